"""The token every text starts from, in training and scoring, and the rule that chooses it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from transformers import PreTrainedTokenizerBase

from privft.config import require
from privft.scoring.stats import ScoringError

START_RULES = ("auto", "bos-else-eos")  # besides these, a start token may be named by its string
DOCUMENT_SEPARATOR = "<|endoftext|>"  # GPT-2's, Llama 3's and SmolLM2's separator between pretraining documents
_start_rule: ContextVar[str] = ContextVar("privft_start_token", default="auto")


@contextmanager
def start_token_rule(rule: str) -> Iterator[None]:
    """Within the block, every text privft scores or trains on starts from the token `rule` chooses.

    `rule` is "auto" (the default: the token the tokenizer itself prepends, if it adds one;
    else the document separator ``<|endoftext|>`` where the vocabulary has it; else EOS),
    "bos-else-eos" (privft's rule before 2026-12-01; for SmolLM2 the chat-role token
    ``<|im_start|>``), or a token's string, such as ``"<|endoftext|>"``. Like
    `sklearn.config_context`, it applies to the current thread and context only.
    """
    check_start_rule(rule)
    token = _start_rule.set(rule)
    try:
        yield
    finally:
        _start_rule.reset(token)


def check_start_rule(rule: str) -> None:
    """Refuse a start-token rule that is neither a known rule nor a non-empty token string."""
    require(isinstance(rule, str) and bool(rule.strip()), "start_token", rule,
            f"must be one of {', '.join(START_RULES)} or a token's string, such as '<|endoftext|>'.")


def start_token(tokenizer: PreTrainedTokenizerBase, rule: str | None = None) -> int:
    """The id every scored (and trained) text starts from, under `rule` (default: the active `start_token_rule`)."""
    rule = rule or _start_rule.get()
    if rule == "bos-else-eos":
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    elif rule == "auto":
        start = _prepended_token(tokenizer)
        if start is None:
            start = _token_id(tokenizer, DOCUMENT_SEPARATOR)
        if start is None:
            start = tokenizer.eos_token_id
        if start is None:
            start = tokenizer.bos_token_id
    else:
        start = _token_id(tokenizer, rule)
        if start is None:
            raise ScoringError(f"start_token={rule!r} is not a token of {tokenizer.name_or_path or 'the tokenizer'}; "
                               f"name one of its tokens, or use {' or '.join(START_RULES)}.")
    if start is None:
        raise ScoringError("The tokenizer has neither a BOS nor an EOS token, so the first token of a "
                           "text cannot be scored; set tokenizer.bos_token, or start_token to one of its tokens.")
    return start


def start_token_record(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The active rule and the token it chooses for `tokenizer`, as reports and manifests record it."""
    start = start_token(tokenizer)
    return {"rule": _start_rule.get(), "token": tokenizer.convert_ids_to_tokens(start), "id": start}


def _prepended_token(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The special token the tokenizer puts before a text on its own (add_special_tokens=True), if any."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    framed = tokenizer("a", add_special_tokens=True)["input_ids"]
    if len(framed) > len(plain) and framed[-len(plain):] == plain and framed[0] in tokenizer.all_special_ids:
        return framed[0]
    return None


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int | None:
    """The id of vocabulary entry `token`, or None when the vocabulary lacks it (not its unknown-token id)."""
    found = tokenizer.convert_tokens_to_ids(token)
    return found if found is not None and tokenizer.convert_ids_to_tokens(found) == token else None
