"""Leave-one-out evaluation: each shadow model in turn is the target, the others its shadows."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from privft.lira.inputs import check_shadow_scores


class ShadowAttack(Protocol):
    """An estimator fitted on shadow losses that scores a target's losses (higher = member)."""

    def fit(self, losses: np.ndarray, keep: np.ndarray) -> ShadowAttack:
        """Fit on losses (n_models, n_examples, n_positions) and IN masks (n_models, n_examples)."""

    def score_samples(self, losses: np.ndarray) -> np.ndarray:
        """One score per example of a target's losses (n_examples, n_positions)."""


def leave_one_out(attack: ShadowAttack, losses: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Scores (n_models, n_examples), row t from `attack` fitted on every model but t and scoring model t.

    The target's own IN/OUT split never reaches its shadows' statistics. `attack` must be a
    dataclass; each fold gets a fresh copy with the same settings. Also returns the folds'
    distinct warnings (e.g. a fallback to fixed variance).
    """
    losses, keep = check_shadow_scores(losses, keep)
    if len(losses) < 3:
        raise ValueError(f"Leave-one-out needs at least 3 models (a target and 2 shadows), got {len(losses)}.")
    scores, notes = np.empty(keep.shape), {}
    for target in range(len(losses)):
        others = np.arange(len(losses)) != target
        fold = dataclasses.replace(attack).fit(losses[others], keep[others])  # type: ignore[type-var]
        scores[target] = fold.score_samples(losses[target])
        notes |= dict.fromkeys(getattr(fold, "warnings_", []))
    return scores, list(notes)
