"""Extraction of trained replies: where generation starts from a record's prompt, and the reply it was trained on.

A prompt–completion record's prompt is its `prompt`; a messages record's is every turn before its
last assistant turn. Generation starts from the prompt with the chat template's generation prompt
(`apply_chat_template(prompt, add_generation_prompt=True)`; a string prompt tokenized as trl
tokenizes it). The reply is the record's rendered ids from where they part from the prompt's
(`privft.scoring.render`, trl's rendering): the trained reply, then its end of turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase
from trl.data_utils import common_prefix_length

from privft.data.records import Record
from privft.scoring.render import render_records


@dataclass(frozen=True)
class Reply:
    """One record cut where generation starts: the prompt's ids, the rendered reply after them, where it is scored."""

    prompt: list[int]  # the prompt with the generation prompt, as a user would ask the model
    reply: list[int]  # the rendered ids after the prompt: the trained reply, then its end of turn
    scored_offset: int | None  # index among the record's scored tokens of the reply's first token; None: unscored


def prompt_ids(record: Record, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids generation starts from: the prompt turns with the template's generation prompt, or the prompt string."""
    if isinstance(record, str):
        raise ValueError("A text has no prompt to generate from; greedy extraction of texts decodes from their "
                         "first k tokens (greedy_extraction)")
    if "messages" in record:
        messages = record["messages"]
        last = max(i for i, message in enumerate(messages) if message["role"] == "assistant")
        prompt = messages[:last]
    else:
        prompt = record["prompt"]
    if isinstance(prompt, str):
        return tokenizer(text=prompt)["input_ids"]
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]


def record_replies(records: Sequence[Record], tokenizer: PreTrainedTokenizerBase) -> list[Reply]:
    """Each record's prompt ids and trained reply, under the rendering in force (`rendering_context`)."""
    found = []
    for record, rendered in zip(records, render_records(records, tokenizer)):
        prompt = prompt_ids(record, tokenizer)
        start = common_prefix_length(prompt, rendered.input_ids)  # where trl starts the completion
        offset = rendered.scored.index(start) if start in rendered.scored else None
        found.append(Reply(prompt, rendered.input_ids[start:], offset))
    return found
