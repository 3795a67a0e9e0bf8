"""SOFT's selection rules: which training samples to obfuscate, decided from per-sample losses alone.

Every function here is pure: arrays of per-sample losses in, boolean masks out (True = serve the
obfuscated version). The losses are per-token mean NLLs (`privft.scoring.TokenStats.mean_nll`),
the quantity the audit's loss attack scores.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

Mask = np.ndarray  # 1-D, dtype bool; True: the sample is served obfuscated


def _losses(values: ArrayLike, name: str) -> np.ndarray:
    """`values` as a non-empty, finite, 1-D float64 array; errors name the argument."""
    losses = np.asarray(values, dtype=np.float64)
    if losses.ndim != 1 or losses.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of per-sample losses, got shape {losses.shape}.")
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} non-finite loss(es) (first at index {bad[0]}: {losses[bad[0]]}); "
                         "the model has probably diverged, so no selection can be made from it.")
    return losses


def check_select_ratio(select_ratio: float) -> float:
    """`select_ratio` as a float in (0, 1], or a ValueError saying what is allowed."""
    if isinstance(select_ratio, bool) or not isinstance(select_ratio, (int, float)) or not 0 < select_ratio <= 1:
        raise ValueError(f"select_ratio={select_ratio!r} must be a number in (0, 1]: the fraction of training "
                         "samples the release rule obfuscates at its first selection.")
    return float(select_ratio)


def paper_rule(train_losses: ArrayLike, validation_losses: ArrayLike) -> tuple[Mask, float]:
    """Select samples the model fits better than unseen data: loss < τ, τ = mean held-out validation loss."""
    train = _losses(train_losses, "train_losses")
    tau = float(_losses(validation_losses, "validation_losses").mean())
    return train < tau, tau


def release_rule(train_losses: ArrayLike, select_ratio: float, selection_index: int) -> Mask:
    """The released code's schedule: the lowest-loss `select_ratio` share first, then every sample.

    At the first selection (`selection_index` 0) the ``floor(N * select_ratio)`` samples with the
    lowest loss are selected (ties go to the lower index), but at least one, since a positive ratio
    asks for some obfuscation; the product is rounded to 9 decimals first so that, for example,
    100 * 0.29 selects 29 samples and not 28. Later selections select all samples.
    """
    train = _losses(train_losses, "train_losses")
    ratio = check_select_ratio(select_ratio)
    if selection_index < 0:
        raise ValueError(f"selection_index={selection_index} must be 0 (first selection) or more.")
    if selection_index > 0:
        return np.ones(train.size, dtype=bool)
    count = max(1, math.floor(round(train.size * ratio, 9)))
    mask = np.zeros(train.size, dtype=bool)
    mask[np.argsort(train, kind="stable")[:count]] = True
    return mask


def update_mask(previous: Mask | None, new: Mask, *, cumulative: bool) -> Mask:
    """The mask to serve next: `previous | new` when cumulative (once obfuscated, always), else `new`."""
    new = np.asarray(new, dtype=bool)
    if previous is None or not cumulative:
        return new.copy()
    previous = np.asarray(previous, dtype=bool)
    if previous.shape != new.shape:
        raise ValueError(f"The previous mask has shape {previous.shape} but the new one {new.shape}; "
                         "both must cover the same training samples.")
    return previous | new


def mean_losses(losses: ArrayLike, mask: Mask) -> tuple[float | None, float | None]:
    """Mean loss of the selected and of the unselected samples (None for an empty group)."""
    values = _losses(losses, "losses")
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != values.shape:
        raise ValueError(f"mask has shape {mask.shape} but losses {values.shape}; they must match.")
    selected, unselected = values[mask], values[~mask]
    return (float(selected.mean()) if selected.size else None,
            float(unselected.mean()) if unselected.size else None)
