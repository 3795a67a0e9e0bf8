"""Canary designs: how each canary's secret is drawn. A registry; adding a design is one class.

- `random` (Carlini et al. 2019; privft's default digits): characters uniform over an alphabet.
- Panda et al. (ICLR 2025, "Privacy auditing of large language models", arXiv 2503.06808) craft
  secrets from the tokenizer's vocabulary, so that one fine-tune leaves a mark that one forward
  pass reads:
  - `rare`: out-of-distribution tokens, uniform over the tokens rarest in the training data;
  - `new`: tokens that never occur in the training data, so only the canary teaches them;
  - `unigram`: tokens drawn from the training data's unigram distribution;
  - `bigram`: each token drawn from the training data's bigram statistics given the one before.

`privft.data.designed_canaries.designed_plan` draws a canary plan through a design.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privft.data.canaries import CanaryError, CanaryPlan, _normalize
from privft.data.records import Record, record_content

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class TokenSource:
    """What a design draws from: the tokenizer's usable tokens and the training texts' token statistics."""

    tokenizer: Any  # a Hugging Face tokenizer: encode, decode, all_special_ids, len()
    usable: np.ndarray  # ids decoding to printable non-blank text that encodes back to the id alone; no specials
    counts: np.ndarray  # occurrences of each id in the training texts
    pairs: np.ndarray  # (n, 2) distinct bigrams (previous id, next id) of the training texts, sorted; next usable
    pair_counts: np.ndarray  # their occurrences
    text: str = field(repr=False)  # the normalised training text, joined, for the collision check

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, training: Sequence[Record]) -> TokenSource:
        """Tokenize the training texts (or records' contents) once and find the vocabulary's usable tokens."""
        special = set(tokenizer.all_special_ids)
        ids = [i for i in range(len(tokenizer)) if i not in special]
        pieces = [tokenizer.decode([i]) for i in ids]
        back = tokenizer(pieces, add_special_tokens=False)["input_ids"]
        usable = np.array([i for i, piece, again in zip(ids, pieces, back)
                           if piece.strip() and piece.isprintable() and again == [i]], dtype=np.int64)
        texts = [record_content(record) for record in training]
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        counts = np.bincount(np.fromiter((t for seq in encoded for t in seq), dtype=np.int64),
                             minlength=len(tokenizer))
        pairs = np.array([(a, b) for seq in encoded for a, b in zip(seq, seq[1:])], dtype=np.int64).reshape(-1, 2)
        pairs = pairs[np.isin(pairs[:, 1], usable)]
        distinct, pair_counts = np.unique(pairs, axis=0, return_counts=True)
        return cls(tokenizer, usable, counts, distinct.reshape(-1, 2), pair_counts,
                   "\n".join(_normalize(text) for text in texts))


class CanaryDesign(ABC):
    """How one secret is drawn; subclass it with a `name` and `secret`, and decorate with `register_design`."""

    name: ClassVar[str]

    @abstractmethod
    def secret(self, rng: np.random.Generator, source: TokenSource, length: int) -> str | None:
        """One secret of `length` symbols (characters or tokens), as text; None if the tokenizer loses it."""


class TokenDesign(CanaryDesign):
    """A design that draws token ids; the secret is their decoded text, if it encodes back to the same ids."""

    def secret(self, rng: np.random.Generator, source: TokenSource, length: int) -> str | None:
        """The decoded text of `length` drawn tokens; None when it does not encode back to them (round trip)."""
        ids = self.tokens(rng, source, length)
        text = source.tokenizer.decode(ids)
        return text if source.tokenizer.encode(text, add_special_tokens=False) == ids else None

    @abstractmethod
    def tokens(self, rng: np.random.Generator, source: TokenSource, length: int) -> list[int]:
        """`length` token ids."""


CANARY_DESIGNS: dict[str, type[CanaryDesign]] = {}


def register_design(design: type[CanaryDesign]) -> type[CanaryDesign]:
    """Add `design` to `CANARY_DESIGNS` under its name; a name already taken is refused."""
    if design.name in CANARY_DESIGNS:
        raise ValueError(f"A canary design named {design.name!r} is already registered "
                         f"({CANARY_DESIGNS[design.name].__name__}); give {design.__name__} another name.")
    CANARY_DESIGNS[design.name] = design
    return design


def get_design(name: str) -> CanaryDesign:
    """The registered design called `name`."""
    if name not in CANARY_DESIGNS:
        raise CanaryError(f"Unknown canary design {name!r}; the registered designs are {sorted(CANARY_DESIGNS)}")
    return CANARY_DESIGNS[name]()


@register_design
class RandomCharacters(CanaryDesign):
    """Characters uniform over `alphabet`: the Secret Sharer's digits, privft's default."""

    name = "random"
    alphabet = CanaryPlan.alphabet

    def secret(self, rng: np.random.Generator, source: TokenSource, length: int) -> str | None:
        """`length` characters of the alphabet; None if the tokenizer does not decode their tokens back to them."""
        text = "".join(rng.choice(list(self.alphabet), size=length))
        return text if source.tokenizer.decode(source.tokenizer.encode(text, add_special_tokens=False)) == text \
            else None


@register_design
class RareTokens(TokenDesign):
    """Out-of-distribution tokens: uniform over the `pool` usable tokens rarest in the training data."""

    name = "rare"
    pool = 1000

    def tokens(self, rng: np.random.Generator, source: TokenSource, length: int) -> list[int]:
        """Tokens from the rarest usable ones (ties broken by id)."""
        rarest = source.usable[np.argsort(source.counts[source.usable], kind="stable")[:self.pool]]
        return rng.choice(rarest, size=length).tolist()


@register_design
class NewTokens(TokenDesign):
    """Tokens the training data never contains, uniform over those usable."""

    name = "new"

    def tokens(self, rng: np.random.Generator, source: TokenSource, length: int) -> list[int]:
        """Tokens of zero count in the training texts."""
        unseen = source.usable[source.counts[source.usable] == 0]
        if not len(unseen):
            raise CanaryError("Canary design 'new' needs tokens the training texts never use, but they use every "
                              "usable token of this tokenizer; choose design 'rare'")
        return rng.choice(unseen, size=length).tolist()


@register_design
class UnigramTokens(TokenDesign):
    """Tokens drawn independently from the training data's unigram distribution (over usable tokens)."""

    name = "unigram"

    def tokens(self, rng: np.random.Generator, source: TokenSource, length: int) -> list[int]:
        """Tokens in proportion to their counts."""
        weights = source.counts[source.usable].astype(np.float64)
        if not weights.sum():
            raise CanaryError("Canary design 'unigram' needs training texts to count tokens in; none were given")
        return rng.choice(source.usable, size=length, p=weights / weights.sum()).tolist()


@register_design
class BigramTokens(TokenDesign):
    """A chain of tokens: the first by unigram counts, each next one by the bigram counts after the one before."""

    name = "bigram"

    def tokens(self, rng: np.random.Generator, source: TokenSource, length: int) -> list[int]:
        """Tokens of the training data's bigram chain (a unigram draw where a token has no successor)."""
        drawn = UnigramTokens().tokens(rng, source, 1)
        while len(drawn) < length:
            start, stop = np.searchsorted(source.pairs[:, 0], [drawn[-1], drawn[-1] + 1])  # pairs are sorted
            if start == stop:
                drawn += UnigramTokens().tokens(rng, source, 1)
                continue
            weights = source.pair_counts[start:stop].astype(np.float64)
            drawn.append(int(rng.choice(source.pairs[start:stop, 1], p=weights / weights.sum())))
        return drawn
