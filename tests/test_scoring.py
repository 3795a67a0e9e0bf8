"""The one-pass scorer: padding safety, sliding windows, exact statistics, caching."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model

from privft.attacks import min_k_plus_plus_score
from privft.scoring import (
    ScoringError,
    StatsCache,
    model_fingerprint,
    score_losses,
    score_texts,
    start_token,
    start_token_rule,
)
from privft.scoring import forward as scoring


def _mixed_lengths(local_texts: list[str]) -> list[str]:
    return [text[:n] for text, n in zip(local_texts[:16], [40, 300, 900, 25, 150, 600, 80, 1200] * 2)]


def test_batch_size_and_padding_do_not_change_statistics(tiny_model, tokenizer, local_texts):
    texts = _mixed_lengths(local_texts)
    one = score_texts(tiny_model, tokenizer, texts, batch_size=1)
    eight = score_texts(tiny_model, tokenizer, texts, batch_size=8)
    for a, b in zip(one, eight):
        for field in ("token_logprobs", "mean_logprob", "std_logprob"):
            np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=1e-5)


def test_loss_only_pass_equals_the_full_statistics_loss(tiny_model, tokenizer, local_texts, tmp_path):
    texts = _mixed_lengths(local_texts)
    full = score_texts(tiny_model, tokenizer, texts, max_length=128, batch_size=3)
    np.testing.assert_allclose(score_losses(tiny_model, tokenizer, texts, max_length=128),
                               [s.mean_nll for s in full], rtol=1e-5)
    cache = StatsCache(tmp_path)
    loss_only = score_texts(tiny_model, tokenizer, texts, max_length=128, distribution=False, cache=cache)
    assert all(s.mean_logprob is None and s.std_logprob is None for s in loss_only)
    for a, b in zip(full, loss_only):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-5)
    cached = score_texts(tiny_model, tokenizer, texts, max_length=128, distribution=False, cache=cache)
    assert cached[0].mean_logprob is None and np.array_equal(cached[0].token_logprobs, loss_only[0].token_logprobs)
    with_distribution = score_texts(tiny_model, tokenizer, texts[:2], max_length=128, cache=cache)
    assert with_distribution[0].mean_logprob is not None  # a loss-only entry never stands in for full statistics
    with pytest.raises(ValueError, match="μ and σ"):
        min_k_plus_plus_score(loss_only[0])


def test_loss_only_and_full_passes_agree_bit_for_bit(tiny_model, tokenizer, local_texts):
    # A model audited against itself (compare's pretrained row) must get reference ratios of exactly 0.
    texts = _mixed_lengths(local_texts)
    full = score_texts(tiny_model, tokenizer, texts, max_length=128)
    loss_only = score_texts(tiny_model, tokenizer, texts, max_length=128, distribution=False)
    for a, b in zip(full, loss_only):
        np.testing.assert_array_equal(a.token_logprobs, b.token_logprobs)


def test_every_token_is_scored_once_and_in_order(tokenizer):
    ids = list(range(1, 301))  # BOS then 299 text tokens
    for max_length, stride in [(64, 32), (64, 63), (50, 7), (400, 200)]:
        windows = scoring._windows(0, ids, max_length, stride)
        scored = [w.input_ids[t] for w in windows for t in range(w.first_target, len(w.input_ids))]
        assert scored == ids[1:]
        assert all(len(w.input_ids) <= max_length for w in windows)
        assert all(w.first_target >= 1 for w in windows)  # every scored token has context


def test_a_pinned_prefix_starts_every_window_and_every_token_is_scored_once():
    pinned, ids = [0, 900, 901, 902], list(range(1, 300))  # BOS + a 3-token prefix, then the text
    for max_length, stride in [(64, 32), (64, 63), (8, 7), (400, 200)]:
        windows = scoring._windows(0, ids, max_length, stride, first=0, pinned=pinned)
        scored = [w.input_ids[t] for w in windows for t in range(w.first_target, len(w.input_ids))]
        assert scored == ids
        assert all(w.input_ids[:4] == pinned and w.first_target >= 4 for w in windows)
        assert all(len(w.input_ids) <= max_length for w in windows)


def test_sliding_windows_score_long_texts_without_truncation(tiny_model, tokenizer, local_texts):
    long_text = " ".join(local_texts[:40])
    n_tokens = len(tokenizer(long_text, add_special_tokens=False)["input_ids"])
    (windowed,) = score_texts(tiny_model, tokenizer, [long_text], max_length=64, stride=32)
    assert n_tokens > 64 and windowed.n_tokens == n_tokens
    # The first window sees the same context as a full pass, so its tokens agree exactly.
    (full,) = score_texts(tiny_model, tokenizer, [long_text], max_length=256, stride=128)
    np.testing.assert_allclose(windowed.token_logprobs[:63], full.token_logprobs[:63], atol=1e-5)


def test_min_k_plus_plus_matches_direct_full_vocabulary_computation(tiny_model, tokenizer, local_texts):
    text = local_texts[3]
    (stats,) = score_texts(tiny_model, tokenizer, [text])
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_model(ids).logits[0, :-1].double(), dim=-1)
    token_lp = logp.gather(1, ids[0, 1:, None]).squeeze(1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    sigma = ((p * logp**2).sum(-1) - mu**2).sqrt()
    z = ((token_lp - mu) / sigma).numpy()
    k = max(1, int(0.2 * len(z)))
    np.testing.assert_allclose(stats.token_logprobs, token_lp.numpy(), atol=1e-5)
    np.testing.assert_allclose(stats.mean_logprob, mu.numpy(), atol=1e-5)
    np.testing.assert_allclose(stats.std_logprob, sigma.numpy(), atol=1e-5)
    assert min_k_plus_plus_score(stats, 0.2) == pytest.approx(np.sort(z)[:k].mean(), abs=1e-4)


def test_statistics_match_float64_on_hard_distributions():
    # Mass clustered far below the max makes the raw second moment cancel; huge logits overflow exp without the shift.
    generator = torch.Generator().manual_seed(0)
    rows = []
    for depth in (0.25, 0.5, 2.0, 6.0):
        for spread in (0.0, 1e-3, 1e-1):
            row = torch.full((32768,), -40.0)
            row[0], row[1:32001] = 0.0, -depth + spread * torch.randn(32000, generator=generator)
            rows.append(row)
    rows += list(torch.randn(4, 32768, generator=generator) * 300)
    logits = torch.stack(rows)
    targets = torch.randint(0, 32768, (len(rows),), generator=generator)
    logp = torch.log_softmax(logits.double(), dim=-1)
    mu = (logp.exp() * logp).sum(-1)
    sigma = (logp.exp() * (logp - mu[:, None]) ** 2).sum(-1).sqrt()
    # A linear head over one-hot hidden rows gives these logits back exactly, through the scorer's tiles and merge.
    head = torch.nn.Linear(len(rows), logits.shape[1], bias=False)
    head.weight.data = logits.T.contiguous()
    hidden = torch.eye(len(rows))
    workspace = scoring._HeadWorkspace.for_model(SimpleNamespace(get_output_embeddings=lambda: head))
    target_logp, mean, std = scoring._head_statistics(head, hidden, targets, True, workspace)
    loss_only = scoring._head_statistics(head, hidden, targets, False, workspace).logprob
    expected_target = logp.gather(1, targets[:, None]).squeeze(1)
    np.testing.assert_allclose(target_logp.double(), expected_target, atol=1e-5)
    np.testing.assert_allclose(loss_only.double(), expected_target, atol=1e-5)
    np.testing.assert_allclose(mean.double(), mu, atol=1e-5)
    np.testing.assert_allclose(std.double(), sigma, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("head", ["with bias", "wrapped by LoRA"])
def test_heads_other_than_a_bare_linear_give_exact_statistics(tiny_model, tokenizer, local_texts, head, monkeypatch):
    monkeypatch.setattr(scoring, "HEAD_TILE_WIDTH", 100)  # eleven tiles of the 1,024-token vocabulary, one narrower
    model = copy.deepcopy(tiny_model)
    if head == "with bias":
        weight = model.lm_head.weight.detach().clone()
        model.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=True)
        model.lm_head.weight.data, model.lm_head.bias.data = weight, torch.randn(weight.shape[0])
    else:
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["lm_head"], init_lora_weights=False))
    (stats,) = score_texts(model, tokenizer, local_texts[:1])
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer(local_texts[0], add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
    np.testing.assert_allclose(stats.token_logprobs, logp.gather(1, ids[0, 1:, None]).squeeze(1), atol=1e-5)
    np.testing.assert_allclose(stats.mean_logprob, (logp.exp() * logp).sum(-1), atol=1e-5)


def test_head_chunking_does_not_change_results(tiny_model, tokenizer, local_texts, monkeypatch):
    texts = _mixed_lengths(local_texts)[:4]
    whole = score_texts(tiny_model, tokenizer, texts)
    monkeypatch.setattr(scoring, "HEAD_TILE_WIDTH", 100)  # eleven tiles of the 1,024-token vocabulary, one narrower
    monkeypatch.setattr(scoring, "HEAD_TILE_ELEMENTS", 100 * 7)  # seven rows per block
    chunked = score_texts(tiny_model, tokenizer, texts)
    for a, b in zip(whole, chunked):
        # fp32 head tiles of other shapes round differently: σ (a raw second moment) agrees to ~1e-5 relative
        np.testing.assert_allclose(a.std_logprob, b.std_logprob, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, rtol=1e-5, atol=1e-5)


def test_statistics_are_fp32_for_a_bf16_model(tiny_model, tokenizer, local_texts):
    (stats,) = score_texts(tiny_model.to(torch.bfloat16), tokenizer, local_texts[:1])
    assert stats.token_logprobs.dtype == np.float32 and stats.std_logprob.dtype == np.float32


def test_bytes_and_bits_per_byte(tiny_model, tokenizer):
    (stats,) = score_texts(tiny_model, tokenizer, ["naïve café"])
    assert stats.n_bytes == len("naïve café".encode()) == 12
    assert stats.bits_per_byte == pytest.approx(stats.nll_sum / np.log(2) / 12)


def test_empty_or_whitespace_text_is_refused(tiny_model, tokenizer):
    with pytest.raises(ScoringError, match="Text 1 is empty or whitespace-only"):
        score_texts(tiny_model, tokenizer, ["fine text", "  \n "])


def test_single_token_text_warns(tiny_model, tokenizer):
    with pytest.warns(UserWarning, match="single token"):
        (stats,) = score_texts(tiny_model, tokenizer, ["a"])
    assert stats.n_tokens == 1


def test_bad_window_settings_are_refused(tiny_model, tokenizer):
    with pytest.raises(ScoringError, match="max_length=100000"):
        score_texts(tiny_model, tokenizer, ["text"], max_length=100_000)
    with pytest.raises(ScoringError, match="stride=64"):
        score_texts(tiny_model, tokenizer, ["text"], max_length=64, stride=64)


def test_cache_returns_identical_statistics_without_a_forward_pass(tiny_model, tokenizer, local_texts, tmp_path,
                                                                   monkeypatch):
    cache = StatsCache(tmp_path)
    texts = local_texts[:5]
    first = score_texts(tiny_model, tokenizer, texts, cache=cache)

    def no_forward(*args, **kwargs):
        raise AssertionError("cached texts must not be scored again")

    monkeypatch.setattr(scoring, "_score_windows", no_forward)
    again = score_texts(tiny_model, tokenizer, texts, cache=cache)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.token_logprobs, b.token_logprobs)
        assert a.n_bytes == b.n_bytes


def test_a_loss_only_pass_reads_a_cached_full_pass_of_the_same_model(tiny_model, tokenizer, local_texts, tmp_path,
                                                                      monkeypatch):
    """The pretrained row's full pass serves every later loss-only pass of the base model (a LoRA cell's reference)."""
    texts = local_texts[:5]
    computed = score_texts(tiny_model, tokenizer, texts, distribution=False)
    cache = StatsCache(tmp_path)
    score_texts(tiny_model, tokenizer, texts, cache=cache)  # the full pass: log p, μ and σ
    monkeypatch.setattr(scoring, "_score_windows", lambda *a, **k: pytest.fail("a cached text was scored again"))
    served = score_texts(tiny_model, tokenizer, texts, cache=cache, distribution=False)
    for a, b in zip(computed, served):
        np.testing.assert_array_equal(a.token_logprobs, b.token_logprobs)  # the same code up to log p: bit for bit
        assert b.mean_logprob is None and b.std_logprob is None and a.n_bytes == b.n_bytes


def test_fingerprint_follows_weights_and_adapter_state(tiny_model):
    """Adapters on, rescaled or trained differ; adapters off is the base model itself, so its cache is shared."""
    before = model_fingerprint(tiny_model)
    peft_model = get_peft_model(tiny_model, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    with_adapters = model_fingerprint(peft_model)
    with peft_model.disable_adapter():
        disabled = model_fingerprint(peft_model)
    for module in peft_model.modules():  # peft's set_scale changes the output, not a single weight
        if isinstance(getattr(module, "scaling", None), dict):
            module.scaling["default"] *= 4
    rescaled = model_fingerprint(peft_model)
    assert len({before, with_adapters, rescaled}) == 3
    assert disabled == before  # the base model's computation, whatever the adapters hold


def test_fingerprint_ignores_where_the_model_was_loaded_from(tiny_model, tmp_path):
    """A copy saved and reloaded from another folder computes the same outputs, so it reads the same cache."""
    tiny_model.save_pretrained(tmp_path / "copy")
    reloaded = type(tiny_model).from_pretrained(tmp_path / "copy")
    assert str(reloaded.name_or_path) != str(tiny_model.name_or_path)
    assert model_fingerprint(reloaded) == model_fingerprint(tiny_model)


def test_cache_keys_follow_the_tokenizer_and_never_run_fields_together(tiny_model, tokenizer, tmp_path):
    cache = StatsCache(tmp_path)
    [full] = score_texts(tiny_model, tokenizer, ["hello world|loss-only"], cache=cache)
    [loss_only] = score_texts(tiny_model, tokenizer, ["hello world"], cache=cache, distribution=False)
    assert loss_only.n_bytes == len("hello world") and loss_only.n_tokens < full.n_tokens
    [plain] = score_texts(tiny_model, tokenizer, ["hello world"], cache=cache)
    with start_token_rule("<pad>"):  # another start token: other statistics, so another cache entry
        [restarted] = score_texts(tiny_model, tokenizer, ["hello world"], cache=cache)
    assert not np.array_equal(plain.token_logprobs, restarted.token_logprobs)


def test_the_start_token_is_the_tokenizers_own_else_the_document_separator_else_eos(tokenizer):
    from tokenizers import processors

    vocab = tokenizer.get_vocab()
    assert start_token(tokenizer) == vocab["<|endoftext|>"]  # the separator, whatever BOS says
    chat = copy.deepcopy(tokenizer)
    chat.add_special_tokens({"bos_token": "<|im_start|>"})
    assert start_token(chat) == vocab["<|endoftext|>"] and start_token(chat, "bos-else-eos") == chat.bos_token_id
    prepending = copy.deepcopy(chat)  # a tokenizer that puts its BOS before every text itself (Llama's)
    prepending.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", chat.bos_token_id)])
    assert start_token(prepending) == chat.bos_token_id
    with start_token_rule("<pad>"):
        assert start_token(tokenizer) == vocab["<pad>"]
    with pytest.raises(ScoringError, match=r"start_token='<\|nope\|>' is not a token of"):
        start_token(tokenizer, "<|nope|>")
    with pytest.raises(ValueError, match="start_token=.. must be one of auto, bos-else-eos or a token"):
        start_token_rule("").__enter__()


def test_a_model_whose_forward_post_processes_unannounced_is_refused_before_scoring(tiny_model, tokenizer,
                                                                                     local_texts, monkeypatch):
    """A forward pass that scales its logits under a name privft does not read (MiniCPM's width scaling) is caught."""
    forward = type(tiny_model).forward

    def scaled(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        output.logits = output.logits / 9.0  # MiniCPM: hidden / (hidden_size / dim_model_base) before its head
        return output

    monkeypatch.setattr(type(tiny_model), "forward", scaled)
    with pytest.raises(ScoringError, match=r"LlamaForCausalLM \(model_type 'llama'\)'s own forward pass gives "
                                           r"log-probabilities up to .* nats away.*open an issue naming"):
        score_texts(tiny_model, tokenizer, local_texts[:2])


@pytest.mark.parametrize("post_processing", [{"final_logit_softcapping": 2.0}, {"logit_scale": 0.5},
                                             {"logits_scaling": 4.0}], ids=["softcap", "scale", "granite-scale"])
def test_heads_whose_model_post_processes_its_logits_give_the_forward_passs_statistics(tokenizer, local_texts,
                                                                                       post_processing, monkeypatch):
    """Gemma 2's softcapping, Cohere's and Granite's logit scales: applied tile by tile, as the model's forward."""
    from privft.models import build_tiny_model

    monkeypatch.setattr(scoring, "HEAD_TILE_WIDTH", 100)  # eleven tiles of the 1,024-token vocabulary, one narrower
    model = build_tiny_model(tokenizer, "gemma3")
    model.config.update(post_processing)  # Gemma 3's own forward applies a final_logit_softcapping
    scale = post_processing.get("logit_scale", 1) / post_processing.get("logits_scaling", 1)
    forward = type(model).forward

    def scaled(self, *args, **kwargs):  # Cohere's and Granite's forward: the head's logits times a constant
        output = forward(self, *args, **kwargs)
        output.logits = output.logits * scale
        return output

    monkeypatch.setattr(type(model), "forward", scaled)
    (stats,) = score_texts(model, tokenizer, local_texts[:1])
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer(local_texts[0], add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
        plain = torch.log_softmax(model.lm_head(model.model(input_ids=ids).last_hidden_state)[0, :-1].double(), -1)
    expected = logp.gather(1, ids[0, 1:, None]).squeeze(1)
    assert not np.allclose(expected, plain.gather(1, ids[0, 1:, None]).squeeze(1), atol=1e-3)  # it does change them
    np.testing.assert_allclose(stats.token_logprobs, expected, atol=1e-5)
    mean = (logp.exp() * logp).sum(-1)
    np.testing.assert_allclose(stats.mean_logprob, mean, atol=1e-5)
    np.testing.assert_allclose(stats.std_logprob, ((logp.exp() * logp**2).sum(-1) - mean**2).sqrt(), rtol=1e-4,
                               atol=1e-5)
