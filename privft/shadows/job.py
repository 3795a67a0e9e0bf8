"""One shadow model as an independent, resumable job: fine-tune on its IN texts, store per-token losses.

Each job reads the farm's `plan.json`, trains shadow `index` from the plan's base model, scores
every pool text, writes `shadows/NNN/shadow.json` (with the sha256 of the plan it trained on)
and then `shadows/NNN/losses.npy` atomically, last; a job whose files read back whole is done and
is skipped (a corrupt one is retrained), so any scheduler can run indices in any order, on any
machine, and re-run the farm after a crash.

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
import shutil
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from privft.callbacks.training_clock import TrainingClockCallback
from privft.io import atomic_write_bytes, atomic_write_text
from privft.models import load_model
from privft.scoring import TokenStats, score_texts, start_token_record, start_token_rule
from privft.shadows.plan import ShadowPlan, plan_sha256
from privft.shadows.store import corruption, losses_path, missing_shadows
from privft.training import finetune, last_complete_checkpoint


def loss_windows(stats: Sequence[TokenStats], window: int) -> np.ndarray:
    """Per-token losses (n_texts, window) of the first `window` tokens of each text, NaN-padded."""
    out = np.full((len(stats), window), np.nan, dtype=np.float32)
    for row, text in enumerate(stats):
        head = -text.token_logprobs[:window]
        out[row, :len(head)] = head
    return out


def train_shadow(directory: str | os.PathLike[str], index: int, *, overwrite: bool = False) -> Path:
    """Train shadow `index` of the farm in `directory` and store its losses; skipped when stored whole.

    A corrupt shadow is retrained, with a warning naming it. With `training.save_steps`, a killed job
    resumes from its last complete checkpoint; `overwrite` retrains from step 0.
    """
    plan = ShadowPlan.load(directory)
    fingerprint = plan_sha256(directory)
    texts = plan.training_texts(index)  # checks the index
    path = losses_path(directory, index)
    if path.exists() and not overwrite:
        damage = corruption(directory, index, plan)
        if damage is None:
            return path
        warnings.warn(f"Shadow {index} of {directory} is corrupt ({damage}); retraining it.", stacklevel=2)
    settings = plan.settings
    training = dataclasses.replace(settings.training, seed=settings.seed * 10_000 + index,
                                   output_dir=str(path.parent / "trainer"))
    checkpoint = _resume_point(Path(training.output_dir), fingerprint, overwrite) if training.save_steps else None
    timer = TrainingClockCallback(resumed_from=checkpoint)  # kept in each checkpoint: a resume adds its time
    if checkpoint:
        warnings.warn(f"Resuming shadow {index} of {directory} from {checkpoint}" + (
            "; it kept no training clock, so its train_seconds count this part only." if timer.times_partial
            else "."),
            stacklevel=2)
    model, tokenizer = load_model(settings.model)
    with start_token_rule(settings.start_token):  # trained and scored after the plan's start token
        model = finetune(model, tokenizer, texts, training, callbacks=[timer], resume_from_checkpoint=checkpoint)
        trained, start = timer.elapsed(), time.perf_counter()
        stats = score_texts(model, tokenizer, plan.texts, batch_size=settings.score_batch_size,
                            max_length=training.max_length, desc=f"shadow {index}", distribution=False)
        start_token = start_token_record(tokenizer)
    atomic_write_text(path.parent / "shadow.json", json.dumps({
        "index": index, "plan_sha256": fingerprint, "n_training_texts": len(texts), "seed": training.seed,
        "start_token": start_token, "resumed_from": Path(checkpoint).name if checkpoint else None,
        "times_partial": timer.times_partial, "train_seconds": trained.seconds,
        "train_cpu_seconds": trained.cpu_seconds, "score_seconds": time.perf_counter() - start}, indent=1))
    buffer = io.BytesIO()
    np.save(buffer, loss_windows(stats, settings.window))
    return atomic_write_bytes(path, buffer.getvalue())


def _resume_point(trainer: Path, fingerprint: str, overwrite: bool) -> str | None:
    """The last complete checkpoint a killed job of this shadow left on this plan; None after clearing `trainer`.

    `trainer` records the plan sha256 its checkpoints were made on. Checkpoints of another plan, of a
    privft that did not record it, or that `overwrite` discards are deleted, so the Trainer's rotation
    never mixes them into this run.
    """
    marker = trainer / "plan_sha256"
    checkpoint = last_complete_checkpoint(trainer)
    if checkpoint and not overwrite:
        if marker.is_file() and marker.read_text(encoding="utf-8") == fingerprint:
            return checkpoint
        warnings.warn(f"{trainer} holds checkpoints not recorded as made on this farm's plan.json; deleting them "
                      "and training this shadow from step 0.", stacklevel=3)
    shutil.rmtree(trainer, ignore_errors=True)
    atomic_write_text(marker, fingerprint)
    return None


def train_missing(directory: str | os.PathLike[str]) -> list[int]:
    """Run every shadow job of the farm that has not finished; returns the indices it ran."""
    todo = missing_shadows(directory)
    for index in todo:
        train_shadow(directory, index)
    return todo
