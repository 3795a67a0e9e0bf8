"""The Trainer events DP-LoRA needs: hooks on and off, per-sample gradients cleared, budget stop."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from privft.dp.engine import DPLoraEngine

STATE_FILE = "dp_state.json"  # the accountant in each checkpoint, written by the DP trainer's checkpoint save


class DPLoraCallback(TrainerCallback):
    """Wires a `DPLoraEngine` into the Trainer's events; added by `privft.dp.make_private`, not by hand.

    - ``on_train_begin``: attach opacus' per-sample gradient hooks (after peft and the device move);
    - ``on_optimizer_step``: clear ``grad_sample`` and ``summed_grad`` (the Trainer's
      ``model.zero_grad()`` leaves them, and the next step would fail);
    - ``on_step_end``: stop once the T calibrated noised steps are spent;
    - ``on_train_end``: remove the hooks, leaving a plain peft model to save or audit.

    The accountant is saved by the DP trainer's checkpoint save itself (``dp_state.json``), not
    here: ``on_save`` runs after the Trainer has rotated old checkpoints out.
    """

    def __init__(self, engine: DPLoraEngine) -> None:
        self.engine = engine

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, **kwargs: Any) -> None:
        """Attach the per-sample gradient hooks."""
        self.engine.attach_hooks(model)

    def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          **kwargs: Any) -> None:
        """Clear the per-sample gradients of the step just taken."""
        self.engine.optimizer.zero_grad(set_to_none=True)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl | None:
        """Stop training when the calibrated number of noised steps is reached."""
        if self.engine.budget_exhausted:
            control.should_training_stop = True
            return control
        return None

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Remove the hooks."""
        self.engine.remove_hooks()
