"""Shadow-model attacks on stored per-token losses: LiRA (univariate and sequence-aware) and offline RMIA."""

from privft.lira.audit import LiraReport, default_variants, run_lira_audit
from privft.lira.evaluate import ShadowAttack, leave_one_out
from privft.lira.lira import LiRA
from privft.lira.rmia import RMIA

__all__ = ["RMIA", "LiRA", "LiraReport", "ShadowAttack", "default_variants", "leave_one_out", "run_lira_audit"]
