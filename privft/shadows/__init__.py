"""Shadow-model farms: a seeded plan over a candidate pool, and one resumable job per shadow."""

from privft.shadows.job import loss_windows, train_missing, train_shadow
from privft.shadows.plan import PoolSettings, ShadowPlan, ShadowSettings, balanced_keep
from privft.shadows.store import CorruptShadowError, load_losses, missing_shadows

__all__ = ["CorruptShadowError", "PoolSettings", "ShadowPlan", "ShadowSettings", "balanced_keep", "load_losses",
           "loss_windows", "missing_shadows", "train_missing", "train_shadow"]
