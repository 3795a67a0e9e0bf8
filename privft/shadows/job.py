"""One shadow model as an independent, resumable job: fine-tune on its IN texts, store per-token losses.

Each job reads the farm's `plan.json`, trains shadow `index` from the plan's base model, scores
every pool text, writes `shadows/NNN/shadow.json` (with the sha256 of the plan it trained on)
and then `shadows/NNN/losses.npy` atomically, last; a job whose losses exist is done and is
skipped, so any scheduler can run indices in any order, on any machine, and re-run the farm
after a crash.

Stored losses: float32 (n_texts, window). Row j holds −log p(x_t | x_<t) for the first `window`
tokens of text j (after BOS, exactly as the audit scores them); a text with fewer tokens is
NaN-padded at the end, and tokens past the window are not stored. So position t means the same
token of the same text in every shadow, which is what lets LiRA compare vectors across models.
Split long texts into several pool texts if their later tokens matter.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from privft.io import atomic_write_bytes, atomic_write_text
from privft.models import load_model
from privft.scoring import TokenStats, score_texts, start_token_record, start_token_rule
from privft.shadows.plan import ShadowPlan, plan_sha256
from privft.training import finetune


def losses_path(directory: str | os.PathLike[str], index: int) -> Path:
    """Where shadow `index` of the farm in `directory` stores its losses."""
    return Path(directory) / "shadows" / f"{index:03d}" / "losses.npy"


def loss_windows(stats: Sequence[TokenStats], window: int) -> np.ndarray:
    """Per-token losses (n_texts, window) of the first `window` tokens of each text, NaN-padded."""
    out = np.full((len(stats), window), np.nan, dtype=np.float32)
    for row, text in enumerate(stats):
        head = -text.token_logprobs[:window]
        out[row, :len(head)] = head
    return out


def missing_shadows(directory: str | os.PathLike[str]) -> list[int]:
    """Indices of the plan's shadows that have not stored their losses yet."""
    plan = ShadowPlan.load(directory)
    return [i for i in range(plan.settings.n_shadows) if not losses_path(directory, i).exists()]


def train_shadow(directory: str | os.PathLike[str], index: int, *, overwrite: bool = False) -> Path:
    """Train shadow `index` of the farm in `directory` and store its losses; skipped when already stored."""
    plan = ShadowPlan.load(directory)
    fingerprint = plan_sha256(directory)
    texts = plan.training_texts(index)  # checks the index
    path = losses_path(directory, index)
    if path.exists() and not overwrite:
        return path
    settings = plan.settings
    training = dataclasses.replace(settings.training, seed=settings.seed * 10_000 + index,
                                   output_dir=str(path.parent / "trainer"))
    model, tokenizer = load_model(settings.model)
    start = time.perf_counter()
    with start_token_rule(settings.start_token):  # trained and scored after the plan's start token
        model = finetune(model, tokenizer, texts, training)
        train_seconds = time.perf_counter() - start
        stats = score_texts(model, tokenizer, plan.texts, batch_size=settings.score_batch_size,
                            max_length=training.max_length, desc=f"shadow {index}", distribution=False)
        start_token = start_token_record(tokenizer)
    atomic_write_text(path.parent / "shadow.json", json.dumps({
        "index": index, "plan_sha256": fingerprint, "n_training_texts": len(texts), "seed": training.seed,
        "start_token": start_token,
        "train_seconds": train_seconds, "score_seconds": time.perf_counter() - start - train_seconds}, indent=1))
    buffer = io.BytesIO()
    np.save(buffer, loss_windows(stats, settings.window))
    return atomic_write_bytes(path, buffer.getvalue())


def train_missing(directory: str | os.PathLike[str]) -> list[int]:
    """Run every shadow job of the farm that has not finished; returns the indices it ran."""
    todo = missing_shadows(directory)
    for index in todo:
        train_shadow(directory, index)
    return todo


def _recorded_plan(directory: str | os.PathLike[str], index: int) -> str | None:
    """The `plan.json` sha256 that shadow `index` recorded when it was trained, or None if it recorded none."""
    try:
        record = json.loads((losses_path(directory, index).parent / "shadow.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get("plan_sha256") if isinstance(record, dict) else None


def load_losses(directory: str | os.PathLike[str]) -> tuple[ShadowPlan, np.ndarray]:
    """The plan and every shadow's losses stacked (n_shadows, n_texts, window); all shadows done, on this plan."""
    plan = ShadowPlan.load(directory)
    todo = missing_shadows(directory)
    if todo:
        raise FileNotFoundError(f"Shadows {todo} of {directory} have no stored losses yet; run them with "
                                f"`privft shadows train {directory} --missing` (or --index I per shadow).")
    expected = plan_sha256(directory)
    recorded = {i: _recorded_plan(directory, i) for i in range(plan.settings.n_shadows)}
    other = [i for i, sha in recorded.items() if sha is not None and sha != expected]
    if other:
        raise ValueError(f"Shadows {other} of {directory} were trained on another plan than its plan.json (their "
                         f"shadow.json records a different plan_sha256), so their losses do not match its IN matrix; "
                         f"retrain each with `privft shadows train {directory} --index I --overwrite`.")
    unchecked = [i for i, sha in recorded.items() if sha is None]
    if unchecked:
        warnings.warn(f"Shadows {unchecked} of {directory} record no plan_sha256 (trained by an older privft), so "
                      "they cannot be checked against its plan.json; if the farm was ever re-planned, retrain them "
                      f"with `privft shadows train {directory} --index I --overwrite`.", stacklevel=2)
    losses = np.stack([np.load(losses_path(directory, i)) for i in range(plan.settings.n_shadows)])
    if losses.shape[1:] != (len(plan.texts), plan.settings.window):
        raise ValueError(f"Stored losses have shape {losses.shape[1:]} per shadow but the plan has "
                         f"{len(plan.texts)} texts × window {plan.settings.window}; re-run the shadows of this plan.")
    return plan, losses
