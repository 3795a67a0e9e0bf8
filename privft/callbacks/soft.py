"""SOFT (selective obfuscation) as a Trainer callback: swap likely-memorised samples for their paraphrases.

At the start of each epoch from `warmup_epochs` on, the callback scores the *original* training
texts with the current model (eval mode, no gradients, the audit's per-token loss), picks the
samples to obfuscate with the chosen rule, and sets the `ObfuscatedView`'s mask, so the batches
of that epoch carry the obfuscated ids for the selected samples (see `privft.defend.view` for
why this takes effect when reassigning the dataset does not).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
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

from privft.data.loaders import check_texts
from privft.defend.distributed import on_main_then_broadcast
from privft.defend.losses import sample_losses
from privft.defend.selection import check_select_ratio, mean_losses, paper_rule, release_rule, update_mask
from privft.defend.view import ObfuscatedView

RULES = ("paper", "release")
DEFAULT_WARMUP_EPOCHS = {"paper": 1, "release": 0}
DEFAULT_SELECT_RATIO = 0.5
LOG_PREFIX = "soft/"


def _epoch_index(epoch: float | None) -> int:
    """The epoch that starts (or, after a mid-epoch resume, continues) at Trainer epoch value `epoch`."""
    return 0 if epoch is None else math.floor(epoch + 1e-6)


def check_schedule(rule: str | None, select_ratio: float | None, warmup_epochs: int | None) -> None:
    """Refuse an unknown rule, a `select_ratio` outside (0, 1] or with the paper rule, and a negative warm-up.

    `rule=None` (SOFT off in a config) checks the values alone.
    """
    if rule is not None and rule not in RULES:
        raise ValueError(f"rule={rule!r} is not one of {RULES}.")
    if select_ratio is not None:
        if rule == "paper":
            raise ValueError("select_ratio applies to rule='release' only; the paper rule selects samples below "
                             "the validation loss τ.")
        check_select_ratio(select_ratio)
    if warmup_epochs is not None and (isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, int)
                                      or warmup_epochs < 0):
        raise ValueError(f"warmup_epochs={warmup_epochs!r} must be an integer >= 0 (epochs trained on the "
                         "original texts before the first selection).")


class SelectiveObfuscationCallback(TrainerCallback, ExportableState):
    """Re-select, at each epoch start after warm-up, which training samples the `ObfuscatedView` serves obfuscated.

    Rules (pure functions in `privft.defend.selection`):

    - ``"paper"``: τ = mean loss of `validation_texts` (held out, never trained on), re-scored
      every epoch; samples with loss < τ are selected. Default warm-up: 1 epoch, so the first
      selection is made by a model that has seen the data once.
    - ``"release"``: the released code's schedule: the lowest-loss `select_ratio` share (default
      0.5) at the first selection, every sample afterwards. Default warm-up: 0, as released (the
      first selection is then made by the pretrained model).

    `cumulative=True` (the default) ORs each new selection into the previous mask: once a sample
    has been judged memorised its original is never trained on again, whereas a fresh selection
    (`cumulative=False`) would serve it as written again once its loss rises above τ, re-exposing
    exactly the samples the defence singled out. The release rule is cumulative by construction.

    Every selection runs on global rank 0 and is broadcast, so all ranks serve the same mask;
    sharded set-ups (FSDP, DeepSpeed ZeRO-3) are refused because rank 0 cannot run the forward
    pass alone. Each selection is appended to ``state.log_history`` (keys ``soft/tau``,
    ``soft/n_selected``, ``soft/n_total``, ``soft/n_scored``, ``soft/mean_loss_selected``,
    ``soft/mean_loss_unselected``, plus ``epoch`` and ``step``) and to `history`. A cumulative
    selection re-scores only the samples not yet obfuscated, the only ones whose fate is open.

    Checkpoints: the mask and `history` are saved in ``trainer_state.json`` (with the options,
    including the validation texts). With ``restore_callback_states_from_checkpoint=True`` the
    Trainer rebuilds this callback from that state when resuming; the rebuilt instance, which
    replaces this one in ``trainer.callback_handler``, takes the view from the Trainer's
    training dataloader and the tokenizer from ``processing_class``, so pass
    ``processing_class=tokenizer`` to the Trainer, and read the resumed run's history from the
    callback in ``trainer.callback_handler.callbacks``.

    Use with ``transformers.Trainer``: pass the view as ``train_dataset``. With trl's
    ``SFTTrainer`` (which accepts only ``datasets`` datasets): pass ``view.original`` as
    ``train_dataset`` with ``SFTConfig(dataset_kwargs={"skip_prepare_dataset": True})`` (the ids
    are already tokenized, BOS-prefixed, as the audit scores them), then set
    ``trainer.train_dataset = view`` before ``trainer.train()``. In both cases keep
    ``dataloader_persistent_workers=False``. The callback checks at train start that the
    Trainer really serves the view and raises otherwise.
    """

    def __init__(
        self,
        view: ObfuscatedView | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        rule: str = "paper",
        validation_texts: Sequence[str] | None = None,
        select_ratio: float | None = None,
        warmup_epochs: int | None = None,
        cumulative: bool = True,
        batch_size: int = 8,
        max_length: int | None = None,
    ) -> None:
        check_schedule(rule, select_ratio, warmup_epochs)
        if rule == "paper":
            if not validation_texts:
                raise ValueError("rule='paper' needs validation_texts: held-out texts (never trained on) whose mean "
                                 "loss is the selection threshold τ.")
            validation_texts = check_texts(validation_texts, "validation_texts")
        else:
            if validation_texts:
                raise ValueError("rule='release' does not use validation_texts; drop them or use rule='paper'.")
            validation_texts = None
            select_ratio = check_select_ratio(DEFAULT_SELECT_RATIO if select_ratio is None else select_ratio)
        warmup_epochs = DEFAULT_WARMUP_EPOCHS[rule] if warmup_epochs is None else warmup_epochs
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer (texts per scoring batch).")
        if view is not None and not isinstance(view, ObfuscatedView):
            raise TypeError(f"view must be an ObfuscatedView, got {type(view).__name__}.")
        self.view = view
        self.tokenizer = tokenizer
        self.rule = rule
        self.validation_texts = validation_texts
        self.select_ratio = select_ratio
        self.warmup_epochs = warmup_epochs
        self.cumulative = bool(cumulative)
        self.batch_size = batch_size
        self.max_length = max_length
        self.mask: np.ndarray | None = None  # the mask of the latest selection; None before the first
        self.history: list[dict[str, Any]] = []  # one record per selection

    def state(self) -> dict[str, Any]:
        """Options and selection state as JSON-ready data, saved by the Trainer with each checkpoint."""
        return {
            "args": {
                "rule": self.rule,
                "validation_texts": self.validation_texts,
                "select_ratio": self.select_ratio,
                "warmup_epochs": self.warmup_epochs,
                "cumulative": self.cumulative,
                "batch_size": self.batch_size,
                "max_length": self.max_length,
            },
            "attributes": {
                "mask": None if self.mask is None else np.asarray(self.mask, dtype=bool).tolist(),
                "history": [dict(record) for record in self.history],
            },
        }

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       train_dataloader: Any = None, processing_class: Any = None, **kwargs: Any) -> None:
        """Check the set-up, bind the view and tokenizer, and serve the current (or restored) mask."""
        if args.dataloader_persistent_workers:
            raise ValueError("SelectiveObfuscationCallback needs dataloader_persistent_workers=False: persistent "
                             "workers keep the dataset copy of the first epoch and never see a new mask.")
        if args.fsdp or is_deepspeed_zero3_enabled():
            raise ValueError("SelectiveObfuscationCallback scores on rank 0 alone, which sharded parameters "
                             "(FSDP, DeepSpeed ZeRO-3) do not allow; use DDP or ZeRO-1/2.")
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
        self.mask = None if self.mask is None else np.asarray(self.mask, dtype=bool)
        self.view.set_mask(np.zeros(len(self.view), dtype=bool) if self.mask is None else self.mask)

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: PreTrainedModel | None = None, **kwargs: Any) -> None:
        """Select and serve the obfuscated samples for the epoch that starts now."""
        epoch = _epoch_index(state.epoch)
        if epoch < self.warmup_epochs or (self.history and self.history[-1]["epoch"] == epoch):
            return  # still warming up, or resumed mid-epoch: keep the mask this epoch started with
        mask, record = on_main_then_broadcast(lambda: self._select(model, epoch, state.global_step))
        self.mask = mask
        self.view.set_mask(mask)
        self.history.append(record)
        logged = {LOG_PREFIX + key: value for key, value in record.items()
                  if key not in ("epoch", "step", "rule") and value is not None}
        state.log_history.append({**logged, "epoch": state.epoch, "step": state.global_step})

    def _served_view(self, served: Any) -> ObfuscatedView:
        """The view the Trainer's dataloader serves, checked against the one this callback was given."""
        if self.view is None and isinstance(served, ObfuscatedView):
            return served
        if served is self.view:
            return self.view
        raise ValueError(
            f"The Trainer serves a {type(served).__name__}, not this callback's ObfuscatedView, so a new mask "
            "would never reach the batches. Pass the view as train_dataset (with SFTTrainer: set "
            "trainer.train_dataset = view before trainer.train()).")

    def _select(self, model: PreTrainedModel, epoch: int, step: int) -> tuple[np.ndarray, dict[str, Any]]:
        """Score the original texts that can still change the mask, apply the rule, and summarise it.

        Under a cumulative selection a sample already obfuscated stays so whatever its loss, so
        only the others are scored (the release rule's later selections, which take every
        sample, score nothing). The logged mean losses are over the samples scored this time:
        those newly selected against those left as written.
        """
        previous = np.zeros(len(self.view), dtype=bool) if self.mask is None or not self.cumulative else self.mask
        open_indices = np.flatnonzero(~previous)
        later_release = self.rule == "release" and bool(self.history)
        scored = open_indices[:0] if later_release else open_indices
        score = dict(batch_size=self.batch_size, max_length=self.max_length)
        losses = sample_losses(model, self.tokenizer, [self.view.texts[i] for i in scored], **score)
        new, tau = previous.copy(), None
        if later_release:
            new[:] = True
        elif scored.size and self.rule == "paper":
            validation = sample_losses(model, self.tokenizer, self.validation_texts, desc="SOFT validation", **score)
            new[scored], tau = paper_rule(losses, validation)
        elif scored.size:
            new[scored] = release_rule(losses, self.select_ratio, selection_index=0)
        mask = update_mask(self.mask, new, cumulative=self.cumulative)
        selected, unselected = mean_losses(losses, mask[scored]) if scored.size else (None, None)
        record = {"epoch": epoch, "step": step, "rule": self.rule, "tau": tau, "n_selected": int(mask.sum()),
                  "n_total": int(mask.size), "n_scored": int(scored.size), "mean_loss_selected": selected,
                  "mean_loss_unselected": unselected}
        return mask, record
