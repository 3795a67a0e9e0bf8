"""A farm's stored shadows read back and checked whole: a corrupt one is named, with how to retrain it."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from privft.shadows.plan import ShadowPlan, plan_sha256


class CorruptShadowError(ValueError):
    """A shadow whose shadow.json or losses.npy exists but cannot be read as its plan expects."""

    def __init__(self, directory: str | os.PathLike[str], index: int, damage: str) -> None:
        self.damage = damage
        super().__init__(f"Shadow {index} of {directory} is corrupt: {damage}. Retrain it with `privft shadows train "
                         f"{directory} --index {index}` (--missing retrains every unfinished shadow).")


def losses_path(directory: str | os.PathLike[str], index: int) -> Path:
    """Where shadow `index` of the farm in `directory` stores its losses."""
    return Path(directory) / "shadows" / f"{index:03d}" / "losses.npy"


def read_shadow(directory: str | os.PathLike[str], index: int, plan: ShadowPlan) -> tuple[str | None, np.ndarray]:
    """Shadow `index`'s recorded plan sha256 (None: trained by an older privft) and its losses, both checked whole.

    Raises FileNotFoundError while it has stored no losses, and CorruptShadowError when its shadow.json
    is not a JSON object or its losses.npy is not a float array of shape (n_texts, window).
    """
    path = losses_path(directory, index)
    if not path.exists():
        raise FileNotFoundError(f"Shadow {index} of {directory} has stored no losses yet; train it with "
                                f"`privft shadows train {directory} --index {index}`.")
    record_path = path.parent / "shadow.json"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, or a write cut short
        record = None
    if not isinstance(record, dict):
        raise CorruptShadowError(directory, index, f"{record_path} is missing, unreadable or not a JSON object")
    return record.get("plan_sha256"), _read_losses(directory, index, (len(plan.texts), plan.settings.window))


def _read_losses(directory: str | os.PathLike[str], index: int, shape: tuple[int, int]) -> np.ndarray:
    """Shadow `index`'s losses.npy, which must hold a float array of `shape`; never unpickled."""
    path = losses_path(directory, index)
    try:
        with path.open("rb") as handle:
            losses = np.load(handle, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        losses = None
    if path.stat().st_size == 0:
        damage = "is empty (0 bytes)"
    elif not isinstance(losses, np.ndarray):  # not .npy data, cut short, pickled objects, or an .npz archive
        damage = "is not a readable NumPy .npy array"
    elif losses.dtype.kind != "f" or losses.shape != shape:
        damage = f"holds {losses.dtype} values of shape {losses.shape}; expected float losses of shape {shape}"
    else:
        return losses
    raise CorruptShadowError(directory, index, f"{path} {damage}")


def corruption(directory: str | os.PathLike[str], index: int, plan: ShadowPlan) -> str | None:
    """What makes stored shadow `index` unreadable (its CorruptShadowError's damage), or None when it reads whole."""
    try:
        read_shadow(directory, index, plan)
    except CorruptShadowError as error:
        return error.damage
    return None


def missing_shadows(directory: str | os.PathLike[str]) -> list[int]:
    """Indices of the plan's shadows that have not finished: no stored losses yet, or corrupt ones."""
    plan = ShadowPlan.load(directory)
    return [i for i in range(plan.settings.n_shadows)
            if not losses_path(directory, i).exists() or corruption(directory, i, plan)]


def load_losses(directory: str | os.PathLike[str]) -> tuple[ShadowPlan, np.ndarray]:
    """The plan and every shadow's losses stacked (n_shadows, n_texts, window); all shadows done, on this plan."""
    plan = ShadowPlan.load(directory)
    todo = [i for i in range(plan.settings.n_shadows) if not losses_path(directory, i).exists()]
    if todo:
        raise FileNotFoundError(f"Shadows {todo} of {directory} have no stored losses yet; run them with "
                                f"`privft shadows train {directory} --missing` (or --index I per shadow).")
    shadows, corrupt = {}, []
    for index in range(plan.settings.n_shadows):
        try:
            shadows[index] = read_shadow(directory, index, plan)
        except CorruptShadowError as error:
            corrupt.append(str(error))
    if corrupt:
        raise ValueError(" ".join(corrupt))
    expected = plan_sha256(directory)
    other = [i for i, (sha, _) in shadows.items() if sha is not None and sha != expected]
    if other:
        raise ValueError(f"Shadows {other} of {directory} were trained on another plan than its plan.json (their "
                         f"shadow.json records a different plan_sha256), so their losses do not match its IN matrix; "
                         f"retrain each with `privft shadows train {directory} --index I --overwrite`.")
    unchecked = [i for i, (sha, _) in shadows.items() if sha is None]
    if unchecked:
        warnings.warn(f"Shadows {unchecked} of {directory} record no plan_sha256 (trained by an older privft), so "
                      "they cannot be checked against its plan.json; if the farm was ever re-planned, retrain them "
                      f"with `privft shadows train {directory} --index I --overwrite`.", stacklevel=2)
    return plan, np.stack([losses for _, losses in shadows.values()])
