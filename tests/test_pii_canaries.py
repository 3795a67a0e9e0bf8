"""PII canaries: seeded realistic secrets, planted like digit canaries; exposure, extraction and rank per canary."""

from __future__ import annotations

import json
import re

import pytest

from privft.audit import AuditConfig
from privft.callbacks import CanaryCallback, PrivacyAuditCallback
from privft.callbacks.audit import CARD_START
from privft.data import MembershipSplit
from privft.data.canaries import CanaryError, CanaryPlan
from privft.data.pii import PII_FORMATS, PIICanaryPlan, luhn_check_digit, plan_from_dict
from privft.extraction import ExtractionSettings
from privft.training import FinetuneSettings, build_trainer, tokenize_for_training


@pytest.mark.parametrize("kind", sorted(PII_FORMATS))
def test_secrets_and_references_are_seeded_distinct_values_of_their_format(kind):
    plan = PIICanaryPlan(kind=kind, n_canaries=5, n_alternatives=200, seed=3)
    pattern = re.compile(PII_FORMATS[kind].pattern)
    references = plan.reference_secrets()
    assert PIICanaryPlan(kind=kind, n_canaries=5, n_alternatives=200, seed=3) == plan
    assert PIICanaryPlan(kind=kind, n_canaries=5, n_alternatives=200, seed=4).secrets != plan.secrets
    assert len(set(plan.secrets)) == 5 and len(set(references)) == 200 and not set(references) & set(plan.secrets)
    assert all(pattern.fullmatch(value) for value in (*plan.secrets, *references))
    assert plan.canary_texts()[0] == PII_FORMATS[kind].template.replace("{secret}", plan.secrets[0])


def test_card_numbers_pass_the_luhn_check():
    assert luhn_check_digit("7992739871") == "3"  # the textbook example 79927398713
    for number in PIICanaryPlan(kind="card", n_canaries=20, seed=0).secrets:
        digits = number.replace(" ", "")
        assert luhn_check_digit(digits[:-1]) == digits[-1]


def test_a_pii_plan_round_trips_and_survives_the_callback_state():
    plan = PIICanaryPlan(kind="phone", n_canaries=3, copies=2, n_alternatives=50, seed=7, template="call {secret} now")
    assert plan_from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert isinstance(plan_from_dict(CanaryPlan(n_canaries=2).to_dict()), CanaryPlan)
    restored = CanaryCallback(**CanaryCallback(plan).state()["args"])
    assert restored.plan == plan and isinstance(restored.plan, PIICanaryPlan)
    inserted = plan.insert([f"text {i}" for i in range(10)])
    assert len(inserted) == 16 and all(inserted.count(text) == 2 for text in plan.canary_texts())


@pytest.mark.parametrize(("settings", "message"), [
    ({"kind": "passport"}, "kind='passport' is not one of"),
    ({"alphabet": "0123456789"}, "do not apply to PII canaries"),
    ({"kind": "name", "n_alternatives": 3000}, "the 'name' generator's distinct values"),
    ({"kind": "email", "n_canaries": 1, "secrets": ("not an email",)}, "is not a 'email' value"),
])
def test_bad_pii_plans_are_refused_with_the_fix(settings, message):
    with pytest.raises(CanaryError, match=re.escape(message)):
        PIICanaryPlan(**settings)


def test_planted_pii_is_exposed_extracted_and_reported(local_texts, tokenizer, tiny_model, tmp_path, one_thread):
    texts = [t[:200] for t in local_texts if len(t) >= 200]
    split = MembershipSplit.random(texts, n_members=16, n_non_members=16, n_validation=0, seed=2, source="pydoc")
    plan = PIICanaryPlan(kind="email", n_canaries=2, copies=8, n_alternatives=100, seed=0)
    canaries = CanaryCallback(plan, tokenizer)
    audit = PrivacyAuditCallback(split, tokenizer, canary_callback=canaries, config=AuditConfig(
        attacks=("loss",), n_bootstrap=10, extraction=ExtractionSettings(prefix_lengths=(16,), suffix_length=16,
                                                                         greedy_prefix_length=16)))
    settings = FinetuneSettings(lora=None, epochs=30, learning_rate=3e-3, batch_size=8, max_length=96,
                                output_dir=str(tmp_path))
    trainer = build_trainer(tiny_model, tokenizer, tokenize_for_training(tokenizer, plan.insert(split.members), 96),
                            settings, callbacks=[canaries, audit])
    trainer.train()

    rows = audit.report.extraction.canaries
    assert [row.secret for row in rows] == list(plan.secrets) and all(row.secret_format == "email" for row in rows)
    assert all(row.rank == 1 and row.n_alternatives == 100 for row in rows)  # first among 101 emails
    assert sum(row.greedy for row in rows) == 1  # both share the template's prefix, hence one greedy continuation
    assert all(row.in_beams for row in rows) and any(secret in rows[0].greedy_text for secret in plan.secrets)
    assert all(row.exposure == pytest.approx(e.exposure_rank) for row, e in zip(rows, canaries.results))

    logged = trainer.state.log_history[-1]
    assert logged["privacy/extraction/canaries/greedy_rate"] == 0.5
    assert logged["privacy/extraction/canaries/n_canaries"] == 2
    assert logged["privacy/extraction/prefix16/members/n_long_enough"] == 16
    assert "privacy/extraction/greedy/members/exact_rate" in logged
    card = (tmp_path / "README.md").read_text()
    assert CARD_START in card and "### Extraction" in card and f"| {plan.secrets[0]} | email | yes |" in card
    saved = json.loads((tmp_path / "privacy-audit" / "report.json").read_text())
    assert saved["extraction"]["canaries"][0]["rank"] == 1


def test_a_run_config_plants_pii_canaries_by_kind():
    from privft.config import SettingError
    from privft.pipeline import CanarySettings, canary_plan

    plan = canary_plan(CanarySettings(n_canaries=3, copies=2, n_alternatives=50, kind="email"), seed=1)
    assert plan == PIICanaryPlan(kind="email", n_canaries=3, copies=2, n_alternatives=50, seed=1)
    assert plan.template == PII_FORMATS["email"].template  # the digit default gives way to the kind's own
    custom = canary_plan(CanarySettings(n_canaries=3, kind="phone", template="call me on {secret}"), seed=1)
    assert custom.canary_texts()[0].startswith("call me on +1 (")
    with pytest.raises(SettingError, match="kind='ssn' must be one of"):
        CanarySettings(kind="ssn")
    with pytest.raises(SettingError, match="leave alphabet and secret_length at their defaults"):
        CanarySettings(kind="email", secret_length=8)
