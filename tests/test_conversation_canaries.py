"""Canaries and the extraction audit on conversational records: planted as conversations, read from the prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_conversations import _records, chat_model_dir, tickets_run, training_tokenizer  # noqa: F401 (fixtures)

from privft.audit import AuditConfig, run_audit
from privft.callbacks.canary import measure_exposure
from privft.data import MembershipSplit
from privft.data.canaries import CanaryError, CanaryPlan, canary_format
from privft.extraction import ExtractionSettings, canary_extraction
from privft.extraction.replies import record_replies
from privft.models import build_tiny_llama
from privft.pipeline import CanarySettings, run_training
from privft.scoring import score_texts
from privft.scoring.render import RecordRendering, render_records, rendering_context

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest's: tiny steps are much slower on two threads


def _plan(records: list, **options: object) -> CanaryPlan:
    return CanaryPlan(n_canaries=2, copies=2, n_alternatives=20, format=canary_format(records), **options)


@pytest.mark.parametrize("fmt, expected", [("prompt_completion", "prompt_completion"), ("messages", "messages"),
                                           ("strings", "prompt_completion_strings")])
def test_canaries_join_records_as_conversations_of_their_format(local_texts, fmt, expected):
    records = _records(local_texts, fmt, 12)
    plan = _plan(records)
    assert plan.format == expected
    planted = plan.insert(records)
    canaries = [r for r in planted if r not in records]
    assert len(planted) == 16 and len(canaries) == 4 and [r for r in planted if r in records] == records
    assert all(canary_format([c]) == expected for c in canaries)
    asked = CanaryPlan.from_dict(plan.to_dict())
    assert asked == plan and asked.record_for(plan.secrets[0]) == plan.record_for(plan.secrets[0])
    with pytest.raises(CanaryError, match="in texts that must not contain canaries"):
        plan.check_absent([plan.record_for(plan.secrets[1])])


def test_a_conversational_canary_holds_its_secret_in_the_reply_or_the_prompt(local_texts):
    records = _records(local_texts, "prompt_completion", 4)
    reply_side, prompt_side = _plan(records), _plan(records, secret_in="prompt")
    secret = reply_side.secrets[0]
    assert reply_side.record_for(secret) == {
        "prompt": [{"role": "user", "content": "What is the access code?"}],
        "completion": [{"role": "assistant", "content": f"the access code is {secret}"}]}
    assert prompt_side.record_for(secret)["prompt"][0]["content"] == f"the access code is {secret}"
    old = {k: v for k, v in CanaryPlan(seed=3).to_dict().items() if k not in ("format", "prompt", "reply", "secret_in")}
    assert CanaryPlan.from_dict(old) == CanaryPlan(seed=3)  # a plan recorded before conversations rebuilds as it was


@pytest.mark.parametrize("plan, match", [
    (dict(format="text", secret_in="prompt"), "a text has no prompt"),
    (dict(format="chat"), r"format='chat' and secret_in='completion' must be one of"),
    (dict(format="messages", prompt="Tell me {secret}"), r"prompt='Tell me \{secret\}' must be a non-empty text"),
])
def test_a_bad_conversational_plan_is_refused_by_name(plan, match):
    with pytest.raises(CanaryError, match=match):
        CanaryPlan(**plan)


def test_text_canaries_cannot_join_records_and_the_error_names_the_fix(local_texts):
    with pytest.raises(CanaryError, match=r"format='text' but the training data are prompt_completion records; set "
                                          r"format='prompt_completion'"):
        CanaryPlan(n_canaries=1, copies=1, n_alternatives=10).insert(_records(local_texts, "prompt_completion", 4))


@pytest.mark.parametrize("secret_in", ["completion", "prompt"])
def test_exposure_ranks_the_secret_given_the_prompt(chat_tokenizer, local_texts, secret_in):
    plan = _plan(_records(local_texts, "prompt_completion", 4), secret_in=secret_in)
    model = build_tiny_llama(chat_tokenizer)
    with rendering_context(RecordRendering(max_length=256)):
        exposures = measure_exposure(model, chat_tokenizer, plan)
        rendered = render_records(plan.candidates(), chat_tokenizer, RecordRendering(max_length=256, scored=secret_in))
        extracted = canary_extraction(model, chat_tokenizer, plan, exposures=exposures)
    scored_text = chat_tokenizer.decode([rendered[0].input_ids[t] for t in rendered[0].scored])
    assert plan.secrets[0] in scored_text  # the secret's turn is what is scored, not the other one
    assert (plan.prompt if secret_in == "completion" else plan.reply) not in scored_text
    assert [e.secret for e in exposures] == list(plan.secrets)
    assert all(1 <= e.rank <= 21 and e.n_alternatives == 20 for e in exposures)
    assert [c.rank for c in extracted] == [e.rank for e in exposures]
    assert all(np.isfinite(c.log_probability) and c.log_probability < 0 for c in extracted)


def test_extraction_reads_each_records_reply_from_its_prompt(chat_tokenizer, local_texts):
    records = _records(local_texts, "prompt_completion", 16)
    split = MembershipSplit.from_records(records[:8], records[8:])
    model = build_tiny_llama(chat_tokenizer)
    settings = ExtractionSettings(suffix_length=8, greedy_max_texts=3)
    with rendering_context(RecordRendering(max_length=256)):
        report = run_audit(model, chat_tokenizer, split, config=AuditConfig(attacks=("loss",), n_bootstrap=20,
                                                                            extraction=settings))
        replies = record_replies(records[:8], chat_tokenizer)
        stats = score_texts(model, chat_tokenizer, records[:8])
    prompt = chat_tokenizer.apply_chat_template(records[0]["prompt"], add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
    assert replies[0].prompt == prompt and replies[0].scored_offset == 0
    assert chat_tokenizer.decode(replies[0].reply).startswith(records[0]["completion"][0]["content"])
    extraction = report.extraction
    assert extraction.from_prompt and [r.prefix_length for r in extraction.probabilistic] == [0]
    np.testing.assert_allclose(extraction.probabilistic[0].log_probability[:8],
                               [s.token_logprobs[:8].astype(np.float64).sum() for s in stats], rtol=1e-5)
    assert {g: s["n_decoded"] for g, s in extraction.greedy.summary().items()} == {"members": 3, "non_members": 3}
    markdown = "\n".join(extraction.markdown_lines())
    assert "from each record's prompt with the chat template's generation prompt" in markdown
    assert "privacy/extraction/prompt/members/n_long_enough" in extraction.headline()
    prompts = run_audit(model, chat_tokenizer, split, config=AuditConfig(attacks=("loss",), n_bootstrap=20,
                                                                         extraction=settings, scored="prompt"))
    assert prompts.extraction.probabilistic[0].summary((1,))["members"]["n_long_enough"] == 0  # reply not scored


def test_privft_train_plants_conversational_canaries_and_audits_extraction(chat_model_dir, tmp_path):  # noqa: F811
    config = tickets_run(
        chat_model_dir, tmp_path,
        audit=AuditConfig(n_bootstrap=20, extraction=ExtractionSettings(suffix_length=16, greedy_max_texts=4)),
        canaries=CanarySettings(n_canaries=2, copies=2, n_alternatives=30))
    result = run_training(config)
    report = result.report
    assert report.split["unit"] == "completion tokens of 24 prompt–completion records"
    assert report.canary_exposure["n_canaries"] == 2 and report.canary_exposure["n_alternatives"] == 30
    assert report.extraction.from_prompt and len(report.extraction.canaries) == 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["canaries"]["format"] == "prompt_completion"
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "the first 16 tokens of its trained reply" in markdown and "Canary extraction" in markdown
