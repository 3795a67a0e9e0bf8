"""Trainer callbacks for training-time privacy: canary exposure, the audit, selective obfuscation, DP-LoRA.

`DPLoraCallback` is added by `privft.dp.make_private`, which also replaces the Trainer methods
DP-SGD needs; do not add it by hand.
"""

from privft.callbacks.audit import PrivacyAuditCallback, write_model_card_section
from privft.callbacks.canary import CanaryCallback, measure_exposure
from privft.callbacks.soft import SelectiveObfuscationCallback, prepare_soft
from privft.dp.callback import DPLoraCallback

__all__ = [
    "CanaryCallback", "DPLoraCallback", "PrivacyAuditCallback", "SelectiveObfuscationCallback", "measure_exposure",
    "prepare_soft",
    "write_model_card_section",
]
