"""DP-LoRA: DP-SGD on LoRA adapters inside an existing Trainer, with Poisson sampling and PRV accounting.

    trainer = Trainer(model=peft_model, args=TrainingArguments(..., max_grad_norm=0), ...)
    make_private(trainer, target_epsilon=8.0)
    trainer.train()   # logs dp/epsilon at every log step

The privacy unit is one training sequence (one row of the training dataset); a text present in k
rows is protected only at group level k (`group_privacy`), and training warns about it.
"""

from privft.dp.accounting import Calibration, calibrate, default_delta, epsilon_rdp, epsilon_spent, group_privacy
from privft.dp.callback import DPLoraCallback
from privft.dp.checks import DPConfigError, check_trainer, privacy_problems
from privft.dp.engine import PRIVACY_UNIT, DPLoraEngine
from privft.dp.loss import sequence_losses
from privft.dp.settings import DPSettings
from privft.dp.trainer import DPLoraTrainerMixin, make_private

__all__ = [
    "PRIVACY_UNIT", "Calibration", "DPConfigError", "DPLoraCallback", "DPLoraEngine", "DPLoraTrainerMixin",
    "DPSettings", "calibrate", "check_trainer", "default_delta", "epsilon_rdp", "epsilon_spent", "group_privacy",
    "make_private", "privacy_problems", "sequence_losses",
]
