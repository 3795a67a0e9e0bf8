"""Utility on a task: does the model's reply to a held-out support ticket give the ticket's fix?

For each held-out tickets-chat record (the split's test side, else its validation side: prompts never
trained on), generation starts from the record's prompt with the chat template's generation prompt
(`privft.extraction.replies.prompt_ids`) and decodes greedily; the decoded reply is right when it states
the ticket's ground-truth fix and no other (`privft.data.tickets_chat.reply_gives_fix`, `record_fix`).
The accuracy comes with its Wilson 95 % interval and its counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.config import require
from privft.data import MembershipSplit
from privft.data.records import Record
from privft.data.tickets_chat import Fix, record_fix, reply_gives_fix
from privft.extraction.greedy import generate_continuations
from privft.extraction.replies import prompt_ids
from privft.metrics import AccuracyResult, accuracy_with_ci


@dataclass
class TaskSettings:
    """What `run_audit` measures when `AuditConfig.task` is set (None leaves task accuracy off)."""

    max_new_tokens: int = 128  # greedy decoding stops here or at the end of the turn
    max_texts: int | None = None  # score the first this many held-out tickets (drawn in seeded order); None: all

    def __post_init__(self) -> None:
        """Refuse settings that would measure nothing."""
        require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "must be at least 1.")
        require(self.max_texts is None or self.max_texts >= 1, "max_texts", self.max_texts,
                "must be at least 1, or None to score every held-out ticket.")


@dataclass(frozen=True)
class TaskAccuracy:
    """Task accuracy on held-out tickets: the share of greedy replies that give the right fix, which did, and the
    replies themselves (so a failure can be read, not only counted)."""

    accuracy: AccuracyResult
    on: str  # the split's side the tickets come from: "test" or "validation"
    max_new_tokens: int
    correct: list[bool]  # per scored ticket, in the side's order
    replies: list[str]  # the greedy reply to each scored ticket, in the same order

    def to_dict(self) -> dict:
        """A JSON-ready dict (report.json's `task_accuracy`)."""
        return {"accuracy": self.accuracy.to_dict(), "on": self.on, "max_new_tokens": self.max_new_tokens,
                "correct": list(self.correct), "replies": list(self.replies)}

    def line(self) -> str:
        """The report.md line: accuracy, Wilson interval, counts and how the replies were generated."""
        a = self.accuracy
        return (f"Task accuracy on {a.n_total} {self.on} tickets (the reply gives the ticket's fix, and no other): "
                f"{a.format()}, Wilson {a.confidence * 100:g} % interval; greedy replies of at most "
                f"{self.max_new_tokens} tokens from each prompt.")


def fixes_given(replies: Sequence[str], fixes: Sequence[Fix]) -> np.ndarray:
    """Whether each reply gives its ticket's fix and no other (`reply_gives_fix`): one bool per reply."""
    if len(replies) != len(fixes):
        raise ValueError(f"{len(replies)} replies but {len(fixes)} fixes; give one ground-truth fix per reply")
    return np.array([reply_gives_fix(reply, fix) for reply, fix in zip(replies, fixes)], dtype=bool)


def task_accuracy_score(replies: Sequence[str], fixes: Sequence[Fix], *, confidence: float = 0.95
                        ) -> AccuracyResult:
    """The share of `replies` that give their ticket's fix and no other, with its Wilson interval and counts."""
    return accuracy_with_ci(fixes_given(replies, fixes), confidence=confidence)


def held_out_tickets(split: MembershipSplit, max_texts: int | None = None) -> tuple[str, list[Record]]:
    """The side task accuracy reads, and its first `max_texts` records (None: all): the test side, else validation
    (never trained on)."""
    if not split.validation and not split.test:
        raise ValueError(f"Task accuracy reads held-out tickets, but the {split.source!r} split has no test or "
                         "validation records; set data.n_test (or data.n_validation), or turn audit.task off.")
    on, records = ("test", split.test) if split.test else ("validation", split.validation)
    return on, records[:max_texts]


def greedy_replies(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, records: Sequence[Record], *,
                   max_new_tokens: int, batch_size: int = 8) -> list[str]:
    """Each record's greedy reply to its prompt (with the generation prompt), decoded without special tokens."""
    prompts = [prompt_ids(record, tokenizer) for record in records]
    continuations = generate_continuations(model, tokenizer, prompts, max_new_tokens, batch_size=batch_size)
    return [tokenizer.decode(beams[0], skip_special_tokens=True) for beams in continuations]


def measure_task_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, split: MembershipSplit,
                          settings: TaskSettings, *, batch_size: int = 8) -> TaskAccuracy:
    """Task accuracy of `model` on the split's held-out tickets (`held_out_tickets`), at most `settings.max_texts`."""
    on, records = held_out_tickets(split, settings.max_texts)
    fixes = [record_fix(record) for record in records]  # before generating: a record without ground truth fails now
    replies = greedy_replies(model, tokenizer, records, max_new_tokens=settings.max_new_tokens, batch_size=batch_size)
    correct = fixes_given(replies, fixes)
    return TaskAccuracy(accuracy_with_ci(correct), on, settings.max_new_tokens, correct.tolist(), replies)
