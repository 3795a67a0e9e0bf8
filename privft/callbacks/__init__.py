"""Trainer callbacks for training-time privacy: canary exposure, the membership audit, selective obfuscation."""

from privft.callbacks.audit import PrivacyAuditCallback, write_model_card_section
from privft.callbacks.canary import CanaryCallback, measure_exposure
from privft.callbacks.soft import SelectiveObfuscationCallback

__all__ = [
    "CanaryCallback", "PrivacyAuditCallback", "SelectiveObfuscationCallback", "measure_exposure",
    "write_model_card_section",
]
