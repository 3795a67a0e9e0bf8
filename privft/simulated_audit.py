"""One-run audits of simulated DP mechanisms: canary scores drawn as DP-SGD would leak them, where the true ε is known.

Each canary's score is the sum over `steps` of its inclusion bit, sampled with probability
`sample_rate`, plus Gaussian noise of standard deviation `noise_multiplier`: the signal a
canary's clipped gradient leaves in DP-SGD with Poisson sampling and unit clipping. Canary i's
inclusion changes only score i, so each canary is protected by exactly the subsampled Gaussian
mechanism that privft's accountant bounds (`privft.dp.accounting.epsilon_spent`). The true ε
comes from the caller, so this module stays pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privft.epsilon_audit import OneRunAudit, audit_one_run
from privft.fdp_audit import FdpOneRunAudit, audit_one_run_fdp


@dataclass(frozen=True)
class SimulatedMechanism:
    """A Gaussian mechanism on each canary's inclusion bit, composed `steps` times under Poisson `sample_rate`."""

    noise_multiplier: float
    sample_rate: float = 1.0  # 1: every step sees every inserted canary (the plain Gaussian mechanism when steps = 1)
    steps: int = 1

    def __post_init__(self) -> None:
        """Refuse settings that define no mechanism."""
        if not self.noise_multiplier > 0 or not 0 < self.sample_rate <= 1 or self.steps < 1:
            raise ValueError(f"SimulatedMechanism needs noise_multiplier > 0, sample_rate in (0, 1] and steps ≥ 1; "
                             f"got {self.noise_multiplier}, {self.sample_rate}, {self.steps}.")

    @property
    def history(self) -> list[tuple[float, float, int]]:
        """The mechanism as an opacus accountant history, for its true ε."""
        return [(self.noise_multiplier, self.sample_rate, self.steps)]

    def scores(self, included: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One score per canary: how often its bit was sampled if inserted, plus the summed noise of every step."""
        sampled = rng.binomial(self.steps, self.sample_rate, size=len(included))
        noise = self.noise_multiplier * np.sqrt(self.steps) * rng.standard_normal(len(included))
        return np.asarray(included, dtype=np.float64) * sampled + noise


def simulated_audits(mechanism: SimulatedMechanism, n_canaries: int, delta: float, seed: int, *,
                     confidence: float = 0.95) -> tuple[OneRunAudit, FdpOneRunAudit]:
    """Both one-run bounds of one seeded run: canaries inserted with probability ½, scored by `mechanism`."""
    rng = np.random.default_rng(seed)
    included = rng.random(n_canaries) < 0.5
    scores = mechanism.scores(included, rng)
    return (audit_one_run(scores, included, delta, confidence=confidence),
            audit_one_run_fdp(scores, included, delta, confidence=confidence))
