"""The state of one DP-LoRA run: settings, noise calibration, the accountant and the per-sample hooks."""

from __future__ import annotations

import math
from typing import Any

import torch
from opacus.accountants import PRVAccountant
from opacus.grad_sample import prepare_module
from opacus.optimizers import DPOptimizer

from privft.dp.accounting import Calibration, calibrate, default_delta, epsilon_rdp, epsilon_spent
from privft.dp.checks import DPConfigError

PRIVACY_UNIT = "one training sequence"


class DPLoraEngine:
    """Calibrates σ for a target ε, counts noised steps in a PRV accountant and owns the opacus hooks.

    `max_grad_norm` (C) bounds each sequence's gradient; the logical batch size L is the Trainer's
    `per_device_train_batch_size`, the expected size of a Poisson batch; `physical_batch_size`
    (P, default L) bounds how many sequences go through one forward pass.
    """

    def __init__(self, *, target_epsilon: float, target_delta: float | None = None, max_grad_norm: float = 1.0,
                 physical_batch_size: int | None = None) -> None:
        if not target_epsilon > 0 or not math.isfinite(target_epsilon):
            raise ValueError(f"target_epsilon={target_epsilon!r} must be a positive finite number.")
        if target_delta is not None and not 0 < target_delta < 1:
            raise ValueError(f"target_delta={target_delta!r} must be in (0, 1), or None for min(1e-5, 1/N^1.1).")
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm={max_grad_norm!r} must be positive: it is the per-sequence clipping "
                             "bound C that the noise is scaled to.")
        if physical_batch_size is not None and physical_batch_size < 1:
            raise ValueError(f"physical_batch_size={physical_batch_size!r} must be a positive integer or None.")
        self.target_epsilon = float(target_epsilon)
        self.target_delta = target_delta
        self.max_grad_norm = float(max_grad_norm)
        self.physical_batch_size = physical_batch_size
        self.logical_batch_size: int | None = None
        self.n_examples: int | None = None
        self.calibration: Calibration | None = None
        self.accountant = PRVAccountant()
        self.optimizer: DPOptimizer | None = None
        self.hooks: Any = None
        self._epsilon_cache: tuple[int, float] | None = None

    def calibrate(self, n_examples: int, logical_batch_size: int, steps: int) -> Calibration:
        """Solve σ for N = `n_examples`, q = L/N and T = `steps`; a second call must find the same settings."""
        if logical_batch_size >= n_examples:
            raise DPConfigError(f"per_device_train_batch_size={logical_batch_size} (the expected logical batch) must "
                                f"be smaller than the {n_examples} training sequences for Poisson sampling to "
                                "amplify privacy.")
        delta = self.target_delta if self.target_delta is not None else default_delta(n_examples)
        calibration = calibrate(self.target_epsilon, delta, logical_batch_size / n_examples, steps)
        if self.calibration is not None and calibration != self.calibration:
            raise DPConfigError(f"The DP settings changed since calibration ({self.calibration} → {calibration}); "
                                "start a new run with make_private on a fresh Trainer.")
        self.n_examples, self.logical_batch_size, self.calibration = n_examples, logical_batch_size, calibration
        return calibration

    @property
    def noised_steps(self) -> int:
        """Noised optimizer steps taken so far: the accountant's step count."""
        return sum(steps for _, _, steps in self.accountant.history)

    @property
    def budget_exhausted(self) -> bool:
        """Whether all T calibrated noised steps have been taken."""
        return self.calibration is not None and self.noised_steps >= self.calibration.steps

    def epsilon(self) -> float:
        """ε spent so far (PRV upper bound), computed once per step count."""
        if self.calibration is None:
            raise RuntimeError("DP-LoRA is not calibrated yet; ε exists once training starts.")
        steps = self.noised_steps
        if self._epsilon_cache is None or self._epsilon_cache[0] != steps:
            self._epsilon_cache = (steps, epsilon_spent(self.accountant.history, self.calibration.delta,
                                                           self.calibration.target_epsilon))
        return self._epsilon_cache[1]

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> DPOptimizer:
        """`optimizer` as an opacus DPOptimizer that clips, noises, divides by L and steps the accountant."""
        if self.calibration is None:
            raise RuntimeError("Calibrate before wrapping the optimizer.")
        self.optimizer = DPOptimizer(optimizer, noise_multiplier=self.calibration.noise_multiplier,
                                     max_grad_norm=self.max_grad_norm, expected_batch_size=self.logical_batch_size,
                                     loss_reduction="mean")
        self.optimizer.attach_step_hook(self._count_noised_step)
        return self.optimizer

    def _count_noised_step(self, optimizer: DPOptimizer) -> None:
        self.accountant.step(noise_multiplier=self.calibration.noise_multiplier,
                             sample_rate=self.calibration.sample_rate)

    def attach_hooks(self, model: torch.nn.Module) -> None:
        """Per-sample gradient hooks on the trainable (LoRA) Linear layers, without wrapping the model."""
        if self.hooks is None:
            self.hooks = prepare_module(model, grad_sample_mode="hooks", wrap_model=False, batch_first=True,
                                        loss_reduction="mean", strict=True)

    def remove_hooks(self) -> None:
        """Remove the hooks and opacus' per-parameter attributes, leaving a plain peft model."""
        if self.hooks is not None:
            self.hooks.cleanup()
            self.hooks = None

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state saved with each checkpoint: the calibration and the accountant's history."""
        return {"calibration": self.calibration.to_dict() if self.calibration else None,
                "history": [list(entry) for entry in self.accountant.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the accountant from a checkpoint; its calibration must equal this run's."""
        saved = Calibration(**state["calibration"])
        if saved != self.calibration:
            raise DPConfigError(f"The checkpoint was calibrated as {saved} but this run as {self.calibration}; resume "
                                "with the same data, batch size, epochs or max_steps, and privacy settings.")
        self.accountant.history = [tuple(entry) for entry in state["history"]]

    def summary(self) -> dict[str, Any]:
        """Everything needed to read the guarantee: settings, calibration, noised steps and ε spent."""
        spent = {}
        if self.calibration:
            spent = {"epsilon": self.epsilon(), "epsilon_rdp": epsilon_rdp(self.accountant.history,
                                                                           self.calibration.delta)}
        return {**(self.calibration.to_dict() if self.calibration else {}), **spent,
                "noised_steps": self.noised_steps, "max_grad_norm": self.max_grad_norm,
                "logical_batch_size": self.logical_batch_size, "physical_batch_size": self.physical_batch_size,
                "n_examples": self.n_examples, "accountant": "prv", "sampling": "poisson",
                "privacy_unit": PRIVACY_UNIT, "secure_mode": False}
