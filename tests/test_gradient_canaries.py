"""DP-LoRA's white-box gradient canaries: injection before the noise, scores, the one-run audit, state, refusals."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from opacus.optimizers import DPOptimizer
from peft import get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

from privft.callbacks.one_run import gradient_canary_epsilon_audit
from privft.config import SettingError
from privft.dp import DPConfigError, DPLoraEngine, DPSettings, make_private
from privft.dp.callback import STATE_FILE
from privft.training import LoraSettings, tokenize_for_training

LORA = LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))


@pytest.fixture(scope="module")
def dataset(tokenizer, local_texts):
    return tokenize_for_training(tokenizer, [t[:160] for t in local_texts[:48]], 48)


@pytest.fixture()
def lora_model(tiny_model):
    return get_peft_model(tiny_model, LORA.to_peft())


def _private(model, tokenizer, dataset, tmp_path, dp: DPSettings, **overrides) -> Trainer:
    settings = dict(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=8, learning_rate=1e-2,
                    use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, max_grad_norm=0.0,
                    disable_tqdm=True, seed=0, lr_scheduler_type="constant", optim="sgd")
    trainer = Trainer(model=model, args=TrainingArguments(**{**settings, **overrides}), train_dataset=dataset,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    return make_private(trainer, dp)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])


def test_a_canary_adds_its_clipped_gradient_before_the_noise_and_nothing_else(lora_model, tokenizer, dataset,
                                                                             tmp_path, one_thread):
    runs = {}
    for count in (0, 100):
        model = copy.deepcopy(lora_model)
        trainer = _private(model, tokenizer, dataset, tmp_path / str(count),
                           DPSettings(target_epsilon=8.0, seed=0, max_grad_norm=0.5, gradient_canaries=count))
        trainer.train()
        runs[count] = trainer
    off, on = runs[0], runs[100]
    assert type(off.dp.optimizer) is DPOptimizer and off.dp.canaries is None  # off: opacus' optimizer as before
    assert "gradient_canaries" not in off.dp.state_dict() and off.dp.summary()["gradient_canaries"] == 0
    moved = torch.nonzero(_flat(on.model) != _flat(off.model)).flatten().numpy()  # same batches, same noise
    canaries = on.dp.canaries
    assert 0 < len(moved) < canaries.included.sum()  # about q = 1/6 of the inserted canaries joined the one step
    assert set(moved) <= set(canaries.coordinates[canaries.included])  # a control never joins
    lr, c, batch = 1e-2, 0.5, 8  # SGD: the update moves by −lr·C/L where a canary joined
    shift = (_flat(on.model) - _flat(off.model))[moved]
    assert torch.allclose(shift, torch.full_like(shift, -lr * c / batch), rtol=1e-3)
    assert on.dp.calibration == off.dp.calibration and on.dp.epsilon() == off.dp.epsilon()  # the accountant's ε


def test_weakly_noised_included_canaries_separate_and_bound_epsilon(lora_model, tokenizer, dataset, tmp_path,
                                                                    one_thread):
    trainer = _private(lora_model, tokenizer, dataset, tmp_path, DPSettings(target_epsilon=50.0, seed=1,
                                                                             gradient_canaries=200),
                       per_device_train_batch_size=16, max_steps=12)
    trainer.train()
    canaries = trainer.dp.canaries
    assert trainer.dp.n_examples == 48 and trainer.dp.calibration.sample_rate == 16 / 48  # q over the real ones
    inside, outside = canaries.scores[canaries.included], canaries.scores[~canaries.included]
    assert np.median(inside) > np.quantile(outside, 0.9)
    entry = gradient_canary_epsilon_audit(trainer.dp)
    assert entry["n_canaries"] == 200 and entry["copies"] == 1 and entry["n_included"] == canaries.included.sum()
    assert 0 < entry["epsilon_lower_bound"] <= entry["accountant_epsilon"] == trainer.dp.epsilon() <= 50.0
    assert entry["fdp"]["epsilon_lower_bound"] >= entry["epsilon_lower_bound"]
    assert entry["accountant_delta"] == trainer.dp.calibration.delta


def test_a_resumed_run_keeps_its_canaries_and_scores_and_refuses_another_count(lora_model, tokenizer, dataset,
                                                                              tmp_path, one_thread):
    dp = DPSettings(target_epsilon=8.0, gradient_canaries=50)  # OS entropy: only the checkpoint knows the canaries
    straight = _private(copy.deepcopy(lora_model), tokenizer, dataset, tmp_path, dp, max_steps=4,
                        save_strategy="steps", save_steps=2)
    straight.train()
    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())["gradient_canaries"]
    assert saved["count"] == 50 and any(saved["scores"])
    resumed = _private(copy.deepcopy(lora_model), tokenizer, dataset, tmp_path, dp, max_steps=4)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    canaries = resumed.dp.canaries
    assert canaries.coordinates.tolist() == saved["coordinates"] == straight.dp.canaries.coordinates.tolist()
    assert canaries.included.tolist() == saved["included"] and resumed.dp.noised_steps == 4
    assert not np.array_equal(canaries.scores, saved["scores"])  # steps 3 and 4 added to the saved sums
    other = _private(copy.deepcopy(lora_model), tokenizer, dataset, tmp_path, DPSettings(target_epsilon=8.0),
                     max_steps=4)
    with pytest.raises(DPConfigError, match="50 gradient canaries but this run has 0"):
        other.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_bad_canary_counts_are_refused(lora_model):
    with pytest.raises(SettingError, match="gradient_canaries"):
        DPSettings(gradient_canaries=10)  # DP off
    with pytest.raises(SettingError, match="gradient_canaries"):
        DPSettings(target_epsilon=8.0, gradient_canaries=-1)
    params = [p for p in lora_model.parameters() if p.requires_grad]
    too_many = DPLoraEngine(DPSettings(target_epsilon=8.0, gradient_canaries=10 ** 9)).canaries
    with pytest.raises(DPConfigError, match="more than the .* trainable parameters"):
        too_many.bind(params)
