"""Shadow-model farms: a seeded plan over a candidate pool, and one resumable job per shadow."""

from privft.shadows.job import (
           load_losses,
           loss_windows,
           missing_shadows,
           train_missing,
           train_shadow,
)
from privft.shadows.plan import PoolSettings, ShadowPlan, ShadowSettings, balanced_keep

__all__ = ["PoolSettings", "ShadowPlan", "ShadowSettings", "balanced_keep", "load_losses", "loss_windows",
           "missing_shadows", "train_missing", "train_shadow"]
