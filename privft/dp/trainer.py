"""`make_private(trainer, ...)`: turn an existing Trainer or trl SFTTrainer into its DP-LoRA version.

One Trainer step is one Poisson-sampled logical batch (expected size L =
`per_device_train_batch_size`), split inside the step into physical chunks of at most P
sequences. Each chunk's per-sequence losses are back-propagated through opacus' hooks; every
chunk but the last is clipped and accumulated (a skipped DPOptimizer step), and the Trainer's own
`optimizer.step()` clips the last chunk, adds the noise once and divides by L (public), never by
the realised batch size. An empty draw is a noise-only step.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import datasets
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from privft.dp.callback import STATE_FILE, DPLoraCallback
from privft.dp.checks import DPConfigError, check_trainer
from privft.dp.engine import SAMPLING, DPLoraEngine
from privft.dp.loss import sequence_losses
from privft.dp.sampling import is_empty, poisson_dataloader
from privft.dp.settings import DPSettings
from privft.heap import add_release_callback
from privft.io import atomic_write_text
from privft.training import last_complete_checkpoint


class DPLoraTrainerMixin:
    """The Trainer methods DP-LoRA replaces; `make_private` puts this class in front of the Trainer's own."""

    dp: DPLoraEngine

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """Train; on resume, restore the accountant from the checkpoint's `dp_state.json` or refuse.

        `resume_from_checkpoint=True` takes the newest complete checkpoint: one whose save finished,
        accountant included.
        """
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir, required=(STATE_FILE,))
            if resume_from_checkpoint is None:
                raise ValueError(f"No complete checkpoint (with {STATE_FILE}) in {self.args.output_dir} to resume "
                                 "from.")
        self._dp_resume_state = None
        if resume_from_checkpoint:
            path = os.path.join(resume_from_checkpoint, STATE_FILE)
            if not os.path.isfile(path):
                complete = last_complete_checkpoint(os.path.dirname(os.path.normpath(resume_from_checkpoint)),
                                                    required=(STATE_FILE,))
                advice = (f"the last complete checkpoint is {complete}: resume from it" if complete else
                          "no checkpoint beside it is complete: resume from a checkpoint of a DP-LoRA run")
                raise DPConfigError(f"{resume_from_checkpoint} has no {STATE_FILE} (not a DP-LoRA checkpoint, or its "
                                    "save was interrupted): resuming without the accountant's history would "
                                    f"under-report ε; {advice}.")
            with open(path, encoding="utf-8") as handle:
                self._dp_resume_state = json.load(handle)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _save_checkpoint(self, model: nn.Module, trial: Any) -> None:
        """Save a checkpoint with the accountant in it: `dp_state.json` first, the Trainer's files after it.

        The Trainer writes its own state last, so a checkpoint that `last_complete_checkpoint` accepts
        holds the accountant of the same step; a kill during the save leaves it incomplete.
        """
        if self.args.should_save:
            folder = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            atomic_write_text(os.path.join(folder, STATE_FILE), json.dumps(self.dp.state_dict(), indent=1))
        super()._save_checkpoint(model, trial)

    def get_train_dataloader(self) -> DataLoader:
        """Calibrate σ for this dataset and schedule, and serve Poisson-sampled logical batches."""
        check_trainer(self)  # again: the dataset or arguments may have changed since make_private
        dataset, collator = self.train_dataset, self.data_collator
        if isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description="Training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="Training")
        n_examples, batch_size = len(dataset), self.args.per_device_train_batch_size
        steps_per_epoch = math.ceil(n_examples / batch_size)
        steps = self.args.max_steps if self.args.max_steps > 0 else math.ceil(self.args.num_train_epochs
                                                                               * steps_per_epoch)
        calibration = self.dp.calibrate(n_examples, batch_size, steps)
        self.dp.count_duplicates(_token_rows(dataset))
        if getattr(self, "_dp_resume_state", None) is not None:
            self.dp.load_state_dict(self._dp_resume_state)  # before the generator: its derivation counts steps
            self._dp_resume_state = None
        return poisson_dataloader(dataset, collator, sample_rate=calibration.sample_rate,
                                  steps_per_epoch=steps_per_epoch, generator=self.dp.generator(SAMPLING),
                                  num_workers=self.args.dataloader_num_workers)

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """The Trainer's optimizer (same parameter groups), wrapped in opacus' DPOptimizer."""
        optimizer = super().create_optimizer(model)
        if optimizer is not self.dp.optimizer:
            self.optimizer = self.dp.wrap_optimizer(optimizer)
        return self.optimizer

    def training_step(self, model: nn.Module, inputs: dict[str, Any],
                      num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
        """Back-propagate one logical batch chunk by chunk; the Trainer's next optimizer.step() noises it once."""
        if self.dp.budget_exhausted:
            raise RuntimeError(f"All {self.dp.calibration.steps} noised steps the budget ε = "
                               f"{self.dp.target_epsilon:g} was calibrated for are spent; another step would "
                               "exceed it.")
        model.train()
        optimizer = self.dp.optimizer
        if is_empty(inputs):
            for p in optimizer.params:  # zero per-sample gradients: the step adds noise only
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
            return torch.zeros((), device=self.args.device)
        inputs = self._prepare_inputs(inputs)
        n = len(inputs["input_ids"])
        chunk = self.dp.physical_batch_size or n
        total = torch.zeros((), device=self.args.device)
        for start in range(0, n, chunk):
            part = {k: v[start:start + chunk] for k, v in inputs.items() if isinstance(v, torch.Tensor)}
            with self.compute_loss_context_manager():
                losses = sequence_losses(model, part)
            losses.mean().backward()  # opacus' hooks rescale by the chunk size: per-sequence gradients
            total += losses.detach().sum()
            if start + chunk < n:  # clip and accumulate this chunk; noise comes once, at the Trainer's step
                optimizer.signal_skip_step(True)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return total / n

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Log as the Trainer does, with ε spent so far and δ (`dp/epsilon`, PRV; `dp/delta`), without `grad_norm`.

        HF's `grad_norm` is the norm of the last chunk's raw gradient, before clipping and noise:
        a statistic of private data outside the guarantee, so it is not logged.
        """
        logs = {key: value for key, value in logs.items() if key != "grad_norm"}
        if self.dp.calibration is not None:
            logs = {**logs, "dp/epsilon": self.dp.epsilon(), "dp/delta": self.dp.calibration.delta,
                    "dp/noised_steps": self.dp.noised_steps}
        super().log(logs, start_time)


def _token_rows(dataset: Dataset) -> Iterator[tuple[int, ...]]:
    """Each training row's `input_ids` as a tuple, to count identical sequences."""
    try:
        column = dataset["input_ids"] if isinstance(dataset, datasets.Dataset) else (
            dataset[i]["input_ids"] for i in range(len(dataset)))
        for ids in column:
            yield tuple(ids.tolist() if isinstance(ids, torch.Tensor) else ids)
    except (KeyError, TypeError) as error:
        raise DPConfigError(f"A training row has no 'input_ids' ({error!r}); DP-LoRA counts repeated sequences by "
                            "their token ids, so tokenize the training set before building the Trainer.") from error


@functools.cache
def _private_class(trainer_class: type[Trainer]) -> type[Trainer]:
    return type(f"DPLora{trainer_class.__name__}", (DPLoraTrainerMixin, trainer_class), {})


def make_private(trainer: Trainer, settings: DPSettings | None = None, **fields: Any) -> Trainer:
    """Make `trainer` (a Trainer or SFTTrainer on a peft LoRA model) train with DP-SGD; returns it.

    The settings are a `DPSettings` (the YAML's `dp:` section), its fields given as keywords, or
    both (the keywords win): `make_private(trainer, target_epsilon=8.0)`.

    target_epsilon: ε after the whole run (PRV accountant), for δ = `delta` (default
        min(1e-5, 1/N^1.1) for N training sequences). The noise is calibrated for the run's
        epochs or max_steps at q = L/N, L = `per_device_train_batch_size`; training stops when
        those steps are spent.
    max_grad_norm: C, the bound on each sequence's gradient norm (the Trainer's own
        `max_grad_norm` must be 0).
    physical_batch_size: at most this many sequences per forward pass (default: the whole
        logical batch); it changes memory, not the result.
    seed: for tests and reproducibility only. By default the batch sampler and the noise each
        draw a seed from OS entropy (never `TrainingArguments.seed`) that is kept nowhere; a
        `seed` makes both recomputable by whoever knows it, which voids the guarantee's
        assumption that they are secret (what opacus' `secure_mode` would harden).

    Warns when δ ≥ 1/N, and when a training sequence occurs k > 1 times (it is then protected
    only at group level k; `trainer.dp.summary()` gives `group_epsilon` and `group_delta`).

    Refuses set-ups that break the guarantee (packing, padding-free batches, non-reentrant
    gradient checkpointing, DoRA, LoRA on embeddings, fp16, HF gradient clipping, gradient
    accumulation, several processes), listing every problem at once.
    """
    if isinstance(trainer, DPLoraTrainerMixin):
        raise ValueError("This trainer is already private; call make_private once per Trainer.")
    check_trainer(trainer)
    engine = DPLoraEngine(dataclasses.replace(settings or DPSettings(), **fields))
    trainer.__class__ = _private_class(type(trainer))
    trainer.dp = engine
    trainer.add_callback(DPLoraCallback(engine))
    add_release_callback(trainer)  # its per-chunk activations leave the most freed memory behind
    return trainer
