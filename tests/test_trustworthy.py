"""Issue 18: no silent numbers, nothing lost. One test per item; each failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import warnings

import numpy as np
import pytest
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

import privft.data
import privft.report
from privft.attacks import blind_baseline_scores
from privft.audit import AuditConfig, run_audit
from privft.callbacks.audit import PrivacyAuditCallback
from privft.cli import main
from privft.config import ConfigError, from_dict, load_yaml
from privft.data import DataError, MembershipSplit
from privft.metrics import evaluate_attack
from privft.models import ModelNotFoundError, load_model
from privft.pipeline import DataSettings, RunConfig, check_output_dir, load_split, run_training
from privft.report import AuditReport, PerplexityResult
from privft.scoring import ScoringError, StatsCache, score_texts, start_token_rule
from privft.training import tokenize_for_training


@pytest.fixture(scope="module")
def split(local_texts) -> MembershipSplit:
    texts = [t[:200] for t in local_texts if len(t) >= 150]
    return MembershipSplit.random(texts, n_members=20, n_non_members=20, seed=2, source="pydoc")


@pytest.fixture()
def model_dir(tiny_model, tokenizer, tmp_path) -> str:
    tiny_model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return str(tmp_path / "model")


def small_report(local_texts, n: int, model: str = "m") -> AuditReport:
    """A report on `n` members vs `n` non-members that a bag of words separates perfectly (no model needed)."""
    members = [f"alpha beta gamma {t[:80]}" for t in local_texts[:n]]
    non_members = [f"omega sigma kappa {t[:80]}" for t in local_texts[n:2 * n]]
    texts, labels = members + non_members, np.array([1] * n + [0] * n)
    blind = blind_baseline_scores(texts, labels)
    loss = np.arange(2 * n, dtype=float)
    return AuditReport(model=model, reference=None, config={}, split={"source": "test", "seed": 0, "n_members": n,
                                                                      "n_non_members": n, "n_validation": 0},
                       blind_baseline=evaluate_attack(labels, blind, n_bootstrap=50),
                       attacks={"loss": evaluate_attack(labels, loss, n_bootstrap=50)},
                       perplexity=PerplexityResult(10.0, "non-members", n, 100, "test"),
                       scores={"blind_baseline": blind, "loss": loss}, labels=labels,
                       text_sha256=[str(i) for i in range(2 * n)])


# 1. A run that trained nothing never reports.

@pytest.mark.parametrize(("setting", "key"), [("epochs: -1", "training.epochs=-1"),
                                              ("epochs: 0", "training.epochs=0"),
                                              ("learning_rate: 0", "training.learning_rate=0.0"),
                                              ("batch_size: 0", "training.batch_size=0")])
def test_a_config_that_trains_nothing_is_refused_when_it_loads(tmp_path, setting, key):
    (tmp_path / "run.yaml").write_text(f"training:\n  {setting}\n")
    with pytest.raises(ConfigError, match=key):
        load_yaml(RunConfig, tmp_path / "run.yaml")


def test_an_audit_after_zero_training_steps_says_so_at_the_top(tiny_model, tokenizer, split, tmp_path):
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss",), n_bootstrap=50))
    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=0, use_cpu=True, report_to="none",
                             save_strategy="no")
    Trainer(model=tiny_model, args=args, train_dataset=tokenize_for_training(tokenizer, split.members, 128),
            data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), callbacks=[callback]).train()
    report = json.loads((tmp_path / "privacy-audit" / "report.json").read_text())
    assert report["training_steps"] == 0 and report["warnings"][0].startswith("NO TRAINING: the model took 0")
    markdown = (tmp_path / "privacy-audit" / "report.md").read_text()
    assert markdown.index("NO TRAINING") < markdown.index("| Attack |")


# 4. Warnings reach the report.

def test_near_duplicates_and_single_token_texts_are_warned_about_in_the_report(tiny_model, tokenizer, split):
    members, non_members = list(split.members), list(split.non_members)
    non_members[0] = members[0].upper()  # the case variant: the same text to an attack, a non-member to the split
    non_members[1] = "the"
    with pytest.warns(privft.data.NearDuplicateWarning):
        shifted = MembershipSplit(members, non_members, source="pydoc")
    with pytest.warns(UserWarning, match="single token"):
        report = run_audit(tiny_model, tokenizer, shifted, config=AuditConfig(attacks=("loss",), n_bootstrap=20))
    [near] = [w for w in report.warnings if "near_duplicates" in w]
    assert "non_members[0]~members[0]" in near and near in report.to_markdown()
    assert any(w.startswith("1 text(s) are a single token (first: index 21, 'the')") for w in report.warnings)
    assert json.loads(json.dumps(report.to_dict()))["warnings"] == report.warnings


# 5. Small audits say they are small.

def test_a_small_audit_warns_on_every_auc_and_the_blind_baseline_gives_no_verdict(local_texts):
    report = small_report(local_texts, 6)
    assert report.blind_baseline.auc.auc == 1.0  # what read as "DISTRIBUTION SHIFT" before
    assert all(m.auc.warning and "SMALL SAMPLE: 6 members vs 6 non-members" in m.auc.warning
               for m in (report.blind_baseline, *report.attacks.values()))
    assert report.distribution_shift is None and report.to_dict()["distribution_shift"] is None
    assert not any("DISTRIBUTION SHIFT" in w for w in report.warnings)
    assert any("blind baseline gives no verdict on 6 members vs 6 non-members" in w for w in report.warnings)
    assert "1.000 [1.000, 1.000] ⚠" in report.to_markdown()
    large = small_report(local_texts, 20)  # from 20 a side: no warning, and the verdict is back
    assert large.blind_baseline.auc.warning is None and large.distribution_shift is True


# 6. Non-finite model outputs are named.

def test_non_finite_log_probs_are_blamed_on_the_model(tiny_model, tokenizer, split):
    tiny_model.model.norm.weight.data[0] = float("nan")
    with pytest.raises(ScoringError, match="non-finite scores .* for 4 of 4 texts"):
        score_texts(tiny_model, tokenizer, split.members[:4])
    with pytest.raises(ScoringError, match="non-finite scores .* for 40 of 40 texts"):  # not "no members among 0"
        run_audit(tiny_model, tokenizer, split, config=AuditConfig(attacks=("loss",), n_bootstrap=10))


# 7. A corrupt cache entry is recomputed.

def test_a_corrupt_cache_entry_is_named_deleted_and_recomputed(tiny_model, tokenizer, split, tmp_path):
    texts = split.members[:3]
    cache = StatsCache(tmp_path / "cache")
    fresh = score_texts(tiny_model, tokenizer, texts, cache=cache)
    entries = sorted((tmp_path / "cache").rglob("*.npz"))
    entries[0].write_bytes(entries[0].read_bytes()[:100])  # truncated by a full disk
    entries[1].write_bytes(b"not a cache entry")  # junk
    np.savez(entries[2], lp=np.array([object()], dtype=object), n_bytes=3)  # would need pickle to load
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = score_texts(tiny_model, tokenizer, texts, cache=cache)
    named = [str(w.message) for w in caught if "Cache entry" in str(w.message)]
    assert len(named) == 3 and all(sum(str(entry) in message for message in named) == 1 for entry in entries)
    assert all(np.array_equal(a.token_logprobs, b.token_logprobs) for a, b in zip(fresh, again))
    assert all(cache.get(path.stem) is not None for path in entries)  # rewritten whole


# 8. Config checks before any file is written.

@pytest.mark.parametrize(("section", "key"), [("training:\n  batch_size: 0", "training.batch_size=0"),
                                              ("training:\n  learning_rate: -1.0e-3", "training.learning_rate=-0.001"),
                                              ("dp:\n  target_epsilon: 0", "dp.target_epsilon=0.0"),
                                              ("dp:\n  target_epsilon: 8\n  delta: 1.0", "dp.delta=1.0"),
                                              ("dp:\n  target_epsilon: 8\n  delta: 0", "dp.delta=0.0"),
                                              ("audit:\n  batch_size: 0", "audit.batch_size=0"),
                                              ("training:\n  lora:\n    rank: 0", "training.lora.rank=0")])
def test_a_value_a_library_would_refuse_is_named_when_the_yaml_loads(tmp_path, section, key):
    (tmp_path / "run.yaml").write_text(f"{section}\n")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_yaml(RunConfig, tmp_path / "run.yaml")


def test_the_corrected_config_then_runs_in_the_same_folder(model_dir, write_texts, tmp_path):
    write_texts(tmp_path, 60, min_chars=150, max_chars=200)
    out = tmp_path / "run"
    settings = (f"model: {model_dir}\ndata:\n  corpus: null\n  path: {tmp_path / 'texts.json'}\n  n_members: 20\n"
                f"  n_non_members: 20\n  n_validation: 5\naudit:\n  attacks: [loss]\n  n_bootstrap: 20\n"
                f"training:\n  epochs: 1\n  max_length: 128\n  output_dir: {out}\n")
    (tmp_path / "run.yaml").write_text(settings + "  batch_size: 0\n")
    with pytest.raises(ConfigError, match=r"training\.batch_size=0"):
        load_yaml(RunConfig, tmp_path / "run.yaml")
    assert not (out / "manifest.json").exists() and not (out / "split.json").exists()
    (tmp_path / "run.yaml").write_text(settings + "  batch_size: 8\n")
    config = load_yaml(RunConfig, tmp_path / "run.yaml")
    check_output_dir(out, config)  # not "holds another run"
    assert run_training(config).report.training_steps == 3


# 10. The start token is the model's document boundary, configurable and recorded.

def test_the_start_token_is_configured_once_recorded_and_used_for_training_and_scoring(model_dir, write_texts,
                                                                                        tokenizer, tmp_path):
    write_texts(tmp_path, 60, min_chars=150, max_chars=200)
    settings = (f"model: {model_dir}\ndata:\n  corpus: null\n  path: {tmp_path / 'texts.json'}\n  n_members: 20\n"
                f"  n_non_members: 20\n  n_validation: 5\naudit:\n  attacks: [loss]\n  n_bootstrap: 20\n"
                f"training:\n  epochs: 1\n  max_length: 128\n  output_dir: {tmp_path / 'run'}\n")
    (tmp_path / "run.yaml").write_text(settings + "start_token: '<pad>'\n")
    result = run_training(load_yaml(RunConfig, tmp_path / "run.yaml"))
    pad = {"rule": "<pad>", "token": "<pad>", "id": tokenizer.pad_token_id}
    assert result.report.start_token == pad and "scored after `<pad>`" in result.report.to_markdown()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["start_token"] == pad and manifest["config"]["start_token"] == "<pad>"
    model, _ = load_model(str(tmp_path / "run" / "model"))
    with start_token_rule("<pad>"):  # scored again after <pad>: the report's numbers; training starts there too
        [again] = score_texts(model, tokenizer, [MembershipSplit.load(tmp_path / "run" / "split.json").members[0]])
        assert tokenize_for_training(tokenizer, ["a text"], None)["input_ids"][0][0] == tokenizer.pad_token_id
    assert np.isclose(-again.mean_nll, result.report.scores["loss"][0], atol=1e-4)


def test_a_saved_config_without_start_token_was_run_with_the_old_rule():
    saved = {"model": "m"}  # a manifest or cell.json written before the setting existed
    assert from_dict(RunConfig, saved, saved=True).start_token == "bos-else-eos"
    assert from_dict(RunConfig, saved).start_token == "auto" and RunConfig().start_token == "auto"
    with pytest.raises(ConfigError, match="start_token"):
        from_dict(RunConfig, {"start_token": ""})


# 11. Errors in the interface's own words.

def test_cli_errors_name_the_flag(tmp_path):
    (tmp_path / "members.jsonl").write_text('{"body": "a text"}\n')
    with pytest.raises(SystemExit, match="no column 'text'.*Pass --text-column with one of them") as refusal:
        main(["audit", "--model", "unused", "--members", str(tmp_path / "members.jsonl"),
              "--non-members", str(tmp_path / "members.jsonl"), "--out", str(tmp_path / "out")])
    assert "text_column" not in str(refusal.value)
    with pytest.raises(DataError, match="Pass data.text_column with one of them"):  # as privft train's YAML names it
        load_split(DataSettings(corpus=None, path=str(tmp_path / "members.jsonl")))
    for side in ("in", "out"):
        (tmp_path / f"{side}.jsonl").write_text("".join(json.dumps({"text": f"{side} text {i}"}) + "\n"
                                                        for i in range(3)))
    with pytest.raises(SystemExit, match="--batch-size=0 must be at least 1"):
        main(["audit", "--model", "unused", "--members", str(tmp_path / "in.jsonl"),
              "--non-members", str(tmp_path / "out.jsonl"), "--batch-size", "0"])


def test_an_empty_model_folder_is_named(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(ModelNotFoundError, match=f"no model files in {tmp_path / 'model'}"):
        load_model(str(tmp_path / "model"))


# 2. A run folder belongs to one run.

@pytest.fixture()
def read_only_dir(tmp_path):
    """A folder no file can be created in: chmod for a user, the immutable flag for root."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    immutable = os.geteuid() == 0
    if immutable:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("running as root where chattr +i is unavailable: no folder is read-only")
    else:
        folder.chmod(0o555)
    yield folder
    if immutable:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_cli_audit_keeps_another_run_unless_told_to_overwrite(model_dir, split, tmp_path, read_only_dir):
    split.save(tmp_path / "split.json")
    audit = ["audit", "--model", model_dir, "--split", str(tmp_path / "split.json"), "--attacks", "loss",
             "--bootstrap", "20"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{}")
    with pytest.raises(SystemExit, match="holds a training run"):
        main([*audit, "--out", str(tmp_path / "run")])
    main([*audit, "--out", str(tmp_path / "audit")])
    main([*audit, "--out", str(tmp_path / "audit")])  # the same audit may be measured again in place
    with pytest.raises(SystemExit, match="holds another audit"):
        main([*audit, "--out", str(tmp_path / "audit"), "--seed", "1"])
    main([*audit, "--out", str(tmp_path / "audit"), "--seed", "1", "--overwrite"])
    assert json.loads((tmp_path / "audit" / "report.json").read_text())["config"]["seed"] == 1
    with pytest.raises(SystemExit, match="is not writable"):  # before any model loads
        main(["audit", "--model", "unused", "--split", str(tmp_path / "split.json"), "--out", str(read_only_dir)])


# 3. A report is replaced as a whole.

def test_an_interrupted_save_is_detected_and_its_temp_files_cleaned(local_texts, tmp_path, monkeypatch):
    from privft.report import ReportMismatchError, read_report

    small_report(local_texts, 20, model="old").save(tmp_path)
    assert read_report(tmp_path)["model"] == "old"
    write_text = privft.report.atomic_write_text

    def killed_at_the_json(path, text):
        if path.name == "report.json":
            (path.parent / f".{path.name}.x1y2.tmp").write_text(text[:50])  # what a kill mid-write leaves
            raise KeyboardInterrupt
        return write_text(path, text)

    monkeypatch.setattr(privft.report, "atomic_write_text", killed_at_the_json)
    with pytest.raises(KeyboardInterrupt):
        small_report(local_texts, 20, model="new").save(tmp_path)
    with pytest.raises(ReportMismatchError, match="report.md and roc.png .* another save than report.json"):
        read_report(tmp_path)
    monkeypatch.setattr(privft.report, "atomic_write_text", write_text)
    small_report(local_texts, 20, model="new").save(tmp_path)
    assert read_report(tmp_path)["model"] == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md", "roc.png"]
