"""Training-time defences. SOFT: serve likely-memorised samples as their obfuscations (paraphrases);
Goldfish loss: drop a hashed 1-in-k share of the tokens from the loss (`privft.defend.goldfish`).

The parts: the dataset view, the selection rules (a registry), the schedule that picks one
(`SoftSchedule`), the per-sample losses they read.
Add SOFT to a script with `privft.callbacks.prepare_soft`, which wires them to the callback;
Goldfish loss with `add_goldfish(trainer, GoldfishSettings(k=4))`.
"""

from privft.defend.distributed import MainProcessError, on_main_then_broadcast
from privft.defend.goldfish import GoldfishCollator, GoldfishSettings, add_goldfish, goldfish_labels, goldfish_mask
from privft.defend.losses import TrainingPassLosses, sample_losses
from privft.defend.rules import RULES, SelectionRule, get_rule
from privft.defend.schedule import LOSS_SOURCES, SoftSchedule, check_loss_source
from privft.defend.selection import check_select_ratio, mean_losses, paper_rule, release_rule, update_mask
from privft.defend.view import ObfuscatedView

__all__ = [
    "GoldfishCollator",
    "GoldfishSettings",
    "LOSS_SOURCES",
    "MainProcessError",
    "ObfuscatedView",
    "RULES",
    "SelectionRule",
    "SoftSchedule",
    "TrainingPassLosses",
    "add_goldfish",
    "get_rule",
    "check_loss_source",
    "check_select_ratio",
    "goldfish_labels",
    "goldfish_mask",
    "mean_losses",
    "on_main_then_broadcast",
    "paper_rule",
    "release_rule",
    "sample_losses",
    "update_mask",
]
