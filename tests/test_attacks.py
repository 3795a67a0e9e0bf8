"""Token-level attacks against hand computations from their papers' definitions."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from privft.attacks import ATTACKS, AttackInputs, get_attack, min_k_score, register_attack
from privft.scoring import TokenStats


def _stats(logprobs, n_bytes=None, mu=None, sigma=None) -> TokenStats:
    lp = np.asarray(logprobs, dtype=np.float32)
    return TokenStats(lp, np.asarray(mu if mu is not None else np.full_like(lp, -2.0), dtype=np.float32),
                      np.asarray(sigma if sigma is not None else np.ones_like(lp), dtype=np.float32),
                      n_bytes or 4 * len(lp))


TEXTS = ["The cat sat on the mat.", "Quantum chromodynamics describes quarks."]
TARGET = [_stats([-1.0, -2.0, -3.0, -4.0, -5.0]), _stats([-0.5, -0.5, -6.0])]
REFERENCE = [_stats([-2.0, -2.0, -4.0, -4.0, -6.0]), _stats([-1.0, -1.0, -1.0])]
LOWER = [_stats([-2.0, -2.0, -3.0, -4.0, -5.0]), _stats([-1.0, -1.0, -6.0])]
INPUTS = AttackInputs(TEXTS, TARGET, REFERENCE, LOWER)


def test_loss_zlib_lowercase_and_reference_ratio():
    assert get_attack("loss")(INPUTS) == pytest.approx([-3.0, -7.0 / 3])
    assert get_attack("zlib")(INPUTS) == pytest.approx(
        [-3.0 / len(zlib.compress(TEXTS[0].encode())), -(7.0 / 3) / len(zlib.compress(TEXTS[1].encode()))])
    assert get_attack("lowercase")(INPUTS) == pytest.approx([-3.0 / 3.2, -(7.0 / 3) / (8.0 / 3)])
    assert get_attack("ref_ratio")(INPUTS) == pytest.approx([3.6 - 3.0, 1.0 - 7.0 / 3])


def test_bits_per_byte_variants():
    bpb = [s.nll_sum / np.log(2) / s.n_bytes for s in TARGET]
    ref_bpb = [s.nll_sum / np.log(2) / s.n_bytes for s in REFERENCE]
    assert get_attack("loss_bpb")(INPUTS) == pytest.approx([-b for b in bpb])
    assert get_attack("ref_ratio_bpb")(INPUTS) == pytest.approx(np.subtract(ref_bpb, bpb))


def test_min_k_takes_the_least_likely_tokens_and_at_least_one():
    assert min_k_score(TARGET[0], 0.4) == pytest.approx(-4.5)  # the two lowest of five
    assert min_k_score(TARGET[1], 0.2) == pytest.approx(-6.0)  # int(0.6) = 0 → one token, never NaN
    assert get_attack("min_k")(AttackInputs(TEXTS, TARGET, min_k_fraction=1.0)) == pytest.approx([-3.0, -7.0 / 3])


def test_min_k_plus_plus_standardises_by_mu_and_sigma():
    stats = _stats([-1.0, -3.0, -2.0], mu=[-1.0, -1.0, -4.0], sigma=[2.0, 1.0, 0.5])
    z = [0.0, -2.0, 4.0]
    scores = get_attack("min_k_pp")(AttackInputs(["x"], [stats], min_k_fraction=0.67))
    assert scores == pytest.approx([np.mean(sorted(z)[:2])])


def test_reference_ratio_is_refused_across_tokenizers():
    inputs = AttackInputs(TEXTS, TARGET, REFERENCE, same_tokenizer=False)
    with pytest.raises(ValueError, match="tokenizers differ.*ref_ratio_bpb"):
        get_attack("ref_ratio")(inputs)
    assert np.isfinite(get_attack("ref_ratio_bpb")(inputs)).all()


def test_missing_inputs_and_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="needs reference statistics"):
        get_attack("ref_ratio")(AttackInputs(TEXTS, TARGET))
    with pytest.raises(ValueError, match="Unknown attack 'mink'.*min_k"):
        get_attack("mink")
    with pytest.raises(ValueError, match="already registered"):
        register_attack("loss", description="twin")(lambda inputs: np.zeros(len(inputs.texts)))
    assert "loss" in ATTACKS
