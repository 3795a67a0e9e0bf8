"""Offline RMIA (Zarifzadeh, Liu, Cheng, Shokri, "Low-Cost High-Power Membership Inference Attacks", ICML 2024).

The signal is a text's geometric-mean token probability p(x | θ) = exp(−mean loss). With OUT
reference models only, p(x) is approximated as ((1 + a) · mean_OUT p(x | θ') + (1 − a)) / 2,
the same correction applied to population texts z (OUT for every model), and the score is the
fraction of z with [p(x | θ) / p(x)] / [p(z | θ) / p(z)] > γ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privft.lira.inputs import check_shadow_scores, check_target


@dataclass
class RMIA:
    """Offline RMIA over stored shadow losses; `population` indexes examples no model trained on."""

    population: np.ndarray  # example indices of the population set z
    offline_a: float = 0.3  # not tuned here; ml_privacy_meter grid-searches it on a paired model
    gamma: float = 1.0

    def __post_init__(self) -> None:
        """Check the population and the two constants."""
        self.population = np.asarray(self.population, dtype=int)
        if self.population.ndim != 1 or len(self.population) == 0:
            raise ValueError("The 'population' parameter of RMIA must be a non-empty 1-D array of example "
                             f"indices. Got shape {self.population.shape} instead; plan shadows with n_population > 0.")
        if not 0 <= self.offline_a <= 1:
            raise ValueError(f"The 'offline_a' parameter of RMIA must be in [0, 1]. Got {self.offline_a} instead.")
        if self.gamma <= 0:
            raise ValueError(f"The 'gamma' parameter of RMIA must be positive. Got {self.gamma} instead.")

    def fit(self, losses: np.ndarray, keep: np.ndarray) -> RMIA:
        """Estimate p(x) from the OUT reference models' losses (n_models, n_examples, n_positions)."""
        losses, keep = check_shadow_scores(losses, keep)
        if keep[:, self.population].any():
            raise ValueError("Some population example is IN for a reference model; the population must be "
                             "texts no model trained on.")
        out = (~keep).sum(axis=0)
        if (out < 1).any():
            raise ValueError(f"Example {int(np.argmax(out < 1))} is OUT for no reference model; offline RMIA "
                             "needs at least one OUT model per example.")
        probability = np.exp(-np.nanmean(losses, axis=2))
        mean_out = np.where(keep, 0.0, probability).sum(axis=0) / out
        self.valid_ = ~np.isnan(losses[0])
        self.marginal_ = ((1 + self.offline_a) * mean_out + (1 - self.offline_a)) / 2
        return self

    def score_samples(self, losses: np.ndarray) -> np.ndarray:
        """Fraction of population texts each example dominates under the target model; higher = member."""
        losses = check_target(losses, self.valid_)
        ratio = np.exp(-np.nanmean(losses, axis=1)) / self.marginal_
        population = np.sort(ratio[self.population])
        return np.searchsorted(population, ratio / self.gamma, side="left") / len(population)
