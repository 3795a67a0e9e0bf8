"""Where a record becomes token ids and the mask of the tokens a trainer trains on: the one place.

A text (`privft.data.records`, format "text") is rendered privft's way: the start token, then its
tokens, all of them trained on (`privft.training.tokenize_for_training` does the same). A
prompt–completion or messages record is rendered by trl's own `SFTTrainer._prepare_dataset`, the
code `SFTTrainer` runs on its train dataset, with the chat-template and loss-mask decisions taken
by trl's own functions from the trainer's settings (`RecordRendering`). So the ids and the mask are
the trainer's to the token, and every later layer (scoring, attacks, SOFT, canaries, DP) reads ids
and masks without knowing the format.

Which tokens an audit scores is `scored`:
- "completion": the trained tokens (completion-only for prompt–completion, trl's default; the
  assistant turns under `assistant_only_loss`; every token when the trainer trains on all);
- "prompt": the tokens of the record the trainer does not train on (the prompt and the template);
- "all": every token after the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from transformers import PreTrainedTokenizerBase

from privft.data.records import Record, describe_records, is_conversational, record_format
from privft.scoring.start import start_token
from privft.scoring.stats import ScoringError

SCORED = ("completion", "prompt", "all")
TRUNCATION_MODES = ("keep_start", "keep_end")


def _sft_default(name: str) -> Any:
    """trl's own default of an `SFTConfig` field (read from the class, never copied here)."""
    from trl import SFTConfig

    return {f.name: f.default for f in dataclasses.fields(SFTConfig)}[name]


@dataclass(frozen=True)
class RecordRendering:
    """The trainer settings that decide a conversational record's ids and trained tokens, and what an audit scores.

    The first four are `trl.SFTConfig`'s fields of the same names, with trl's defaults
    (`from_args` reads them off a trainer's args); `scored` is the audit's choice (`SCORED`).
    """

    max_length: int | None = dataclasses.field(default_factory=lambda: _sft_default("max_length"))
    assistant_only_loss: bool = False
    completion_only_loss: bool | None = None  # None: trl's rule, completion-only for prompt–completion records
    truncation_mode: str = "keep_start"
    scored: str = "completion"

    def __post_init__(self) -> None:
        """Refuse a setting that names no rendering."""
        if self.scored not in SCORED:
            raise ScoringError(f"scored={self.scored!r} is not one of {SCORED}")
        if self.truncation_mode not in TRUNCATION_MODES:
            raise ScoringError(f"truncation_mode={self.truncation_mode!r} is not one of {TRUNCATION_MODES}")

    @classmethod
    def from_args(cls, args: Any, scored: str = "completion") -> RecordRendering:
        """The rendering a trainer with these `TrainingArguments` / `SFTConfig` applies (trl's defaults if absent)."""
        defaults = cls()
        return cls(**{f.name: getattr(args, f.name, getattr(defaults, f.name))
                      for f in dataclasses.fields(cls) if f.name != "scored"}, scored=scored)

    def describe(self, records: Sequence[Record]) -> str:
        """The unit and tokens an audit scores, e.g. "completion tokens of 500 prompt–completion records"."""
        if not records or record_format(records[0]) == "text":
            return describe_records(records)
        part = {"completion": "trained tokens", "prompt": "untrained (prompt) tokens", "all": "all tokens"}
        if self.scored == "completion":
            part["completion"] = ("assistant tokens" if self.assistant_only_loss
                                  else "completion tokens" if self._completion_only(records[0]) else "all tokens")
        return f"{part[self.scored]} of {describe_records(records)}"

    def _completion_only(self, record: Record) -> bool:
        """Whether trl masks the prompt: `completion_only_loss`, or by default for prompt–completion records."""
        if self.completion_only_loss is None:
            return record_format(record) == "prompt_completion"
        return self.completion_only_loss


_RENDERING: ContextVar[RecordRendering | None] = ContextVar("privft_record_rendering", default=None)


def record_rendering() -> RecordRendering:
    """The rendering in force (`rendering_context`), else trl's defaults."""
    return _RENDERING.get() or RecordRendering()


@contextlib.contextmanager
def rendering_context(rendering: RecordRendering) -> Iterator[RecordRendering]:
    """Render and score records under `rendering` inside the block (like `sklearn.config_context`)."""
    token = _RENDERING.set(rendering)
    try:
        yield rendering
    finally:
        _RENDERING.reset(token)


@dataclass(frozen=True)
class Rendered:
    """One record as the trainer sees it: its token ids, which of them it trains on, and which an audit scores."""

    input_ids: list[int]
    trained: list[bool]  # the trainer's loss mask (labels ≠ -100), position 0 included as trl gives it
    scored: list[int]  # positions (≥ 1) whose tokens the audit scores, each predicted from all before it


def render_records(records: Sequence[Record], tokenizer: PreTrainedTokenizerBase,
                   rendering: RecordRendering | None = None) -> list[Rendered]:
    """Each record's ids, trained mask and scored positions, exactly as the trainer renders it.

    Texts are the start token then their tokens, all trained. Conversational records go through
    trl's `SFTTrainer._prepare_dataset` (chat template, completion or assistant mask, truncation to
    `max_length`); a record that truncation leaves with nothing to train on is refused by name.
    """
    rendering = rendering or record_rendering()
    if not records:
        return []
    if record_format(records[0]) == "text":
        start = start_token(tokenizer)
        encoded = tokenizer(list(records), add_special_tokens=False)["input_ids"]
        return [Rendered([start, *ids], [True] * (len(ids) + 1), list(range(1, len(ids) + 1))) for ids in encoded]
    rows = _trl_rows(records, tokenizer, rendering)
    return [_rendered(row["input_ids"], [label != -100 for label in row["labels"]], rendering.scored, i)
            for i, row in enumerate(rows)]


def _rendered(input_ids: list[int], trained: list[bool], scored: str, index: int) -> Rendered:
    """A rendering whose scored positions follow `scored`; refused when it scores nothing."""
    positions = {"completion": [t for t in range(1, len(input_ids)) if trained[t]],
                 "prompt": [t for t in range(1, len(input_ids)) if not trained[t]],
                 "all": list(range(1, len(input_ids)))}[scored]
    if not positions:
        why = ("the trainer trains on every token of it, so no prompt token is left to score; score 'all' or "
               "'completion'" if scored == "prompt" else "it has a single token")
        raise ScoringError(f"Record {index} has no {scored} tokens to score: {why}.")
    return Rendered(input_ids, trained, positions)


def _trl_rows(records: Sequence[Record], tokenizer: PreTrainedTokenizerBase,
              rendering: RecordRendering) -> list[dict[str, Any]]:
    """trl's tokenized rows (input_ids, labels) for `records`, in order, each checked to train on something."""
    from datasets import Dataset, disable_progress_bars, enable_progress_bars, is_progress_bar_enabled
    from trl import SFTTrainer

    trainer = _trl_trainer_state(records[0], tokenizer, rendering)
    args = SimpleNamespace(max_length=rendering.max_length, assistant_only_loss=rendering.assistant_only_loss,
                           truncation_mode=rendering.truncation_mode, dataset_num_proc=None,
                           dataset_text_field="text", shuffle_dataset=False, packing_strategy=None)
    dataset = Dataset.from_list([{**record, "privft_index": i} for i, record in enumerate(records)])
    bars = is_progress_bar_enabled()
    disable_progress_bars()
    try:
        prepared = SFTTrainer._prepare_dataset(trainer, dataset, tokenizer, args, packing=False,
                                               formatting_func=None, dataset_name="privft")
    except RuntimeError as error:  # trl's refusal of a record without assistant tokens
        raise ScoringError(f"trl could not render the records under assistant_only_loss: {error}") from None
    finally:
        if bars:
            enable_progress_bars()
    kept = prepared.select_columns(["privft_index", "input_ids", "labels"]).to_list()
    if len(kept) < len(records):
        lost = sorted(set(range(len(records))) - {row["privft_index"] for row in kept})
        raise ScoringError(f"{len(lost)} record(s) have no trained token within max_length={rendering.max_length} "
                           f"(first: record {lost[0]}): the prompt alone fills it, so the trainer drops them. "
                           "Shorten their prompts, raise max_length, or drop them before the split.")
    return kept


def _trl_trainer_state(record: Record, tokenizer: PreTrainedTokenizerBase, rendering: RecordRendering
                       ) -> SimpleNamespace:
    """What `_prepare_dataset` reads off the trainer: its tokenizer, chat template and completion-only flag.

    Decided as `SFTTrainer.__init__` decides them, with trl's own template functions.
    """
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if getattr(tokenizer, "chat_template", None) is None and is_conversational(record):
        raise ScoringError("The records are conversational but the tokenizer has no chat template; set "
                           "tokenizer.chat_template (the model's own, e.g. from its instruct release) first.")
    chat_template = None
    if rendering.assistant_only_loss:
        if not is_conversational(record):
            raise ScoringError("assistant_only_loss needs conversational records (messages, or prompt–completion "
                               "as message lists); drop it for these records")
        if not has_generation_markers(tokenizer.chat_template):
            try:
                chat_template = get_training_chat_template(tokenizer)
            except ValueError:
                raise ScoringError(
                    "assistant_only_loss needs a chat template with {% generation %} markers, and trl cannot "
                    "patch this one; set tokenizer.chat_template to a version that wraps each assistant turn in "
                    "{% generation %}…{% endgeneration %} (privft.models.SMOLLM2_TRAINING_CHAT_TEMPLATE is "
                    "SmolLM2's), or train on completions (prompt–completion records)") from None
    return SimpleNamespace(_tokenizer=tokenizer, chat_template=chat_template,
                           completion_only_loss=rendering._completion_only(record))


def scored_bytes(rendered: Rendered, tokenizer: PreTrainedTokenizerBase) -> int:
    """UTF-8 length of the scored tokens as the tokenizer decodes them (bits per byte's denominator)."""
    return len(_decoded_scored(rendered, tokenizer).encode("utf-8"))


def _decoded_scored(rendered: Rendered, tokenizer: PreTrainedTokenizerBase) -> str:
    """A rendering's scored tokens, decoded (special tokens kept: they are scored too)."""
    return tokenizer.decode([rendered.input_ids[t] for t in rendered.scored])


def scored_texts(records: Sequence[Record], tokenizer: PreTrainedTokenizerBase,
                 rendering: RecordRendering | None = None) -> list[str]:
    """The scored tokens of each record, decoded: the text that zlib and bits per byte measure."""
    return [_decoded_scored(r, tokenizer) for r in render_records(records, tokenizer, rendering)]
