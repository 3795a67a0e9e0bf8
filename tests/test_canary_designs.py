"""Canary designs: every registered design draws a checked, seeded, recordable plan; bad designs are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privft.callbacks.one_run import one_run_epsilon_audit
from privft.config import ConfigError, load_yaml, save_yaml
from privft.data.canaries import CanaryError, _normalize
from privft.data.canary_designs import CANARY_DESIGNS, NewTokens, TokenDesign, TokenSource, get_design, register_design
from privft.data.designed_canaries import DesignedCanaryPlan, designed_plan
from privft.data.pii import plan_from_dict
from privft.dp import DPSettings
from privft.fdp_audit import REFERENCE_DELTA
from privft.pipeline import CanarySettings, DataSettings, RunConfig, run_training
from privft.shadows import ShadowSettings
from privft.training import FinetuneSettings, LoraSettings


@pytest.fixture(scope="module")
def training(local_texts):
    """The texts the canaries join: a few hundred paragraphs of the tokenizer's own corpus."""
    return local_texts[:300]


@pytest.fixture(scope="module")
def source(tokenizer, training):
    """The tokenizer's usable tokens and the training texts' statistics."""
    return TokenSource.build(tokenizer, training)


@pytest.mark.parametrize("design", sorted(CANARY_DESIGNS))
def test_every_design_draws_a_seeded_plan_that_round_trips_avoids_training_text_and_rebuilds(design, tokenizer,
                                                                                             training, source):
    plan = designed_plan(design, tokenizer, training, secret_length=6, n_canaries=20, n_alternatives=10, seed=3,
                         one_run=True)
    assert plan == designed_plan(design, tokenizer, training, secret_length=6, n_canaries=20, n_alternatives=10,
                                 seed=3, one_run=True)
    every = (*plan.secrets, *plan.reference_secrets())
    assert len(set(every)) == 30 and not any(_normalize(secret) in source.text for secret in every)
    for secret in every:
        assert tokenizer.decode(tokenizer.encode(secret, add_special_tokens=False)) == secret
    assert plan_from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    mixed = plan.insert(training)
    assert sum(text in plan.canary_texts() for text in mixed) == sum(plan.included()) * plan.copies


def test_conversational_canaries_carry_the_designed_secret_in_the_reply(tokenizer, training):
    records = [{"messages": [{"role": "user", "content": "Summarise."}, {"role": "assistant", "content": text}]}
               for text in training]
    plan = designed_plan("new", tokenizer, records, n_canaries=10, n_alternatives=10, format="messages", copies=1)
    reply = plan.record_for(plan.secrets[0])["messages"][1]["content"]
    assert plan.secrets[0] in reply and len(plan.insert(records)) == len(records) + sum(plan.included())


def test_token_designs_draw_what_they_promise(source):
    rng = np.random.default_rng(0)
    assert all(source.counts[t] == 0 for t in get_design("new").tokens(rng, source, 200))
    rarest = source.usable[np.argsort(source.counts[source.usable], kind="stable")[:get_design("rare").pool]]
    assert set(get_design("rare").tokens(rng, source, 200)) <= set(rarest.tolist())
    seen = {tuple(pair) for pair in source.pairs.tolist()}
    chain = get_design("bigram").tokens(rng, source, 200)
    assert np.mean([pair in seen for pair in zip(chain, chain[1:])]) > 0.9  # a unigram restart only at dead ends
    assert np.mean([source.counts[t] > 0 for t in get_design("unigram").tokens(rng, source, 200)]) == 1.0


class _BrokenBytes(TokenDesign):
    """Single bytes that are no whole character: what a tokenizer cannot give back."""

    name = "broken-bytes"

    def tokens(self, rng, source, length):
        return [source.tokenizer.convert_tokens_to_ids("Ã")] * length  # byte 0xC3 alone, half a UTF-8 character


def test_a_design_the_tokenizer_cannot_encode_and_secrets_inside_training_text_are_refused(tokenizer, training,
                                                                                          monkeypatch):
    monkeypatch.setitem(CANARY_DESIGNS, "broken-bytes", _BrokenBytes)
    with pytest.raises(CanaryError, match="does not encode them back"):
        designed_plan("broken-bytes", tokenizer, training, n_canaries=10, n_alternatives=10)
    with pytest.raises(CanaryError, match="occur in the training text"):  # single common tokens: in the text
        designed_plan("unigram", tokenizer, training, secret_length=1, n_canaries=10, n_alternatives=10)


def test_unknown_duplicate_and_impossible_designs_are_refused_with_the_fix(source):
    with pytest.raises(CanaryError, match=r"registered designs are \['bigram', 'new', 'random', 'rare', 'unigram'\]"):
        get_design("newest")
    with pytest.raises(ValueError, match="already registered"):
        register_design(NewTokens)
    every_token_seen = TokenSource(source.tokenizer, source.usable, np.ones_like(source.counts), source.pairs,
                                   source.pair_counts, source.text)
    with pytest.raises(CanaryError, match="choose design 'rare'"):
        get_design("new").tokens(np.random.default_rng(0), every_token_seen, 4)
    with pytest.raises(CanaryError, match="build it with designed_plan"):
        DesignedCanaryPlan(n_canaries=10)


def test_a_designed_plan_feeds_the_one_run_audit_with_both_analyses_and_its_warnings(tokenizer, training,
                                                                                   tiny_model):
    plan = designed_plan("rare", tokenizer, training, n_canaries=12, n_alternatives=10, one_run=True, copies=2)
    entry = one_run_epsilon_audit(tiny_model, tokenizer, plan, log_history=[])
    assert entry["n_canaries"] == 12 and entry["fdp"]["delta"] == REFERENCE_DELTA and entry["delta"] == 0.0
    assert [w.split(":")[0] for w in entry["warnings"]] == [
        "One-run audit with 2 copies per canary", "12 canaries are too few for a bound that says much"]


def test_the_design_key_round_trips_in_yaml_and_an_unknown_or_unsupported_design_is_refused(tmp_path):
    config = RunConfig(canaries=CanarySettings(n_canaries=20, copies=1, one_run=True, design="unigram"))
    assert load_yaml(RunConfig, save_yaml(config, tmp_path / "run.yaml")) == config
    assert "design: unigram" in (tmp_path / "run.yaml").read_text()
    (tmp_path / "bad.yaml").write_text("canaries:\n  design: crafted\n")
    with pytest.raises(ConfigError, match=r"canaries.design='crafted'.*\['bigram', 'new', 'random', 'rare'"):
        load_yaml(RunConfig, tmp_path / "bad.yaml")
    with pytest.raises(ValueError, match="leave kind null"):
        CanarySettings(design="rare", kind="email")
    with pytest.raises(ValueError, match="shadow farm plants digit or PII canaries only"):
        ShadowSettings(canaries=CanarySettings(n_canaries=4, design="new"))


def test_a_tiny_dp_run_with_unigram_canaries_audits_them_beside_its_gradient_canaries(tiny_model_dir, write_texts,
                                                                                     tmp_path, one_thread):
    data_file = write_texts(tmp_path, 100, min_chars=120, max_chars=200)
    config = RunConfig(
        model=tiny_model_dir,
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=40, n_non_members=30,
                          n_validation=10),
        training=FinetuneSettings(epochs=1, batch_size=8, max_length=64, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        canaries=CanarySettings(n_canaries=20, copies=1, one_run=True, n_alternatives=20, design="unigram"),
        dp=DPSettings(target_epsilon=8.0, seed=0, gradient_canaries=100),
    )
    result = run_training(config)
    plan = plan_from_dict(json.loads((tmp_path / "run" / "manifest.json").read_text())["canaries"])
    assert isinstance(plan, DesignedCanaryPlan) and plan.design == "unigram" and plan.n_canaries == 20
    black, white = result.report.epsilon_audit, result.report.gradient_epsilon_audit
    assert black["n_canaries"] == 20 and black["n_included"] == sum(plan.included()) and "fdp" in black
    assert white["n_canaries"] == 100 and white["copies"] == 1 and white["accountant_epsilon"] <= 8.0
    recorded = json.loads((tmp_path / "run" / "gradient_canaries.json").read_text())
    assert sum(recorded["included"]) == white["n_included"] and len(recorded["scores"]) == 100
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "One-run ε audit (Steinke et al. 2023)" in markdown
    assert "20 canaries × 1 copies (unigram design)" in markdown
    assert "White-box one-run ε audit, gradient canaries on the LoRA parameters (Steinke et al. 2023)" in markdown
    assert result.report.training.dp.gradient_canaries == 100  # the training record says the sums carried them
    assert "100 white-box gradient canaries (each inserted with probability ½) joined the noised sums" in markdown
