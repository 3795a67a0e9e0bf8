"""Paraphrasers by name, for configuration files: build_paraphraser("wordnet", fraction=0.2).

A paraphraser is one class: subclass `Paraphraser`, give it a `name` (and `needs_model = True`
if it rewrites with a language model), and decorate it with `register_paraphraser`; the YAML's
``soft.paraphraser`` then accepts that name.
"""

from __future__ import annotations

from typing import Any, TypeVar

from privft.models import DEFAULT_MODEL, load_model
from privft.paraphrase.base import Paraphraser

PARAPHRASERS: dict[str, type[Paraphraser]] = {}
P = TypeVar("P", bound=type[Paraphraser])


def register_paraphraser(cls: P) -> P:
    """Class decorator: make `cls` buildable by its `name` (names are unique)."""
    if cls.name in PARAPHRASERS:
        raise ValueError(f"A paraphraser named {cls.name!r} is already registered ({PARAPHRASERS[cls.name]}).")
    PARAPHRASERS[cls.name] = cls
    return cls


def get_paraphraser(name: str) -> type[Paraphraser]:
    """The paraphraser class registered as `name`, or a ValueError listing the registered ones."""
    try:
        return PARAPHRASERS[name]
    except KeyError:
        known = ", ".join(sorted(PARAPHRASERS))
        raise ValueError(f"Unknown paraphraser {name!r}; known paraphrasers: {known}.") from None


def build_paraphraser(name: str, **options: Any) -> Paraphraser:
    """The paraphraser registered as `name`, built with `options` (its constructor's keyword arguments).

    A paraphraser that `needs_model` takes `model` (an embedded name, a local path or a hub id;
    default DEFAULT_MODEL), loaded with its tokenizer by privft.models.load_model.
    """
    cls = get_paraphraser(name)
    if cls.needs_model:
        return cls(*load_model(options.pop("model", DEFAULT_MODEL)), **options)
    return cls(**options)
