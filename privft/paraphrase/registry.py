"""Paraphrasers by name, for configuration files: build_paraphraser("wordnet", fraction=0.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from privft.models import DEFAULT_MODEL, load_model
from privft.paraphrase.base import Paraphraser
from privft.paraphrase.llm import LLMParaphraser
from privft.paraphrase.neighbour import NeighbourParaphraser
from privft.paraphrase.wordnet import WordNetParaphraser


def _with_model(cls: type[NeighbourParaphraser] | type[LLMParaphraser]) -> Callable[..., Paraphraser]:
    """A constructor that first loads `model` (an embedded name, a local path or a hub id) with its tokenizer."""

    def build(*, model: str = DEFAULT_MODEL, **options: Any) -> Paraphraser:
        return cls(*load_model(model), **options)

    build.__doc__ = f"A {cls.__name__} on `model` (default {DEFAULT_MODEL!r}), loaded by privft.models.load_model."
    return build


PARAPHRASERS: dict[str, Callable[..., Paraphraser]] = {
    NeighbourParaphraser.name: _with_model(NeighbourParaphraser),
    LLMParaphraser.name: _with_model(LLMParaphraser),
    WordNetParaphraser.name: WordNetParaphraser,
}


def build_paraphraser(name: str, **options: Any) -> Paraphraser:
    """The paraphraser registered as `name`, built with `options` (its constructor's keyword arguments)."""
    try:
        constructor = PARAPHRASERS[name]
    except KeyError:
        known = ", ".join(sorted(PARAPHRASERS))
        raise ValueError(f"Unknown paraphraser {name!r}; known paraphrasers: {known}.") from None
    return constructor(**options)
