"""The audit end to end on a tiny model: fine-tune, score once, every attack, report, CLI."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from privft import audit
from privft.attacks import AttackInputs, get_attack
from privft.attacks.registry import INPUT_HINTS, NEEDS
from privft.audit import AuditConfig, run_audit
from privft.cli import main
from privft.data import MembershipSplit
from privft.models import build_tiny_llama, train_bpe_tokenizer
from privft.scoring import score_texts
from privft.training import FinetuneSettings, LoraSettings, finetune

FAST = AuditConfig(n_bootstrap=1000, batch_size=16)


@pytest.fixture(scope="module")
def split(local_texts) -> MembershipSplit:
    texts = [t[:300] for t in local_texts if len(t) >= 200]
    return MembershipSplit.random(texts, n_members=30, n_non_members=30, n_validation=10, seed=0, source="pydoc")


@pytest.fixture(scope="module")
def lora_model(tokenizer, split, tmp_path_factory):
    settings = FinetuneSettings(epochs=3, learning_rate=1e-2, batch_size=8, max_length=128,
                                output_dir=str(tmp_path_factory.mktemp("trainer")),
                                lora=LoraSettings(rank=8, alpha=16, targets=("q_proj", "v_proj", "up_proj")))
    return finetune(build_tiny_llama(tokenizer), tokenizer, split.members, settings)


def test_full_finetune_memorisation_is_detected_against_the_base_model(tokenizer, split, tmp_path):
    base = build_tiny_llama(tokenizer)
    reference = copy.deepcopy(base)
    settings = FinetuneSettings(epochs=15, learning_rate=3e-3, batch_size=8, max_length=128,
                                output_dir=str(tmp_path), lora=None)
    target = finetune(base, tokenizer, split.members, settings)
    report = run_audit(target, tokenizer, split, reference=reference, config=FAST)
    assert set(report.attacks) == {"loss", "loss_bpb", "zlib", "lowercase", "min_k", "min_k_pp",
                                   "ref_ratio", "ref_ratio_bpb"}
    assert report.attacks["ref_ratio"].auc.auc > 0.9  # the tiny model memorised its 30 members
    assert report.attacks["ref_ratio"].auc.ci_low > 0.5
    assert report.perplexity.on == "validation" and report.perplexity.n_texts == 10
    one_percent = report.attacks["ref_ratio"].tpr_at_fpr[0]
    assert one_percent.tpr is None and "not estimable" in one_percent.warning  # 30 non-members
    assert not report.distribution_shift


def test_lora_audit_uses_disabled_adapters_as_reference(lora_model, tokenizer, split):
    report = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss", "ref_ratio")))
    assert report.reference == "base model (adapters disabled)"
    texts, _ = split.labels_and_texts()
    base = build_tiny_llama(tokenizer)  # same seed: the weights LoRA started from
    base_nll = np.array([s.mean_nll for s in score_texts(base, tokenizer, texts)])
    np.testing.assert_allclose(report.scores["ref_ratio"], base_nll + report.scores["loss"], atol=1e-5)


def test_audit_scores_only_the_passes_its_attacks_read(lora_model, tokenizer, split, monkeypatch):
    passes = []
    monkeypatch.setattr(audit, "score_texts", lambda *a, desc, **k: passes.append(desc) or score_texts(*a, **k))
    run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss", "min_k_pp")))
    assert passes == ["target", "base perplexity", "perplexity"]  # the base scores the held-out texts alone
    passes.clear()
    run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss", "ensemble")))
    assert passes == ["target", "reference", "base perplexity", "lowercase", "perplexity"]  # every component
    passes.clear()
    run_audit(build_tiny_llama(tokenizer), tokenizer, split, config=AuditConfig(attacks=("loss",)))
    assert passes == ["target", "perplexity"]  # no reference: no base perplexity


def test_report_shows_the_base_perplexity_on_the_same_texts_and_warns_when_the_fine_tune_is_worse(
        lora_model, tokenizer, split, tmp_path):
    report = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss",)))
    base = build_tiny_llama(tokenizer)  # same seed: the weights LoRA started from
    stats = score_texts(base, tokenizer, split.validation)
    expected = np.exp(sum(s.nll_sum for s in stats) / sum(s.n_tokens for s in stats))
    comparison = report.base_perplexity
    assert comparison.model == "base model (adapters disabled)" and comparison.perplexity.n_texts == 10
    assert comparison.perplexity.value == pytest.approx(expected, rel=1e-5)
    assert comparison.ratio.ratio == pytest.approx(report.perplexity.value / expected, rel=1e-5)
    assert comparison.ratio.ratio < 1 and not any("WORSE THAN THE BASE" in w for w in report.warnings)
    assert f"on the same texts: {expected:.2f}" in report.to_markdown()
    worse = run_audit(base, tokenizer, split, reference=lora_model, config=AuditConfig(attacks=("loss",)))
    [warning] = [w for w in worse.warnings if w.startswith("WORSE THAN THE BASE MODEL")]
    assert f"perplexity {worse.perplexity.value:.2f} on 10 validation texts" in warning
    saved = json.loads(worse.save(tmp_path)["json"].read_text())
    assert saved["base_perplexity"]["ratio"]["ratio"] > 1 and warning in saved["warnings"]
    assert warning in (tmp_path / "report.md").read_text()


def test_report_files_carry_counts_scores_and_warnings(lora_model, tokenizer, split, tmp_path):
    report = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss", "ref_ratio")))
    paths = report.save(tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["split"]["n_members"] == 30 and data["split"]["n_non_members"] == 30
    assert len(data["per_text"]["scores"]["ref_ratio"]) == 60 and sum(data["per_text"]["label"]) == 30
    assert data["versions"]["torch"].startswith("2.13.0")
    markdown = paths["markdown"].read_text()
    assert markdown.index("blind baseline") < markdown.index("| ref_ratio")
    assert "30 members vs 30 non-members" in markdown and "not estimable" in markdown
    assert paths["roc"].read_bytes().startswith(b"\x89PNG")
    loose = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss",), max_fprs=(0.05,)))
    bound = loose.attacks["loss"].tpr_at_fpr[0].fpr_upper  # 1 false positive allowed among 30 non-members
    assert bound == pytest.approx(0.1486, abs=1e-4)
    assert "threshold set for FPR ≤ 5 % may reach FPR 15 %" in loose.to_markdown()
    mixed = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss", "ensemble"), max_fprs=(0.05,)))
    markdown = mixed.to_markdown()  # the Ensemble scores 21 + 21 texts; its looser bound is stated with its count
    assert "ensemble is measured on 21 of 30 members and 21 of 30 non-members" in markdown
    assert "order statistics of 21 non-members" in markdown


def test_with_no_tpr_estimable_the_report_suggests_a_ceiling_the_non_members_resolve(lora_model, tokenizer, split):
    report = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss",)))
    [hint] = [w for w in report.warnings if w.startswith("No TPR at any FPR ceiling is estimable on 30")]
    assert "FPR ≤ 0.334 allows 10 false positives (`privft audit --max-fpr 0.334`" in hint
    markdown = report.to_markdown()
    assert hint in markdown and "⚠" not in markdown  # no cell is flagged, so the footnote promises no mark
    resolved = run_audit(lora_model, tokenizer, split, config=AuditConfig(attacks=("loss",), max_fprs=(0.334, 0.1)))
    assert resolved.attacks["loss"].tpr_at_fpr[0].false_positives <= 10
    assert not any(w.startswith("No TPR") for w in resolved.warnings)
    markdown = resolved.to_markdown()  # FPR ≤ 10 % rests on 3 false positives: flagged, and the footnote says why
    assert " ⚠ |" in markdown and "⚠ marks a warning above" in markdown


def test_no_reference_skips_reference_attacks_with_a_note(tiny_model, tokenizer, split):
    report = run_audit(tiny_model, tokenizer, split, config=AuditConfig(n_bootstrap=1000))
    assert "ref_ratio" not in report.attacks
    assert any(note.startswith("ref_ratio skipped") for note in report.warnings)
    with pytest.raises(ValueError, match="'ref_ratio' cannot run"):
        run_audit(tiny_model, tokenizer, split, config=AuditConfig(attacks=("ref_ratio",)))


def test_reference_with_another_tokenizer_allows_only_the_per_byte_ratio(tiny_model, tokenizer, split, local_texts):
    other_tokenizer = train_bpe_tokenizer(local_texts[::-1], vocab_size=700)
    reference = build_tiny_llama(other_tokenizer, seed=3)
    report = run_audit(tiny_model, tokenizer, split, reference=reference, reference_tokenizer=other_tokenizer)
    assert "ref_ratio_bpb" in report.attacks and "ref_ratio" not in report.attacks
    with pytest.raises(ValueError, match="tokenizers differ"):
        run_audit(tiny_model, tokenizer, split, reference=reference, reference_tokenizer=other_tokenizer,
                  config=AuditConfig(attacks=("ref_ratio",)))


def test_every_input_an_attack_can_need_has_a_hint():
    optional = {f.name for f in dataclasses.fields(AttackInputs) if f.default is None}
    assert NEEDS == optional and all(INPUT_HINTS.values())  # so a refusal always says what to supply
    reason, hint = get_attack("recall").refusal(set(), same_tokenizer=True)
    assert reason == "needs prefixed statistics" and "--prefix-non-members" in hint


def test_unknown_attack_fails_before_any_forward_pass():
    with pytest.raises(ValueError, match="Unknown attack 'mink'"):
        AuditConfig(attacks=("mink",))


def test_cli_audit_writes_the_report(tiny_model, tokenizer, split, tmp_path, capsys):
    tiny_model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    split.save(tmp_path / "split.json")
    main(["audit", "--model", str(tmp_path / "model"), "--reference", str(tmp_path / "model"),
          "--split", str(tmp_path / "split.json"), "--attacks", "loss,ref_ratio,min_k_pp", "--out",
          str(tmp_path / "out")])
    assert "| ref_ratio |" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"report.json", "report.md", "roc.png"}


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    (tmp_path / "members.jsonl").write_text('{"body": "a text"}\n')
    with pytest.raises(SystemExit, match="privft audit: error: .*text"):
        main(["audit", "--model", "unused", "--members", str(tmp_path / "members.jsonl"),
              "--non-members", str(tmp_path / "members.jsonl")])


def test_cli_audit_refuses_an_unusable_out_before_any_model_loads(split, tmp_path):
    split.save(tmp_path / "split.json")
    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(SystemExit, match="--out .*taken is a file"):  # not "cannot load model 'unused'"
        main(["audit", "--model", "unused", "--split", str(tmp_path / "split.json"), "--out", str(tmp_path / "taken")])
