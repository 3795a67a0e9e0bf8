"""Score attacks on one forward pass's statistics, each as its paper defines it.

Every function returns one score per text where higher means "more likely a member".
"""

from __future__ import annotations

import zlib

import numpy as np

from privft.attacks.registry import AttackInputs, register_attack
from privft.scoring import TokenStats

SIGMA_FLOOR = 1e-3  # σ below this (a near one-hot prediction) would blow up Min-K%++'s z-scores


def _lowest_fraction_mean(values: np.ndarray, fraction: float) -> float:
    """Mean of the lowest `fraction` of values, over at least one value."""
    count = max(1, int(fraction * values.shape[0]))
    return float(np.partition(values, count - 1)[:count].mean())


def min_k_score(stats: TokenStats, fraction: float = 0.2) -> float:
    """Min-K% (Shi et al. 2023): mean log-probability of the k % least likely tokens."""
    return _lowest_fraction_mean(stats.token_logprobs, fraction)


def min_k_plus_plus_score(stats: TokenStats, fraction: float = 0.2) -> float:
    """Min-K%++ (Zhang et al. 2024): Min-K% over log p standardised by the model's own μ and σ."""
    if stats.mean_logprob is None or stats.std_logprob is None:
        raise ValueError("Min-K%++ needs the model's μ and σ per token, but these statistics were scored for "
                         "the loss alone; score the target with score_texts(..., distribution=True).")
    z = (stats.token_logprobs - stats.mean_logprob) / np.maximum(stats.std_logprob, SIGMA_FLOOR)
    return _lowest_fraction_mean(z, fraction)


@register_attack("loss", default=True, ensemble_component=True,
                 description="negative mean token loss (Yeom et al. 2018)")
def loss_attack(inputs: AttackInputs) -> np.ndarray:
    """Members have lower loss."""
    return np.array([-s.mean_nll for s in inputs.target])


@register_attack("loss_bpb", default=True,
                 description="negative bits per byte of the target")
def loss_bpb_attack(inputs: AttackInputs) -> np.ndarray:
    """The loss attack in bits per UTF-8 byte, independent of the tokenizer."""
    return np.array([-s.bits_per_byte for s in inputs.target])


@register_attack("zlib", default=True, ensemble_component=True,
                 description="loss over zlib-compressed length (Carlini et al. 2021)")
def zlib_attack(inputs: AttackInputs) -> np.ndarray:
    """Mean token loss divided by the zlib entropy (compressed bytes) of the text, negated."""
    return np.array([-s.mean_nll / len(zlib.compress(t.encode("utf-8")))
                     for s, t in zip(inputs.target, inputs.texts)])


@register_attack("lowercase", needs=("lowercase",), default=True, ensemble_component=True,
                 description="loss over the loss of the lowercased text (Carlini et al. 2021)")
def lowercase_attack(inputs: AttackInputs) -> np.ndarray:
    """Ratio of log-perplexities of the original and the lowercased text, negated."""
    return np.array([-s.mean_nll / lower.mean_nll for s, lower in zip(inputs.target, inputs.lowercase)])


@register_attack("min_k", default=True, ensemble_component=True,
                 description="mean of the lowest k % token log-probs (Shi et al. 2023)")
def min_k_attack(inputs: AttackInputs) -> np.ndarray:
    """Min-K% with k = inputs.min_k_fraction."""
    return np.array([min_k_score(s, inputs.min_k_fraction) for s in inputs.target])


@register_attack("min_k_pp", default=True, ensemble_component=True,
                 description="Min-K% of log p standardised by μ and σ (Zhang et al. 2024)")
def min_k_plus_plus_attack(inputs: AttackInputs) -> np.ndarray:
    """Min-K%++ with k = inputs.min_k_fraction."""
    return np.array([min_k_plus_plus_score(s, inputs.min_k_fraction) for s in inputs.target])


@register_attack("ref_ratio", needs=("reference",), default=True, ensemble_component=True,
                 needs_same_tokenizer=True,
                 description="reference loss minus target loss, per token (Carlini et al. 2021)")
def reference_ratio_attack(inputs: AttackInputs) -> np.ndarray:
    """How much easier the text is for the target than for the reference, in nats per token."""
    return np.array([r.mean_nll - s.mean_nll for s, r in zip(inputs.target, inputs.reference)])


@register_attack("ref_ratio_bpb", needs=("reference",), default=True,
                 description="reference minus target bits per byte; valid across tokenizers")
def reference_ratio_bpb_attack(inputs: AttackInputs) -> np.ndarray:
    """The reference ratio in bits per UTF-8 byte, so the two models may tokenize differently."""
    return np.array([r.bits_per_byte - s.bits_per_byte for s, r in zip(inputs.target, inputs.reference)])
