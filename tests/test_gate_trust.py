"""The release gate on inputs it must not trust: void DP guarantees, malformed report fields, misdirected paths."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from privft.audit import AuditConfig, run_audit
from privft.callbacks.audit import write_model_card_section
from privft.cli import main
from privft.config import ConfigError, load_yaml, save_yaml
from privft.data import MembershipSplit
from privft.extraction import ExtractionSettings
from privft.gate import CANNOT_JUDGE, FAIL, NOT_MEASURED, PASS, GatePolicy, check
from privft.gate_input import MalformedReportError
from privft.models import build_tiny_llama
from privft.pipeline import RunConfig
from privft.training_record import DPRecord, TrainingRecord

# Limits this small audit (60 members, 60 non-members, an untrained model) can meet.
SMALL = GatePolicy(min_members=60, min_non_members=60, max_blind_baseline_auc=0.75, max_tpr_at_fpr={0.05: 0.9},
                   max_canary_exposure=None)
DP = {"epsilon": 7.9, "delta": 1e-5, "target_epsilon": 8.0, "noise_multiplier": 0.6, "sample_rate": 0.04, "steps": 75,
      "noised_steps": 75, "max_grad_norm": 1.0, "accountant": "prv", "privacy_unit": "one training sequence",
      "max_multiplicity": 1, "group_epsilon": 7.9, "group_delta": 1e-5, "n_examples": 300}


@pytest.fixture(scope="module")
def audited(tokenizer, local_texts, tmp_path_factory):
    """A real audit of an untrained tiny model on short texts, extraction read past their end: (report, folder)."""
    texts = [t[:150] for t in local_texts if len(t) >= 100]
    split = MembershipSplit.random(texts, n_members=60, n_non_members=60, seed=0, source="pydoc")
    extraction = ExtractionSettings(prefix_lengths=(200,), suffix_length=100, greedy_prefix_length=200,
                                    n_samples=(1, 100))  # no text has 300 tokens
    report = run_audit(build_tiny_llama(tokenizer), tokenizer, split, config=AuditConfig(
        attacks=("loss", "zlib"), max_fprs=(0.05,), n_bootstrap=100, extraction=extraction))
    folder = tmp_path_factory.mktemp("audit")
    report.save(folder)
    return report, folder


def trained(report: dict, **dp: object) -> dict:
    """A copy of report.json's dict as a DP-LoRA run's, its dp.json fields overridden by `dp`."""
    report = copy.deepcopy(report)
    report["training"] = {"method": "DP-LoRA", "n_training_texts": 300, "dp": {**DP, **dp}}
    return report


def criterion(verdict, name: str):
    [found] = [c for c in verdict.criteria if c.name == name]
    return found


def test_a_delta_not_below_one_over_n_fails_whatever_epsilon(audited):
    report = trained(audited[0].to_dict(), delta=0.05, group_delta=0.05)  # N = 300: 1/N = 0.0033
    verdict = check(report, dataclasses.replace(SMALL, max_epsilon=8.0))
    delta = criterion(verdict, "DP accountant δ")
    assert verdict.outcome == FAIL and delta.status == FAIL and delta in verdict.deciding
    assert delta.row().startswith("| DP accountant δ | 0.05 | < 0.003333 | fail | δ per training sequence, N = 300")
    assert criterion(check(report), "DP accountant δ").status == FAIL  # the default policy holds it too
    at_one_over_n = trained(audited[0].to_dict(), delta=1 / 300, group_delta=1 / 300)
    assert criterion(check(at_one_over_n, SMALL), "DP accountant δ").status == FAIL  # below, not at
    below = trained(audited[0].to_dict(), delta=0.002, group_delta=0.002)
    assert check(below, SMALL).outcome == PASS
    assert check(below, dataclasses.replace(SMALL, max_delta_times_n=0.1)).outcome == FAIL  # δ < 1/(10 N) asked
    with pytest.raises(ValueError, match="max_delta_times_n=2 must be in"):
        GatePolicy(max_delta_times_n=2)


def test_a_repeated_texts_group_delta_not_below_one_over_n_fails(audited):
    """Canaries × 2 at ε = 8: group ε = 16 passes max_epsilon 20, but at group δ = 1 nothing is guaranteed."""
    report = trained(audited[0].to_dict(), epsilon=8.0, max_multiplicity=2, group_epsilon=16.0, group_delta=1.0)
    verdict = check(report, dataclasses.replace(SMALL, max_epsilon=20.0))
    delta = criterion(verdict, "DP accountant δ")
    assert verdict.outcome == FAIL and delta.status == FAIL and delta.value == 1.0
    assert "group δ of a text present 2 times" in delta.evidence
    small_group = trained(audited[0].to_dict(), max_multiplicity=2, group_epsilon=16.0, group_delta=1e-3)
    assert check(small_group, dataclasses.replace(SMALL, max_epsilon=20.0)).outcome == PASS


def test_a_void_delta_is_warned_about_in_report_json_report_md_and_the_model_card(audited, tmp_path):
    record = TrainingRecord(method="DP-LoRA", epochs=3, n_training_texts=300,
                            dp=DPRecord.from_summary({**DP, "delta": 0.05, "group_delta": 0.05}))
    report = dataclasses.replace(audited[0], training=record)
    report.save(tmp_path)
    write_model_card_section(tmp_path / "model", report, check(report, SMALL))
    warning = "DP GUARANTEE VOID: δ = 0.05 is not below 1/N = 0.00333 for the N = 300 training sequences"
    assert any(w.startswith(warning) for w in json.loads((tmp_path / "report.json").read_text())["warnings"])
    assert warning in (tmp_path / "report.md").read_text()
    card = (tmp_path / "model" / "README.md").read_text()
    assert warning in card and "Release gate: FAIL** — DP accountant δ: fail (0.05, limit < 0.003333)" in card


def _save_with(folder, report: dict, dp: object = None, dp_text: str | None = None) -> None:
    """report.json (with the saved generation, so report.md and roc.png still match it), and dp.json if given."""
    (folder / "report.json").write_text(json.dumps(report))
    if dp is not None or dp_text is not None:
        (folder / "dp.json").write_text(dp_text if dp_text is not None else json.dumps(dp))


def _without(report: dict, *path: str | int) -> dict:
    """A copy of `report` with the field at `path` removed."""
    report = copy.deepcopy(report)
    parent = report
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return report


def _with(report: dict, value: object, *path: str | int) -> dict:
    """A copy of `report` with the field at `path` set to `value`."""
    report = copy.deepcopy(report)
    parent = report
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return report


MALFORMED = {  # name: (report.json given the saved one, dp.json as an object or text, what the message names)
    "report.json a list": (lambda r: [r], None, "report.json holds a JSON list, not an audit report's object"),
    "split.n_members a string": (lambda r: _with(r, "60", "split", "n_members"), None,
                                 "report.json: field split.n_members is '60', not a whole number"),
    "blind baseline ci_low missing": (lambda r: _without(r, "blind_baseline", "auc", "ci_low"), None,
                                      "report.json: field blind_baseline.auc.ci_low is missing"),
    "an attack's ci_low missing": (lambda r: _without(r, "attacks", "loss", "auc", "ci_low"), None,
                                   "report.json: field attacks.loss.auc.ci_low is missing"),
    "max_fpr missing": (lambda r: _without(r, "attacks", "zlib", "tpr_at_fpr", 0, "max_fpr"), None,
                        "report.json: field attacks.zlib.tpr_at_fpr[0].max_fpr is missing"),
    "an attack null": (lambda r: _with(r, None, "attacks", "loss"), None,
                       "report.json: field attacks.loss is missing (or null)"),
    "dp.json epsilon a string": (lambda r: r, {**DP, "epsilon": "7.9"},
                                 "dp.json: field epsilon is '7.9', not a number"),
    "dp.json a list": (lambda r: r, [DP], "dp.json: the whole file is [{"),
    "dp.json truncated": (lambda r: r, json.dumps(DP)[:40], "dp.json is not valid JSON"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_report_or_dp_json_cannot_be_judged_and_names_the_file_and_field(audited, tmp_path, capsys, case):
    change, dp, named = MALFORMED[case]
    folder = tmp_path / "run"
    audited[0].save(folder)
    saved = json.loads((folder / "report.json").read_text())
    _save_with(folder, change(saved), *((None, dp) if isinstance(dp, str) else (dp,)))
    policy = save_yaml(dataclasses.replace(SMALL, max_epsilon=8.0), tmp_path / "policy.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(folder), "--policy", str(policy)])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and error.startswith("privft gate: cannot judge: ") and str(folder) in error
    assert named in error


def _fields(value: object, path: tuple = ()):
    """Every field path of a report dict, short lists' items included (per-text arrays are one field)."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _fields(inner, (*path, key))
    elif isinstance(value, list) and len(value) <= 10:
        for index, inner in enumerate(value):
            yield from _fields(inner, (*path, index))


def test_no_field_of_any_type_makes_the_gate_crash(audited):
    """Each field the gate may read, removed or of another type: a verdict, or an error naming it, never a crash."""
    report = trained(audited[0].to_dict(), max_multiplicity=2, group_epsilon=16.0, group_delta=1e-3)
    report["canary_exposure"] = {"n_canaries": 4, "copies": 2, "n_alternatives": 100, "mean_exposure": 1.5,
                                 "max_exposure": 3.2, "max_measurable": 6.6}
    report["extraction"]["canaries"] = [{"secret": "401925", "greedy": False, "beam": True}]
    report["epsilon_audit"] = {"epsilon_lower_bound": 1.5, "accountant_epsilon": 8.0, "n_canaries": 100,
                               "n_guesses": 50, "n_correct": 40, "copies": 2}
    asks = dataclasses.replace(SMALL, max_canary_exposure=6.0, max_extraction_rate=0.5,
                               max_sampled_extraction={1: 0.5, 100: 0.5}, max_canaries_extracted=0, max_epsilon=20.0,
                               require_epsilon_lower_bound=True)
    for path in _fields({k: v for k, v in report.items() if k not in ("per_text", "config", "versions")}):
        field = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")
        for value in ("x", None, [], {}, -1, True):
            try:
                check(_with(report, value, *path), asks)
            except MalformedReportError as error:
                assert f"field {field}" in str(error)
        try:
            check(_without(report, *path), asks)
        except MalformedReportError as error:
            assert f"field {field}" in str(error)


def test_extraction_evidence_says_no_text_is_long_enough(audited):
    verdict = check(audited[1], dataclasses.replace(SMALL, max_extraction_rate=0.5, max_sampled_extraction={100: 0.5}))
    greedy = criterion(verdict, "greedy extraction, members (upper 95 % bound)")
    sampled = criterion(verdict, "sampled extraction in 100 samples, members (mean chance)")
    assert verdict.outcome == CANNOT_JUDGE and greedy.status == sampled.status == NOT_MEASURED
    assert greedy.evidence.startswith("greedy extraction ran, but none of the 60 members has the 200 + 100 tokens it "
                                      "reads") and "greedy_prefix_length" in greedy.evidence
    assert sampled.evidence.startswith("probabilistic extraction ran, but none of the 60 members has the 200 + 100")
    for evidence in (greedy.evidence, sampled.evidence):
        assert "set audit.extraction" not in evidence and "is not among" not in evidence


def test_a_policy_that_gives_a_key_twice_is_refused(audited, tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_epsilon: 4\nmin_members: 60\nmax_epsilon: 20\n")
    with pytest.raises(ConfigError, match=r"found the key 'max_epsilon' twice \(first on line 1\)"):
        load_yaml(GatePolicy, policy)
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(audited[1]), "--policy", str(policy)])
    assert exit_.value.code == 2 and "max_epsilon' twice" in capsys.readouterr().err


def test_a_model_card_folder_that_does_not_exist_is_refused_not_created(audited, tmp_path, capsys):
    policy = save_yaml(SMALL, tmp_path / "policy.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(audited[1]), "--policy", str(policy), "--model-card", str(tmp_path / "modle")])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--model-card {tmp_path / 'modle'}: not an existing folder" in error
    assert not (tmp_path / "modle").exists()


def test_a_file_other_than_report_json_is_refused_not_read_as_its_folders_report(audited, tmp_path, capsys):
    folder = tmp_path / "rep"
    audited[0].save(folder)
    (folder / "split.json").write_text("{}")
    policy = save_yaml(SMALL, tmp_path / "policy.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(folder / "split.json"), "--policy", str(policy)])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{folder / 'split.json'} is not a report.json: expected the report.json" in error
    assert check(folder / "report.json", SMALL).outcome == PASS  # the report itself, or its folder, is judged


def test_a_gate_ceiling_the_audit_does_not_measure_is_refused_when_the_config_is_built(tmp_path):
    with pytest.raises(ValueError, match=r"gate.max_tpr_at_fpr limits FPR ceiling\(s\) \[0.05\] that "
                                         r"audit.max_fprs = \[0.01, 0.001\] does not measure"):
        RunConfig(gate=GatePolicy(max_tpr_at_fpr={0.05: 0.5, 0.01: 0.1}), audit=AuditConfig(max_fprs=(0.01, 0.001)))
    (tmp_path / "run.yaml").write_text("audit: {max_fprs: [0.01]}\ngate: {}\n")  # the default policy asks 0.001 too
    with pytest.raises(ValueError, match=r"\[0.001\] that audit.max_fprs = \[0.01\]"):
        load_yaml(RunConfig, tmp_path / "run.yaml")
    assert RunConfig(gate=GatePolicy(max_tpr_at_fpr={1e-2: 0.1}), audit=AuditConfig(max_fprs=(0.01,))).gate
