"""Probabilistic extraction (Hayes et al. 2024, arXiv 2410.19482) from the audit's own per-token log-probs.

For a text x_1 … x_T, read after BOS as the audit scores it, a prefix of k tokens and a suffix of
m: log p = Σ_{t=k+1}^{k+m} log p(x_t | x_<t), a sum over `TokenStats.token_logprobs` of the
target pass. Nothing is generated and no forward pass is added. p is the chance that one
continuation of the prefix, sampled at temperature 1 without truncation, is exactly the suffix;
1 − (1 − p)^n is the chance it appears at least once in n such samples. For a record the prefix
is its whole prompt and the suffix the first m tokens of its trained reply, read from the same pass
when it scored them (`AuditConfig.scored="completion"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privft.scoring import TokenStats

GROUPS = {"members": 1, "non_members": 0}  # report name → label


@dataclass(frozen=True)
class ProbabilisticExtraction:
    """log P(suffix | prefix) of each audited text for one prefix length; NaN where the text is too short."""

    prefix_length: int  # k
    suffix_length: int  # m
    log_probability: np.ndarray  # (n_texts,) natural log of P(next m tokens | BOS + first k tokens)
    labels: np.ndarray  # (n_texts,) 1 = member, 0 = non-member

    def at_least_once(self, n: int) -> np.ndarray:
        """Per text, 1 − (1 − p)^n: the chance its suffix appears in n sampled continuations (NaN if too short)."""
        p = np.exp(self.log_probability)
        with np.errstate(divide="ignore"):  # p = 1 gives log1p(-1) = -inf, hence a chance of exactly 1
            return -np.expm1(n * np.log1p(-p))

    def summary(self, n_samples: Sequence[int]) -> dict[str, dict]:
        """Per group: texts, texts long enough, and the mean of 1 − (1 − p)^n over the latter for each n."""
        found = {}
        for group, label in GROUPS.items():
            in_group = self.labels == label
            measured = in_group & np.isfinite(self.log_probability)
            n_measured = int(measured.sum())
            found[group] = {
                "n_texts": int(in_group.sum()),
                "n_long_enough": n_measured,
                "at_least_once": {str(n): float(self.at_least_once(n)[measured].mean()) if n_measured else None
                                  for n in n_samples},
                "median_log10_p": float(np.median(self.log_probability[measured]) / np.log(10))
                if n_measured else None,
            }
        return found


def suffix_log_probability(stats: TokenStats, prefix_length: int, suffix_length: int) -> float:
    """log P(tokens k … k + m − 1 | BOS + tokens 0 … k − 1) from one text's statistics; NaN if it is too short."""
    if stats.n_tokens < prefix_length + suffix_length:
        return float("nan")
    return float(stats.token_logprobs[prefix_length:prefix_length + suffix_length].astype(np.float64).sum())


def probabilistic_extraction(target: Sequence[TokenStats], labels: np.ndarray, prefix_length: int,
                             suffix_length: int) -> ProbabilisticExtraction:
    """P(suffix | prefix) of every text from the target pass's statistics, for one prefix length."""
    labels = np.asarray(labels)
    if len(labels) != len(target):
        raise ValueError(f"labels has {len(labels)} entries but there are {len(target)} texts' statistics; "
                         "pass one label per scored text.")
    values = np.array([suffix_log_probability(s, prefix_length, suffix_length) for s in target], dtype=np.float64)
    return ProbabilisticExtraction(prefix_length, suffix_length, values, labels)


def reply_extraction(target: Sequence[TokenStats], offsets: Sequence[int | None], labels: np.ndarray,
                     suffix_length: int) -> ProbabilisticExtraction:
    """P(first m reply tokens | prompt) of each record, whose reply starts at `offsets` among its scored tokens.

    An offset of None (the pass did not score the reply, or it is shorter than m) gives NaN. The prefix length is 0.
    """
    labels = np.asarray(labels)
    values = np.array([float("nan") if offset is None else suffix_log_probability(s, offset, suffix_length)
                       for s, offset in zip(target, offsets, strict=True)], dtype=np.float64)
    return ProbabilisticExtraction(0, suffix_length, values, labels)
