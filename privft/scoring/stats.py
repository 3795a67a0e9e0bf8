"""The statistics one forward pass leaves per text, and the error a text that cannot be scored raises."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenStats:
    """Per-text statistics from one forward pass; all arrays are float32 of length n_tokens.

    μ and σ are None when the text was scored for its loss alone (``score_texts(..., distribution=False)``).
    """

    token_logprobs: np.ndarray  # log p(x_t | x_<t) of each scored token (every token of a text)
    mean_logprob: np.ndarray | None  # μ_t = E_{v~p(·|x_<t)} log p(v): the model's own expected log p
    std_logprob: np.ndarray | None  # σ_t: standard deviation of log p(v) under the same distribution
    n_bytes: int  # UTF-8 length of the text (of a record, of its scored tokens decoded)

    @property
    def n_tokens(self) -> int:
        """Number of scored tokens (all tokens of a text; a record's scored tokens, `privft.scoring.render`)."""
        return int(self.token_logprobs.shape[0])

    @property
    def nll_sum(self) -> float:
        """Total negative log-likelihood of the text in nats."""
        return float(-self.token_logprobs.astype(np.float64).sum())

    @property
    def mean_nll(self) -> float:
        """Per-token loss: the mean negative log-likelihood in nats."""
        return self.nll_sum / self.n_tokens

    @property
    def bits_per_byte(self) -> float:
        """Code length of the text in bits per UTF-8 byte; comparable across tokenizers."""
        return self.nll_sum / math.log(2) / self.n_bytes


class ScoringError(ValueError):
    """A text cannot be scored as given."""


def single_token_warning(texts: Sequence[str], n_tokens: Sequence[int]) -> str | None:
    """A warning naming the texts of a single token (their scores rest on one prediction), or None."""
    single = [i for i, n in enumerate(n_tokens) if n == 1]
    if not single:
        return None
    return (f"{len(single)} text(s) are a single token (first: index {single[0]}, {texts[single[0]]!r}); their scores "
            "rest on one prediction.")
