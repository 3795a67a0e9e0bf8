"""The release gate: verdicts and exit codes on real audit reports, the policy in YAML, the record of training."""

from __future__ import annotations

import copy
import json
import os
import signal
import sys

import pytest

from privft.audit import AuditConfig, run_audit
from privft.callbacks.audit import CARD_START, GATE_START, write_gate_verdict, write_model_card_section
from privft.cli import main
from privft.config import ConfigError, load_yaml, save_yaml
from privft.data import MembershipSplit
from privft.extraction import ExtractionSettings
from privft.gate import CANNOT_JUDGE, FAIL, NOT_MEASURED, PASS, GatePolicy, check, policy_yaml
from privft.metrics import clopper_pearson
from privft.models import build_tiny_llama
from privft.pipeline import DataSettings, DPSettings, RunConfig, run_training
from privft.training import FinetuneSettings, LoraSettings

# Limits this small audit (100 members, 200 non-members, an untrained model) can meet.
SMALL = GatePolicy(min_members=100, min_non_members=200, max_blind_baseline_auc=0.6, max_tpr_at_fpr={0.01: 0.5},
                   max_canary_exposure=None)


@pytest.fixture(scope="module")
def audited(tokenizer, local_texts, tmp_path_factory):
    """A real audit of an untrained tiny model, saved as privft saves it: (report, folder)."""
    texts = [t[:200] for t in local_texts if len(t) >= 120]
    split = MembershipSplit.random(texts, n_members=100, n_non_members=200, seed=0, source="pydoc")
    extraction = ExtractionSettings(prefix_lengths=(8, 16), suffix_length=8, greedy_prefix_length=8, n_samples=(1, 100),
                                    greedy_max_texts=20)
    report = run_audit(build_tiny_llama(tokenizer), tokenizer, split, config=AuditConfig(
        attacks=("loss", "zlib"), max_fprs=(0.01, 0.001), n_bootstrap=200, extraction=extraction))
    folder = tmp_path_factory.mktemp("audit")
    report.save(folder)
    return report, folder


def statuses(verdict) -> dict[str, str]:
    return {c.name: c.status for c in verdict.criteria}


def test_a_report_within_every_limit_passes(audited):
    verdict = check(audited[1], SMALL)
    assert verdict.outcome == PASS and verdict.exit_code == 0
    assert set(statuses(verdict).values()) == {PASS}


def test_tpr_is_judged_on_the_upper_clopper_pearson_bound_not_the_point(audited):
    report = audited[0].to_dict()
    strongest = max((m["tpr_at_fpr"][0] for m in report["attacks"].values()),
                    key=lambda t: clopper_pearson(t["true_positives"], t["n_members"])[1])
    upper = clopper_pearson(strongest["true_positives"], strongest["n_members"])[1]
    between = (strongest["tpr"] + upper) / 2  # the point estimate meets it, the upper bound does not
    verdict = check(report, GatePolicy(**{**vars(SMALL), "max_tpr_at_fpr": {0.01: between}}))
    assert verdict.outcome == FAIL and verdict.exit_code == 1
    [tpr] = [c for c in verdict.criteria if c.name.startswith("TPR")]
    assert tpr.value == pytest.approx(upper) and tpr.status == FAIL
    assert f"{strongest['true_positives']}/100 members" in tpr.evidence


def test_an_audit_below_the_minimum_counts_cannot_pass(audited):
    lenient = GatePolicy(**{**vars(SMALL), "min_members": 1000})
    verdict = check(audited[1], lenient)
    assert verdict.outcome == CANNOT_JUDGE and verdict.exit_code == 2
    assert statuses(verdict)["members audited"] == FAIL
    assert "members audited" in verdict.headline()
    # Even a failing limit does not turn an unjudgeable audit into a verdict on the model.
    failing = GatePolicy(**{**vars(lenient), "max_tpr_at_fpr": {0.01: 0.0}})
    assert check(audited[1], failing).outcome == CANNOT_JUDGE


def test_a_cannot_judge_shows_the_strongest_attacks_auc_and_tpr(audited):
    report = copy.deepcopy(audited[0].to_dict())
    report["attacks"]["zlib"]["auc"].update(auc=0.999, ci_low=0.995, ci_high=1.0)  # obvious leakage, too few texts
    report["attacks"]["zlib"]["tpr_at_fpr"][0].update(tpr=0.95, true_positives=95)
    verdict = check(report)  # the default policy asks for 1,000 members
    assert verdict.outcome == CANNOT_JUDGE
    line = ("Measured, not judged: the strongest attack, zlib, reaches AUC 0.999 [0.995, 1.000]; TPR 0.950 "
            "(95/100 members) at FPR ≤ 1 %; TPR not estimable at FPR ≤ 0.1 %.")
    markdown = verdict.to_markdown()
    assert markdown.index(verdict.headline()) < markdown.index(line) < markdown.index("| Criterion")
    assert verdict.to_dict()["strongest_attack"] == line
    assert line not in check(report, SMALL).to_markdown()  # judged: the criteria rows carry the numbers


def test_a_split_given_as_two_files_has_no_seed_to_print(audited):
    report = copy.deepcopy(audited[0])
    report.split = {**report.split, "source": "members.jsonl vs non.jsonl", "seed": None}
    expected = "split: members.jsonl vs non.jsonl, members and non-members as given"
    assert expected in report.to_markdown() and "seed None" not in report.to_markdown()
    assert expected in check(report).criteria[0].evidence


def _closed_pipe(line_buffered: bool):
    """A stdout whose reader has gone, as after `privft … | head` has read its lines."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return os.fdopen(write_end, "w", buffering=1 if line_buffered else -1)


@pytest.mark.parametrize("line_buffered", [False, True])  # True: as under PYTHONUNBUFFERED, each line written at once
def test_gate_piped_into_a_reader_that_stops_keeps_its_verdict_and_prints_no_broken_pipe(audited, monkeypatch,
                                                                                         tmp_path, line_buffered):
    folder = tmp_path / "run"
    audited[0].save(folder)
    write_model_card_section(folder / "model", audited[0])
    with _closed_pipe(line_buffered) as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        with pytest.raises(SystemExit) as unjudged:
            main(["gate", str(folder)])
        assert unjudged.value.code == 2  # the verdict's code, not a BrokenPipeError
        print("more output", file=closed, flush=True)  # later writes, Python's own at exit among them, are dropped
    assert "Release gate: CANNOT JUDGE" in (folder / "model" / "README.md").read_text()  # the card is still written


def test_other_commands_into_a_closed_pipe_exit_as_sigpipe_would_without_a_traceback(monkeypatch, tmp_path):
    with _closed_pipe(line_buffered=True) as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        with pytest.raises(SystemExit) as stopped:
            main(["gate", "--write-default", str(tmp_path / "policy.yaml")])  # its one line fails as it is written
        assert stopped.value.code == 128 + signal.SIGPIPE
        print("more output", file=closed, flush=True)
    assert (tmp_path / "policy.yaml").exists()


def test_a_ceiling_the_audit_cannot_resolve_is_not_measured(audited):
    verdict = check(audited[1], GatePolicy(**{**vars(SMALL), "max_tpr_at_fpr": {0.01: 0.5, 0.001: 0.5}}))
    assert verdict.outcome == CANNOT_JUDGE
    assert statuses(verdict)["TPR @ FPR ≤ 0.1 %, strongest attack (upper 95 % bound)"] == NOT_MEASURED
    assert "need ≥ 1,000" in verdict.criteria[-1].evidence


def test_a_blind_baseline_above_chance_makes_the_gate_refuse(audited):
    report = copy.deepcopy(audited[0].to_dict())
    report["blind_baseline"]["auc"]["auc"] = 0.9
    assert check(report, SMALL).outcome == CANNOT_JUDGE
    report["blind_baseline"]["auc"]["auc"], report["distribution_shift"] = 0.58, True
    verdict = check(report, SMALL)
    assert verdict.outcome == CANNOT_JUDGE and "DISTRIBUTION SHIFT" in verdict.criteria[2].evidence


def test_extraction_limits_are_judged_on_the_audits_own_extraction(audited):
    asks = GatePolicy(**{**vars(SMALL), "max_extraction_rate": 0.5, "max_sampled_extraction": {100: 1e-6}})
    verdict = check(audited[1], asks)
    assert verdict.outcome == PASS  # an untrained model reproduces no suffix
    greedy = statuses(verdict)["greedy extraction, members (upper 95 % bound)"]
    assert greedy == PASS and "0/20 decoded members" in verdict.criteria[-2].evidence
    unasked_n = check(audited[1], GatePolicy(**{**vars(asks), "max_sampled_extraction": {10: 0.5}}))
    assert unasked_n.outcome == CANNOT_JUDGE and "n = 10 is not among" in unasked_n.criteria[-1].evidence
    strict = check(audited[1], GatePolicy(**{**vars(asks), "max_extraction_rate": 0.01}))
    assert strict.outcome == FAIL  # 0/20 decoded: the upper bound is 0.17, too few texts to show 1 %


def test_canary_exposure_extraction_and_epsilon_are_read_when_present(audited):
    report = copy.deepcopy(audited[0].to_dict())
    asks = GatePolicy(**{**vars(SMALL), "max_canary_exposure": 6.0, "max_canaries_extracted": 0, "max_epsilon": 4.0})
    verdict = check(report, asks)
    assert verdict.outcome == CANNOT_JUDGE  # asked, not measured
    assert [c.status for c in verdict.criteria[-3:]] == [NOT_MEASURED] * 3
    report["canary_exposure"] = {"n_canaries": 10, "copies": 5, "n_alternatives": 1000, "mean_exposure": 1.5,
                                 "max_exposure": 3.2, "max_measurable": 9.97}
    report["extraction"] = {"canaries": [{"secret": "401925", "greedy": False, "beam": False}] * 10}
    report["training"] = {"method": "LoRA", "dp": None}  # the record of a run without DP
    verdict = check(report, asks)
    assert statuses(verdict)["canary exposure, highest canary (bits)"] == PASS
    assert statuses(verdict)["canaries extracted (greedy or beam decoding)"] == PASS
    assert statuses(verdict)["DP accountant ε"] == FAIL and verdict.outcome == FAIL  # no DP: no guarantee
    report["training"]["dp"] = {"epsilon": 3.0, "delta": 1e-5, "accountant": "prv", "max_multiplicity": 1,
                                "n_examples": 300}  # N: δ is held below 1/N
    assert check(report, asks).outcome == PASS
    report["epsilon_audit"] = {"epsilon_lower_bound": 3.5, "accountant_epsilon": 3.0, "n_canaries": 1000,
                               "n_guesses": 500, "n_correct": 490}
    verdict = check(report, asks)  # a bound above the accountant's ε fails whatever the policy asks
    assert verdict.outcome == FAIL and statuses(verdict)["empirical ε lower bound (one run) ≤ accountant ε"] == FAIL
    assert "ABOVE THE ACCOUNTANT'S ε" in verdict.criteria[-1].evidence


def test_the_one_run_check_reads_the_tighter_analysis_of_one_copy_canaries(audited):
    report = json.loads(json.dumps(audited[0].to_dict()))
    report["training"] = {"method": "LoRA", "dp": {"epsilon": 3.0, "delta": 1e-5, "accountant": "prv",
                                                   "max_multiplicity": 1, "n_examples": 1300}}
    report["epsilon_audit"] = {"epsilon_lower_bound": 1.2, "n_canaries": 1000, "n_guesses": 100, "n_correct": 95,
                               "copies": 1, "fdp": {"epsilon_lower_bound": 3.4}}
    name = "empirical ε lower bound (one run) ≤ accountant ε"
    verdict = check(report, GatePolicy(**{**vars(SMALL), "max_epsilon": 8.0}))
    criterion = next(c for c in verdict.criteria if c.name == name)
    assert (criterion.value, criterion.status, verdict.outcome) == (3.4, FAIL, FAIL)  # Steinke's 1.2 alone would pass
    assert "f-DP" in criterion.evidence and "1.20" in criterion.evidence
    report["epsilon_audit"]["copies"] = 4  # the f-DP bound is read at the per-sequence δ: not for a group
    criterion = next(c for c in check(report, GatePolicy(**{**vars(SMALL), "max_epsilon": 8.0})).criteria
                     if c.name == name)
    assert (criterion.value, criterion.status) == (1.2, PASS)
    report["gradient_epsilon_audit"] = {**report.pop("epsilon_audit"), "copies": 1, "accountant_epsilon": 3.0}
    verdict = check(report, GatePolicy(**{**vars(SMALL), "max_epsilon": 8.0}))
    white_box = next(c for c in verdict.criteria if c.name.startswith("white-box"))
    assert (white_box.value, white_box.status, verdict.outcome) == (3.4, FAIL, FAIL)
    assert "ABOVE THE ACCOUNTANT'S ε" in white_box.evidence


def test_dp_json_beside_the_report_gives_the_accountant_epsilon(audited, tmp_path):
    folder = tmp_path / "run"
    audited[0].save(folder)
    asks = GatePolicy(**{**vars(SMALL), "max_epsilon": 4.0})
    assert check(folder, asks).outcome == CANNOT_JUDGE  # no dp.json, no training record: unknown
    (folder / "dp.json").write_text(json.dumps({"epsilon": 7.9, "delta": 1e-5, "accountant": "prv"}))
    verdict = check(folder, asks)
    assert verdict.outcome == FAIL and verdict.criteria[-1].value == 7.9 and "dp.json" in verdict.source


def test_cli_exit_codes_and_the_verdict_in_the_model_card(audited, tmp_path, capsys):
    report, _ = audited
    folder = tmp_path / "run"
    report.save(folder)
    write_model_card_section(folder / "model", report)
    policy = save_yaml(SMALL, tmp_path / "policy.yaml")
    main(["gate", str(folder / "report.json"), "--policy", str(policy)])  # passes: returns normally
    out = capsys.readouterr().out
    assert "**Release gate: PASS**" in out and "| members audited | 100 | ≥ 100 | pass |" in out
    card = (folder / "model" / "README.md").read_text()
    assert card.index(CARD_START) < card.index("Release gate: PASS") < card.index("Audited ")
    save_yaml(GatePolicy(**{**vars(SMALL), "max_tpr_at_fpr": {0.01: 0.0}}), policy)
    with pytest.raises(SystemExit) as failed:
        main(["gate", str(folder), "--policy", str(policy)])
    assert failed.value.code == 1
    card = (folder / "model" / "README.md").read_text()
    assert card.count(GATE_START) == 1 and "Release gate: FAIL" in card and "PASS" not in card
    with pytest.raises(SystemExit) as unjudged:
        main(["gate", str(folder)])  # the default policy asks for 1,000 members
    assert unjudged.value.code == 2
    with pytest.raises(SystemExit) as unreadable:
        main(["gate", str(tmp_path / "missing"), "--policy", str(policy)])
    assert unreadable.value.code == 2 and "No audit report" in capsys.readouterr().err


def test_a_verdict_goes_into_a_card_without_a_privacy_section(audited, tmp_path):
    (tmp_path / "README.md").write_text("# My model\n")
    write_gate_verdict(tmp_path, check(audited[0], SMALL))
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("# My model") and card.count(CARD_START) == 1 and "Release gate: PASS" in card


def test_the_policy_round_trips_through_yaml(tmp_path, capsys):
    import privft

    assert privft.GatePolicy is GatePolicy  # exported from the package
    main(["gate", "--write-default", str(tmp_path / "policy.yaml")])
    written = (tmp_path / "policy.yaml").read_text()
    assert written == policy_yaml(GatePolicy()) and "# Fewest members the audit must have scored" in written
    assert load_yaml(GatePolicy, tmp_path / "policy.yaml") == GatePolicy()
    custom = GatePolicy(min_members=500, max_tpr_at_fpr={0.01: 0.02, 1e-4: 0.001}, max_sampled_extraction={100: 0.01},
                        max_epsilon=8.0, require_epsilon_lower_bound=True)
    (tmp_path / "custom.yaml").write_text(policy_yaml(custom))
    assert load_yaml(GatePolicy, tmp_path / "custom.yaml") == custom
    assert load_yaml(GatePolicy, save_yaml(custom, tmp_path / "plain.yaml")) == custom
    with pytest.raises(SystemExit, match="policy.yaml already exists"):
        main(["gate", "--write-default", str(tmp_path / "policy.yaml")])


def test_bad_limits_are_refused_naming_the_key(tmp_path):
    (tmp_path / "bad.yaml").write_text("max_tpr_at_fpr:\n  2.0: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.max_tpr_at_fpr=\{2.0: 0.1\} must map FPR ceilings"):
        load_yaml(GatePolicy, tmp_path / "bad.yaml")
    (tmp_path / "small.yaml").write_text("min_members: 1\n")
    with pytest.raises(ConfigError, match="min_members=1 must be at least 2"):
        load_yaml(GatePolicy, tmp_path / "small.yaml")
    (tmp_path / "run.yaml").write_text("gate: {}\n")
    assert load_yaml(RunConfig, tmp_path / "run.yaml").gate == GatePolicy()


def test_a_dp_lora_run_states_epsilon_and_ends_with_its_verdict(tokenizer, write_texts, tmp_path):
    build_tiny_llama(tokenizer).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    data_file = write_texts(tmp_path, 120, min_chars=150, max_chars=250)
    gate = GatePolicy(min_members=30, min_non_members=30, max_blind_baseline_auc=1.0, max_tpr_at_fpr={0.05: 1.0},
                      max_canary_exposure=None, max_epsilon=8.0)
    config = RunConfig(
        model=str(tmp_path / "base"),
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=30, n_non_members=30,
                          n_validation=10),
        training=FinetuneSettings(epochs=2, batch_size=8, max_length=128, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        audit=AuditConfig(attacks=("loss", "ref_ratio"), max_fprs=(0.05,), n_bootstrap=100),
        dp=DPSettings(target_epsilon=8.0), gate=gate)
    result = run_training(config)
    run = tmp_path / "run"
    epsilon = json.loads((run / "dp.json").read_text())["epsilon"]
    assert json.loads((run / "report.json").read_text())["training"]["dp"]["epsilon"] == epsilon
    for text in ((run / "report.md").read_text(), (run / "model" / "README.md").read_text()):
        assert f"ε = {epsilon:.3g} (target 8)" in text and "DP-LoRA rank 4 (α 8) on q_proj, v_proj; 2 epochs" in text
        assert "σ = " in text and "q = " in text and "T = " in text and "C = 1" in text and "PRV accountant" in text
    card = (run / "model" / "README.md").read_text()
    outcome = result.verdict.outcome
    assert card.index(f"Release gate: {outcome.upper()}") < card.index("Trained and defended")
    assert json.loads((run / "gate.json").read_text())["outcome"] == outcome
    [accountant] = [c for c in result.verdict.criteria if c.name == "DP accountant ε"]
    assert accountant.value == pytest.approx(epsilon) and accountant.status == PASS
