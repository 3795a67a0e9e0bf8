"""The state of one DP-LoRA run: settings, noise calibration, the accountant and the per-sample hooks."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from opacus.accountants import PRVAccountant
from opacus.grad_sample import prepare_module
from opacus.optimizers import DPOptimizer

from privft.dp.accounting import Calibration, calibrate, default_delta, epsilon_rdp, epsilon_spent, group_privacy
from privft.dp.checks import DPConfigError
from privft.dp.gradient_canaries import CanaryDPOptimizer, GradientCanaries
from privft.dp.settings import DPSettings

PRIVACY_UNIT = "one training sequence"
# The random streams, never the same generator: Poisson batch masks, Gaussian noise, the gradient canaries' draws
SAMPLING, NOISE, CANARIES = 0, 1, 2


class DPLoraEngine:
    """Calibrates σ for a target ε, counts noised steps in a PRV accountant and owns the opacus hooks.

    Its settings are a `DPSettings`. `max_grad_norm` (C) bounds each sequence's gradient; the
    logical batch size L is the Trainer's `per_device_train_batch_size`, the expected size of a
    Poisson batch; `physical_batch_size` (P, default L) bounds how many sequences go through one
    forward pass.

    The Poisson sampler and the noise each get their own torch.Generator, seeded from fresh OS
    entropy, never from `TrainingArguments.seed`, and the seeds are kept nowhere. `seed`
    derives them from a fixed number instead, for tests and reproducibility only: whoever knows it
    can recompute the batches and the noise, which voids the guarantee's assumption that both are
    secret (the assumption opacus' `secure_mode` strengthens with a cryptographic generator).
    With `gradient_canaries`, the white-box audit's canaries (`canaries`) draw from a third stream.
    """

    def __init__(self, settings: DPSettings) -> None:
        if settings.target_epsilon is None:
            raise DPConfigError("DP-LoRA needs the ε to spend: set target_epsilon, e.g. "
                                "make_private(trainer, target_epsilon=8.0).")
        self.target_epsilon = float(settings.target_epsilon)
        self.delta = settings.delta
        self.max_grad_norm = float(settings.max_grad_norm)
        self.physical_batch_size = settings.physical_batch_size
        self.seed = settings.seed
        self.logical_batch_size: int | None = None
        self.n_examples: int | None = None
        self.calibration: Calibration | None = None
        self.max_multiplicity: int | None = None  # k: most copies of one training sequence, once counted
        self.repeated_texts: int | None = None  # distinct training sequences present more than once
        self.accountant = PRVAccountant()
        self.optimizer: DPOptimizer | None = None
        self.hooks: Any = None
        self._epsilon_cache: tuple[int, float] | None = None
        self.canaries = (GradientCanaries(settings.gradient_canaries, np.random.SeedSequence(
            self.seed, spawn_key=(CANARIES,))) if settings.gradient_canaries else None)

    def calibrate(self, n_examples: int, logical_batch_size: int, steps: int) -> Calibration:
        """Solve σ for N = `n_examples`, q = L/N and T = `steps`; a second call must find the same settings."""
        if logical_batch_size >= n_examples:
            raise DPConfigError(f"per_device_train_batch_size={logical_batch_size} (the expected logical batch) must "
                                f"be smaller than the {n_examples} training sequences for Poisson sampling to "
                                "amplify privacy.")
        delta = self.delta if self.delta is not None else default_delta(n_examples)
        if delta >= 1 / n_examples:
            warnings.warn(f"delta={delta:g} is not below 1/N = {1 / n_examples:g} for the N = {n_examples} "
                          "training sequences: publishing one random sequence verbatim meets such a δ. Use "
                          f"delta=None for the default min(1e-5, 1/N^1.1) = {default_delta(n_examples):g}.",
                          stacklevel=2)
        calibration = calibrate(self.target_epsilon, delta, logical_batch_size / n_examples, steps)
        if self.calibration is not None and calibration != self.calibration:
            raise DPConfigError(f"The DP settings changed since calibration ({self.calibration} → {calibration}); "
                                "start a new run with make_private on a fresh Trainer.")
        self.n_examples, self.logical_batch_size, self.calibration = n_examples, logical_batch_size, calibration
        return calibration

    def count_duplicates(self, rows: Iterable[tuple[int, ...]]) -> None:
        """Count identical training sequences (token ids); warn when one occurs k > 1 times (group privacy)."""
        if self.calibration is None:
            raise RuntimeError("Calibrate before counting duplicates: the warning states the group ε and δ.")
        counts = Counter(rows)
        self.max_multiplicity = max(counts.values(), default=1)
        self.repeated_texts = sum(count > 1 for count in counts.values())
        if self.max_multiplicity > 1:
            k = self.max_multiplicity
            epsilon, delta = group_privacy(self.calibration.target_epsilon, self.calibration.delta, k)
            warnings.warn(f"{self.repeated_texts} distinct training sequence(s) occur more than once, one of them "
                          f"k = {k} times. Each copy is a separate privacy unit, so such a text is protected only "
                          f"as a group of {k}: ε = {epsilon:g}, δ = {delta:.3g} at the target ε = "
                          f"{self.calibration.target_epsilon:g}, δ = {self.calibration.delta:g}. Deduplicate the "
                          "training set (or plant each canary once) for the per-sequence guarantee to cover them.",
                          stacklevel=2)

    def generator(self, stream: int, device: torch.device | str = "cpu") -> torch.Generator:
        """A generator for `stream` (SAMPLING or NOISE): fresh OS entropy, or derived from `seed`.

        A derived seed also depends on the noised steps already taken, so a run resumed with the
        same `seed` continues with new draws instead of replaying the first epoch's batches.
        """
        seed = np.random.SeedSequence(self.seed, spawn_key=(stream, self.noised_steps))  # None: 128 OS bits
        return torch.Generator(device=device).manual_seed(int(seed.generate_state(1, np.uint64)[0]))

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
        device = optimizer.param_groups[0]["params"][0].device  # opacus draws the noise where the parameters are
        settings = dict(noise_multiplier=self.calibration.noise_multiplier, max_grad_norm=self.max_grad_norm,
                        expected_batch_size=self.logical_batch_size, loss_reduction="mean",
                        generator=self.generator(NOISE, device))
        if self.canaries is None:
            self.optimizer = DPOptimizer(optimizer, **settings)
        else:  # the canaries join batches at the training sequences' rate q, from a stream of their own
            self.optimizer = CanaryDPOptimizer(optimizer, **settings, canaries=self.canaries,
                                               sampler=self.generator(CANARIES),
                                               sample_rate=self.calibration.sample_rate)
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
        """JSON-ready state saved with each checkpoint: the calibration, the accountant's history, the canaries."""
        return {"calibration": self.calibration.to_dict() if self.calibration else None,
                "history": [list(entry) for entry in self.accountant.history],
                **({"gradient_canaries": self.canaries.state_dict()} if self.canaries else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the accountant (and gradient canaries) from a checkpoint; its calibration must equal this run's."""
        saved = Calibration(**state["calibration"])
        if saved != self.calibration:
            raise DPConfigError(f"The checkpoint was calibrated as {saved} but this run as {self.calibration}; resume "
                                "with the same data, batch size, epochs or max_steps, and privacy settings.")
        canaries = state.get("gradient_canaries") or {"count": 0}
        if canaries["count"] != (self.canaries.count if self.canaries else 0):
            raise DPConfigError(f"The checkpoint was trained with {canaries['count']} gradient canaries but this run "
                                f"has {self.canaries.count if self.canaries else 0}; resume with the same "
                                "dp.gradient_canaries.")
        self.accountant.history = [tuple(entry) for entry in state["history"]]
        if self.canaries is not None:
            self.canaries.load_state_dict(canaries)

    def summary(self) -> dict[str, Any]:
        """Everything needed to read the guarantee: settings, calibration, noised steps, ε spent, group level k.

        `group_epsilon`/`group_delta` are the guarantee of a text present `max_multiplicity` times
        (equal to ε, δ when no training sequence repeats); None until the duplicates are counted.
        """
        spent: dict[str, Any] = {}
        if self.calibration:
            epsilon = self.epsilon()
            group = (group_privacy(epsilon, self.calibration.delta, self.max_multiplicity)
                     if self.max_multiplicity else (None, None))
            spent = {"epsilon": epsilon, "epsilon_rdp": epsilon_rdp(self.accountant.history, self.calibration.delta),
                     "group_epsilon": group[0], "group_delta": group[1]}
        return {**(self.calibration.to_dict() if self.calibration else {}), **spent,
                "max_multiplicity": self.max_multiplicity, "repeated_texts": self.repeated_texts,
                "noised_steps": self.noised_steps, "max_grad_norm": self.max_grad_norm,
                "gradient_canaries": self.canaries.count if self.canaries else 0,
                "logical_batch_size": self.logical_batch_size, "physical_batch_size": self.physical_batch_size,
                "n_examples": self.n_examples, "accountant": "prv", "sampling": "poisson",
                "privacy_unit": PRIVACY_UNIT, "secure_mode": False,
                "randomness": "os_entropy" if self.seed is None else "explicit_dp_seed (not secret)"}
