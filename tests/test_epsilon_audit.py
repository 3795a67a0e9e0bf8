"""The one-run ε lower bound: the theorem's numbers, guesses from scores, the canary plan's draw, and real runs."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from transformers import TrainerCallback

from privft import epsilon_lower_bound
from privft.attacks.exposure import CanaryExposure
from privft.audit import AuditConfig
from privft.callbacks import CanaryCallback
from privft.data.canaries import CanaryError, CanaryPlan
from privft.epsilon_audit import audit_one_run, one_run_guesses, one_run_p_value
from privft.models import build_tiny_llama
from privft.pipeline import CanarySettings, DataSettings, DPSettings, RunConfig, run_training
from privft.report import beyond_membership_warnings, epsilon_audit_line
from privft.training import FinetuneSettings, LoraSettings


def test_all_correct_guesses_grow_the_bound_and_reproduce_the_papers_ceilings():
    bounds = [epsilon_lower_bound(r, r, r, delta=0.0) for r in (10, 50, 100, 500, 1000)]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds)
    assert round(epsilon_lower_bound(100, 100, 100, delta=0.0), 2) == 3.49
    assert round(epsilon_lower_bound(1000, 1000, 1000, delta=0.0), 2) == 5.81


def test_the_bound_is_where_the_p_value_crosses_one_minus_the_confidence():
    bound = epsilon_lower_bound(1000, 200, 180, delta=1e-5)
    assert one_run_p_value(1000, 200, 180, bound, 1e-5) == pytest.approx(0.05, abs=1e-6)
    assert epsilon_lower_bound(1000, 200, 180, delta=1e-5) < epsilon_lower_bound(1000, 200, 180, delta=0.0)
    assert epsilon_lower_bound(1000, 200, 180, delta=0.0, confidence=0.99) < bound


def test_chance_guessing_gives_about_zero():
    assert epsilon_lower_bound(1000, 1000, 500, delta=1e-5) == 0.0
    rng = np.random.default_rng(0)
    bounds = [audit_one_run(rng.normal(size=1000), rng.random(1000) < 0.5, delta=1e-5).epsilon_lower_bound
              for _ in range(20)]
    assert max(bounds) < 0.3 and sum(b == 0 for b in bounds) >= 15


def test_guesses_take_the_top_as_in_and_the_bottom_as_out():
    scores = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    included = [True, False, True, False, False, True]
    assert one_run_guesses(scores, included, 2, 2) == (4, 2)  # "in" on 5 ✓ and 4 ✗; "out" on 1 ✓ and 0 ✗
    assert one_run_guesses(scores, included, 1, 0) == (1, 1)
    assert one_run_guesses(scores, included, 0, 3) == (3, 2)


def test_fixed_guess_counts_use_no_bonferroni_and_the_grid_says_so():
    scores = np.r_[np.arange(50, 100), np.arange(50)]
    included = np.r_[np.ones(50, bool), np.zeros(50, bool)]  # a perfect attack
    fixed = audit_one_run(scores, included, delta=0.0, k_plus=50, k_minus=50)
    assert fixed.n_strategies == 1 and (fixed.n_guesses, fixed.n_correct) == (100, 100)
    assert fixed.epsilon_lower_bound == pytest.approx(3.49, abs=5e-3) == fixed.ceiling
    grid = audit_one_run(scores, included, delta=0.0)
    assert grid.n_strategies == 4 and "Bonferroni" in grid.strategy
    assert grid.epsilon_lower_bound < fixed.epsilon_lower_bound  # the price of trying four guess counts


@pytest.mark.parametrize(("call", "message"), [
    (lambda: epsilon_lower_bound(10, 20, 5, 0.0), "n_guesses ≤ n_canaries"),
    (lambda: epsilon_lower_bound(10, 5, 6, 0.0), "n_correct ≤ n_guesses"),
    (lambda: epsilon_lower_bound(10, 5, 5, 0.0, confidence=1.0), "confidence"),
    (lambda: epsilon_lower_bound(10, 5, 5, 2.0), "delta"),
    (lambda: one_run_guesses([1.0, 2.0], [True], 1, 1), "one length"),
    (lambda: one_run_guesses([1.0, math.nan], [True, False], 1, 1), "not finite"),
    (lambda: one_run_guesses([1.0, 2.0], [True, False], 2, 1), "at most the 2 canaries"),
    (lambda: audit_one_run([1.0, 2.0], [True, False], 0.0, k_plus=1), "both k_plus and k_minus"),
])
def test_bad_input_is_refused_with_the_fix(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_one_run_plan_inserts_a_seeded_half_and_records_it():
    plan = CanaryPlan(n_canaries=200, copies=2, n_alternatives=10, seed=4, one_run=True)
    included = plan.included()
    assert included == CanaryPlan(n_canaries=200, copies=2, n_alternatives=10, seed=4, one_run=True).included()
    assert 70 < sum(included) < 130
    texts = [f"original text number {i}" for i in range(500)]
    mixed = plan.insert(texts)
    for canary, inside in zip(plan.canary_texts(), included):
        assert mixed.count(canary) == (2 if inside else 0)
    assert CanaryPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    old_record = {k: v for k, v in CanaryPlan(n_canaries=3).to_dict().items() if k != "one_run"}
    assert CanaryPlan.from_dict(old_record) == CanaryPlan(n_canaries=3)  # written before one_run existed
    assert CanaryPlan(n_canaries=3).included() == (True, True, True)
    with pytest.raises(CanaryError, match="at least 10 canaries"):
        CanaryPlan(n_canaries=4, one_run=True)


def test_exposure_is_summarised_over_the_inserted_canaries_only():
    plan = CanaryPlan(n_canaries=10, n_alternatives=10, seed=0, one_run=True)
    callback = CanaryCallback(plan)
    callback.results = [CanaryExposure(s, 1 if inside else 11, 10, 3.46 if inside else 0.0, 0.0)
                        for s, inside in zip(plan.secrets, plan.included())]
    summary = callback.summary()
    assert summary["n_canaries"] == sum(plan.included()) and summary["mean_exposure"] == pytest.approx(3.46)


# Real runs through `privft train`'s pipeline on the tiny Llama: ~70 s on one CPU thread in all.

@pytest.fixture(scope="module")
def run_inputs(tokenizer, write_texts, tmp_path_factory):
    """A saved tiny base model and a file of short texts, shared by the runs below."""
    folder = tmp_path_factory.mktemp("one-run")
    build_tiny_llama(tokenizer).save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    write_texts(folder, 600, min_chars=120, max_chars=120)
    return folder


class _KeepLog(TrainerCallback):
    """Keeps the Trainer's log history as it stands after privft's own callbacks ran at the end of training."""

    def on_train_end(self, args, state, control, **kwargs):
        self.log_history = list(state.log_history)


def _one_run_config(folder, name: str, *, n_members: int, copies: int, seed: int, training: FinetuneSettings,
                    dp: DPSettings | None = None) -> RunConfig:
    return RunConfig(
        model=str(folder / "base"),
        data=DataSettings(corpus=None, path=str(folder / "texts.json"), max_words=None, n_members=n_members,
                          n_non_members=40, n_validation=10, seed=seed),
        training=dataclasses.replace(training, output_dir=str(folder / name)),
        canaries=CanarySettings(n_canaries=64, copies=copies, n_alternatives=20, one_run=True),
        audit=AuditConfig(attacks=("loss",), n_bootstrap=10), dp=dp or DPSettings())


def test_dp_lora_at_epsilon_one_never_shows_more_and_an_undefended_run_shows_much_more(run_inputs, one_thread):
    lora = FinetuneSettings(epochs=2, batch_size=8, learning_rate=1e-2, max_length=64,
                            lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj", "down_proj")))
    private = []
    for seed in range(3):  # a new split, canary draw and inclusion draw each time; the DP noise is OS entropy
        result = run_training(_one_run_config(run_inputs, f"dp-{seed}", n_members=64, copies=1, seed=seed,
                                              training=lora, dp=DPSettings(target_epsilon=1.0)))
        audit = result.report.epsilon_audit
        assert audit["accountant_epsilon"] <= 1.0 and audit["delta"] == result.privacy["delta"]
        assert audit["n_canaries"] == 64 and 0 < audit["n_included"] < 64
        assert audit["epsilon_lower_bound"] <= 1.0
        private.append(audit["epsilon_lower_bound"])

    full = FinetuneSettings(epochs=8, batch_size=8, learning_rate=5e-3, max_length=64, lora=None)
    keep_log = _KeepLog()
    result = run_training(_one_run_config(run_inputs, "undefended", n_members=300, copies=8, seed=0, training=full),
                          extra_callbacks=[keep_log])
    audit = result.report.epsilon_audit
    assert audit["accountant_epsilon"] is None and audit["delta"] == 0.0
    assert audit["score"].startswith("reference ratio")  # full fine-tuning: against a fresh copy of the base
    assert audit["epsilon_lower_bound"] > 1.5 and audit["epsilon_lower_bound"] > max(private) + 1.0

    run = result.output_dir
    manifest = json.loads((run / "manifest.json").read_text())
    assert sum(manifest["canaries_included"]) == audit["n_included"] and manifest["canaries"]["one_run"] is True
    assert json.loads((run / "report.json").read_text())["epsilon_audit"] == audit
    assert f"ε ≥ {audit['epsilon_lower_bound']:.2f}" in (run / "report.md").read_text()
    assert "One-run ε audit" in (run / "model" / "README.md").read_text()
    logged = keep_log.log_history[-1]
    assert logged["privacy/epsilon_lower_bound"] == audit["epsilon_lower_bound"]
    assert [logged[f"privacy/epsilon_lower_bound/{count}"] for count in ("n_canaries", "n_guesses", "n_correct")] == [
        audit["n_canaries"], audit["n_guesses"], audit["n_correct"]]


def _entry(bound: float, accountant: float | None) -> dict:
    audit = audit_one_run(np.arange(100.0), np.r_[np.zeros(50, bool), np.ones(50, bool)], delta=1e-5)
    return {**audit.to_dict(), "epsilon_lower_bound": bound, "score": "secret log-likelihood (loss)", "copies": 1,
            "accountant_epsilon": accountant, "accountant_delta": 1e-5 if accountant else None,
            "accountant_epsilon_per_sequence": accountant}


def test_the_report_sets_the_bound_beside_the_accountant_and_warns_when_it_refutes_it():
    entry = _entry(0.4, 1.0)
    line = epsilon_audit_line(entry)
    assert "ε ≥ 0.40" in line and f"{entry['n_correct']}/{entry['n_guesses']} guesses correct" in line
    assert "DP accountant: ε = 1" in line and "50 inserted × 1 copies, 50 controls" in line
    assert "lower bound on leakage only" in epsilon_audit_line(_entry(2.0, None))
    refuted = beyond_membership_warnings(SimpleNamespace(epsilon_audit=_entry(2.5, 1.0), dataset_inference=None))
    assert len(refuted) == 1 and refuted[0].startswith("DP GUARANTEE REFUTED") and "ε ≥ 2.50" in refuted[0]
    assert beyond_membership_warnings(SimpleNamespace(epsilon_audit=_entry(0.4, 1.0), dataset_inference=None)) == []
