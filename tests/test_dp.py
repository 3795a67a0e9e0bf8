"""DP-LoRA: per-sample gradients, chunking, frozen base, accounting, empty batches, resume, secret randomness,
duplicates, refusals."""

from __future__ import annotations

import copy
import math
import os
import warnings

import opacus.optimizers.optimizer
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

from privft.config import SettingError
from privft.dp import (
    DPConfigError,
    DPLoraEngine,
    DPSettings,
    default_delta,
    group_privacy,
    make_private,
    sequence_losses,
)
from privft.dp.callback import STATE_FILE
from privft.dp.engine import NOISE, SAMPLING
from privft.training import LoraSettings, tokenize_for_training
from privft.training_record import DPRecord

LORA = LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj", "down_proj"))


@pytest.fixture()
def lora_model(tiny_model):
    return get_peft_model(tiny_model, LORA.to_peft())


@pytest.fixture(scope="module")
def dataset(tokenizer, local_texts):
    return tokenize_for_training(tokenizer, [t[:160] for t in local_texts[:48]], 48)


def _trainer(model, tokenizer, dataset, tmp_path, **overrides) -> Trainer:
    settings = dict(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=8, learning_rate=5e-2,
                    use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, max_grad_norm=0.0,
                    disable_tqdm=True, seed=0, lr_scheduler_type="constant")
    args = TrainingArguments(**{**settings, **overrides})
    return Trainer(model=model, args=args, train_dataset=dataset,
                   data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))


def _lora_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_default_delta_is_below_one_over_n():
    assert default_delta(64) == default_delta(30_000) == 1e-5  # 1/N^1.1 is the smaller one only past ~35,000
    assert default_delta(10 ** 6) == pytest.approx(10 ** -6.6)


def test_small_budgets_are_not_swamped_by_the_accountant_error():
    from privft.dp import calibrate, epsilon_spent

    calibration = calibrate(0.05, 1e-5, 0.15, 14)
    assert calibration.noise_multiplier < 36  # a fixed eps_error of 0.01 asks σ ≈ 40 here (σ ≈ 1280 at ε = 0.01)
    spent = epsilon_spent([(calibration.noise_multiplier, 0.15, 14)], 1e-5, 0.05)
    assert 0.04 < spent <= 0.05  # the bound tracks the budget, not the discretisation error
    assert epsilon_spent([(calibration.noise_multiplier, 0.15, 1)], 1e-5, 0.05) < spent / 2


def test_lora_per_sample_gradients_equal_a_per_example_loop(lora_model, tokenizer, dataset):
    engine = DPLoraEngine(DPSettings(target_epsilon=8.0))
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    batch = collate([dataset[i] for i in range(5)])  # different lengths: right padding and -100 labels
    lora_model.train()
    engine.attach_hooks(lora_model)
    sequence_losses(lora_model, batch).mean().backward()
    params = [p for p in lora_model.parameters() if p.requires_grad]
    per_sample = [p.grad_sample.detach().clone() for p in params]
    engine.remove_hooks()
    for i in range(5):
        lora_model.zero_grad()
        sequence_losses(lora_model, {k: v[i:i + 1] for k, v in batch.items()}).sum().backward()
        loop = torch.cat([p.grad.flatten() for p in params])
        hooks = torch.cat([g[i].flatten() for g in per_sample])
        assert loop.norm() > 0
        assert ((hooks - loop).norm() / loop.norm()).item() <= 1e-5


class _NoNoise(TrainerCallback):
    """Sets σ = 0 on the real DPOptimizer, so two runs can be compared update for update."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, *args, **kwargs):
        self.trainer.dp.optimizer.noise_multiplier = 0.0


def test_chunked_logical_batch_gives_the_unchunked_update(lora_model, tokenizer, dataset, tmp_path):
    updates = []
    for chunk in (None, 3):
        model = copy.deepcopy(lora_model)
        before = _lora_state(model)
        trainer = make_private(_trainer(model, tokenizer, dataset, tmp_path, optim="sgd", logging_steps=4),
                               target_epsilon=8.0, physical_batch_size=chunk, seed=0)  # same draws twice
        trainer.add_callback(_NoNoise(trainer))
        trainer.train()
        updates.append(torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters()
                                  if n in before]))
    whole, chunked = updates
    assert whole.norm() > 0
    assert ((chunked - whole).norm() / whole.norm()).item() <= 1e-5


@pytest.fixture(scope="module")
def private_run(tokenizer, dataset, tmp_path_factory):
    """One DP-LoRA run of 4 steps at ε = 8 with checkpoints every 2 steps, and the weights before it."""
    from privft.models import build_tiny_llama

    model = get_peft_model(build_tiny_llama(tokenizer), LORA.to_peft())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = tmp_path_factory.mktemp("private-run")
    trainer = make_private(_trainer(copy.deepcopy(model), tokenizer, dataset, out, save_strategy="steps",
                                    save_steps=2), target_epsilon=8.0)
    trainer.train()
    return model, before, trainer


def test_lora_moves_base_stays_bit_identical_and_epsilon_stays_within_target(private_run, dataset):
    _, before, trainer = private_run
    params = dict(trainer.model.named_parameters())
    assert all(torch.equal(p, before[n]) for n, p in params.items() if not p.requires_grad)
    assert any(not torch.equal(p, before[n]) for n, p in params.items() if p.requires_grad)
    dp = trainer.dp
    assert dp.noised_steps == dp.calibration.steps == trainer.state.global_step == 4
    assert dp.epsilon() <= 8.0
    logged = [e["dp/epsilon"] for e in trainer.state.log_history if "dp/epsilon" in e]
    assert len(logged) >= 4 and logged == sorted(logged) and logged[-1] <= 8.0
    assert not any("grad_norm" in entry for entry in trainer.state.log_history)  # the raw gradient's norm is private
    assert not hasattr(next(p for p in params.values() if p.requires_grad), "grad_sample")  # hooks removed
    with pytest.raises(RuntimeError, match="noised steps"):
        trainer.training_step(trainer.model, trainer.data_collator([dataset[0]]))


def test_empty_poisson_batches_are_noise_only_steps(lora_model, tokenizer, dataset, tmp_path):
    sizes = []
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    trainer = _trainer(lora_model, tokenizer, dataset, tmp_path, per_device_train_batch_size=1, max_steps=12,
                       logging_steps=12)
    trainer.data_collator = lambda samples: sizes.append(len(samples)) or collate(samples)
    lora = _lora_state(lora_model)
    make_private(trainer, target_epsilon=8.0, seed=0)  # a seed whose 12 draws include empty ones
    trainer.train()
    assert trainer.dp.noised_steps == 12
    assert len(sizes) < 12  # q = 1/48: some of the 12 draws were empty, and still took a noised step
    assert any(not torch.equal(p, lora[n]) for n, p in lora_model.named_parameters() if n in lora)


def test_resume_restores_the_accountant_and_keeps_epsilon(private_run, tokenizer, dataset):
    model, _, straight = private_run
    out = straight.args.output_dir
    assert os.path.exists(os.path.join(out, "checkpoint-2", STATE_FILE))

    def resume():
        trainer = make_private(_trainer(copy.deepcopy(model), tokenizer, dataset, out), target_epsilon=8.0)
        trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
        return trainer

    resumed = resume()
    assert resumed.dp.noised_steps == 4
    assert resumed.dp.epsilon() == pytest.approx(straight.dp.epsilon())
    os.remove(os.path.join(out, "checkpoint-2", STATE_FILE))
    with pytest.raises(DPConfigError, match="under-report ε; the last complete checkpoint is .*checkpoint-4"):
        resume()


def _row_index(dataset, collate, draws: list):
    """A collator that also records each draw as the sorted row indices of its sequences."""
    rows = {tuple(ids): i for i, ids in enumerate(dataset["input_ids"])}
    assert len(rows) == len(dataset)  # the rows identify the draws only if none repeats
    return lambda samples: draws.append(sorted(rows[tuple(s["input_ids"])] for s in samples)) or collate(samples)


def test_resumed_epoch_draws_new_batches(lora_model, tokenizer, dataset, tmp_path):
    small = dataset.select(range(12))  # batch 4: 3 draws per epoch, 2 epochs, a checkpoint at the epoch boundary
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=False)

    def run(resume=None) -> list:
        draws = []
        trainer = _trainer(copy.deepcopy(lora_model), tokenizer, small, tmp_path, max_steps=-1, num_train_epochs=2,
                           per_device_train_batch_size=4, save_strategy="steps", save_steps=3, logging_steps=3)
        trainer.data_collator = _row_index(small, collate, draws)
        make_private(trainer, target_epsilon=8.0, seed=0)  # the same seed both times: the old replay case
        trainer.train(resume_from_checkpoint=resume)
        assert trainer.dp.noised_steps == 6
        return draws

    straight = run()
    resumed = run(os.path.join(tmp_path, "checkpoint-3"))
    first_epoch = straight[:len(resumed)]
    assert len(resumed) >= 2 and resumed != first_epoch  # epoch 1 continues the stream; it does not redraw epoch 0


def _box_muller_uniforms(z: torch.Tensor) -> torch.Tensor:
    """The uniforms that torch's CPU normal sampler (normal_fill_16) turned into the standard normals `z`."""
    pairs = z.double()[:len(z) // 16 * 16].view(-1, 2, 8)  # per 16 values: r·cos(2πu₂) (8), r·sin(2πu₂) (8)
    a, b = pairs[:, 0], pairs[:, 1]
    u1 = 1 - torch.exp(-(a * a + b * b) / 2)  # r = sqrt(-2 log(1 - u₁))
    u2 = torch.atan2(b, a) / (2 * math.pi) % 1.0
    return torch.stack([u1, u2], dim=1).flatten()


def _drawn_from(z: torch.Tensor, stream: torch.Tensor) -> bool:
    """Whether 64 consecutive uniforms behind the normals `z` appear, in order, anywhere in `stream`."""
    words = _box_muller_uniforms(z)[:64]
    windows = stream.double().unfold(0, len(words), 1)  # (positions, 64)
    return bool(((windows - words).abs().max(dim=1).values < 1e-5).any())


def test_noise_is_not_drawn_from_the_sampler_or_the_public_seed(lora_model, tokenizer, dataset, tmp_path,
                                                                  monkeypatch):
    shared = torch.Generator().manual_seed(7)  # control: batches and noise from one stream, as before the fix
    mask_uniforms = torch.rand(4096, generator=torch.Generator().manual_seed(7))
    torch.rand(48, generator=shared)
    assert _drawn_from(torch.normal(0.0, 1.0, (256,), generator=shared), mask_uniforms)

    trainer = make_private(_trainer(lora_model, tokenizer, dataset, tmp_path, max_steps=1), target_epsilon=8.0)
    starts, noise = {}, []
    make_generator, generate_noise = trainer.dp.generator, opacus.optimizers.optimizer._generate_noise

    def recorded_generator(stream, device="cpu"):
        generator = make_generator(stream, device)
        starts[stream] = generator.get_state()
        return generator

    def recorded_noise(std, reference, **kwargs):
        drawn = generate_noise(std, reference, **kwargs)
        noise.append(drawn.flatten() / std)
        return drawn

    monkeypatch.setattr(trainer.dp, "generator", recorded_generator)
    monkeypatch.setattr(opacus.optimizers.optimizer, "_generate_noise", recorded_noise)
    trainer.train()
    sampler_uniforms = torch.rand(4096, generator=torch.Generator().set_state(starts[SAMPLING]))
    public_seed_uniforms = torch.rand(4096, generator=torch.Generator().manual_seed(trainer.args.seed))
    assert noise and len(noise[0]) >= 80
    assert not _drawn_from(noise[0], sampler_uniforms)
    assert not _drawn_from(noise[0], public_seed_uniforms)
    assert len(starts) == 2 and not torch.equal(starts[SAMPLING], starts[NOISE])
    assert trainer.dp.summary()["randomness"] == "os_entropy"
    assert DPLoraEngine(DPSettings(target_epsilon=1.0)).generator(NOISE).initial_seed() != \
        DPLoraEngine(DPSettings(target_epsilon=1.0)).generator(NOISE).initial_seed()  # fresh OS entropy each time


def test_group_privacy_bound():
    assert group_privacy(1.0, 1e-5, 1) == (1.0, 1e-5)
    assert group_privacy(1.0, 1e-5, 5) == pytest.approx((5.0, 5 * math.exp(4) * 1e-5))
    assert group_privacy(8.0, 1e-5, 1000) == (8000.0, 1.0)  # vacuous, and no overflow


def test_a_vacuous_group_guarantee_says_it_is_no_protection():
    record = dict(epsilon=8.0, delta=1e-5, target_epsilon=8.0, noise_multiplier=0.6, sample_rate=0.04, steps=75,
                  noised_steps=75, max_grad_norm=1.0, accountant="prv", privacy_unit="one training sequence",
                  max_multiplicity=3)
    vacuous = DPRecord(**record, group_epsilon=24.0, group_delta=1.0).markdown()
    assert "protected at (ε, δ) = (24, 1) only (group privacy): δ = 1 holds for any training whatever" in vacuous
    assert "no DP protection at all" in vacuous
    meaningful = DPRecord(**record, group_epsilon=24.0, group_delta=2e-4).markdown()
    assert meaningful.endswith("(24, 0.0002) only (group privacy).") and "no DP protection" not in meaningful


def test_repeated_sequences_warn_and_report_group_privacy(lora_model, tokenizer, dataset, tmp_path):
    repeated = dataset.select([*range(44), 0, 0, 0, 1])  # row 0 four times, row 1 twice; N = 48
    trainer = make_private(_trainer(lora_model, tokenizer, repeated, tmp_path), target_epsilon=8.0)
    with pytest.warns(UserWarning, match=r"2 distinct training sequence\(s\) occur more than once, one of them "
                                         r"k = 4 times.*ε = 32, δ = 1 at the target ε = 8"):
        trainer.get_train_dataloader()
    summary = trainer.dp.summary()
    assert (summary["max_multiplicity"], summary["repeated_texts"]) == (4, 2)
    assert (summary["group_epsilon"], summary["group_delta"]) == group_privacy(summary["epsilon"],
                                                                               summary["delta"], 4)


def test_unique_sequences_report_the_per_sequence_guarantee(private_run):
    summary = private_run[2].dp.summary()
    assert summary["max_multiplicity"] == 1 and summary["repeated_texts"] == 0
    assert (summary["group_epsilon"], summary["group_delta"]) == (summary["epsilon"], summary["delta"])


def test_rows_without_token_ids_are_refused(lora_model, tokenizer, tmp_path):
    texts = [{"text": f"row {i}"} for i in range(48)]
    trainer = make_private(_trainer(lora_model, tokenizer, texts, tmp_path), target_epsilon=8.0)
    with pytest.raises(DPConfigError, match="input_ids"):
        trainer.get_train_dataloader()


def test_make_private_takes_the_configs_settings_and_its_fields_as_keywords(lora_model, tokenizer, dataset, tmp_path):
    """One DPSettings serves the YAML and make_private; keywords override it, and a missing ε is refused."""
    settings = DPSettings(target_epsilon=4.0, max_grad_norm=0.5, seed=3)
    trainer = make_private(_trainer(lora_model, tokenizer, dataset, tmp_path), settings, physical_batch_size=2)
    assert (trainer.dp.target_epsilon, trainer.dp.max_grad_norm, trainer.dp.seed, trainer.dp.physical_batch_size) \
        == (4.0, 0.5, 3, 2)
    with pytest.raises(DPConfigError, match=r"set target_epsilon, e.g. make_private\(trainer, target_epsilon=8.0\)"):
        make_private(_trainer(lora_model, tokenizer, dataset, tmp_path / "no-epsilon"))
    with pytest.raises(SettingError, match="max_grad_norm=0"):
        make_private(_trainer(lora_model, tokenizer, dataset, tmp_path / "bad"), target_epsilon=8.0, max_grad_norm=0)


def test_delta_not_below_one_over_n_warns():
    engine = DPLoraEngine(DPSettings(target_epsilon=8.0, delta=0.05))
    with pytest.warns(UserWarning, match=r"delta=0\.05 is not below 1/N = 0\.0208333 for the N = 48 .*"
                                         r"min\(1e-5, 1/N\^1\.1\) = 1e-05"):
        engine.calibrate(48, 8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DPLoraEngine(DPSettings(target_epsilon=8.0)).calibrate(48, 8, 4)


def test_sft_trainer_trains_privately(lora_model, tokenizer, dataset, tmp_path):
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(output_dir=str(tmp_path), max_steps=4, logging_steps=4, per_device_train_batch_size=8,
                       use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, max_grad_norm=0.0,
                       activation_checkpointing=False, dataset_kwargs={"skip_prepare_dataset": True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(model=lora_model, args=config, train_dataset=dataset, processing_class=tokenizer)
    make_private(trainer, target_epsilon=8.0)
    trainer.train()
    assert trainer.dp.noised_steps == 4 and trainer.dp.epsilon() <= 8.0
    assert type(trainer).__name__ == "DPLoraSFTTrainer"


REFUSALS = {
    "packing": ("sft", dict(packing=True), "packing"),
    "padding-free": ("sft", dict(padding_free=True, max_length=None), "padding_free"),
    "non-reentrant checkpointing": ("sft", dict(), "use_reentrant"),
    "HF clipping": ("hf", dict(max_grad_norm=1.0), "max_grad_norm"),
    "accumulation": ("hf", dict(gradient_accumulation_steps=2), "gradient_accumulation_steps"),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_unsafe_trainer_settings_are_refused(lora_model, tokenizer, dataset, tmp_path, case):
    kind, overrides, message = REFUSALS[case]
    if kind == "sft":
        from trl import SFTConfig, SFTTrainer

        base = dict(max_grad_norm=0.0, activation_checkpointing=False)
        if case == "non-reentrant checkpointing":
            base.pop("activation_checkpointing")  # SFTConfig's default: on, non-reentrant
        config = SFTConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none",
                           dataset_kwargs={"skip_prepare_dataset": True}, **{**base, **overrides})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = SFTTrainer(model=lora_model, args=config, train_dataset=dataset, processing_class=tokenizer)
    else:
        trainer = _trainer(lora_model, tokenizer, dataset, tmp_path, **overrides)
    with pytest.raises(DPConfigError, match=message):
        make_private(trainer, target_epsilon=8.0)


def test_fp16_and_several_processes_are_refused(lora_model, tokenizer, dataset, tmp_path, monkeypatch):
    trainer = _trainer(lora_model, tokenizer, dataset, tmp_path)
    trainer.args.fp16 = True  # fp16 cannot be requested on a CPU machine; set it as a GPU run would have it
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    with pytest.raises(DPConfigError, match=r"(?s)GradScaler.*2 processes"):
        make_private(trainer, target_epsilon=8.0)


@pytest.mark.parametrize("lora", [dict(use_dora=True), dict(target_modules=["embed_tokens", "q_proj"])],
                         ids=["DoRA", "embeddings"])
def test_dora_and_embedding_lora_are_refused(tiny_model, tokenizer, dataset, tmp_path, lora):
    model = get_peft_model(tiny_model, LoraConfig(r=4, **{"target_modules": ["q_proj"], **lora}))
    with pytest.raises(DPConfigError, match="DoRA" if "use_dora" in lora else "embedding"):
        make_private(_trainer(model, tokenizer, dataset, tmp_path), target_epsilon=8.0)


def test_a_model_without_adapters_is_refused(tiny_model, tokenizer, dataset, tmp_path):
    with pytest.raises(DPConfigError, match="get_peft_model"):
        make_private(_trainer(tiny_model, tokenizer, dataset, tmp_path), target_epsilon=8.0)


def test_soft_view_as_training_set_is_refused(lora_model, tokenizer, local_texts, tmp_path):
    from privft.callbacks import prepare_soft

    texts = [t[:120] for t in local_texts[:12]]
    view, _ = prepare_soft(tokenizer, texts, [t.upper() for t in texts], texts[:2], max_length=48)
    with pytest.raises(DPConfigError, match="SOFT"):
        make_private(_trainer(lora_model, tokenizer, view, tmp_path), target_epsilon=8.0)


def test_run_config_refuses_dp_with_full_fine_tuning_or_soft():
    from privft.pipeline import DPSettings, RunConfig, SoftSettings
    from privft.training import FinetuneSettings

    with pytest.raises(ValueError, match="LoRA adapters only"):
        RunConfig(training=FinetuneSettings(lora=None), dp=DPSettings(target_epsilon=1.0))
    with pytest.raises(ValueError, match="SOFT"):
        RunConfig(soft=SoftSettings(rule="paper"), dp=DPSettings(target_epsilon=1.0))


def test_an_epsilon_too_large_to_calibrate_is_refused_before_any_file_is_written(tmp_path, capsys):
    """ε = 1,000 searched σ for minutes after the manifest and split were written; now the config is refused."""
    from privft.cli import main
    from privft.config import ConfigError, load_yaml
    from privft.dp.accounting import MAX_TARGET_EPSILON, calibrate
    from privft.pipeline import RunConfig

    config = tmp_path / "run.yaml"
    config.write_text(f"dp: {{target_epsilon: 1000}}\ntraining: {{output_dir: {tmp_path / 'run'}}}\n")
    with pytest.raises(ConfigError, match=r"dp.target_epsilon=1000.0 must be at most 100: the noise calibration"):
        load_yaml(RunConfig, config)
    with pytest.raises(SystemExit, match="target_epsilon=1000.0 must be at most 100"):
        main(["train", str(config)])
    assert not (tmp_path / "run").exists()  # no manifest, no split
    with pytest.raises(ValueError, match="must be at most 100"):
        calibrate(1000.0, 1e-5, 0.04, 75)
    assert DPSettings(target_epsilon=MAX_TARGET_EPSILON).target_epsilon == 100  # the paper's ε = 100 row still runs
