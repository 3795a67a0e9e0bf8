"""Training modes: full and LoRA runs reload exactly as trained; the callbacks also run under trl's SFTTrainer."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from privft.audit import AuditConfig
from privft.callbacks import CanaryCallback, PrivacyAuditCallback
from privft.data import MembershipSplit
from privft.data.canaries import CanaryPlan
from privft.models import load_model
from privft.scoring import score_texts
from privft.training import FinetuneSettings, LoraSettings, build_trainer, tokenize_for_training


@pytest.fixture(scope="module")
def split(local_texts) -> MembershipSplit:
    texts = [t[:250] for t in local_texts if len(t) >= 150]
    return MembershipSplit.random(texts, n_members=16, n_non_members=16, n_validation=4, seed=2, source="pydoc")


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))],
                         ids=["full", "lora"])
def test_a_saved_run_reloads_with_the_same_per_text_losses(tiny_model, tokenizer, split, tmp_path, lora):
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    base, base_tokenizer = load_model(str(tmp_path / "base"))
    settings = FinetuneSettings(epochs=2, learning_rate=1e-2, batch_size=8, max_length=128,
                                output_dir=str(tmp_path / "run"), lora=lora)
    trainer = build_trainer(base, base_tokenizer, tokenize_for_training(base_tokenizer, split.members, 128), settings)
    trainer.train()
    trainer.save_model(str(tmp_path / "trained"))
    base_tokenizer.save_pretrained(tmp_path / "trained")
    texts, _ = split.labels_and_texts()
    trained = np.array([s.mean_nll for s in score_texts(trainer.model, base_tokenizer, texts)])
    reloaded_model, reloaded_tokenizer = load_model(str(tmp_path / "trained"))
    reloaded = np.array([s.mean_nll for s in score_texts(reloaded_model, reloaded_tokenizer, texts)])
    untrained = np.array([s.mean_nll for s in score_texts(tiny_model, tokenizer, texts)])
    np.testing.assert_allclose(reloaded, trained, atol=1e-5)
    assert np.abs(trained - untrained).max() > 1e-3  # training changed the model, so the check has teeth


def test_the_run_seed_fixes_the_lora_init_whatever_ran_before(tiny_model, tokenizer, split, tmp_path):
    settings = FinetuneSettings(output_dir=str(tmp_path), lora=LoraSettings(rank=4, alpha=8, targets=("q_proj",)))
    dataset = tokenize_for_training(tokenizer, split.members, 64)
    inits = []
    for draws in (1, 7):
        torch.rand(draws)  # other work in the process moved the global generator
        model = build_trainer(copy.deepcopy(tiny_model), tokenizer, dataset, settings).model
        inits.append({k: v.clone() for k, v in model.state_dict().items() if "lora_A" in k})
    assert inits[0] and all(torch.equal(inits[0][k], inits[1][k]) for k in inits[0])


def test_canary_and_audit_callbacks_run_under_sft_trainer(tiny_model, tokenizer, split, tmp_path):
    from trl import SFTConfig, SFTTrainer

    plan = CanaryPlan(n_canaries=1, copies=2, n_alternatives=20)
    canary = CanaryCallback(plan, tokenizer)
    audit = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss", "min_k_pp")),
                                 canary_callback=canary)
    config = SFTConfig(output_dir=str(tmp_path), num_train_epochs=1, per_device_train_batch_size=8,
                       learning_rate=1e-3, use_cpu=True, report_to="none", save_strategy="no",
                       disable_tqdm=True, dataset_kwargs={"skip_prepare_dataset": True})
    dataset = tokenize_for_training(tokenizer, plan.insert(split.members), 128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(model=tiny_model, args=config, train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[canary, audit])
    trainer.train()
    assert len(canary.results) == 1 and audit.report.canary_exposure["n_canaries"] == 1
    assert "privacy/loss/auc" in trainer.state.log_history[-1]
    assert (tmp_path / "privacy-audit" / "report.json").exists()
