"""Extraction audits: P(suffix | prefix) from the audit's own pass, greedy k-extractability, the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from privft.audit import AuditConfig, run_audit
from privft.cli import _extraction_settings, build_parser
from privft.config import ConfigError, from_dict, load_yaml, save_yaml
from privft.data import MembershipSplit
from privft.extraction import ExtractionSettings, normalised_edit_distance, probabilistic_extraction
from privft.extraction.greedy import edit_distance, generate_continuations
from privft.models import build_tiny_llama
from privft.scoring import TokenStats, score_texts
from privft.training import FinetuneSettings, finetune

SHORT = dict(prefix_lengths=(16, 24), suffix_length=16, greedy_prefix_length=16)  # texts here are ~60 tokens


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest's: tiny steps are much slower on two threads


@pytest.fixture(scope="module")
def split(local_texts) -> MembershipSplit:
    texts = [t[:250] for t in local_texts if len(t) >= 250]
    return MembershipSplit.random(texts, n_members=16, n_non_members=16, n_validation=0, seed=0, source="pydoc")


@pytest.fixture(scope="module")
def memorised(tokenizer, split, tmp_path_factory):
    """A tiny Llama fully fine-tuned until it reproduces its 16 members."""
    settings = FinetuneSettings(lora=None, epochs=40, learning_rate=3e-3, batch_size=4, max_length=128,
                                output_dir=str(tmp_path_factory.mktemp("trainer")))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module-scoped, so not conftest's function-scoped one_thread; restored after
    try:
        return finetune(build_tiny_llama(tokenizer), tokenizer, split.members, settings)
    finally:
        torch.set_num_threads(threads)


def _stats(logprobs: list[float]) -> TokenStats:
    return TokenStats(np.array(logprobs, dtype=np.float32), None, None, n_bytes=len(logprobs))


def test_suffix_probability_is_the_product_over_the_suffix_tokens():
    stats = [_stats([-5.0, -4.0, -0.5, -0.25, -9.0]), _stats([-1.0, -1.0, -1.0]), _stats([-3.0, -2.0, 0.0, 0.0])]
    result = probabilistic_extraction(stats, np.array([1, 1, 0]), prefix_length=2, suffix_length=2)
    np.testing.assert_allclose(np.exp(result.log_probability[[0, 2]]), [math.exp(-0.5) * math.exp(-0.25), 1.0],
                               rtol=1e-6)
    assert math.isnan(result.log_probability[1])  # 3 tokens cannot hold 2 + 2
    p = math.exp(-0.75)
    np.testing.assert_allclose(result.at_least_once(10)[[0, 2]], [1 - (1 - p) ** 10, 1.0], rtol=1e-9)
    summary = result.summary((1, 10))
    assert summary["members"]["n_texts"] == 2 and summary["members"]["n_long_enough"] == 1
    assert summary["members"]["at_least_once"]["10"] == pytest.approx(1 - (1 - p) ** 10)
    assert summary["non_members"]["at_least_once"]["1"] == 1.0


def test_normalised_edit_distance_counts_token_edits():
    assert edit_distance([1, 2, 3, 4, 5, 6], [7, 2, 3, 4, 8, 6, 9]) == 3  # kitten → sitting
    assert normalised_edit_distance([1, 2, 3], [1, 2, 3]) == 0.0
    assert normalised_edit_distance([1, 2], [3, 4]) == 1.0
    assert normalised_edit_distance([1, 2, 3, 4], [1, 2, 4]) == pytest.approx(0.25)  # one deletion of four tokens
    assert normalised_edit_distance([], []) == 0.0


def test_settings_refuse_bad_values_by_their_yaml_key(tmp_path):
    with pytest.raises(ConfigError, match=r"audit\.extraction\.suffix_length=0 must be at least 1"):
        from_dict(AuditConfig, {"extraction": {"suffix_length": 0}}, where="audit")
    with pytest.raises(ValueError, match="max_length=64 must exceed the 82 tokens extraction reads"):
        AuditConfig(max_length=64, extraction=ExtractionSettings())
    assert from_dict(AuditConfig, {"extraction": {}}).extraction == ExtractionSettings()
    config = AuditConfig(extraction=ExtractionSettings(prefix_lengths=(8,), greedy_max_texts=3))
    assert load_yaml(AuditConfig, save_yaml(config, tmp_path / "audit.yaml")) == config


def test_cli_flags_build_the_settings():
    def settings(*flags: str) -> ExtractionSettings | None:
        return _extraction_settings(build_parser().parse_args(["audit", "--model", "m", "--split", "s", *flags]))

    assert settings() is None and settings("--extraction") == ExtractionSettings()
    assert settings("--extraction", "--extraction-max-texts", "7").greedy_max_texts == 7
    with pytest.raises(SystemExit, match="--extraction-max-texts needs --extraction"):
        settings("--extraction-max-texts", "7")


def test_probabilistic_extraction_adds_no_forward_pass(memorised, tokenizer, split):
    calls = []
    hook = memorised.get_decoder().register_forward_hook(lambda *_: calls.append(1))  # every pass runs the decoder
    try:
        counts = {}
        for name, extraction in (("off", None), ("probabilistic", ExtractionSettings(**SHORT, greedy=False)),
                                 ("greedy", ExtractionSettings(**SHORT))):
            calls.clear()
            run_audit(memorised, tokenizer, split, config=AuditConfig(attacks=("loss",), n_bootstrap=10,
                                                                      extraction=extraction))
            counts[name] = len(calls)
    finally:
        hook.remove()
    assert counts["probabilistic"] == counts["off"] > 0
    assert counts["greedy"] > counts["off"]  # the hook does see generation: decoding is extra work


def test_memorised_members_are_extracted_and_non_members_are_not(memorised, tokenizer, split, tmp_path):
    config = AuditConfig(attacks=("loss",), n_bootstrap=10, extraction=ExtractionSettings(**SHORT))
    report = run_audit(memorised, tokenizer, split, config=config)
    texts, labels = split.labels_and_texts()
    by_hand = [s.token_logprobs[16:32].astype(np.float64).sum() for s in score_texts(memorised, tokenizer, texts)]
    np.testing.assert_allclose(report.extraction.probabilistic[0].log_probability, by_hand, rtol=1e-6)

    shares = report.extraction.probabilistic[0].summary((1, 100))
    assert shares["members"]["at_least_once"]["100"] > 0.5 > 1e-6 > shares["non_members"]["at_least_once"]["100"]
    greedy = report.extraction.greedy.summary()
    assert greedy["members"]["n_decoded"] == 16 and greedy["non_members"]["n_decoded"] == 16
    assert greedy["members"]["exact_rate"] >= 0.75 and greedy["non_members"]["approximate_rate"] == 0.0
    assert greedy["members"]["approximate"] >= greedy["members"]["exact"]

    data = json.loads(report.save(tmp_path)["json"].read_text())
    assert data["extraction"]["probabilistic"][1]["prefix_length"] == 24
    assert len(data["extraction"]["probabilistic"][0]["log_probability"]) == 32
    assert data["config"]["extraction"]["suffix_length"] == 16
    markdown = (tmp_path / "report.md").read_text()
    assert "### Extraction" in markdown and "| 16 | members 16/16 |" in markdown
    assert f"| members | 16/16/16 | {greedy['members']['exact_rate']:.3f} ({greedy['members']['exact']}/16) |" \
        in markdown
    assert any("only 16 of 16 members" in note for note in report.warnings)  # a small audit says so


def test_greedy_subsample_is_seeded_and_per_group(memorised, tokenizer, split):
    def decoded(seed: int) -> list[int]:
        config = AuditConfig(attacks=("loss",), n_bootstrap=10, seed=seed,
                             extraction=ExtractionSettings(**SHORT, greedy_max_texts=5))
        return run_audit(memorised, tokenizer, split, config=config).extraction.greedy.decoded.tolist()

    first = decoded(0)
    assert len(first) == 10 and sum(i < 16 for i in first) == 5  # five members, five non-members
    assert decoded(0) == first != decoded(1)


def test_left_padded_batches_decode_as_one_prompt_at_a_time(tiny_model, tokenizer, local_texts):
    prompts = [[tokenizer.bos_token_id, *ids[:n]]
               for ids, n in zip(tokenizer(local_texts[:4], add_special_tokens=False)["input_ids"], (3, 9, 5, 12))]
    batched = generate_continuations(tiny_model, tokenizer, prompts, 6, batch_size=4)
    assert batched == [generate_continuations(tiny_model, tokenizer, [p], 6)[0] for p in prompts]
    beams = generate_continuations(tiny_model, tokenizer, prompts[:2], 6, batch_size=2, num_beams=3)
    assert [len({tuple(seq) for seq in b}) for b in beams] == [3, 3]  # three distinct beams per prompt
