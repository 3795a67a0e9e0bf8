"""Measure canary exposure in a model, and a Trainer callback that does it during fine-tuning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from accelerate.utils import extract_model_from_parallel
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_callback import ExportableState

from privft.attacks.exposure import CanaryExposure, summarize
from privft.data.canaries import CanaryPlan
from privft.data.pii import plan_from_dict
from privft.data.records import Record
from privft.extraction.canaries import canary_rendering, template_prefix_length
from privft.scoring import score_texts
from privft.scoring.render import render_records, rendering_context

LOG_PREFIX = "privacy/canary_"  # the namespace of privft's audit callback


def measure_exposure(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plan: CanaryPlan,
                     *, batch_size: int = 32, shard: bool = False) -> list[CanaryExposure]:
    """Exposure of each of the plan's canaries in `model`, against the plan's seeded reference secrets.

    The canaries and the `plan.n_alternatives` references (one set shared by all canaries, as in
    Carlini et al. and tensorflow_privacy) are scored in one batched pass. A candidate's
    log-likelihood is the sum over its tokens after the longest token prefix all candidates
    share: those tokens have the same context in every candidate, so dropping them changes
    no rank or fit, only removes a constant (and batching noise). It needs no assumption
    about how the template's prefix and the secret tokenize at their boundary. `shard=True` shares
    the pass across the torch.distributed ranks (every rank calls it and gets every exposure).
    Conversational canaries are scored as trained (`privft.scoring.render`, the rendering in force):
    the reply's tokens given the prompt, or for a prompt-side canary the prompt's (`scored="prompt"`).
    """
    logps = _logps_after_shared_prefix(model, tokenizer, plan.candidates(), plan, batch_size=batch_size,
                                       desc="canary exposure", shard=shard)
    references = logps[plan.n_canaries:]
    return [CanaryExposure.measure(secret, true_logp, references, plan.secret_space)
            for secret, true_logp in zip(plan.secrets, logps[:plan.n_canaries])]


def canary_logps(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plan: CanaryPlan,
                 *, batch_size: int = 32) -> np.ndarray:
    """Each canary's log-likelihood in `model`, summed over the tokens after the template's shared prefix.

    Inserted canaries and controls alike, in the order of `plan.secrets`: the one-run ε audit's scores.
    """
    records = [plan.record_for(secret) for secret in plan.secrets]
    return _logps_after_shared_prefix(model, tokenizer, records, plan, batch_size=batch_size, desc="canary scores")


def _logps_after_shared_prefix(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, records: Sequence[Record],
                               plan: CanaryPlan, *, batch_size: int, desc: str, shard: bool = False) -> np.ndarray:
    """Each record's summed log-probabilities of its scored tokens after the scored prefix common to all of them.

    A text's scored tokens are all its tokens; a conversational canary's are those `canary_rendering(plan)` scores.
    """
    with rendering_context(canary_rendering(plan)):
        stats = score_texts(model, tokenizer, records, batch_size=batch_size, desc=desc, distribution=False,
                            shard=shard)
        scored_ids = [[r.input_ids[t] for t in r.scored] for r in render_records(records, tokenizer)]
    shared = template_prefix_length(scored_ids)
    return np.array([s.token_logprobs[shared:].astype(np.float64).sum() for s in stats])


class CanaryCallback(TrainerCallback, ExportableState):
    """Measures canary exposure at the end of training (and every N epochs) and logs it.

    The callback never touches the data; insert the canaries before tokenizing:

        plan = CanaryPlan(seed=0)
        plan.check_absent(split.non_members, split.validation, split.test)
        finetune(model, tokenizer, plan.insert(split.members), callbacks=[CanaryCallback(plan, tokenizer)])

    Each measurement appends `privacy/canary_exposure_mean` and `_max`, the extrapolated mean and
    max and `privacy/canary_exposure_ceiling` (all in bits) to `state.log_history` with the
    epoch and step, and keeps the per-canary results in `results`. A step is measured once: the
    audit callback asks `exposure_at` for the report, which measures only when the log has no
    entry for the current step yet. Every rank scores its share of the candidates, on the
    unwrapped model, and logs the same exposures; sharded parameters (FSDP, ZeRO-3) are not supported.
    The plan is saved with checkpoints; with `restore_callback_states_from_checkpoint=True`
    the Trainer rebuilds this callback from it, without the tokenizer (it then comes from the
    Trainer's `processing_class`) and as a new object (read its results from the Trainer's
    callbacks or `state.log_history`). The audit keeps the object it was given, and still gets
    the final exposure through `exposure_at`, whichever of the two measures it.
    """

    def __init__(self, plan: CanaryPlan | Mapping[str, Any], tokenizer: PreTrainedTokenizerBase | None = None,
                 *, every_n_epochs: int | None = None, batch_size: int = 32) -> None:
        """Keep the plan (a `CanaryPlan` or its `to_dict()`) and the measuring settings."""
        if every_n_epochs is not None and every_n_epochs < 1:
            raise ValueError(f"every_n_epochs={every_n_epochs} must be at least 1, or None to measure "
                             "only at the end of training")
        self.plan = plan if isinstance(plan, CanaryPlan) else plan_from_dict(plan)  # a digit or a PII plan
        self.tokenizer = tokenizer
        self.every_n_epochs = every_n_epochs
        self.batch_size = batch_size
        self.results: list[CanaryExposure] = []

    def state(self) -> dict[str, Any]:
        """The constructor arguments (the plan as a dict) for the Trainer's checkpoint."""
        return {
            "args": {"plan": self.plan.to_dict(), "every_n_epochs": self.every_n_epochs,
                     "batch_size": self.batch_size},
            "attributes": {},
        }

    def summary(self) -> dict[str, Any]:
        """The latest measurement for `AuditReport.canary_exposure`: exposures in bits and the plan's size."""
        return self._report_entry(summarize(self._inserted()))

    def _inserted(self) -> list[CanaryExposure]:
        """The exposures of the canaries inserted into training (all but a one-run audit's controls)."""
        return [result for result, inside in zip(self.results, self.plan.included()) if inside]

    def exposure_at(self, state: TrainerState, model: PreTrainedModel) -> dict[str, Any]:
        """`summary()` of the current step for the audit report, measured now unless the log already holds it."""
        stats = self._logged(state) or self._measure(state, model)
        return self._report_entry(stats)

    def _report_entry(self, stats: Mapping[str, float]) -> dict[str, Any]:
        """`summarize` output in the report's names, with the plan's size."""
        return {
            "mean_exposure": stats["exposure_mean"],
            "max_exposure": stats["exposure_max"],
            "mean_exposure_extrapolated": stats["exposure_extrapolated_mean"],
            "max_exposure_extrapolated": stats["exposure_extrapolated_max"],
            "max_measurable": stats["exposure_ceiling"],
            "n_canaries": sum(self.plan.included()),  # inserted; a one-run audit's controls are not trained on
            "copies": self.plan.copies,
            "n_alternatives": self.plan.n_alternatives,
        }

    @staticmethod
    def _logged(state: TrainerState) -> dict[str, float] | None:
        """The exposure statistics logged at the current step, by this callback or a copy of it, if any."""
        for entry in reversed(state.log_history):
            # the ceiling marks a measurement; the audit's headline entry repeats only the mean and max
            if entry.get("step") == state.global_step and LOG_PREFIX + "exposure_ceiling" in entry:
                return {key.removeprefix(LOG_PREFIX): value for key, value in entry.items()
                        if key.startswith(LOG_PREFIX)}
        return None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        """Take the tokenizer from the Trainer if none was given, so a missing one fails before training."""
        if self.tokenizer is None:
            processing_class = kwargs.get("processing_class")
            if not isinstance(processing_class, PreTrainedTokenizerBase):
                raise ValueError("CanaryCallback has no tokenizer to score the canaries with; pass "
                                 "CanaryCallback(plan, tokenizer) or Trainer(processing_class=tokenizer)")
            self.tokenizer = processing_class

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Measure every `every_n_epochs` epochs."""
        if self.every_n_epochs and round(state.epoch or 0) % self.every_n_epochs == 0 and not self._logged(state):
            self._measure(state, kwargs["model"])

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Measure the final model, unless this step was measured already (last epoch, or the audit asked)."""
        if not self._logged(state):
            self._measure(state, kwargs["model"])

    def _measure(self, state: TrainerState, model: PreTrainedModel) -> dict[str, float]:
        """Measure exposure (every rank scores its share), append the summary to the log history and return it."""
        self.results = measure_exposure(extract_model_from_parallel(model), self.tokenizer, self.plan,
                                        batch_size=self.batch_size, shard=True)
        stats = summarize(self._inserted())
        entry = {LOG_PREFIX + key: value for key, value in stats.items()}
        if state.epoch is not None:
            entry["epoch"] = state.epoch
        state.log_history.append({**entry, "step": state.global_step})
        return stats
