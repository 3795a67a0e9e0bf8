"""privft: training-time privacy for Hugging Face fine-tuning, with a membership-inference audit."""

import importlib

from privft.epsilon_audit import epsilon_lower_bound
from privft.fdp_audit import fdp_epsilon_lower_bound

__version__ = "0.1.0"
__all__ = ["GatePolicy", "Verdict", "epsilon_lower_bound", "fdp_epsilon_lower_bound"]
_IMPORTED_ON_USE = {"GatePolicy": "privft.gate", "Verdict": "privft.gate"}  # the gate imports the audit stack


def __getattr__(name: str) -> object:
    """The release gate's policy and verdict (`privft.gate`), imported on first use so `import privft` stays light."""
    if name in _IMPORTED_ON_USE:
        return getattr(importlib.import_module(_IMPORTED_ON_USE[name]), name)
    raise AttributeError(f"module 'privft' has no attribute {name!r}")
