"""SOFT: selection rules, the obfuscated view, and the callback inside Trainer and SFTTrainer runs."""

from __future__ import annotations

import math
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainerState, TrainingArguments

from privft.callbacks import SelectiveObfuscationCallback, prepare_soft
from privft.callbacks.soft import soft_report_notes
from privft.defend import ObfuscatedView, SoftSchedule, paper_rule, release_rule, sample_losses, update_mask
from privft.models import build_tiny_llama

N_TRAIN, N_VALIDATION, BATCH = 16, 8, 8


def _obfuscate(text: str) -> str:
    """A deterministic stand-in for a paraphraser: the words in reverse order."""
    return " ".join(reversed(text.split()))


@pytest.fixture(scope="module")
def texts(local_texts) -> tuple[list[str], list[str], list[str]]:
    """Short distinct training texts, their obfuscations, and held-out validation texts."""
    short = list(dict.fromkeys(t[:120] for t in local_texts))
    train, validation = short[:N_TRAIN], short[N_TRAIN:N_TRAIN + N_VALIDATION]
    return train, [_obfuscate(t) for t in train], validation


class BatchRecorder(TrainerCallback):
    """Records, per epoch, the mask the view serves and the unpadded ids of every row the model trains on."""

    def __init__(self, model: torch.nn.Module, view: ObfuscatedView) -> None:
        self.view, self.epoch = view, 0
        self.masks: dict[int, np.ndarray] = {}
        self.rows: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        model.register_forward_pre_hook(self._record, with_kwargs=True)

    def on_step_begin(self, args, state, control, **kwargs):
        # After every on_epoch_begin, whatever the callbacks' order (a restored callback comes last).
        self.epoch = math.floor(state.epoch + 1e-6)
        self.masks.setdefault(self.epoch, self.view.mask)

    def _record(self, module, args, kwargs):
        if not module.training:  # a scoring pass (eval mode), not a training batch
            return
        for ids, keep in zip(kwargs["input_ids"], kwargs["attention_mask"]):
            self.rows[self.epoch].append(tuple(ids[keep.bool()].tolist()))

    def expected(self, epoch: int) -> Counter:
        """The rows epoch `epoch` must contain: obfuscated ids where its mask is set, original ids elsewhere."""
        mask = self.masks[epoch]
        sources = (self.view.obfuscated if mask[i] else self.view.original for i in range(len(self.view)))
        return Counter(tuple(source[i]["input_ids"]) for i, source in enumerate(sources))


def _args(output_dir: Path, epochs: int = 3, **overrides) -> TrainingArguments:
    settings = dict(output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=BATCH,
                    learning_rate=1e-3, seed=0, use_cpu=True, report_to="none", save_strategy="no",
                    logging_strategy="no", disable_tqdm=True, lr_scheduler_type="constant")
    return TrainingArguments(**{**settings, **overrides})


def _train(tokenizer, texts, output_dir: Path, *, rule: str, epochs: int = 3, resume: str | None = None,
           soft_options: dict | None = None, **arg_overrides):
    """Train a fresh tiny full-FT model with SOFT; returns the trainer, the view and the batch recorder."""
    train, obfuscated, validation = texts
    view, soft = prepare_soft(tokenizer, train, obfuscated, validation if rule == "paper" else None,
                              schedule=SoftSchedule(rule=rule, **(soft_options or {})))
    model = build_tiny_llama(tokenizer)
    recorder = BatchRecorder(model, view)
    trainer = Trainer(model=model, args=_args(output_dir, epochs, **arg_overrides), train_dataset=view,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                      processing_class=tokenizer, callbacks=[soft, recorder])
    trainer.train(resume_from_checkpoint=resume)
    return trainer, view, recorder


def _soft_callback(trainer: Trainer) -> SelectiveObfuscationCallback:
    (callback,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, SelectiveObfuscationCallback)]
    return callback


# --- selection rules -------------------------------------------------------------------------------------------


def test_paper_rule_selects_exactly_the_samples_below_the_validation_mean():
    train = np.array([1.0, 2.9, 3.0, 3.1, 5.0])
    mask, tau = paper_rule(train, [2.0, 4.0, 3.0])
    assert tau == pytest.approx(3.0)
    assert mask.tolist() == [True, True, False, False, False]  # strictly below τ


def test_release_rule_selects_the_lowest_ratio_first_then_everything():
    losses = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 2.0])
    assert release_rule(losses, 0.5, selection_index=0).tolist() == [False, True, False, True, False, True]
    assert release_rule(losses, 0.34, selection_index=0).tolist() == [False, True, False, True, False, False]
    assert release_rule(losses, 0.5, selection_index=1).all()
    assert release_rule(losses, 0.1, selection_index=0).sum() == 1  # at least one sample
    assert release_rule(np.arange(100.0), 0.29, selection_index=0).sum() == 29  # not 28 from 100 * 0.29 = 28.99…


def test_cumulative_selection_keeps_earlier_choices_and_fresh_replaces_them():
    previous, new = np.array([True, False, False]), np.array([False, True, False])
    assert update_mask(previous, new, cumulative=True).tolist() == [True, True, False]
    assert update_mask(previous, new, cumulative=False).tolist() == [False, True, False]
    assert update_mask(None, new, cumulative=True).tolist() == [False, True, False]


@pytest.mark.parametrize("ratio", [0, 1.5, -0.1, True])
def test_bad_select_ratio_is_refused(ratio):
    with pytest.raises(ValueError, match="select_ratio"):
        release_rule([1.0, 2.0], ratio, selection_index=0)
    with pytest.raises(ValueError, match="select_ratio"):
        SelectiveObfuscationCallback(schedule=SoftSchedule(rule="release", select_ratio=ratio))


@pytest.mark.parametrize("validation_texts", [None, []])
def test_paper_rule_without_validation_texts_is_refused(validation_texts):
    with pytest.raises(ValueError, match="validation_texts"):
        SelectiveObfuscationCallback(schedule=SoftSchedule(rule="paper"), validation_texts=validation_texts)


@pytest.mark.parametrize(("options", "message"), [
    (dict(rule="threshold"), "rule="),
    (dict(rule="paper", validation_texts=["held out"], select_ratio=0.5), "release"),
    (dict(rule="release", validation_texts=["held out"]), "validation_texts"),
    (dict(rule="release", warmup_epochs=-1), "warmup_epochs"),
    (dict(rule="release", batch_size=0), "batch_size"),
    (dict(rule="paper", validation_texts=["ok", "  "]), "validation_texts"),
])
def test_bad_options_are_refused_with_the_option_named(options, message):
    schedule = {key: options.pop(key) for key in ("rule", "select_ratio", "warmup_epochs") if key in options}
    with pytest.raises(ValueError, match=message):
        SelectiveObfuscationCallback(schedule=SoftSchedule(**schedule), **options)


def test_non_finite_losses_are_refused():
    with pytest.raises(ValueError, match="non-finite"):
        paper_rule([1.0, float("nan")], [1.0])


def test_rules_are_a_registry_and_a_new_rule_is_one_class(tokenizer, texts, tmp_path):
    from privft.defend.rules import RULES, Selection, SelectionRule
    from privft.pipeline import SoftSettings

    assert {"paper", "release", "all", "all-after-warmup"} <= set(RULES)

    class EveryOther(SelectionRule):
        """Obfuscates every other open sample: a rule that reads no loss."""

        name = "every-other"

        def needs_losses(self, selection_index: int) -> bool:
            return False

        def select(self, n_open, losses, validation_losses, selection_index):
            return Selection(np.arange(n_open) % 2 == 0)

    try:
        assert SoftSettings(rule="every-other").rule == "every-other"  # the config takes it by name
        trainer, view, recorder = _train(tokenizer, texts, tmp_path, rule="every-other", epochs=1)
        assert recorder.masks[0].tolist() == [i % 2 == 0 for i in range(N_TRAIN)]
        assert _soft_callback(trainer).history[0]["n_scored"] == 0
    finally:
        del RULES["every-other"]
    with pytest.raises(ValueError, match=r"soft.rule='every-other' is not one of .*'all-after-warmup'"):
        SoftSettings(rule="every-other")


@pytest.mark.parametrize(("rule", "masks"), [("all", [N_TRAIN, N_TRAIN]), ("all-after-warmup", [0, N_TRAIN])])
def test_the_non_selective_controls_obfuscate_everything(tokenizer, texts, tmp_path, rule, masks):
    trainer, view, recorder = _train(tokenizer, texts, tmp_path, rule=rule, epochs=2)
    assert [int(recorder.masks[epoch].sum()) for epoch in range(2)] == masks
    for epoch in range(2):
        assert Counter(recorder.rows[epoch]) == recorder.expected(epoch)
    assert all(record["n_scored"] == 0 for record in _soft_callback(trainer).history)  # no scoring pass at all


def test_training_pass_losses_equal_the_audits_loss(tokenizer, texts):
    from privft.defend import TrainingPassLosses
    from privft.training import tokenize_for_training

    train, _, _ = texts
    model = build_tiny_llama(tokenizer)
    ids = tokenize_for_training(tokenizer, train, None)["input_ids"]
    recorder = TrainingPassLosses(ids)
    recorder.attach(model)
    batch = DataCollatorForLanguageModeling(tokenizer, mlm=False)([{"input_ids": row} for row in ids[:BATCH]])
    model.train()  # no dropout in the tiny model: the training forward computes what eval mode computes
    model(**batch)
    model.eval()
    model(**DataCollatorForLanguageModeling(tokenizer, mlm=False)([{"input_ids": ids[-1]}]))  # eval: not recorded
    recorder.detach()
    np.testing.assert_allclose(recorder.losses[:BATCH], sample_losses(model, tokenizer, train[:BATCH]), rtol=1e-5)
    assert np.isnan(recorder.losses[BATCH:]).all()


def test_the_training_pass_source_scores_no_training_text_after_the_first_epoch(tokenizer, texts, tmp_path):
    trainer, view, recorder = _train(tokenizer, texts, tmp_path, rule="paper", soft_options={"loss_source": "training"})
    history = _soft_callback(trainer).history
    assert [record["epoch"] for record in history] == [1, 2]
    assert [record["n_scored_eval"] for record in history] == [0, 0]  # every loss came from a training pass
    assert history[0]["n_scored"] == N_TRAIN and history[0]["n_selected"] > 0
    for epoch in range(3):
        assert Counter(recorder.rows[epoch]) == recorder.expected(epoch)


# --- the view --------------------------------------------------------------------------------------------------


def test_view_serves_the_obfuscated_example_where_the_mask_is_set():
    view = ObfuscatedView([{"input_ids": [0, 1]}, {"input_ids": [0, 2]}],
                          [{"input_ids": [0, 9]}, {"input_ids": [0, 8]}], ["one", "two"])
    assert [view[i]["input_ids"] for i in range(2)] == [[0, 1], [0, 2]]
    view.set_mask(np.array([False, True]))
    assert [view[i]["input_ids"] for i in range(2)] == [[0, 1], [0, 8]]
    assert len(view) == 2 and view[-1]["input_ids"] == [0, 8]
    with pytest.raises(IndexError):
        view[2]
    with pytest.raises(ValueError, match="shape"):
        view.set_mask([True])
    with pytest.raises(ValueError, match="astype"):
        view.set_mask(np.array([0, 1]))
    with pytest.raises(ValueError, match="one entry per training sample"):
        ObfuscatedView([{"input_ids": [0]}], [{"input_ids": [0]}], ["one", "two"])


def test_dataset_transforms_reach_both_versions_and_keep_the_shared_mask():
    import pickle

    from datasets import Dataset

    view = ObfuscatedView([{"input_ids": [0, 1, 2]}, {"input_ids": [0, 3, 4, 5]}, {"input_ids": [0, 6]}],
                          [{"input_ids": [0, 1, 9]}, {"input_ids": [0, 3, 4, 8]}, {"input_ids": [0, 7]}],
                          ["one", "two", "three"])
    assert isinstance(view, Dataset) and view.column_names == ["input_ids"]
    cut = view.map(lambda e: {"input_ids": e["input_ids"][:3], "labels": e["input_ids"][:3]})  # as trl truncates
    kept = cut.filter(lambda e: len(e["input_ids"]) > 2).remove_columns(["labels"])  # drops "three"
    assert type(kept) is ObfuscatedView and kept.texts == ["one", "two"] and kept.shares_mask_with(view)
    assert kept.served_changed().tolist() == [True, False]  # "two" differs only past the cut
    view.set_mask(np.array([True, True, False]))
    assert kept.__getitems__([0, 1]) == [{"input_ids": [0, 1, 9]}, {"input_ids": [0, 3, 4]}]
    kept.set_mask(np.array([False, True]))  # through a derived view: the root's mask changes too
    assert view.mask.tolist() == [False, True, False]
    copy = pickle.loads(pickle.dumps(kept))  # what a DataLoader worker gets: the mask at the time
    assert copy[0] == {"input_ids": [0, 1, 2]} and copy.mask.tolist() == [False, True]


def test_prepare_soft_pairs_texts_and_warns_on_unchanged_obfuscations(tokenizer, texts):
    train, obfuscated, validation = texts
    with pytest.raises(ValueError, match="pair up"):
        prepare_soft(tokenizer, train, obfuscated[:-1], validation)
    with pytest.warns(UserWarning, match="equal their original"):
        view, _ = prepare_soft(tokenizer, train, [*obfuscated[:-1], train[-1]], validation)
    assert view[0]["input_ids"][0] == tokenizer.bos_token_id and view.texts == train


# --- scoring ---------------------------------------------------------------------------------------------------


def test_scoring_runs_in_eval_mode_without_gradients(tokenizer, texts):
    model = get_peft_model(build_tiny_llama(tokenizer),
                           LoraConfig(r=4, lora_dropout=0.5, init_lora_weights=False, target_modules=["q_proj"]))
    model.train()
    batch = tokenizer(texts[0][:4], return_tensors="pt", padding=True)
    with torch.no_grad():  # dropout is live in train mode ...
        assert not torch.equal(model(**batch).logits, model(**batch).logits)
    first = sample_losses(model, tokenizer, texts[0][:4])
    second = sample_losses(model, tokenizer, texts[0][:4])
    np.testing.assert_array_equal(first, second)  # ... but not while scoring
    assert model.training
    assert all(p.grad is None for p in model.parameters())


# --- the callback in a Trainer ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper_run(tokenizer, texts, tmp_path_factory):
    """Three epochs with the paper rule (one warm-up epoch)."""
    return _train(tokenizer, texts, tmp_path_factory.mktemp("paper"), rule="paper")


@pytest.mark.parametrize("rule", ["paper", "release"])
def test_batches_after_a_selection_carry_the_obfuscated_ids(tokenizer, texts, tmp_path, paper_run, rule):
    trainer, view, recorder = paper_run if rule == "paper" else _train(tokenizer, texts, tmp_path, rule=rule)
    history = _soft_callback(trainer).history
    assert [record["epoch"] for record in history] == ([1, 2] if rule == "paper" else [0, 1, 2])
    for epoch in range(3):
        assert Counter(recorder.rows[epoch]) == recorder.expected(epoch)
    if rule == "paper":
        assert not recorder.masks[0].any()  # warm-up epoch: originals only
        assert recorder.masks[1].any()
    else:
        assert recorder.masks[0].sum() == N_TRAIN // 2 and recorder.masks[1].all()
        assert [record["n_scored"] for record in history] == [N_TRAIN, 0, 0]  # later ones take every sample
    np.testing.assert_array_equal(recorder.masks[2], view.mask)


def test_selections_are_logged_and_kept_in_the_history(paper_run):
    trainer, view, _ = paper_run
    callback = _soft_callback(trainer)
    entries = [e for e in trainer.state.log_history if "soft/n_selected" in e]
    assert [e["epoch"] for e in entries] == [1.0, 2.0]
    for entry, record in zip(entries, callback.history):
        assert entry["step"] == record["step"] and entry["soft/n_total"] == N_TRAIN
        assert entry.get("soft/tau") == record["tau"] and entry["soft/n_selected"] == record["n_selected"]
        assert entry.get("soft/mean_loss_selected") == record["mean_loss_selected"]  # None values are not logged
    first, second = callback.history
    assert first["mean_loss_selected"] < first["tau"] <= (first["mean_loss_unselected"] or math.inf)
    assert first["n_scored"] == N_TRAIN  # cumulative: later selections re-score only the samples still open
    assert second["n_scored"] == N_TRAIN - first["n_selected"]
    assert second["n_selected"] >= first["n_selected"]
    np.testing.assert_array_equal(callback.mask, view.mask)


@pytest.mark.parametrize("rule", ["paper", "release"])
def test_resuming_restores_mask_and_history(tokenizer, texts, tmp_path, rule):
    options = dict(save_strategy="epoch", restore_callback_states_from_checkpoint=True, learning_rate=1e-4)
    soft_options = dict(warmup_epochs=0)  # so the first epoch's checkpoint already holds a selection
    full, full_view, full_recorder = _train(tokenizer, texts, tmp_path / "full", rule=rule,
                                            soft_options=soft_options, **options)
    checkpoint = tmp_path / "full" / f"checkpoint-{N_TRAIN // BATCH}"
    resumed, resumed_view, resumed_recorder = _train(tokenizer, texts, tmp_path / "resumed", rule=rule,
                                                     soft_options=soft_options, resume=str(checkpoint), **options)
    expected, restored = _soft_callback(full).history, _soft_callback(resumed).history
    assert [r["epoch"] for r in restored] == [0, 1, 2]
    for a, b in zip(expected, restored):
        assert a["step"] == b["step"] and a["n_selected"] == b["n_selected"]
        assert a["n_scored"] == b["n_scored"]
        if a["mean_loss_selected"] is not None:
            assert a["mean_loss_selected"] == pytest.approx(b["mean_loss_selected"], rel=1e-4)
    for epoch in (1, 2):
        np.testing.assert_array_equal(resumed_recorder.masks[epoch], full_recorder.masks[epoch])
        assert Counter(resumed_recorder.rows[epoch]) == resumed_recorder.expected(epoch)
    np.testing.assert_array_equal(resumed_view.mask, full_view.mask)


def test_resuming_mid_epoch_keeps_the_mask_that_epoch_started_with(tokenizer, texts, tmp_path):
    options = dict(save_strategy="steps", save_steps=3, restore_callback_states_from_checkpoint=True)
    soft_options = dict(warmup_epochs=0)
    full, _, full_recorder = _train(tokenizer, texts, tmp_path / "full", rule="paper", soft_options=soft_options,
                                    **options)
    resumed, _, recorder = _train(tokenizer, texts, tmp_path / "resumed", rule="paper", soft_options=soft_options,
                                  resume=str(tmp_path / "full" / "checkpoint-3"), **options)  # half-way through epoch 1
    assert [r["epoch"] for r in _soft_callback(resumed).history] == [0, 1, 2]  # epoch 1 not selected again
    np.testing.assert_array_equal(recorder.masks[1], full_recorder.masks[1])
    assert recorder.rows[1] == full_recorder.rows[1][BATCH:]  # the batch left of epoch 1, served as before


def test_train_begin_refuses_set_ups_where_the_mask_cannot_take_effect(tokenizer, texts, tmp_path):
    train, obfuscated, validation = texts
    view, soft = prepare_soft(tokenizer, train, obfuscated, validation)
    args, control, served = _args(tmp_path), SimpleNamespace(), SimpleNamespace(dataset=view)
    other = SimpleNamespace(dataset=view.original)  # e.g. SFTTrainer given the tokenized dataset and never the view
    with pytest.raises(ValueError, match="train_dataset"):
        soft.on_train_begin(args, TrainerState(num_train_epochs=3), control, train_dataloader=other)
    persistent = _args(tmp_path, dataloader_num_workers=1, dataloader_persistent_workers=True)
    with pytest.raises(ValueError, match="persistent"):
        soft.on_train_begin(persistent, TrainerState(num_train_epochs=3), control, train_dataloader=served)
    with pytest.raises(ValueError, match="warmup_epochs=1"):
        soft.on_train_begin(args, TrainerState(num_train_epochs=1), control, train_dataloader=served)
    rebuilt = SelectiveObfuscationCallback(**soft.state()["args"])  # as the Trainer rebuilds it on resume
    with pytest.raises(ValueError, match="processing_class"):
        rebuilt.on_train_begin(args, TrainerState(num_train_epochs=3), control, train_dataloader=served)
    with pytest.warns(UserWarning, match="restore_callback_states_from_checkpoint"):
        rebuilt.on_train_begin(args, TrainerState(num_train_epochs=3, global_step=4), control,
                               train_dataloader=served, processing_class=tokenizer)
    assert rebuilt.view is view and rebuilt.tokenizer is tokenizer


# --- the callback in trl's SFTTrainer --------------------------------------------------------------------------


MAX_LENGTH = 24  # shorter than every training text below: the trainers truncate


def _long_texts(local_texts) -> tuple[list[str], list[str]]:
    """Texts longer than MAX_LENGTH tokens and their obfuscations; the last two change only past the cut."""
    long = list(dict.fromkeys(t for t in local_texts if len(t.split()) > 40))[:N_TRAIN]
    obfuscated = [_obfuscate(t) for t in long[:-2]] + [t + " and so on" for t in long[-2:]]
    return long, obfuscated


def _trainer(kind: str, model, tokenizer, view, callbacks, output_dir: Path):
    """A Trainer (the view cut by prepare_soft) or an SFTTrainer (its own max_length cuts it) given the view as is."""
    options = dict(output_dir=str(output_dir), num_train_epochs=1, per_device_train_batch_size=BATCH, seed=0,
                   use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True)
    if kind == "Trainer":
        return Trainer(model=model, args=TrainingArguments(**options), train_dataset=view, processing_class=tokenizer,
                       data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), callbacks=callbacks)
    from trl import SFTConfig, SFTTrainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SFTTrainer(model=model, args=SFTConfig(max_length=MAX_LENGTH, **options), train_dataset=view,
                          processing_class=tokenizer, callbacks=callbacks)


@pytest.mark.parametrize("kind", ["Trainer", "SFTTrainer"])
def test_the_collator_receives_every_selected_paraphrase_as_the_trainer_tokenised_it(kind, tokenizer, local_texts,
                                                                                      tmp_path):
    from privft.training import tokenize_for_training

    train, obfuscated = _long_texts(local_texts)
    cut = MAX_LENGTH if kind == "Trainer" else None  # SFTTrainer: one max length applies, the trainer's
    view, soft = prepare_soft(tokenizer, train, obfuscated, schedule=SoftSchedule(rule="all"), max_length=cut)
    model = build_tiny_llama(tokenizer)
    recorder = BatchRecorder(model, view)
    trainer = _trainer(kind, model, tokenizer, view, [soft, recorder], tmp_path)
    with pytest.warns(UserWarning, match=r"2 of 16 samples selected for obfuscation are served unchanged.*"
                                         r"prefix_keep_ratio"):
        trainer.train()
    served = [tuple(ids[:MAX_LENGTH]) for ids in tokenize_for_training(tokenizer, obfuscated, None)["input_ids"]]
    assert Counter(recorder.rows[0]) == Counter(served)  # every index, as its paraphrase, cut at the trainer's length
    assert soft.view.shares_mask_with(view) and len(soft.view) == N_TRAIN
    (record,) = soft.history
    assert (record["n_selected"], record["n_served_changed"], record["n_lost_swaps"]) == (16, 14, 2)
    logged = [entry for entry in trainer.state.log_history if "soft/n_selected" in entry]
    assert logged[0]["soft/n_selected"] == 16 and logged[0]["soft/n_served_changed"] == 14
    (note,) = soft_report_notes(trainer.state.log_history)  # what the audit callback adds to the report
    assert note.startswith("SOFT: 2 of 16 samples selected for obfuscation are served unchanged")




def test_rewrites_that_failed_the_filter_are_counted_apart_served_or_skipped(tokenizer, texts, tmp_path):
    train, obfuscated, _ = texts
    failed = [i in (1, 4, 7, 10, 13) for i in range(N_TRAIN)]
    skipped = (4, 13)  # failed_rewrites="skip": the original is served
    served = [train[i] if i in skipped else text for i, text in enumerate(obfuscated)]
    with pytest.warns(UserWarning, match="2 of 16 obfuscated texts equal their original"):
        view, soft = prepare_soft(tokenizer, train, served, schedule=SoftSchedule(rule="all"), rewrite_failed=failed)
    trainer = Trainer(model=build_tiny_llama(tokenizer), args=_args(tmp_path, epochs=1), train_dataset=view,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), processing_class=tokenizer,
                      callbacks=[soft])
    with pytest.warns(UserWarning, match="3 of the 14 samples served obfuscated are rewrites that failed"):
        trainer.train()
    (record,) = soft.history
    counts = ("n_selected", "n_served_changed", "n_served_failed_rewrites", "n_skipped_failed_rewrites", "n_lost_swaps")
    assert [record[key] for key in counts] == [16, 14, 3, 2, 0]
    [logged] = [entry for entry in trainer.state.log_history if "soft/n_selected" in entry]
    assert (logged["soft/n_served_failed_rewrites"], logged["soft/n_skipped_failed_rewrites"]) == (3, 2)
    served_note, skipped_note = soft_report_notes(trainer.state.log_history)
    assert served_note.startswith("SOFT: 3 of the 14 samples served obfuscated are rewrites that failed the similarity")
    assert "soft.failed_rewrites: skip" in served_note
    assert skipped_note.startswith("SOFT: 2 of the 16 selected samples are served as written")
    assert soft.state()["args"]["rewrite_failed"] == failed  # a checkpoint rebuilds the callback with them
    with pytest.raises(ValueError, match="rewrite_failed has 3 flags for 16 samples"):
        prepare_soft(tokenizer, train, obfuscated, schedule=SoftSchedule(rule="all"), rewrite_failed=[True] * 3)


def test_a_configuration_measured_as_ineffective_warns_where_it_is_configured():
    from privft.pipeline import SoftSettings

    with pytest.warns(UserWarning, match=r"barely protects: strongest-attack AUC 0.980 → 0.960.*compare.md"):
        SoftSettings(rule="paper", paraphraser_options={"fraction": 0.5}, mode="prefix+rewrite")  # the earlier demo's
    with pytest.warns(UserWarning, match=r"costs more utility than fine-tuning gains.*soft-study.md"):
        SoftSettings(rule="release")  # the defaults with the release rule: the study's centre
    with pytest.warns(UserWarning, match=r"perplexity 57.98 against 23.41 before fine-tuning"):
        SoftSettings(rule="all-after-warmup")  # the non-selective control at the centre
    with pytest.warns(UserWarning, match=r"leaks through its kept prefix: .*0.967.*mode: rewrite-only"):
        SoftSettings(rule="release", mode="prefix+rewrite")  # the centre with the verbatim first half trained on
    with pytest.warns(UserWarning, match=r"protects no more than rewriting the second half alone.*42.07"):
        SoftSettings(rule="release", prefix_keep_ratio=0.0)  # the centre with the whole text rewritten
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SoftSettings(rule="release", paraphraser_options={"fraction": 0.5})  # measured: protects at a cost; no warning
        SoftSettings()  # SOFT off
        SoftSettings(rule="paper")  # the defaults: tied for the most protection per unit of perplexity in the study
    with pytest.warns(UserWarning, match=r"measured on conversations: .*task accuracy on held-out tickets 0/200"):
        SoftSettings(rule="paper").warn_measured("conversations")  # the defaults on completion-only records
