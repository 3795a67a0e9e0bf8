"""The CUDA paths (`pytest -m gpu`; skipped without CUDA): scoring against the CPU, SOFT and the audit callback on a
LoRA fine-tune, DP-LoRA's noise on the device, and the chunked head's memory. scripts/device_check.sh runs them."""

from __future__ import annotations

import copy

import numpy as np
import opacus.optimizers.optimizer
import pytest
import torch
from peft import get_peft_model
from test_dp import LORA, _trainer, dataset  # noqa: F401  (dataset: the fixture, reused)
from test_scoring import _mixed_lengths
from test_soft import _args, _obfuscate, texts  # noqa: F401  (texts: the fixture, reused)
from transformers import DataCollatorForLanguageModeling, Trainer

from privft.audit import AuditConfig
from privft.callbacks import CanaryCallback, PrivacyAuditCallback, prepare_soft
from privft.data import MembershipSplit
from privft.data.canaries import CanaryPlan
from privft.dp import make_private
from privft.dp.engine import NOISE, SAMPLING
from privft.models import build_tiny_llama
from privft.scoring import forward as scoring
from privft.scoring import score_texts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

FP32_TOLERANCE = 1e-4  # nats per token: fp32 on CUDA against fp32 on the CPU (the bound)
# bf16 against bf16, CUDA against CPU: the kernels round each bf16 activation (8 bits of mantissa, ~0.4 %)
# differently, so a token's log p may move by a few hundredths of a nat; a text's mean loss moves far less.
BF16_TOKEN_TOLERANCE, BF16_MEAN_TOLERANCE = 5e-2, 1e-2


def _decoder_devices(model: torch.nn.Module) -> list[str]:
    """A list that fills with the device type of every batch the decoder reads in eval mode (the scorer's passes)."""
    seen: list[str] = []

    def record(module, args, kwargs):
        if not module.training:
            seen.append(kwargs["input_ids"].device.type)

    model.get_decoder().register_forward_pre_hook(record, with_kwargs=True)
    return seen


def test_scoring_on_the_device_equals_the_cpu_in_fp32(tiny_model, tokenizer, local_texts):
    sample = _mixed_lengths(local_texts)
    on_cpu = score_texts(tiny_model, tokenizer, sample, max_length=128)  # long texts slide over several windows
    on_device = score_texts(copy.deepcopy(tiny_model).to("cuda"), tokenizer, sample, max_length=128)
    for cpu, device in zip(on_cpu, on_device):
        assert device.token_logprobs.dtype == np.float32 and device.n_tokens == cpu.n_tokens
        for field in ("token_logprobs", "mean_logprob", "std_logprob"):
            np.testing.assert_allclose(getattr(device, field), getattr(cpu, field), rtol=0, atol=FP32_TOLERANCE)


def test_a_bf16_model_scores_with_fp32_statistics_on_the_device(tiny_model, tokenizer, local_texts):
    sample = _mixed_lengths(local_texts)
    model = tiny_model.to(torch.bfloat16)
    on_cpu = score_texts(model, tokenizer, sample, max_length=128)
    on_device = score_texts(copy.deepcopy(model).to("cuda"), tokenizer, sample, max_length=128)
    for cpu, device in zip(on_cpu, on_device):
        assert device.token_logprobs.dtype == device.mean_logprob.dtype == device.std_logprob.dtype == np.float32
        np.testing.assert_allclose(device.token_logprobs, cpu.token_logprobs, rtol=0, atol=BF16_TOKEN_TOLERANCE)
        assert abs(device.mean_nll - cpu.mean_nll) <= BF16_MEAN_TOLERANCE


def test_a_lora_fine_tune_with_soft_canaries_and_the_audit_runs_on_the_device(tiny_model, tokenizer,
                                                                                 texts, tmp_path):  # noqa: F811
    train, obfuscated, validation = texts
    plan = CanaryPlan(n_canaries=1, copies=2, n_alternatives=20)
    members = plan.insert(train)
    view, soft = prepare_soft(tokenizer, members, [_obfuscate(t) for t in members], validation)
    split = MembershipSplit.from_texts(train, validation, source="device test")  # SOFT's validation: never trained
    canary = CanaryCallback(plan, tokenizer)
    audit = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss", "ref_ratio", "min_k_pp")),
                                 canary_callback=canary)
    model = get_peft_model(tiny_model, LORA.to_peft())
    devices = _decoder_devices(model)
    trainer = Trainer(model=model, args=_args(tmp_path, epochs=2, use_cpu=False), train_dataset=view,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), processing_class=tokenizer,
                      callbacks=[soft, canary, audit])
    trainer.train()
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert devices and set(devices) == {"cuda"}  # SOFT's, the exposure's and the audit's passes, all on the device
    assert [record["epoch"] for record in soft.history] == [1] and soft.history[0]["n_scored"] == len(members)
    assert audit.report.reference == "base model (adapters disabled)"
    assert set(audit.report.attacks) == {"loss", "ref_ratio", "min_k_pp"}
    assert audit.report.canary_exposure["n_canaries"] == 1 and len(canary.results) == 1
    assert (tmp_path / "privacy-audit" / "report.json").exists()


def test_dp_lora_noise_is_drawn_on_the_device_from_its_own_generator(tiny_model, tokenizer, dataset,  # noqa: F811
                                                                      tmp_path, monkeypatch):
    model = get_peft_model(tiny_model, LORA.to_peft())
    trainer = make_private(_trainer(model, tokenizer, dataset, tmp_path, max_steps=2, use_cpu=False),
                           target_epsilon=8.0)
    generators, noise = {}, []
    make_generator, generate_noise = trainer.dp.generator, opacus.optimizers.optimizer._generate_noise

    def recorded_generator(stream, device="cpu"):
        generators[stream] = make_generator(stream, device)
        return generators[stream]

    def recorded_noise(std, reference, **kwargs):
        drawn = generate_noise(std, reference, **kwargs)
        noise.append((drawn, std))
        return drawn

    monkeypatch.setattr(trainer.dp, "generator", recorded_generator)
    monkeypatch.setattr(opacus.optimizers.optimizer, "_generate_noise", recorded_noise)
    trainer.train()
    sampler, noiser = generators[SAMPLING], generators[NOISE]
    assert sampler.device.type == "cpu"  # opacus' Poisson sampler draws its masks on the host
    assert noiser.device.type == "cuda" and trainer.dp.optimizer.generator is noiser and noiser is not sampler
    assert noiser.initial_seed() != sampler.initial_seed()
    assert noise and all(drawn.device.type == "cuda" for drawn, _ in noise)
    assert trainer.dp.noised_steps == 2 and {p.device.type for p in model.parameters()} == {"cuda"}
    # Seeded as documented: the first noise tensor is the first draw of a CUDA generator seeded like the noise stream.
    first, std = noise[0]
    replay = torch.normal(0.0, std, first.shape, device=first.device,
                          generator=torch.Generator(device=first.device).manual_seed(noiser.initial_seed()))
    torch.testing.assert_close(first, replay)
    from_sampler_seed = torch.normal(0.0, std, first.shape, device=first.device,
                                     generator=torch.Generator(device=first.device).manual_seed(sampler.initial_seed()))
    assert not torch.allclose(first, from_sampler_seed)


def test_the_chunked_head_allocates_at_most_its_chunk_budget_beyond_the_model_and_one_decoder_pass(
        tokenizer, local_texts, monkeypatch):
    model = build_tiny_llama(tokenizer).to("cuda")
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    block_rows, tile_width = 64, 256
    monkeypatch.setattr(scoring, "HEAD_TILE_WIDTH", tile_width)
    monkeypatch.setattr(scoring, "HEAD_TILE_ELEMENTS", block_rows * tile_width)
    encoded = [ids for ids in tokenizer(local_texts, add_special_tokens=False)["input_ids"] if 100 <= len(ids) <= 200]
    sample = tokenizer.batch_decode(encoded[:8])
    start = scoring.start_token(tokenizer)
    sequences = [[start, *ids] for ids in tokenizer(sample, add_special_tokens=False)["input_ids"]]
    width, n_rows = max(map(len, sequences)), sum(len(s) - 1 for s in sequences)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences], device="cuda")  # the pad id costs nothing
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device="cuda")

    def peak_beyond_the_model(work) -> int:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        work()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - resident

    with torch.no_grad():
        decoder = peak_beyond_the_model(lambda: model.get_decoder()(input_ids=ids, attention_mask=mask,
                                                                     use_cache=False))
    scored = peak_beyond_the_model(lambda: score_texts(model, tokenizer, sample, batch_size=len(sample)))
    # The two fp32 tile buffers every block reuses and the tiles' five sums per row (the merge's few copies of the
    # sums, kilobytes, fall in the allowance for rounding below).
    chunk_budget = (2 * block_rows * tile_width + 5 * -(-vocab // tile_width) * block_rows) * 4
    # Per scored row: its gathered hidden state, 4 int64 indices (row, position, position - 1, target) and the 3
    # statistics three times over (per block, concatenated, stacked for the copy to the host); then the ids and mask.
    per_row = n_rows * (hidden * 4 + 4 * 8 + 3 * 3 * 4) + 2 * ids.numel() * 8
    assert scored <= decoder + chunk_budget + per_row + 2**20  # 1 MiB for the allocator's rounding
    assert scored < decoder + n_rows * vocab * 4  # far below a full-logits pass
