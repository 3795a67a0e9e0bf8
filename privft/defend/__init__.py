"""Training-time defences. SOFT: serve likely-memorised samples as their obfuscations (paraphrases).

Add SOFT to a script with `privft.defend.soft.prepare_soft` (imported from its module, because
it builds the callback in `privft.callbacks.soft`, which itself imports this package).
"""

from privft.defend.distributed import MainProcessError, on_main_then_broadcast
from privft.defend.losses import sample_losses
from privft.defend.selection import check_select_ratio, mean_losses, paper_rule, release_rule, update_mask
from privft.defend.view import ObfuscatedView

__all__ = [
    "MainProcessError",
    "ObfuscatedView",
    "check_select_ratio",
    "mean_losses",
    "on_main_then_broadcast",
    "paper_rule",
    "release_rule",
    "sample_losses",
    "update_mask",
]
