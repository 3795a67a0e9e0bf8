"""Offline RMIA (Zarifzadeh, Liu, Cheng, Shokri, "Low-Cost High-Power Membership Inference Attacks", ICML 2024).

The signal is a text's geometric-mean token probability p(x | θ) = exp(−mean loss). With OUT
reference models only, p(x) is approximated as ((1 + a) · mean_OUT p(x | θ') + (1 − a)) / 2,
the same correction applied to population texts z (OUT for every model), and the score is the
fraction of z with [p(x | θ) / p(x)] / [p(z | θ) / p(z)] > γ. By default `a` is tuned as in
ml_privacy_meter: the grid 0, 0.1, …, 1 is scored with one reference model as a pseudo-target
and the others as its references, and the AUC-best value is kept (`offline_a_`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import roc_auc_score

from privft.lira.inputs import check_shadow_scores, check_target, check_used

A_GRID = tuple(np.round(np.linspace(0, 1, 11), 1))


@dataclass
class RMIA:
    """Offline RMIA over stored shadow losses; `population` indexes examples no model trained on."""

    population: np.ndarray  # example indices of the population set z
    offline_a: float | None = None  # None: tuned on a pseudo-target among the reference models
    gamma: float = 1.0

    def __post_init__(self) -> None:
        """Check the population and the two constants."""
        self.population = np.asarray(self.population, dtype=int)
        if self.population.ndim != 1 or len(self.population) == 0:
            raise ValueError("The 'population' parameter of RMIA must be a non-empty 1-D array of example "
                             f"indices. Got shape {self.population.shape} instead; plan shadows with n_population > 0.")
        if self.offline_a is not None and not 0 <= self.offline_a <= 1:
            raise ValueError(f"The 'offline_a' parameter of RMIA must be in [0, 1] or None. "
                             f"Got {self.offline_a} instead.")
        if self.gamma <= 0:
            raise ValueError(f"The 'gamma' parameter of RMIA must be positive. Got {self.gamma} instead.")

    def fit(self, losses: np.ndarray, keep: np.ndarray, used: np.ndarray | None = None) -> RMIA:
        """Estimate p(x) from the OUT reference models' losses (n_models, n_examples, n_positions).

        `used` (n_models, n_examples) leaves out the (model, example) losses that are False.
        """
        losses, keep = check_shadow_scores(losses, keep)
        used = check_used(used, keep)
        if keep[:, self.population].any():
            raise ValueError("Some population example is IN for a reference model; the population must be "
                             "texts no model trained on.")
        probability = np.exp(-np.nanmean(losses, axis=2))  # (models, examples)
        self.valid_ = ~np.isnan(losses[0])
        out = ~keep & used
        self.offline_a_ = self.offline_a if self.offline_a is not None else self._tune_a(probability, keep, out)
        self.marginal_ = self._marginal(probability, out, self.offline_a_)
        return self

    def score_samples(self, losses: np.ndarray) -> np.ndarray:
        """Fraction of population texts each example dominates under the target model; higher = member."""
        losses = check_target(losses, self.valid_)
        return self._score(np.exp(-np.nanmean(losses, axis=1)), self.marginal_)

    def _score(self, probability: np.ndarray, marginal: np.ndarray) -> np.ndarray:
        """RMIA scores of a target's probabilities (examples,) given p(x) for every example."""
        ratio = probability / marginal
        population = np.sort(ratio[self.population])
        return np.searchsorted(population, ratio / self.gamma, side="left") / len(population)

    @staticmethod
    def _marginal(probability: np.ndarray, out: np.ndarray, a: float) -> np.ndarray:
        """p(x) ≈ ((1 + a) · mean OUT p(x | θ') + (1 − a)) / 2 per example; `out` marks the OUT losses to average."""
        n_out = out.sum(axis=0)
        if (n_out < 1).any():
            raise ValueError(f"Example {int(np.argmax(n_out < 1))} is OUT for no reference model; offline RMIA "
                             "needs at least one OUT model per example.")
        mean_out = np.where(out, probability, 0.0).sum(axis=0) / n_out
        return ((1 + a) * mean_out + (1 - a)) / 2

    def _tune_a(self, probability: np.ndarray, keep: np.ndarray, out: np.ndarray) -> float:
        """The grid value of `a` with the best AUC when reference model 0 is the target of the others."""
        scored = np.setdiff1d(np.arange(keep.shape[1]), self.population)
        labels = keep[0, scored]
        if len(keep) < 2 or labels.all() or not labels.any():
            raise ValueError("Tuning RMIA's offline_a needs at least 2 reference models, the first with both IN and "
                             "OUT examples; pass offline_a explicitly.")
        aucs = [roc_auc_score(labels, self._score(probability[0], self._marginal(probability[1:], out[1:], a))[scored])
                for a in A_GRID]
        return float(A_GRID[int(np.argmax(aucs))])
