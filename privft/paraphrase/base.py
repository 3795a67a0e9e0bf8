"""The paraphraser interface: rewrite a piece of text locally, reproducibly from a seed."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.scoring import model_fingerprint


class Paraphraser(ABC):
    """Rewrites text on this machine; `name` and `settings()` identify its output in caches and manifests.

    `needs_model` says whether it is built on a language model: then its constructor takes
    `(model, tokenizer, **options)` and `build_paraphraser` loads the configured model first.
    `batch_size` is how many texts `obfuscate` hands to one `rewrite_many` call.
    """

    name: ClassVar[str]
    needs_model: ClassVar[bool] = False
    batch_size: int = 1

    @abstractmethod
    def rewrite(self, text: str, *, seed: int) -> str:
        """Return a rewrite of the whole of `text`; the same text and seed give the same rewrite."""

    def rewrite_many(self, texts: Sequence[str], *, seeds: Sequence[int]) -> list[str]:
        """The rewrite of each text with its own seed, as `rewrite` gives it; a paraphraser may batch them."""
        return [self.rewrite(text, seed=seed) for text, seed in zip(texts, seeds, strict=True)]

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """JSON-serialisable settings that, with `name`, determine the rewrite of a text for a seed."""


def model_identity(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """Settings entries naming a model by its weights digest and its tokenizer by name and size."""
    return {
        "model": str(getattr(model, "name_or_path", "")),
        "model_fingerprint": model_fingerprint(model),
        "tokenizer": str(tokenizer.name_or_path),
        "vocab_size": len(tokenizer),
    }
