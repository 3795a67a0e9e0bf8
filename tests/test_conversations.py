"""Conversational records: formats, loading, splits, trl's own rendering, scoring, the audit and SOFT on records."""

from __future__ import annotations

import json
import runpy
import warnings
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

import privft.models
from privft import compare
from privft.audit import AuditConfig, run_audit
from privft.callbacks import prepare_soft
from privft.chat_templates import SMOLLM2_TRAINING_CHAT_TEMPLATE, with_chat_template
from privft.compare import PRETRAINED, CellSpec, CompareConfig, GridSettings, run_compare
from privft.data import DataError, MembershipSplit, load_corpus
from privft.data.loaders import load_records
from privft.data.records import check_records, map_turns, record_content, record_format, turn_contents
from privft.defend.schedule import SoftSchedule
from privft.dp import DPSettings
from privft.models import build_tiny_llama
from privft.paraphrase import obfuscate
from privft.paraphrase.base import Paraphraser
from privft.pipeline import DataSettings, RunConfig, SoftSettings, run_training
from privft.scoring import ScoringError, StatsCache, forward, score_texts, whole_records_cached
from privft.scoring.render import RecordRendering, render_records, rendering_context
from privft.task_accuracy import TaskSettings
from privft.training import FinetuneSettings, LoraSettings
from privft.tune import TuneSettings

ROOT = Path(__file__).parent.parent


def _messages(question: str, reply: str, system: str | None = None) -> list[dict[str, str]]:
    return [*([{"role": "system", "content": system}] if system else []),
            {"role": "user", "content": question}, {"role": "assistant", "content": reply}]


def _records(texts: list[str], fmt: str, n: int = 24) -> list[dict]:
    """`n` records whose question and reply come from local paragraphs, in one of trl's formats."""
    pairs = [(f"Question {i}: what does this say? {texts[2 * i][:60]}", texts[2 * i + 1][:200]) for i in range(n)]
    if fmt == "messages":
        return [{"messages": _messages(q, a, "Answer briefly." if i % 2 else None)} for i, (q, a) in enumerate(pairs)]
    if fmt == "prompt_completion":
        return [{"prompt": [{"role": "user", "content": q}], "completion": [{"role": "assistant", "content": a}]}
                for q, a in pairs]
    return [{"prompt": q + "\n", "completion": a} for q, a in pairs]  # prompt–completion as strings


@pytest.fixture(scope="module")
def training_tokenizer(tokenizer):
    """The tiny tokenizer with SmolLM2's template marked for assistant-only loss."""
    return with_chat_template(tokenizer, SMOLLM2_TRAINING_CHAT_TEMPLATE)


def _trl_dataset(model, tokenizer, records, **config):
    args = SFTConfig("unused", use_cpu=True, bf16=False, report_to="none", max_length=256, **config)
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records),
                      processing_class=tokenizer).train_dataset


# --- formats and their checks -------------------------------------------------------------------------------

def test_formats_are_detected_and_content_names_every_turn():
    record = {"messages": _messages("Where is my order 17?", "It ships today, Ada.", "Be kind.")}
    assert record_format(record) == "messages" and record_format("a text") == "text"
    assert record_format({"prompt": "a", "completion": "b"}) == "prompt_completion"
    assert record_content(record) == "system: Be kind.\nuser: Where is my order 17?\nassistant: It ships today, Ada."
    assert record_content({"prompt": "Q: ", "completion": "A."}) == "Q: A."
    assert turn_contents(record, ("assistant",)) == ["It ships today, Ada."]
    shouted = map_turns(record, str.upper, roles=("assistant",))
    assert shouted["messages"][0] == record["messages"][0]
    assert shouted["messages"][2]["content"] == "IT SHIPS TODAY, ADA."


@pytest.mark.parametrize("bad, message", [
    (["a text", {"prompt": "p", "completion": "c"}], r"row 1: a prompt_completion record among text records"),
    ([{"messages": [{"role": "user", "content": "only a question"}]}], r"row 0: the conversation has no assistant"),
    ([{"prompt": "p", "completion": "  "}], r"row 0: the completion is empty"),
    ([{"prompt": [{"role": "user", "content": "q"}], "completion": "c"}],
     r"must both be strings or both lists of messages"),
    ([{"messages": [{"role": "robot", "content": "x"}]}], r"turn 0: .* is not a message"),
    ([{"question": "q", "answer": "a"}], r"keys \['answer', 'question'\] is in none of the formats"),
])
def test_bad_records_are_refused_by_row(bad, message):
    with pytest.raises(DataError, match=message):
        check_records(bad, "mine")


def test_records_load_from_every_source(tmp_path, local_texts):
    records = _records(local_texts, "messages", 4)
    jsonl = tmp_path / "chats.jsonl"
    jsonl.write_text("\n".join(json.dumps({**r, "id": i}) for i, r in enumerate(records)), encoding="utf-8")
    (tmp_path / "chats.json").write_text(json.dumps(records), encoding="utf-8")
    Dataset.from_list(records).to_parquet(tmp_path / "chats.parquet")
    for source in (jsonl, tmp_path / "chats.json", tmp_path / "chats.parquet", Dataset.from_list(records), records):
        assert load_records(source) == records  # extra keys ("id") are dropped
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("prompt,completion\nHi,Hello there\nBye,See you\n", encoding="utf-8")
    assert load_records(pairs) == [{"prompt": "Hi", "completion": "Hello there"},
                                   {"prompt": "Bye", "completion": "See you"}]
    assert load_records(["plain", "texts"]) == ["plain", "texts"]
    with pytest.raises(DataError, match="format='messages'"):
        load_records(pairs, format="messages")


# --- the split -------------------------------------------------------------------------------------------------

def test_a_split_of_records_dedups_on_content_and_round_trips_with_hashes(tmp_path, local_texts):
    records = _records(local_texts, "prompt_completion", 30)
    respaced = {**records[0], "completion": [{"role": "assistant", "content": "  " + records[0]["completion"][0]
                                              ["content"].replace(" ", "  ")}]}
    split = MembershipSplit.random([*records, respaced], n_members=10, n_non_members=10, n_validation=5, seed=3)
    assert split.format == "prompt_completion"
    assert len({record_content(r) for r in split.members + split.non_members + split.validation}) == 25
    path = split.save(tmp_path / "split.json")
    entry = json.loads(path.read_text())["members"][0]
    assert set(entry) == {"id", "sha256", "record"}
    assert MembershipSplit.load(path).members == split.members
    entry["record"]["completion"][0]["content"] += " edited"
    manifest = json.loads(path.read_text())
    manifest["members"][0] = entry
    path.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="member-00000 does not match its sha256"):
        MembershipSplit.load(path)
    with pytest.raises(DataError, match="same text on more than one side"):
        MembershipSplit.from_records(records[:3], [respaced, records[5]])
    with pytest.raises(DataError, match=r"a text record \('a text'\), but format='prompt_completion' was asked"):
        MembershipSplit.from_records(records[:3], ["a text", "another"])


# --- scored as trained -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, config", [
    ("prompt_completion", {}),  # trl's default: completion-only loss
    ("strings", {}),
    ("messages", {}),  # every token trained
    ("messages", {"assistant_only_loss": True}),
    ("prompt_completion", {"completion_only_loss": False}),
])
def test_rendering_equals_sfttrainers_tokenized_dataset(training_tokenizer, local_texts, fmt, config):
    records = _records(local_texts, fmt, 6)
    model = build_tiny_llama(training_tokenizer)
    prepared = _trl_dataset(model, training_tokenizer, records, **config)
    rendered = render_records(records, training_tokenizer, RecordRendering(max_length=256, **config))
    for row, ours in zip(prepared, rendered, strict=True):
        assert ours.input_ids == row["input_ids"]
        assert ours.trained == [label != -100 for label in row["labels"]]


def test_each_members_loss_is_its_mean_nll_over_sfttrainers_trained_tokens(chat_tokenizer, local_texts):
    records = _records(local_texts, "prompt_completion", 8)
    model = build_tiny_llama(chat_tokenizer)
    prepared = _trl_dataset(model, chat_tokenizer, records)
    with rendering_context(RecordRendering(max_length=256)):
        stats = score_texts(model, chat_tokenizer, records, batch_size=3)
        windowed = score_texts(model, chat_tokenizer, records, max_length=64, stride=32)  # long records: windows
    assert [s.n_tokens for s in windowed] == [s.n_tokens for s in stats]  # each trained token scored once
    for row, ours in zip(prepared, stats):
        with torch.no_grad():
            loss = model(input_ids=torch.tensor([row["input_ids"]]), labels=torch.tensor([row["labels"]])).loss
        assert ours.n_tokens == sum(label != -100 for label in row["labels"][1:])
        assert -ours.mean_nll == pytest.approx(-loss.item(), rel=1e-3)


def test_prompt_and_all_score_the_other_tokens(chat_tokenizer, local_texts):
    record = _records(local_texts, "prompt_completion", 1)[0]
    parts = {scored: render_records([record], chat_tokenizer, RecordRendering(scored=scored))[0].scored
             for scored in ("completion", "prompt", "all")}
    assert sorted(parts["completion"] + parts["prompt"]) == parts["all"] == list(range(1, len(parts["all"]) + 1))
    assert chat_tokenizer.decode([render_records([record], chat_tokenizer)[0].input_ids[t]
                                  for t in parts["completion"]]).startswith(record["completion"][0]["content"])
    with pytest.raises(ScoringError, match="trains on every token of it"):
        render_records([{"messages": record["prompt"] + record["completion"]}], chat_tokenizer,
                       RecordRendering(scored="prompt"))


def test_the_prompt_side_is_scored_without_reading_the_reply(chat_tokenizer, local_texts):
    records = _records(local_texts, "prompt_completion", 3)
    model = build_tiny_llama(chat_tokenizer)
    rendering = RecordRendering(scored="prompt")
    lengths = []
    hook = model.get_decoder().register_forward_pre_hook(  # the body: each pass's input length
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    with rendering_context(rendering):
        stats = score_texts(model, chat_tokenizer, records)
    hook.remove()
    for ours, rendered in zip(stats, render_records(records, chat_tokenizer, rendering)):
        ids = torch.tensor([rendered.input_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        whole = [logprobs[t - 1, rendered.input_ids[t]].item() for t in rendered.scored]  # read after every token
        np.testing.assert_allclose(ours.token_logprobs, whole, rtol=1e-4, atol=1e-5)
    longest_prompt = max(rendered.scored[-1] + 1 for rendered in render_records(records, chat_tokenizer, rendering))
    assert max(lengths) == longest_prompt  # no pass read a reply token


def test_whole_record_entries_serve_each_side_from_one_forward_pass(chat_tokenizer, local_texts, tmp_path):
    records = _records(local_texts, "prompt_completion", 3)
    model = build_tiny_llama(chat_tokenizer)
    passes = []
    hook = model.get_decoder().register_forward_pre_hook(lambda module, args, kwargs: passes.append(1),
                                                         with_kwargs=True)
    direct = {}
    for side in ("completion", "prompt"):
        with rendering_context(RecordRendering(scored=side)):
            direct[side] = score_texts(model, chat_tokenizer, records, distribution=True)
    cache = StatsCache(tmp_path / "cache")
    passes.clear()
    with whole_records_cached():
        for side in ("completion", "prompt"):
            with rendering_context(RecordRendering(scored=side)):
                shared = score_texts(model, chat_tokenizer, records, cache=cache, distribution=side == "completion")
            if side == "completion":
                first = len(passes)
            for ours, theirs in zip(shared, direct[side]):
                np.testing.assert_allclose(ours.token_logprobs, theirs.token_logprobs, rtol=1e-5, atol=1e-6)
                assert ours.n_bytes == theirs.n_bytes
                if side == "completion":  # the distribution pass's μ and σ are sliced too
                    np.testing.assert_allclose(ours.mean_logprob, theirs.mean_logprob, rtol=1e-5, atol=1e-6)
    assert first >= 1 and len(passes) == first  # the prompt side read the whole-record entries: no forward pass
    with rendering_context(RecordRendering(scored="prompt")):  # outside the block, only a side's own entries count
        score_texts(model, chat_tokenizer, records, cache=cache)
    hook.remove()
    assert len(passes) > first


def test_bad_conversational_input_is_refused_before_training(tokenizer, chat_tokenizer, local_texts):
    records = _records(local_texts, "messages", 2)
    with pytest.raises(ScoringError, match="no chat template"):
        render_records(records, tokenizer)
    with pytest.raises(ScoringError, match=r"no trained token within max_length=20 .* the prompt alone fills it"):
        render_records(_records(local_texts, "prompt_completion", 2), chat_tokenizer, RecordRendering(max_length=20))
    with pytest.raises(ScoringError, match=r"\{% generation %\} markers, and trl cannot patch this one"):
        render_records(records, chat_tokenizer, RecordRendering(assistant_only_loss=True))


# --- the audit and SOFT on records ---------------------------------------------------------------------------------

def test_an_audit_of_records_names_its_unit_and_scores_prompts_apart(chat_tokenizer, local_texts):
    records = _records(local_texts, "prompt_completion", 24)
    split = MembershipSplit.from_records(records[:12], records[12:])
    model = build_tiny_llama(chat_tokenizer)
    config = AuditConfig(attacks=("loss", "zlib", "min_k_pp", "lowercase"), n_bootstrap=20)
    report = run_audit(model, chat_tokenizer, split, config=config)
    assert report.split["unit"] == "completion tokens of 12 prompt–completion records"
    assert "completion tokens of 12 prompt–completion records" in report.to_markdown()
    stats = score_texts(model, chat_tokenizer, records[:12])
    np.testing.assert_allclose(report.scores["loss"][:12], [-s.mean_nll for s in stats])
    prompts = run_audit(model, chat_tokenizer, split, config=AuditConfig(attacks=("loss",), n_bootstrap=20,
                                                                        scored="prompt"))
    assert prompts.split["unit"].startswith("untrained (prompt) tokens")
    assert not np.allclose(prompts.scores["loss"], report.scores["loss"])
    assert prompts.perplexity.value == pytest.approx(report.perplexity.value)  # both read the trained tokens


class _Reverse(Paraphraser):
    """Spells every word backwards: a paraphraser whose rewrite is easy to see."""

    name = "reverse-test"

    def rewrite(self, text: str, *, seed: int) -> str:
        """The text with every word spelled backwards."""
        return " ".join(word[::-1] for word in text.split())

    def settings(self) -> dict:
        """No settings."""
        return {}


def test_soft_rewrites_only_replies_and_its_view_serves_trls_ids_and_mask(chat_tokenizer, local_texts):
    records = _records(local_texts, "messages", 6)
    rewritten = [r.text for r in obfuscate(records, _Reverse(), min_similarity=0, max_length_ratio=10)]
    for before, after in zip(records, rewritten):
        assert [m for m in after["messages"] if m["role"] != "assistant"] == \
               [m for m in before["messages"] if m["role"] != "assistant"]
        reply = turn_contents(before, ("assistant",))[0]
        kept = reply[:len(reply) // 3]
        new_reply = turn_contents(after, ("assistant",))[0]
        assert new_reply != reply and new_reply[:3] == kept[:3]
    rendering = RecordRendering(max_length=256, assistant_only_loss=True)
    tokenizer = with_chat_template(chat_tokenizer, SMOLLM2_TRAINING_CHAT_TEMPLATE)
    view, _ = prepare_soft(tokenizer, records, rewritten, rendering=rendering, schedule=SoftSchedule(rule="all"))
    view.set_mask(np.ones(len(view), dtype=bool))
    expected = render_records(rewritten, tokenizer, rendering)
    for served, ours in zip(view, expected):
        assert served["input_ids"] == ours.input_ids
        assert [label != -100 for label in served["labels"]] == ours.trained
    trl_served = _trl_dataset(build_tiny_llama(tokenizer), tokenizer, rewritten, assistant_only_loss=True)
    assert [row["input_ids"] for row in trl_served] == [r.input_ids for r in expected]


def test_the_rendering_is_read_off_the_trainers_args():
    args = SFTConfig("unused", use_cpu=True, bf16=False, report_to="none", max_length=96, assistant_only_loss=True)
    assert RecordRendering.from_args(args, scored="prompt") == RecordRendering(
        max_length=96, assistant_only_loss=True, scored="prompt")
    assert RecordRendering.from_args(object()) == RecordRendering()  # a plain Trainer's args: trl's defaults


def test_the_chat_example_runs_as_a_user_runs_it(chat_tokenizer, tmp_path, monkeypatch, capsys, one_thread):
    """examples/sft_chat_integration.py's `__main__` lines as written, on the tiny model with SmolLM2's template."""
    def tiny_model(model: str, **options: object) -> tuple:
        assert model == "smollm2-135m" and not options
        tokenizer = with_chat_template(chat_tokenizer)  # a fresh copy: the example sets its template
        return build_tiny_llama(tokenizer, max_position_embeddings=512), tokenizer

    monkeypatch.setattr(privft.models, "load_model", tiny_model)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace = runpy.run_path(str(ROOT / "examples" / "sft_chat_integration.py"), run_name="__main__")
    printed = capsys.readouterr().out
    for output, unit in (("runs/example-chat", "completion tokens of 200 prompt–completion records"),
                         ("runs/example-chat-messages", "assistant tokens of 200 conversations")):
        report = json.loads((tmp_path / output / "privacy-audit" / "report.json").read_text())
        assert report["split"]["unit"] == unit and report["split"]["n_members"] == 200
        assert report["canary_exposure"]["n_canaries"] == 4
        assert (tmp_path / output / "privacy-audit" / "report.md").read_text() in printed
    trainer = namespace["trainer"]
    selections = [entry for entry in trainer.state.log_history if "soft/n_selected" in entry]
    assert selections and selections[0]["soft/n_served_changed"] > 0 and trainer.state.global_step > 0


@pytest.fixture()
def chat_model_dir(training_tokenizer, tmp_path):
    """A tiny Llama and the chat tokenizer, saved where `privft train` loads a model from."""
    build_tiny_llama(training_tokenizer, max_position_embeddings=512).save_pretrained(tmp_path / "base")
    training_tokenizer.save_pretrained(tmp_path / "base")
    return str(tmp_path / "base")


def tickets_run(model_dir: str, tmp_path: Path, **sections: object) -> RunConfig:
    """A `privft train` config on a JSONL of 120 tickets-chat prompt–completion records, 24 vs 24, LoRA r 4."""
    data = tmp_path / "tickets.jsonl"
    records = load_corpus("tickets-chat", format="prompt_completion", size=120)
    data.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    return RunConfig(
        model=model_dir,
        data=DataSettings(corpus=None, path=str(data), max_words=None, n_members=24, n_non_members=24,
                          n_validation=8),
        training=FinetuneSettings(epochs=2, batch_size=4, max_length=384, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        **sections,
    )


@pytest.mark.parametrize("defence", ["soft", "dp"])
def test_privft_train_runs_on_a_file_of_records(chat_model_dir, tmp_path, defence, one_thread):
    config = tickets_run(
        chat_model_dir, tmp_path, audit=AuditConfig(n_bootstrap=20),
        soft=SoftSettings(rule="paper") if defence == "soft" else SoftSettings(),  # privft's default SOFT
        dp=DPSettings(target_epsilon=8.0) if defence == "dp" else DPSettings())
    # the SOFT defaults were measured on conversations: the run says so as it obfuscates
    measured = pytest.warns(UserWarning, match=r"measured on conversations: it protects, but the fine-tune no longer")
    with measured if defence == "soft" else nullcontext():
        result = run_training(config)
    assert result.report.split["unit"] == "completion tokens of 24 prompt–completion records"
    assert MembershipSplit.load(tmp_path / "run" / "split.json").format == "prompt_completion"
    if defence == "soft":
        obfuscations = json.loads((tmp_path / "run" / "obfuscations.json").read_text())
        assert all(o["text"]["prompt"] == o["original"]["prompt"] for o in obfuscations)  # the ticket stays as it is
        assert result.soft_history[-1]["n_served_changed"] > 0
    else:
        assert result.report.training.dp is not None


def _tickets_with_a_test_side(model_dir: str, tmp_path: Path) -> RunConfig:
    """`tickets_run` with 6 test tickets and task accuracy on 4 of them (greedy replies of 8 tokens)."""
    config = tickets_run(model_dir, tmp_path, audit=AuditConfig(n_bootstrap=20, attacks=("loss",),
                                                                task=TaskSettings(max_new_tokens=8, max_texts=4)))
    return replace(config, data=replace(config.data, n_test=6))


def test_a_run_reports_test_perplexity_and_task_accuracy_on_held_out_tickets(chat_model_dir, tmp_path, one_thread):
    report = run_training(_tickets_with_a_test_side(chat_model_dir, tmp_path)).report
    split = MembershipSplit.load(tmp_path / "run" / "split.json")
    others = {record_content(r) for r in split.members + split.non_members + split.validation}
    assert len(split.test) == 6 and not {record_content(r) for r in split.test} & others  # never trained on
    test, task = report.test_perplexity, report.task_accuracy
    assert (test.on, test.n_texts) == ("test", 6) and test.ci_low <= test.value <= test.ci_high
    assert (task.on, task.accuracy.n_total, len(task.correct)) == ("test", 4, 4)
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["split"]["n_test"] == 6 and saved["test_perplexity"]["n_texts"] == 6
    assert saved["task_accuracy"]["accuracy"]["n_total"] == 4
    assert saved["task_accuracy"]["replies"] == task.replies and len(task.replies) == 4  # a failure can be read
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "Perplexity on test:" in markdown
    assert f"Task accuracy on 4 test tickets (the reply gives the ticket's fix, and no other): " \
           f"{task.accuracy.format()}" in markdown


def test_the_compare_table_shows_test_perplexity_and_task_accuracy_beside_the_base_models(chat_model_dir, tmp_path,
                                                                                          one_thread, monkeypatch):
    run = _tickets_with_a_test_side(chat_model_dir, tmp_path)
    run = replace(run, audit=replace(run.audit, cache_dir=str(tmp_path / "stats")))
    grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(), prompt_side=True)
    passes, in_prompt_side = [], []  # the sequences each pass scored, and whether a prompt-side audit is running
    real_pass, real_prompt_side = forward._score_sequences, compare.audit_prompt_side

    def counted_pass(model, sequences, **options):
        passes.append((bool(in_prompt_side), len(sequences)))
        return real_pass(model, sequences, **options)

    def prompt_side(cell, result):
        in_prompt_side.append(cell.name)
        try:
            return real_prompt_side(cell, result)
        finally:
            in_prompt_side.pop()

    monkeypatch.setattr(forward, "_score_sequences", counted_pass)
    monkeypatch.setattr(compare, "audit_prompt_side", prompt_side)
    comparison = run_compare(CompareConfig(run=run, grid=grid, output_dir=str(tmp_path / "compare")))
    for row in comparison.rows:  # each cell's prompt side, read from its own audit's passes
        side = json.loads((Path(row["report"]).parent / "prompt-side" / "report.json").read_text())
        assert side["split"]["unit"].startswith("untrained (prompt) tokens of ") and "loss" in side["attacks"]
    assert sum(n for prompt, n in passes if prompt) == 0 and sum(n for prompt, n in passes if not prompt) > 0
    pretrained, lora = comparison.rows
    assert pretrained["name"] == PRETRAINED and pretrained["task_accuracy"]["n_total"] == 4  # the base model's
    assert pretrained["test_perplexity_vs_lora"]["ratio"] == pytest.approx(
        pretrained["test_perplexity"] / lora["test_perplexity"])
    assert lora["test_perplexity_vs_lora"] is None
    table = (tmp_path / "compare" / "compare.md").read_text()
    assert "Test ppl [95 % CI]" in table and "Task accuracy [95 % CI] (k/n)" in table
    for row in comparison.rows:
        accuracy = row["task_accuracy"]
        assert f"({accuracy['n_correct']}/4)" in table.split(row["name"] + " |")[1].split("\n")[0]


def test_a_tuned_goldfish_cell_on_records_chooses_by_validation_and_reports_the_task(chat_model_dir, tmp_path,
                                                                                      one_thread, capsys):
    """The frontier's path (issue 31): a tuned cell on prompt–completion records, Goldfish on the completion mask."""
    run = _tickets_with_a_test_side(chat_model_dir, tmp_path)
    cell = CellSpec("Goldfish k=4, tuned", family="goldfish", set={"goldfish.k": 4, "goldfish.h": 13},
                    tune=TuneSettings(learning_rates=(1e-3, 1e-2)))
    grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(), cells=(cell,))
    row = run_compare(CompareConfig(run=run, grid=grid, output_dir=str(tmp_path / "compare"))).rows[-1]
    tune = row["tune"]
    assert [(g["learning_rate"], g["epoch"]) for g in tune["grid"]] == [(1e-3, 1), (1e-3, 2), (1e-2, 1), (1e-2, 2)]
    assert all(np.isfinite(g["validation_loss"]) for g in tune["grid"])
    best = min(tune["grid"], key=lambda g: g["validation_loss"])
    assert (tune["learning_rate"], tune["epoch"]) == (best["learning_rate"], best["epoch"])
    report = json.loads(Path(row["report"]).read_text())
    assert report["split"]["unit"] == "completion tokens of 24 prompt–completion records"
    goldfish = report["training"]["goldfish"]
    assert (goldfish["k"], goldfish["h"]) == (4, 13) and report["training"]["epochs"] == best["epoch"]
    # the tickets' templated replies repeat contexts, so many dropped tokens are dropped in every copy: the report warns
    assert goldfish["n_dropped_recurring"] / goldfish["n_trained"] >= 0.05
    assert any(w.startswith("GOLDFISH ON RECURRING TEXT") for w in report["warnings"])
    assert report["task_accuracy"]["on"] == "test" and report["task_accuracy"]["accuracy"]["n_total"] == 4
    assert row["task_accuracy"]["n_total"] == 4 and row["test_perplexity"] > 0
    # scripts/task_accuracy_by_epoch.py measures a kept epoch's checkpoint as the audit measured the chosen one
    by_epoch = runpy.run_path(str(Path(__file__).parent.parent / "scripts" / "task_accuracy_by_epoch.py"))
    capsys.readouterr()
    by_epoch["main"]([str(Path(row["report"]).parent), "--epochs", str(best["epoch"])])
    printed = capsys.readouterr().out
    assert f"chosen epoch {best['epoch']}; task accuracy on 4 test tickets" in printed
    assert f"({row['task_accuracy']['n_correct']}/4); wrong: " in printed
