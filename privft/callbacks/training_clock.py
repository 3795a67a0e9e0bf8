"""Training time that survives a restart: every checkpoint keeps the seconds spent training up to it."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from privft.clock import Clock
from privft.io import atomic_write_text

CLOCK_FILE = "privft_training_clock.json"  # in each checkpoint: wall and CPU seconds of training up to it


class TrainingClockCallback(TrainerCallback):
    """Training's wall and CPU seconds, the spans of `exclude` (audits run inside training) left out.

    Every checkpoint gets `CLOCK_FILE` with the seconds spent up to it. Given the checkpoint that
    `trainer.train(resume_from_checkpoint=...)` will resume from, the count starts from them, so a run
    trained across restarts reports what producing its model cost once: the steps a kill threw away and
    that were redone count once. The file is written in ``on_save``, after the Trainer's own save; a kill
    between the two leaves a checkpoint without it, from which nothing is carried (`times_partial`).
    """

    def __init__(self, exclude: Clock | None = None, resumed_from: str | Path | None = None) -> None:
        self.exclude = exclude or Clock()
        recorded = _recorded(resumed_from) if resumed_from else None
        self.carried = recorded or Clock()  # the seconds spent before the checkpoint this run resumes from
        # resumed from a checkpoint that kept no clock: the times count the part after the restart only
        self.times_partial = bool(resumed_from) and recorded is None
        self._began: tuple[float, float, float, float] | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        """Start counting."""
        self._began = (time.perf_counter(), time.process_time(), self.exclude.seconds, self.exclude.cpu_seconds)

    def elapsed(self) -> Clock:
        """The seconds so far: those carried from the checkpoint, plus this run's without `exclude`'s spans."""
        if self._began is None:
            raise RuntimeError("TrainingClockCallback.elapsed() before training began: add it to the Trainer's "
                               "callbacks and call trainer.train() first.")
        wall, cpu, excluded, excluded_cpu = self._began
        return Clock(
            self.carried.seconds + time.perf_counter() - wall - (self.exclude.seconds - excluded),
            self.carried.cpu_seconds + time.process_time() - cpu - (self.exclude.cpu_seconds - excluded_cpu))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Write the seconds so far into the checkpoint the Trainer has just saved."""
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if folder.is_dir():
            atomic_write_text(folder / CLOCK_FILE, json.dumps(dataclasses.asdict(self.elapsed())))


def _recorded(checkpoint: str | Path) -> Clock | None:
    """The seconds `checkpoint` recorded, or None where it recorded none (or an unreadable file)."""
    try:
        return Clock(**json.loads((Path(checkpoint) / CLOCK_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None
