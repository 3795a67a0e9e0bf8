"""DP-LoRA's settings, defined once: the YAML's `dp:` section, `make_private`'s keywords and the engine's state."""

from __future__ import annotations

import math
from dataclasses import dataclass

from privft.config import require
from privft.dp.accounting import MAX_TARGET_EPSILON, TOO_LARGE


@dataclass
class DPSettings:
    """DP-LoRA (DP-SGD on the LoRA adapters, `privft.dp`); off when `target_epsilon` is None.

    Refuses, naming the key, what the engine could not run, so a config fails before its split and
    manifest are written.
    """

    target_epsilon: float | None = None  # ε after the whole run (PRV accountant), at most 100; None: no DP
    delta: float | None = None  # None: min(1e-5, 1/N^1.1) for N training sequences
    max_grad_norm: float = 1.0  # C, the bound on each sequence's gradient norm
    physical_batch_size: int | None = None  # sequences per forward pass; None: the whole logical batch
    seed: int | None = None  # reproducible experiments only: batches and noise become recomputable; None: OS entropy
    # White-box audit (privft.dp.gradient_canaries): m Dirac gradient canaries on the LoRA parameters, each inserted
    # with probability ½ and then Poisson-sampled like a training sequence; 0: none, the training is untouched.
    gradient_canaries: int = 0

    def __post_init__(self) -> None:
        """Refuse an ε, δ, C, chunk size, seed or canary count the engine could not run."""
        require(self.gradient_canaries >= 0, "gradient_canaries", self.gradient_canaries,
                "must be a non-negative integer (0: no gradient canaries).")
        if self.target_epsilon is None:
            require(self.gradient_canaries == 0, "gradient_canaries", self.gradient_canaries,
                    "needs DP-LoRA on: set target_epsilon too, or set gradient_canaries to 0.")
            return
        require(self.target_epsilon > 0 and math.isfinite(self.target_epsilon), "target_epsilon",
                self.target_epsilon, "must be a positive finite number.")
        require(self.target_epsilon <= MAX_TARGET_EPSILON, "target_epsilon", self.target_epsilon,
                f"must be at most {MAX_TARGET_EPSILON:g}: {TOO_LARGE}")
        require(self.delta is None or 0 < self.delta < 1, "delta", self.delta,
                "must be in (0, 1), or None for min(1e-5, 1/N^1.1).")
        require(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm,
                "must be positive: it is the per-sequence clipping bound C that the noise is scaled to.")
        require(self.physical_batch_size is None or self.physical_batch_size >= 1, "physical_batch_size",
                self.physical_batch_size, "must be a positive integer or None.")
        require(self.seed is None or self.seed >= 0, "seed", self.seed,
                "must be a non-negative integer, or None for fresh OS entropy.")
