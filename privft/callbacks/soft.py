"""SOFT (selective obfuscation) as a Trainer callback: swap likely-memorised samples for their paraphrases.

At the start of each epoch from the warm-up on, the callback reads each open sample's loss (the
audit's per-token loss: scored in eval mode, or recorded from the previous epoch's training
passes), lets the selection rule pick the samples to obfuscate, and sets the `ObfuscatedView`'s
mask, so that epoch's batches carry the obfuscated version of the selected samples (see
`privft.defend.view` for why this takes effect when reassigning the dataset does not).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.trainer_callback import ExportableState

from privft.data.records import Record, check_records
from privft.defend.distributed import on_main_then_broadcast
from privft.defend.losses import TrainingPassLosses, sample_losses
from privft.defend.rules import RULES, get_rule
from privft.defend.schedule import SoftSchedule
from privft.defend.selection import mean_losses, update_mask
from privft.defend.view import ObfuscatedView
from privft.scoring.render import RecordRendering, record_rendering, rendering_context
from privft.training import tokenize_for_training

LOG_PREFIX = "soft/"


def _epoch_index(epoch: float | None) -> int:
    """The epoch that starts (or, after a mid-epoch resume, continues) at Trainer epoch value `epoch`."""
    return 0 if epoch is None else math.floor(epoch + 1e-6)


def lost_swap_warning(n_lost: int, n_selected: int) -> str:
    """The warning for selected samples whose served tokens equal their original's, with what to change."""
    return (f"{n_lost} of {n_selected} samples selected for obfuscation are served unchanged: after the trainer's "
            "tokenisation and truncation their obfuscated tokens equal the original's (the rewritten part was cut "
            "off, or the paraphrase changed nothing). They are not counted as obfuscated (soft/n_served_changed). "
            "Lower prefix_keep_ratio, raise the trainer's max_length, or use mode='rewrite-only'.")


def selection_warnings(record: Mapping[str, Any]) -> list[str]:
    """A selection's warnings: swaps lost to truncation, and selected samples whose every rewrite failed the filter."""
    found = [lost_swap_warning(record["n_lost_swaps"], record["n_selected"])] if record.get("n_lost_swaps") else []
    if record.get("n_served_failed_rewrites"):
        found.append(f"{record['n_served_failed_rewrites']} of the {record['n_served_changed']} samples served "
                     "obfuscated are rewrites that failed the similarity filter (every try rejected; the last changed "
                     "candidate is served, often word salad). To serve their originals instead, set soft."
                     "failed_rewrites: skip (privft train) or obfuscate(..., failed_rewrites='skip').")
    if record.get("n_skipped_failed_rewrites"):
        found.append(f"{record['n_skipped_failed_rewrites']} of the {record['n_selected']} selected samples are "
                     "served as written: every rewrite of theirs failed the similarity filter, and the original was "
                     "kept (failed_rewrites='skip', or no candidate changed a word). They are not protected.")
    return found


def soft_report_notes(log_history: Sequence[dict[str, Any]]) -> list[str]:
    """Report warnings from SOFT's latest logged selection: emptied swaps, rewrites that failed the filter."""
    selections = [entry for entry in log_history if LOG_PREFIX + "n_selected" in entry]
    if not selections:
        return []
    latest = {key.removeprefix(LOG_PREFIX): value for key, value in selections[-1].items()}
    return [f"SOFT: {warning}" for warning in selection_warnings(latest)]


class SelectiveObfuscationCallback(TrainerCallback, ExportableState):
    """Re-select, at each epoch start after warm-up, which training samples the `ObfuscatedView` serves obfuscated.

    Rules are registered classes (`privft.defend.rules`): ``"paper"`` (τ = mean loss of
    `validation_texts`, held out and re-scored every epoch; select loss < τ; warm-up 1 epoch),
    ``"release"`` (the released code: the lowest-loss `select_ratio` share, default 0.5, then
    every sample; warm-up 0), and the non-selective controls ``"all"`` (every sample from the
    first epoch) and ``"all-after-warmup"``.

    `schedule` (a `privft.defend.schedule.SoftSchedule`; default: the paper rule) holds the rule,
    the release rule's `select_ratio`, the warm-up, `cumulative` and `loss_source`.
    `loss_source` says where the training samples' losses come from: ``"eval"`` re-scores the
    original texts in eval mode without gradients at each selection (paper-faithful);
    ``"training"`` reuses the per-sample losses of the previous epoch's training forward
    passes (`TrainingPassLosses`, no extra pass; a sample not yet trained on, as at a selection
    before any step, is scored in eval mode; on the SOFT study's split it selected a subset of
    the eval source's samples and protected less, docs/results/soft-study.md). Validation texts
    are always scored in eval mode.

    `cumulative=True` (the default) ORs each new selection into the previous mask: once a sample
    has been judged memorised its original is never trained on again. The release rule is
    cumulative by construction.

    The callback binds to the view the trainer really serves (a trainer that prepares its
    dataset with ``map``/``remove_columns``, as trl's `SFTTrainer` does, serves a view derived
    from the one given, sharing its mask) and compares the two versions there, in tokens: a
    selected sample whose served tokens equal its original's is not counted as obfuscated.
    Given `rewrite_failed` (per sample: every rewrite was rejected by the similarity filter), it
    counts the selected samples served such a rewrite (``soft/n_served_failed_rewrites``) and
    those served as written for that reason (``soft/n_skipped_failed_rewrites``) apart, and warns.
    Each selection is appended to ``state.log_history`` (``soft/n_selected``,
    ``soft/n_served_changed``, ``soft/tau``, ``soft/n_scored``, mean losses) and to `history`
    (which also lists the ``selected`` indices).

    Every rank scores its share of the texts; the selection is made on global rank 0 from the
    gathered losses and broadcast; sharded set-ups (FSDP, DeepSpeed ZeRO-3) are refused. The
    mask, `history` and the training passes' recorded losses are saved with each checkpoint
    (``restore_callback_states_from_checkpoint=True`` rebuilds this callback; pass
    ``processing_class=tokenizer`` to the Trainer). Keep ``dataloader_persistent_workers=False``.
    """

    def __init__(
        self,
        view: ObfuscatedView | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        schedule: SoftSchedule | Mapping[str, Any] | None = None,
        validation_texts: Sequence[Record] | None = None,
        batch_size: int = 8,
        max_length: int | None = None,
        rendering: RecordRendering | Mapping[str, Any] | None = None,
        rewrite_failed: Sequence[bool] | None = None,
    ) -> None:
        if isinstance(schedule, Mapping):  # as a checkpoint stores it
            schedule = SoftSchedule(**schedule)
        if isinstance(rendering, Mapping):
            rendering = RecordRendering(**rendering)
        self.rendering = rendering  # how conversational records are scored; None: from the trainer's args
        self.schedule = schedule = schedule or SoftSchedule()
        rule = schedule.rule
        self.selection_rule = get_rule(rule)(select_ratio=schedule.select_ratio)
        if self.selection_rule.needs_validation:
            if not validation_texts:
                raise ValueError(f"rule={rule!r} needs validation_texts: held-out texts (never trained on) whose mean "
                                 "loss is the selection threshold τ.")
            validation_texts = check_records(validation_texts, "validation_texts")
        elif validation_texts:
            readers = sorted(name for name, registered in RULES.items() if registered.needs_validation)
            raise ValueError(f"rule={rule!r} does not use validation_texts; drop them or use a rule that reads them "
                             f"({', '.join(readers)}).")
        else:
            validation_texts = None
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer (texts per scoring batch).")
        if view is not None and not isinstance(view, ObfuscatedView):
            raise TypeError(f"view must be an ObfuscatedView, got {type(view).__name__}.")
        if rewrite_failed is not None and view is not None and len(rewrite_failed) != len(view):
            raise ValueError(f"rewrite_failed has {len(rewrite_failed)} flags for {len(view)} samples: give one per "
                             "sample (ObfuscationResult.failed_filter), in the same order.")
        self.rewrite_failed = None if rewrite_failed is None else np.asarray(rewrite_failed, dtype=bool)
        self.view = view
        self.tokenizer = tokenizer
        self.validation_texts = validation_texts
        self.warmup_epochs = schedule.epochs_before_selection
        self.batch_size = batch_size
        self.max_length = max_length
        self.mask: np.ndarray | None = None  # the mask of the latest selection; None before the first
        self.history: list[dict[str, Any]] = []  # one record per selection
        self.changed: np.ndarray | None = None  # per sample: its served obfuscated tokens differ from the original's
        self._training_losses: TrainingPassLosses | None = None
        self.training_pass_losses: list[float | None] | None = None  # a checkpoint's recorded losses, until resumed

    def state(self) -> dict[str, Any]:
        """Options and selection state as JSON-ready data, saved by the Trainer with each checkpoint."""
        return {
            "args": {
                "schedule": asdict(self.schedule),
                "validation_texts": self.validation_texts,
                "batch_size": self.batch_size,
                "max_length": self.max_length,
                "rendering": None if self.rendering is None else asdict(self.rendering),
                "rewrite_failed": None if self.rewrite_failed is None else self.rewrite_failed.tolist(),
            },
            "attributes": {
                "mask": None if self.mask is None else np.asarray(self.mask, dtype=bool).tolist(),
                "history": [dict(record) for record in self.history],
                "training_pass_losses": None if self._training_losses is None else [
                    None if math.isnan(loss) else loss for loss in self._training_losses.losses.tolist()],
            },
        }

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       train_dataloader: Any = None, processing_class: Any = None, model: Any = None,
                       **kwargs: Any) -> None:
        """Check the set-up, bind the served view and tokenizer, count the real swaps, serve the current mask."""
        if args.dataloader_persistent_workers:
            raise ValueError("SelectiveObfuscationCallback needs dataloader_persistent_workers=False: persistent "
                             "workers keep the dataset copy of the first epoch and never see a new mask.")
        if args.fsdp or is_deepspeed_zero3_enabled():
            raise ValueError("SelectiveObfuscationCallback scores with each rank's whole copy of the model, which "
                             "sharded parameters (FSDP, DeepSpeed ZeRO-3) do not allow; use DDP or ZeRO-1/2.")
        self.view = self._served_view(getattr(train_dataloader, "dataset", None))
        if self.tokenizer is None:
            self.tokenizer = processing_class
        if self.tokenizer is None:
            raise ValueError("SelectiveObfuscationCallback has no tokenizer to score with: pass it to the callback or "
                             "pass processing_class=tokenizer to the Trainer (needed when resuming from a checkpoint).")
        if state.global_step > 0 and not args.restore_callback_states_from_checkpoint:
            warnings.warn("Resuming without restore_callback_states_from_checkpoint=True: SOFT's mask and selection "
                          "history start afresh instead of continuing from the checkpoint.", stacklevel=2)
        if self.warmup_epochs >= state.num_train_epochs:
            raise ValueError(f"warmup_epochs={self.warmup_epochs} leaves no epoch for a selection in a run of "
                             f"{state.num_train_epochs} epoch(s), so nothing would be obfuscated; train longer or "
                             "lower warmup_epochs.")
        served_ids = "input_ids" in self.view.column_names
        self.changed = self.view.served_changed() if served_ids else None
        if self.schedule.loss_source == "training":
            if not served_ids:
                raise ValueError("loss_source='training' recognises samples by their served token ids, but the "
                                 f"served view has no 'input_ids' column ({self.view.column_names}).")
            self._training_losses = TrainingPassLosses(self.view.original["input_ids"],
                                                       masked="labels" in self.view.column_names)
            if self.training_pass_losses is not None:  # resumed: what the interrupted run had recorded (None: NaN)
                self._training_losses.losses[:] = np.array(self.training_pass_losses, dtype=float)
            self._training_losses.attach(model)
        self.mask = None if self.mask is None else np.asarray(self.mask, dtype=bool)
        self.view.set_mask(np.zeros(len(self.view), dtype=bool) if self.mask is None else self.mask)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Stop recording training-pass losses."""
        if self._training_losses is not None:
            self._training_losses.detach()

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: PreTrainedModel | None = None, **kwargs: Any) -> None:
        """Select and serve the obfuscated samples for the epoch that starts now."""
        epoch = _epoch_index(state.epoch)
        if epoch < self.warmup_epochs or (self.history and self.history[-1]["epoch"] == epoch):
            return  # still warming up, or resumed mid-epoch: keep the mask this epoch started with
        with rendering_context(self.rendering or RecordRendering.from_args(args)):
            read = self._read(model)  # every rank scores its share of the texts
        mask, record = on_main_then_broadcast(lambda: self._select(epoch, state.global_step, *read))
        self.mask = mask
        self.view.set_mask(mask)
        self.history.append(record)
        for warning in selection_warnings(record):
            warnings.warn(warning, stacklevel=2)
        logged = {LOG_PREFIX + key: value for key, value in record.items()
                  if key not in ("epoch", "step", "rule", "loss_source", "selected") and value is not None}
        state.log_history.append({**logged, "epoch": state.epoch, "step": state.global_step})

    def _served_view(self, served: Any) -> ObfuscatedView:
        """The view the Trainer's dataloader serves: this callback's view or one derived from it."""
        if isinstance(served, ObfuscatedView) and (self.view is None or self.view.shares_mask_with(served)):
            return served
        raise ValueError(
            f"The Trainer serves a {type(served).__name__}, not this callback's ObfuscatedView (or a view derived "
            "from it), so a new mask would never reach the batches. Pass the view as train_dataset.")

    def _previous(self) -> np.ndarray:
        """The mask a selection builds on: the current one when cumulative (once obfuscated, always), else none."""
        return np.zeros(len(self.view), dtype=bool) if self.mask is None or not self.schedule.cumulative else self.mask

    def _read(self, model: PreTrainedModel) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        """The open samples' losses, the validation losses (None where the rule reads none), and the eval-scored count.

        Under a cumulative selection a sample already obfuscated stays so whatever its loss, so
        only the others are read. Every rank calls this: the eval-mode passes are shared across ranks.
        """
        open_indices = np.flatnonzero(~self._previous())
        if not (open_indices.size and self.selection_rule.needs_losses(len(self.history))):
            return None, None, 0
        losses, n_eval = self._losses(model, open_indices)
        validation = None
        if self.selection_rule.needs_validation:
            validation = sample_losses(model, self.tokenizer, self.validation_texts, desc="SOFT validation",
                                       batch_size=self.batch_size, max_length=self.max_length, shard=True)
        return losses, validation, n_eval

    def _losses(self, model: PreTrainedModel, indices: np.ndarray) -> tuple[np.ndarray, int]:
        """The losses of the samples at `indices`, and how many of them were scored in eval mode."""
        losses = np.full(indices.size, np.nan)
        if self._training_losses is not None:  # rank 0's record decides, so every rank scores the same texts
            losses = on_main_then_broadcast(lambda: self._training_losses.losses[indices].copy())
        unseen = np.flatnonzero(np.isnan(losses))
        losses[unseen] = sample_losses(model, self.tokenizer, [self.view.texts[indices[i]] for i in unseen],
                                       batch_size=self.batch_size, max_length=self.max_length, shard=True)
        return losses, int(unseen.size)

    def _select(self, epoch: int, step: int, losses: np.ndarray | None, validation: np.ndarray | None,
                n_eval: int) -> tuple[np.ndarray, dict[str, Any]]:
        """Apply the rule to the losses `_read` returned and summarise it (on rank 0; the result is broadcast).

        The logged mean losses are over the samples read this time: those newly selected against
        those left as written.
        """
        previous = self._previous()
        open_indices = np.flatnonzero(~previous)
        index = len(self.history)
        reads = losses is not None
        new = previous.copy()
        tau = None
        if open_indices.size:
            decision = self.selection_rule.select(open_indices.size, losses, validation, index)
            new[open_indices], tau = decision.mask, decision.tau
        mask = update_mask(self.mask, new, cumulative=self.schedule.cumulative)
        selected, unselected = mean_losses(losses, mask[open_indices]) if reads else (None, None)
        changed = np.ones(mask.size, dtype=bool) if self.changed is None else self.changed
        failed = np.zeros(mask.size, dtype=bool) if self.rewrite_failed is None else self.rewrite_failed
        record = {"epoch": epoch, "step": step, "rule": self.schedule.rule, "loss_source": self.schedule.loss_source,
                  "tau": tau,
                  "n_selected": int(mask.sum()), "n_served_changed": int((mask & changed).sum()),
                  "n_served_failed_rewrites": int((mask & changed & failed).sum()),
                  "n_skipped_failed_rewrites": int((mask & ~changed & failed).sum()),
                  "n_lost_swaps": int((mask & ~changed & ~failed).sum()), "n_total": int(mask.size),
                  "n_scored": int(open_indices.size) if reads else 0, "n_scored_eval": n_eval,
                  "mean_loss_selected": selected, "mean_loss_unselected": unselected,
                  "selected": np.flatnonzero(mask).tolist()}  # which samples: kept in `history`, not logged
        return mask, record


def prepare_soft(
    tokenizer: PreTrainedTokenizerBase,
    train_texts: Sequence[Record],
    obfuscated_texts: Sequence[Record],
    validation_texts: Sequence[Record] | None = None,
    *,
    schedule: SoftSchedule | None = None,
    max_length: int | None = None,
    batch_size: int = 8,
    score_max_length: int | None = None,
    rendering: RecordRendering | None = None,
    rewrite_failed: Sequence[bool] | None = None,
) -> tuple[ObfuscatedView, SelectiveObfuscationCallback]:
    """The training view (a `datasets.Dataset`) and its SOFT callback; `obfuscated_texts[i]` replaces `train_texts[i]`.

    Both versions are tokenized as `privft.training` does (BOS first). `max_length` cuts them
    for a plain `Trainer`, which does not truncate; leave it None with trl's `SFTTrainer`, whose
    own ``max_length`` then applies to both. `score_max_length` is the selection's scoring
    window (give the audit's, so both read the same losses); `schedule` (default: the paper rule)
    and `batch_size` are `SelectiveObfuscationCallback`'s. `rewrite_failed` (per sample,
    ``ObfuscationResult.failed_filter``) lets the callback count the selected samples whose every
    rewrite the similarity filter rejected. Typical use (Trainer or SFTTrainer alike)::

        view, soft = prepare_soft(tokenizer, train_texts, [r.text for r in obfuscations], validation_texts)
        trainer = SFTTrainer(model, args=SFTConfig(max_length=256, ...), train_dataset=view,
                             processing_class=tokenizer, callbacks=[soft])
        trainer.train()

    Conversational records (`privft.data.records`; `obfuscate` rewrites only their replies) are
    served as trl renders them, ids and ``labels`` masking the untrained tokens, under `rendering`
    (give ``RecordRendering.from_args(sft_config)``; default trl's defaults): SFTTrainer takes the
    view as already tokenized, and its completion-only or assistant-only loss applies to the
    rewritten reply. The callback scores the records under the same rendering.
    """
    train_texts = check_records(train_texts, "train_texts")
    obfuscated_texts = check_records(obfuscated_texts, "obfuscated_texts")
    if len(train_texts) != len(obfuscated_texts):
        raise ValueError(f"train_texts ({len(train_texts)}) and obfuscated_texts ({len(obfuscated_texts)}) must pair "
                         "up one to one, in the same order.")
    unchanged = sum(a == b for a, b in zip(train_texts, obfuscated_texts))
    if unchanged:
        warnings.warn(f"{unchanged} of {len(train_texts)} obfuscated texts equal their original; selecting them "
                      "protects nothing.", stacklevel=2)
    with rendering_context(rendering or record_rendering()):
        view = ObfuscatedView(tokenize_for_training(tokenizer, train_texts, max_length),
                              tokenize_for_training(tokenizer, obfuscated_texts, max_length), train_texts)
    callback = SelectiveObfuscationCallback(
        view, tokenizer, schedule=schedule, validation_texts=validation_texts, batch_size=batch_size,
        max_length=score_max_length, rendering=rendering, rewrite_failed=rewrite_failed)
    return view, callback
