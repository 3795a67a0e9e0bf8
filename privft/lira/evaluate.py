"""Leave-one-out evaluation: each shadow model in turn is the target, the others its shadows."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from privft.lira.inputs import check_shadow_scores


class ShadowAttack(Protocol):
    """An estimator fitted on shadow losses that scores a target's losses (higher = member)."""

    def fit(self, losses: np.ndarray, keep: np.ndarray, used: np.ndarray | None = None) -> ShadowAttack:
        """Fit on losses (n_models, n_examples, n_positions) and IN masks (n_models, n_examples) where `used`."""

    def score_samples(self, losses: np.ndarray) -> np.ndarray:
        """One score per example of a target's losses (n_examples, n_positions)."""


def leave_one_out(attack: ShadowAttack, losses: np.ndarray, keep: np.ndarray, seed: int = 0
                  ) -> tuple[np.ndarray, list[str]]:
    """Scores (n_models, n_examples), row t from `attack` fitted on every model but t and scoring model t.

    The target's own IN/OUT split never reaches its shadows' statistics, not even through
    their counts (`balanced_fold`). `attack` must be a dataclass; each fold gets a fresh copy
    with the same settings. Also returns the folds' distinct warnings (e.g. a fallback to fixed variance).
    """
    losses, keep = check_shadow_scores(losses, keep)
    if len(losses) < 3:
        raise ValueError(f"Leave-one-out needs at least 3 models (a target and 2 shadows), got {len(losses)}.")
    scores, notes = np.empty(keep.shape), {}
    rng = np.random.default_rng(seed)
    for target in range(len(losses)):
        others = np.arange(len(losses)) != target
        used = balanced_fold(keep[others], keep[target], rng)
        fold = dataclasses.replace(attack).fit(losses[others], keep[others], used)  # type: ignore[type-var]
        scores[target] = fold.score_samples(losses[target])
        notes |= dict.fromkeys(getattr(fold, "warnings_", []))
    return scores, list(notes)


def balanced_fold(shadow_keep: np.ndarray, target_keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which shadow scores a fold may use: per example, all but one random shadow of the class the target is not in.

    Without this, the target's label sets the fold's IN/OUT counts: in a plan where every example
    is IN for exactly half of the K models, the other models hold K/2 − 1 IN and K/2 OUT for
    the target's members and the reverse for its non-members. Per-example variances (and their
    shrinkage) depend on those counts, so on losses that carry no membership signal at all the
    scores would still separate members (an AUC of 0.26 at K = 8). Dropping one shadow of the
    other class makes the counts (IN − 1, OUT − 1) whatever the target's label.
    """
    differs = shadow_keep != target_keep[None]
    draws = np.where(differs, rng.random(differs.shape), -1.0)
    dropped = np.argmax(draws, axis=0)
    used = np.ones(shadow_keep.shape, bool)
    columns = np.flatnonzero(differs.any(axis=0))
    used[dropped[columns], columns] = False
    return used
