"""Canary plans, exposure maths, and exposure measured during a tiny fine-tuning run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

from privft.attacks.exposure import (
    CanaryExposure,
    exposure_by_extrapolation,
    exposure_by_rank,
    exposure_from_rank,
    rank_among,
    summarize,
)
from privft.audit import AuditConfig
from privft.callbacks import CanaryCallback, PrivacyAuditCallback, measure_exposure
from privft.data import MembershipSplit
from privft.data.canaries import CanaryError, CanaryPlan
from privft.training import FinetuneSettings, finetune, tokenize_for_training


def test_secrets_are_seeded_distinct_and_well_formed():
    plan = CanaryPlan(n_canaries=50, seed=3)
    assert plan.secrets == CanaryPlan(n_canaries=50, seed=3).secrets
    assert plan.secrets != CanaryPlan(n_canaries=50, seed=4).secrets
    assert len(set(plan.secrets)) == 50
    assert all(len(s) == 6 and s.isdigit() for s in plan.secrets)
    assert plan.canary_texts()[0] == f"the access code is {plan.secrets[0]}"
    references = plan.reference_secrets()
    assert len(set(references)) == plan.n_alternatives and not set(references) & set(plan.secrets)


def test_insert_adds_each_canary_k_times_and_keeps_the_originals_in_order():
    texts = [f"original text number {i}" for i in range(40)]
    plan = CanaryPlan(n_canaries=3, copies=4, seed=1)
    mixed = plan.insert(texts)
    assert len(mixed) == 40 + 12
    assert [t for t in mixed if t.startswith("original")] == texts
    assert all(mixed.count(canary) == 4 for canary in plan.canary_texts())
    assert mixed == plan.insert(texts)
    assert mixed != CanaryPlan(n_canaries=3, copies=4, seed=2).insert(texts)


def test_insert_refuses_canaries_outnumbering_the_training_texts():
    with pytest.raises(CanaryError, match=r"50 canary texts \(10 canaries × 5 copies\) would join 49 training texts"):
        CanaryPlan().insert([f"text {i}" for i in range(49)])


@pytest.mark.parametrize(("settings", "message"), [
    ({"template": "no placeholder here"}, "exactly once"),
    ({"alphabet": ""}, "alphabet"),
    ({"alphabet": "0012"}, "repeated"),
    ({"copies": 0}, "copies=0"),
    ({"alphabet": "01", "secret_length": 3, "n_canaries": 2, "n_alternatives": 10}, "need 12 distinct"),
    ({"n_canaries": 2, "secrets": ("12345",)}, "n_canaries=2"),
    ({"n_canaries": 1, "secrets": ("12345a",)}, "not 6 characters"),
])
def test_plan_validation(settings, message):
    with pytest.raises(CanaryError, match=message):
        CanaryPlan(**settings)


def test_check_absent_finds_canaries_in_held_out_texts():
    plan = CanaryPlan(n_canaries=2, seed=0)
    plan.check_absent(["an unrelated text"], ["the access code is 000000 maybe"])
    leaked = f"Intro.  THE access   code is {plan.secrets[1]}."
    with pytest.raises(CanaryError, match=r"canary 1 .* text set 1, text 0"):
        plan.check_absent(["an unrelated text"], [leaked])


def test_plan_round_trips_through_json_and_the_callback_state():
    plan = CanaryPlan(n_canaries=3, copies=2, n_alternatives=50, seed=7)
    assert CanaryPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    callback = CanaryCallback(plan, every_n_epochs=2)
    restored = CanaryCallback.from_state(json.loads(json.dumps(callback.state())))
    assert restored.plan == plan and restored.every_n_epochs == 2
    with pytest.raises(CanaryError, match="missing keys"):
        CanaryPlan.from_dict({"template": "x {secret}"})


def test_exposure_from_rank():
    assert exposure_from_rank(1, 1024) == 10
    assert exposure_from_rank(1024, 1024) == 0
    assert exposure_from_rank(4, 1024) == 8
    with pytest.raises(ValueError, match="rank=0"):
        exposure_from_rank(0, 10)


def test_rank_exposure_counts_ties_against_the_canary():
    alternatives = np.array([-5.0, -3.0, -2.0, -2.0, -9.0, -7.0, -8.0])
    assert rank_among(-1.0, alternatives) == 1
    assert exposure_by_rank(-1.0, alternatives) == 3  # ranked first of 8
    assert rank_among(-2.0, alternatives) == 3  # both ties rank before it
    assert exposure_by_rank(-2.0, alternatives) == pytest.approx(3 - math.log2(3))
    assert exposure_by_rank(-10.0, alternatives) == 0


def test_extrapolated_exposure_on_synthetic_normals():
    alternatives = -np.random.default_rng(0).normal(40.0, 2.0, size=2000)  # log-likelihoods; NLL ~ N(40, 2)
    assert exposure_by_extrapolation(-40.0, alternatives) == pytest.approx(1.0, abs=0.2)  # the median
    far = exposure_by_extrapolation(-20.0, alternatives)  # 10 standard deviations: CDF ~ 7.6e-24, ~77 bits
    assert 60 < far < 100
    assert exposure_by_extrapolation(-20.0, alternatives, secret_space_size=10**6) == pytest.approx(math.log2(10**6))
    beyond_underflow = exposure_by_extrapolation(200.0, alternatives)  # CDF underflows: the tail bound
    assert math.isfinite(beyond_underflow) and beyond_underflow > far


def test_summary_of_exposures():
    exposures = [CanaryExposure.measure(s, lp, np.array([-3.0, -2.0, -1.5, -4.0]))
                 for s, lp in (("a", -1.0), ("b", -2.5))]
    assert [e.rank for e in exposures] == [1, 3]
    summary = summarize(exposures)
    assert summary["exposure_max"] == pytest.approx(math.log2(5))
    assert summary["exposure_ceiling"] == pytest.approx(math.log2(5))
    assert summary["exposure_mean"] == pytest.approx((2 * math.log2(5) - math.log2(3)) / 2)


def test_inserted_canaries_are_exposed_and_logged(local_texts, tokenizer, tiny_model, one_thread, tmp_path):
    plan = CanaryPlan(n_canaries=2, copies=20, n_alternatives=200, seed=0)
    control = CanaryPlan(n_canaries=2, copies=20, n_alternatives=200, seed=1)
    originals = [text for text in local_texts if len(text) < 150][:40]
    callback = CanaryCallback(plan, tokenizer)
    settings = FinetuneSettings(lora=None, epochs=5, learning_rate=3e-3, max_length=128, output_dir=str(tmp_path))
    model = finetune(tiny_model, tokenizer, plan.insert(originals), settings, callbacks=[callback])

    inserted = summarize(callback.results)
    never_inserted = summarize(measure_exposure(model, tokenizer, control))
    assert inserted["exposure_mean"] > never_inserted["exposure_mean"] + 4
    assert inserted["exposure_extrapolated_mean"] > never_inserted["exposure_extrapolated_mean"] + 4
    assert [e.secret for e in callback.results] == list(plan.secrets)
    assert callback.summary()["max_measurable"] == pytest.approx(math.log2(201))


def test_exposure_entries_reach_the_log_history_and_the_plan_survives_a_restart(
        local_texts, tokenizer, tiny_model, one_thread, tmp_path):
    plan = CanaryPlan(n_canaries=1, copies=4, n_alternatives=20, seed=5)

    def trainer(callback: CanaryCallback, max_steps: int) -> Trainer:
        args = TrainingArguments(output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=4,
                                 save_strategy="epoch", logging_steps=2, use_cpu=True,
                                 report_to="none", disable_tqdm=True, restore_callback_states_from_checkpoint=True)
        texts = plan.insert([text for text in local_texts if len(text) < 150][:4])  # 2 steps an epoch
        return Trainer(model=tiny_model, args=args, processing_class=tokenizer,
                       train_dataset=tokenize_for_training(tokenizer, texts, 64),
                       data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                       callbacks=[callback])

    first = trainer(CanaryCallback(plan, tokenizer, every_n_epochs=1), max_steps=2)
    first.train()
    entries = [e for e in first.state.log_history if "privacy/canary_exposure_mean" in e]
    assert len(entries) == 1 and entries[0]["step"] == 2 and "epoch" in entries[0]

    other_plan = CanaryPlan(n_canaries=1, copies=4, n_alternatives=20, seed=6)
    resumed = trainer(CanaryCallback(other_plan), max_steps=3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    restored = [cb for cb in resumed.callback_handler.callbacks if isinstance(cb, CanaryCallback)]
    assert len(restored) == 1 and restored[0].plan == plan
    assert restored[0].results and restored[0].tokenizer is tokenizer
    assert [e["step"] for e in resumed.state.log_history if "privacy/canary_exposure_mean" in e] == [2, 3]

    # The audit keeps the object it was given, while the Trainer swaps in one rebuilt from the checkpoint,
    # last in line: the report still gets the final exposure, measured once.
    given = CanaryCallback(plan, tokenizer)
    split = MembershipSplit.random([t for t in local_texts if len(t) > 80][:40], n_members=20, n_non_members=20,
                                   n_validation=0, seed=0)
    audit = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss",), n_bootstrap=10),
                                 canary_callback=given, output_dir=str(tmp_path / "audit"))
    again = trainer(given, max_steps=3)
    again.add_callback(audit)
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert given not in again.callback_handler.callbacks
    measured = [e for e in again.state.log_history if "privacy/canary_exposure_ceiling" in e]
    assert [e["step"] for e in measured] == [2, 3]
    final = audit.report.canary_exposure
    assert final is not None and final["mean_exposure"] == measured[-1]["privacy/canary_exposure_mean"]
