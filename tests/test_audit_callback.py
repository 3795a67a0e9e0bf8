"""The audit callback: runs at train end, logs headline numbers, writes the report and model card."""

from __future__ import annotations

import pytest

from privft.audit import AuditConfig
from privft.callbacks.audit import CARD_END, CARD_START, PrivacyAuditCallback, write_model_card_section
from privft.data import MembershipSplit
from privft.training import FinetuneSettings, LoraSettings, build_trainer, finetune, tokenize_for_training


@pytest.fixture(scope="module")
def split(local_texts) -> MembershipSplit:
    texts = [t[:300] for t in local_texts if len(t) >= 200]
    return MembershipSplit.random(texts, n_members=20, n_non_members=20, seed=1, source="pydoc")


def test_audit_runs_at_train_end_and_every_epoch(tiny_model, tokenizer, split, tmp_path):
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss", "ref_ratio")),
                                    every_n_epochs=1)
    settings = FinetuneSettings(epochs=2, learning_rate=1e-2, batch_size=8, max_length=128, output_dir=str(tmp_path),
                                lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj")))
    finetune(tiny_model, tokenizer, split.members, settings, callbacks=[callback])
    assert len(callback.reports) == 3  # after epochs 1 and 2, then at train end
    assert callback.report.reference == "base model (adapters disabled)"
    audit_dir = tmp_path / "privacy-audit"
    assert (audit_dir / "report.json").exists() and (audit_dir / "epoch-1" / "report.md").exists()
    card = (tmp_path / "README.md").read_text()
    assert card.count(CARD_START) == 1 and "20 members vs 20 non-members" in card


def test_trainer_logs_carry_the_headline_numbers(tiny_model, tokenizer, split, tmp_path):
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss",)))
    settings = FinetuneSettings(epochs=1, batch_size=8, max_length=128, output_dir=str(tmp_path), lora=None)
    trainer = build_trainer(tiny_model, tokenizer, tokenize_for_training(tokenizer, split.members, 128), settings,
                            callbacks=[callback])
    trainer.train()
    logged = trainer.state.log_history[-1]
    assert logged["privacy/loss/auc"] == callback.report.attacks["loss"].auc.auc
    assert logged["privacy/perplexity"] == pytest.approx(callback.report.perplexity.value)


def test_model_card_section_is_replaced_not_duplicated(tiny_model, tokenizer, split, tmp_path):
    (tmp_path / "README.md").write_text("# My model\n\nTrained on tickets.\n")
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss",)))
    settings = FinetuneSettings(epochs=1, batch_size=8, max_length=128, output_dir=str(tmp_path), lora=None)
    finetune(tiny_model, tokenizer, split.members, settings, callbacks=[callback])
    write_model_card_section(tmp_path, callback.report)
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("# My model") and card.count(CARD_START) == card.count(CARD_END) == 1


def test_an_audit_that_cannot_run_fails_before_training(tiny_model, tokenizer, split, tmp_path):
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("ref_ratio",)))
    trainer = build_trainer(tiny_model, tokenizer, tokenize_for_training(tokenizer, split.members, 128),
                            FinetuneSettings(epochs=1, output_dir=str(tmp_path), lora=None), callbacks=[callback])
    with pytest.raises(ValueError, match="'ref_ratio' cannot run"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_the_callback_runs_the_ensemble(tiny_model, tokenizer, split, tmp_path):
    callback = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss", "ensemble")))
    settings = FinetuneSettings(epochs=1, batch_size=8, max_length=128, output_dir=str(tmp_path), lora=None)
    finetune(tiny_model, tokenizer, split.members, settings, callbacks=[callback])  # the early check lets it through
    assert set(callback.report.attacks) == {"loss", "ensemble"}


def test_bad_schedule_is_refused(tokenizer, split):
    with pytest.raises(ValueError, match="every_n_epochs"):
        PrivacyAuditCallback(split, tokenizer, every_n_epochs=0)
