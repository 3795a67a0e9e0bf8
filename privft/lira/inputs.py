"""Shadow-model scores as the LiRA and RMIA estimators take them, checked once."""

from __future__ import annotations

import numpy as np

LOSS_FLOOR = 1e-9  # a zero loss would give an infinite logit


def check_shadow_scores(losses: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-token losses (n_models, n_examples, n_positions) and IN masks (n_models, n_examples).

    NaN marks a position an example does not have (its text is shorter than the window); the
    NaN pattern of an example must be the same in every model, and every example needs at least
    one position. Returns the losses as float64 and the mask as bool.
    """
    losses = np.asarray(losses, dtype=np.float64)
    keep = np.asarray(keep)
    if losses.ndim != 3:
        raise ValueError(f"losses must have shape (n_models, n_examples, n_positions), got {losses.shape}.")
    if keep.shape != losses.shape[:2]:
        raise ValueError(f"keep must have shape (n_models, n_examples) = {losses.shape[:2]}, got {keep.shape}.")
    if not np.isin(keep, (0, 1)).all():
        raise ValueError("keep must be boolean (True = the example was IN that model's training set).")
    if np.isinf(losses).any():
        raise ValueError(f"{int(np.isinf(losses).sum())} infinite losses; per-token losses must be finite or NaN.")
    missing = np.isnan(losses)
    differs = np.argwhere((missing != missing[:1]).any(axis=2))
    if len(differs):
        model, example = differs[0]
        raise ValueError(
            f"Example {example} has NaN positions in model {model} that model 0 does not (or the reverse); "
            "every model must score the same tokens of a text. Re-score that shadow with the plan's window.")
    empty = np.flatnonzero(missing[0].all(axis=1))
    if len(empty):
        raise ValueError(f"{len(empty)} example(s) have no scored position (first: {empty[0]}); drop them.")
    return losses, keep.astype(bool)


def check_used(used: np.ndarray | None, keep: np.ndarray) -> np.ndarray:
    """The (n_models, n_examples) mask of shadow scores a fit may read; None means all of them."""
    if used is None:
        return np.ones(keep.shape, bool)
    used = np.asarray(used)
    if used.shape != keep.shape or not np.isin(used, (0, 1)).all():
        raise ValueError(f"used must be a boolean mask of shape {keep.shape} like keep, got {used.shape}.")
    return used.astype(bool)


def check_target(losses: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Validate a target's losses (n_examples, n_positions) against the fitted valid positions."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.shape != valid.shape:
        raise ValueError(f"Target losses must have shape {valid.shape} like the fitted shadows, got {losses.shape}.")
    mismatch = np.argwhere(np.isnan(losses) == valid)
    if len(mismatch):
        example, position = mismatch[0]
        raise ValueError(f"Target example {example} position {position} is NaN where the shadows are not, or "
                         "the reverse; score the target with the same window as the shadows.")
    return losses


def confidence(losses: np.ndarray, statistic: str) -> np.ndarray:
    """Member-high confidence of losses ℓ: −ℓ ("loss"), or the logit log p − log(1 − p) of p = e^−ℓ ("logit")."""
    if statistic == "loss":
        return -losses
    if statistic == "logit":
        clipped = np.maximum(losses, LOSS_FLOOR)  # NaN stays NaN
        return -clipped - np.log(-np.expm1(-clipped))
    raise ValueError(f"statistic must be 'loss' or 'logit', got {statistic!r}.")
