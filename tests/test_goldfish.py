"""Goldfish loss: the hashed mask (the same passage, the same mask), its share, its composition with the
completion-only mask in Trainer and SFTTrainer batches, its setting in YAML and the grid, and a run's record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling as LabelledCollator

import privft.defend.goldfish as goldfish
from privft.audit import AuditConfig
from privft.compare import CellSpec, CompareConfig, GridSettings, grid_cells
from privft.config import ConfigError, load_yaml, save_yaml
from privft.defend import GoldfishSettings, add_goldfish, goldfish_labels, goldfish_mask
from privft.defend.goldfish import drop_counts
from privft.dp import make_private
from privft.pipeline import DataSettings, RunConfig, run_training
from privft.training import FinetuneSettings, LoraSettings, build_trainer, tokenize_for_training
from privft.training_record import GoldfishRecord, TrainingRecord


def _drops(ids, settings: GoldfishSettings) -> list[int]:
    return [i for i, drop in enumerate(goldfish_mask(ids, settings)) if drop]


def test_the_same_passage_gets_the_same_mask_wherever_it_appears():
    settings = GoldfishSettings(k=4, h=13)
    rng = np.random.default_rng(0)
    passage = rng.integers(0, 50_000, 200).tolist()
    documents = [(offset, rng.integers(0, 50_000, offset).tolist() + passage + rng.integers(0, 50_000, 9).tolist())
                 for offset in (0, 5, 37)]
    twice = rng.integers(0, 50_000, 11).tolist() + passage + [3, 1, 4] + passage  # one document, two offsets
    documents += [(11, twice), (11 + 200 + 3, twice)]
    masks = [goldfish_mask(document, settings)[offset + settings.h:offset + len(passage)]
             for offset, document in documents]
    assert all(mask == masks[0] for mask in masks) and any(masks[0])
    # A fixed hash of the ids, not Python's per-process hash(): the mask is the same in every process and release.
    assert _drops(list(range(40)), GoldfishSettings(k=4, h=3)) == [7, 8, 9, 20, 22, 33, 36]


@pytest.mark.parametrize("k", [2, 4, 8])
def test_about_one_in_k_tokens_are_dropped_and_never_the_first_h(k):
    settings = GoldfishSettings(k=k, h=13)
    mask = goldfish_mask(np.random.default_rng(k).integers(0, 50_000, 20_000).tolist(), settings)
    assert abs(np.mean(mask) - 1 / k) < 0.015
    assert not any(mask[:settings.h])


def test_drop_counts_count_a_recurring_contexts_drops_as_recurring_and_skip_untrained_tokens():
    settings = GoldfishSettings(k=4, h=3)
    rng = np.random.default_rng(1)
    sentence = rng.integers(0, 50_000, 60).tolist()  # one sentence, repeated in every row: a template
    rows = [{"input_ids": rng.integers(0, 50_000, 5).tolist() + sentence} for _ in range(6)]
    counts = drop_counts(rows, settings)
    in_sentence = [i for i in _drops(rows[0]["input_ids"], settings) if i >= 5 + settings.h]  # context all sentence
    assert counts.n_trained == 6 * 64 and counts.n_dropped == sum(len(_drops(r["input_ids"], settings)) for r in rows)
    assert counts.n_dropped_recurring == 6 * len(in_sentence) and counts.recurring_share > 0.15
    fresh = [{"input_ids": rng.integers(0, 50_000, 65).tolist()} for _ in range(6)]
    assert drop_counts(fresh, settings).n_dropped_recurring == 0
    # with labels, only trained tokens count: a prompt's tokens are never dropped, nor are contexts they end
    prompted = [{**row, "labels": [-100] * 40 + row["input_ids"][40:]} for row in rows]
    masked = drop_counts(prompted, settings)
    assert masked.n_trained == 6 * 25 and masked.n_dropped == 6 * sum(i >= 40 for i in in_sentence)


def test_the_goldfish_record_warns_when_recurring_drops_pass_five_percent_of_the_trained_tokens():
    quiet, loud = GoldfishRecord(4, 13, 1_000, 250, 49), GoldfishRecord(4, 13, 1_000, 250, 50)
    assert quiet.warnings() == [] and GoldfishRecord(4, 13).warnings() == []  # no counts: an older record
    assert loud.warnings()[0].startswith("GOLDFISH ON RECURRING TEXT: 5.0% of the trained tokens (50 of 1,000)")
    assert "it dropped 250, 50 (5.0%) after a context that recurs" in loud.markdown()
    assert TrainingRecord("LoRA", 1, 10, goldfish=loud).warnings() == loud.warnings()


def test_a_dropped_token_is_a_trained_one_and_padding_changes_no_mask():
    settings = GoldfishSettings(k=3, h=2)
    ids = torch.arange(100, 130)
    labels = ids.clone()
    labels[:12] = -100  # a prompt: never trained, so never "dropped" back into training
    padded = torch.cat([torch.zeros(5, dtype=torch.long), ids])  # left padding
    batch_ids = torch.stack([torch.cat([ids, torch.zeros(5, dtype=torch.long)]), padded])
    batch_labels = torch.stack([torch.cat([labels, torch.full((5,), -100)]), torch.cat([torch.full((5,), -100),
                                                                                          labels])])
    attention = (torch.arange(35) < 30).long()
    masked = goldfish_labels(batch_ids, batch_labels, settings, torch.stack([attention, attention.flip(0)]))
    expected = labels.clone()
    expected[_drops(ids.tolist(), settings)] = -100
    assert torch.equal(masked[0, :30], expected) and torch.equal(masked[1, 5:], expected)
    assert (masked[batch_labels == -100] == -100).all()  # nothing is un-masked
    assert (masked != batch_labels).sum() == 2 * (expected[12:] == -100).sum() > 0


def test_sft_trainer_batches_keep_the_completion_mask_and_drop_the_hashed_tokens(tiny_model, tokenizer, local_texts):
    settings = GoldfishSettings(k=3, h=2)
    records = [{"prompt": f"Question {i}: {local_texts[2 * i][:60]}\n", "completion": local_texts[2 * i + 1][:120]}
               for i in range(4)]
    args = SFTConfig("unused", use_cpu=True, bf16=False, report_to="none", max_length=128)
    trainer = add_goldfish(SFTTrainer(model=tiny_model, args=args, train_dataset=Dataset.from_list(records),
                                      processing_class=tokenizer), settings)
    features = [trainer.train_dataset[i] for i in range(4)]
    plain, batch = trainer.data_collator.collator(features), trainer.data_collator(features)
    prompts = (plain["labels"] == -100) & (plain["attention_mask"] == 1)
    assert prompts[:, 1:].sum(dim=1).min() > 0  # each prompt is masked: completion-only loss
    assert (batch["labels"][plain["labels"] == -100] == -100).all()
    changed = batch["labels"] != plain["labels"]
    assert changed.any() and (batch["labels"][changed] == -100).all()
    for row, feature in enumerate(features):
        trained = (plain["labels"][row] != -100).nonzero().squeeze(1).tolist()
        assert changed[row].nonzero().squeeze(1).tolist() == [
            i for i in _drops(feature["input_ids"], settings) if i in trained]
    packed = goldfish.GoldfishCollator(LabelledCollator(pad_token_id=0, padding_free=True), settings)(features)
    starts = np.cumsum([0] + [len(f["input_ids"]) for f in features])
    for row, feature in enumerate(features):  # each packed sequence hashes its own ids only
        segment = packed["labels"][0, starts[row]:starts[row + 1]]
        assert torch.equal(segment, batch["labels"][row, :len(feature["input_ids"])])
    assert add_goldfish(trainer, GoldfishSettings(k=5)).data_collator.collator is trainer.data_collator.collator


def test_evaluation_measures_every_trained_token(tiny_model, tokenizer, local_texts, tmp_path):
    dataset = tokenize_for_training(tokenizer, [t[:160] for t in local_texts[:8]], None)
    trainer = build_trainer(tiny_model, tokenizer, dataset, FinetuneSettings(
        batch_size=4, output_dir=str(tmp_path), lora=LoraSettings(rank=2, targets=("q_proj",))),
        eval_dataset=dataset)
    plain = trainer.evaluate()["eval_loss"]
    trainer = add_goldfish(trainer, GoldfishSettings(k=2, h=1))  # half the tokens dropped from training batches
    assert trainer.evaluate()["eval_loss"] == pytest.approx(plain)  # the validation loss a tuned run reads
    assert trainer.predict(dataset).metrics["test_loss"] == pytest.approx(plain)
    train_batch = next(iter(trainer.get_train_dataloader()))
    assert (train_batch["labels"] == -100).sum() > (train_batch["attention_mask"] == 0).sum()
    assert isinstance(trainer.data_collator, goldfish.GoldfishCollator)  # the swap for evaluation is undone


def test_dp_lora_batches_are_goldfish_masked_too(tiny_model, tokenizer, local_texts, tmp_path):
    settings = GoldfishSettings(k=3, h=2)
    dataset = tokenize_for_training(tokenizer, [t[:160] for t in local_texts[:24]], None)
    trainer = build_trainer(tiny_model, tokenizer, dataset, FinetuneSettings(
        batch_size=4, output_dir=str(tmp_path), lora=LoraSettings(rank=2, targets=("q_proj",))), max_grad_norm=0.0)
    batch = next(iter(add_goldfish(make_private(trainer, target_epsilon=8.0, seed=0), settings)
                      .get_train_dataloader()))  # the Poisson batches of DP-SGD, through the wrapped collator
    assert len(batch["input_ids"]) > 0
    for ids, labels, real in zip(batch["input_ids"], batch["labels"], batch["attention_mask"].bool()):
        drop = torch.tensor(goldfish_mask(ids[real].tolist(), settings))
        assert drop.any() and (labels[real][drop] == -100).all() and torch.equal(labels[real][~drop], ids[real][~drop])


def test_the_goldfish_setting_round_trips_is_checked_and_turns_on_a_grid_cell(tmp_path):
    config = RunConfig(goldfish=GoldfishSettings(k=4, h=13))
    assert load_yaml(RunConfig, save_yaml(config, tmp_path / "run.yaml")) == config
    (tmp_path / "set.yaml").write_text("goldfish: {k: 4, h: 13}\n")
    assert load_yaml(RunConfig, tmp_path / "set.yaml") == config and not RunConfig().goldfish.on
    for text, key in (("goldfish: {k: 1}\n", "goldfish.k=1 must be at least 2"),
                      ("goldfish: {k: 4, h: 0}\n", "goldfish.h=0 must be at least 1")):
        (tmp_path / "bad.yaml").write_text(text)
        with pytest.raises(ConfigError, match=key):
            load_yaml(RunConfig, tmp_path / "bad.yaml")
    grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(),
                        cells=(CellSpec("Goldfish k=4", family="goldfish", set={"goldfish.k": 4}),))
    cells = grid_cells(CompareConfig(run=RunConfig(goldfish=GoldfishSettings(k=8, h=7)), grid=grid,
                                     output_dir=str(tmp_path / "compare")))
    assert [(c.family, c.config.goldfish.k, c.config.goldfish.h) for c in cells] == [
        ("pretrained", None, 7), ("lora", None, 7), ("goldfish", 4, 7)]  # the base run's own k is not a baseline's


def test_a_run_with_goldfish_trains_on_masked_batches_and_its_record_says_so(tiny_model_dir, write_texts, tmp_path,
                                                                             monkeypatch, one_thread):
    calls = []
    monkeypatch.setattr(goldfish, "goldfish_labels", lambda *args: calls.append(args) or goldfish_labels(*args))
    data_file = write_texts(tmp_path, 40, min_chars=120, max_chars=150)
    config = RunConfig(
        model=tiny_model_dir,
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=16, n_non_members=16,
                          n_validation=4),
        training=FinetuneSettings(epochs=1, batch_size=8, max_length=96, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=2, alpha=4, targets=("q_proj",))),
        audit=AuditConfig(attacks=("loss",), n_bootstrap=20),
        goldfish=GoldfishSettings(k=4, h=13),
    )
    result = run_training(config)
    assert len(calls) == 2  # 16 members in batches of 8, one epoch
    line = "- Goldfish loss (Hans et al., 2024): k = 4, h = 13; the loss skips 1 in 4 trained tokens"
    assert result.report.training.goldfish.k == 4
    assert line in (tmp_path / "run" / "report.md").read_text()
    assert line in (tmp_path / "run" / "model" / "README.md").read_text()
    record = json.loads((tmp_path / "run" / "report.json").read_text())["training"]["goldfish"]
    assert record["k"] == 4 and record["h"] == 13 and 0.15 < record["n_dropped"] / record["n_trained"] < 0.35
