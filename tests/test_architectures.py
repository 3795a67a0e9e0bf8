"""Causal LMs other than Llama, as tiny Gemma 3 and Qwen 2: scoring, the start token, LoRA targets, `privft train`
(LoRA with SOFT, DP-LoRA) and `privft audit`, and GGUF files of those architectures."""

from __future__ import annotations

import json
import warnings

import gguf
import numpy as np
import pytest
import torch
from peft import PeftModel, get_peft_model
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, GemmaTokenizer, Phi3Config

import privft.models
from privft.cli import main
from privft.config import save_yaml
from privft.dp import DPSettings
from privft.models import build_tiny_model, hub_lookups_skipped, load_model
from privft.paraphrase.neighbour import NeighbourParaphraser
from privft.pipeline import DataSettings, RunConfig, SoftSettings
from privft.scoring import score_texts, start_token
from privft.training import FinetuneSettings, LoraSettings, tokenize_for_training

ARCHITECTURES = ("gemma3", "qwen2")
GGUF_ARCHITECTURES = {"gemma3": gguf.MODEL_ARCH.GEMMA3, "qwen2": gguf.MODEL_ARCH.QWEN2}


@pytest.fixture(params=ARCHITECTURES)
def architecture(request) -> str:
    return request.param


@pytest.fixture()
def arch_tokenizer(architecture, tokenizer, bos_tokenizer):
    """Gemma's tokenizer prepends `<bos>` to a text; Qwen 2's prepends nothing."""
    return bos_tokenizer if architecture == "gemma3" else tokenizer


@pytest.fixture()
def arch_model(architecture, arch_tokenizer):
    return build_tiny_model(arch_tokenizer, architecture)


def _texts(local_texts: list[str], n: int, length: int = 200) -> list[str]:
    return [t[:length] for t in local_texts if len(t) >= length][:n]


def test_scores_are_the_models_own_distribution(arch_model, arch_tokenizer, local_texts):
    texts = [" ".join(local_texts[:3]), *local_texts[3:6]]  # one longer than Gemma's 32-token sliding window
    stats = score_texts(arch_model, arch_tokenizer, texts, batch_size=4)
    for text, scored in zip(texts, stats):
        ids = torch.tensor([[start_token(arch_tokenizer), *arch_tokenizer(text, add_special_tokens=False).input_ids]])
        with torch.no_grad():
            logp = torch.log_softmax(arch_model(input_ids=ids).logits[0, :-1].double(), dim=-1)
        np.testing.assert_allclose(scored.token_logprobs, logp.gather(1, ids[0, 1:, None]).squeeze(1), atol=1e-5)
        np.testing.assert_allclose(scored.mean_logprob, (logp.exp() * logp).sum(-1), atol=1e-5)


def test_a_gemma_text_is_scored_trained_and_rewritten_after_one_bos(bos_tokenizer, local_texts):
    model, texts = build_tiny_model(bos_tokenizer, "gemma3"), _texts(local_texts, 3)
    bos = bos_tokenizer.convert_tokens_to_ids("<bos>")
    assert bos_tokenizer(texts[0])["input_ids"][0] == bos == start_token(bos_tokenizer)  # the tokenizer's own start
    rows = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: rows.extend(kwargs["input_ids"].tolist()), with_kwargs=True)
    score_texts(model, bos_tokenizer, texts)
    NeighbourParaphraser(model, bos_tokenizer).rewrite(texts[0], seed=0)
    hook.remove()
    rows += tokenize_for_training(bos_tokenizer, texts, 256)["input_ids"]
    # scoring's and training's rows, the paraphraser's, and scoring's check (its probe, then the model's own forward)
    assert len(rows) == 2 * len(texts) + 3
    assert all(row[0] == bos and bos not in row[1:] for row in rows)


def test_the_neighbour_paraphraser_reads_gemmas_sentencepiece_pieces(local_texts):
    """Gemma's own tokenizer class, on a small SentencePiece vocabulary: its "▁word" pieces decode to " word"."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    backend.train_from_iterator(local_texts[:400], trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]))
    trained = json.loads(backend.to_str())["model"]
    tokenizer = GemmaTokenizer(vocab=trained["vocab"], merges=[tuple(pair) for pair in trained["merges"]])
    paraphraser = NeighbourParaphraser(build_tiny_model(tokenizer, "gemma3"), tokenizer, fraction=1.0)
    text = local_texts[5]
    rewritten = paraphraser.rewrite(text, seed=0)
    assert rewritten != text and len(rewritten.split()) == len(text.split())  # whole words swapped, spacing kept


@pytest.mark.parametrize("architecture", [*ARCHITECTURES, "phi3"])
def test_default_lora_targets_are_every_linear_layer_whatever_it_is_called(architecture, tokenizer):
    if architecture == "phi3":  # fused qkv_proj and gate_up_proj: Llama's names would miss two of its four
        model = AutoModelForCausalLM.from_config(Phi3Config(vocab_size=len(tokenizer), hidden_size=64,
                                                            intermediate_size=176, num_hidden_layers=2,
                                                            num_attention_heads=4, pad_token_id=0))
    else:
        model = build_tiny_model(tokenizer, architecture)
    linear = {name for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and module is not model.get_output_embeddings()}
    adapted = get_peft_model(model, LoraSettings().to_peft())
    assert {name.removeprefix("base_model.model.").removesuffix(".lora_A")
            for name, _ in adapted.named_modules() if name.endswith(".lora_A")} == linear


@pytest.mark.parametrize("defence", ["soft", "dp"])
def test_privft_train_and_audit_run(architecture, arch_model, arch_tokenizer, local_texts, tmp_path, one_thread,
                                    defence, capsys):
    arch_model.save_pretrained(tmp_path / "base")
    arch_tokenizer.save_pretrained(tmp_path / "base")
    (tmp_path / "texts.json").write_text(json.dumps(_texts(local_texts, 40, 160)))
    config = RunConfig(
        model=str(tmp_path / "base"),
        data=DataSettings(corpus=None, path=str(tmp_path / "texts.json"), max_words=None, n_members=16,
                          n_non_members=16, n_validation=4),
        training=FinetuneSettings(epochs=2, batch_size=4, max_length=96, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8)),  # the default targets
        soft=SoftSettings(rule="paper") if defence == "soft" else SoftSettings(),
        dp=DPSettings(target_epsilon=8.0, seed=0) if defence == "dp" else DPSettings(),
    )
    main(["train", str(save_yaml(config, tmp_path / "run.yaml"))])
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["training"]["method"] == ("DP-LoRA" if defence == "dp" else "LoRA")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["start_token"]["token"] == ("<bos>" if architecture == "gemma3" else "<|endoftext|>")
    if defence == "soft":
        assert json.loads((tmp_path / "run" / "soft_selections.json").read_text())
    main(["audit", "--model", str(tmp_path / "run" / "model"), "--split", str(tmp_path / "run" / "split.json"),
          "--bootstrap", "50", "--out", str(tmp_path / "audit")])
    assert "| loss |" in capsys.readouterr().out


def _write_gguf(model: torch.nn.Module, tokenizer, path, architecture: str) -> None:
    """Write `model` and its byte-level tokenizer as llama.cpp's converter would, in fp32."""
    config, arch = model.config, GGUF_ARCHITECTURES[architecture]
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch])
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters.get("full_attention", config.rope_parameters)["rope_theta"])
    if architecture == "gemma3":
        writer.add_key_length(config.head_dim)
        writer.add_value_length(config.head_dim)
        writer.add_sliding_window(config.sliding_window)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    special = set(tokenizer.all_special_ids)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for _, i in vocab])
    writer.add_token_merges([" ".join(pair) for pair in json.loads(
        tokenizer.backend_tokenizer.to_str())["model"]["merges"]])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(architecture == "gemma3")
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied to the embeddings: GGUF stores no output.weight
            continue
        if architecture == "gemma3" and name.endswith("norm.weight"):  # llama.cpp stores Gemma's norms as 1 + w
            tensor = tensor + 1
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_gguf_file_of_another_architecture_is_converted_once(architecture, arch_model, arch_tokenizer,
                                                               local_texts, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "cache"))
    _write_gguf(arch_model, arch_tokenizer, tmp_path / "tiny.gguf", architecture)
    model, tokenizer = load_model(str(tmp_path / "tiny.gguf"))
    assert type(model) is type(arch_model) and model.name_or_path == str((tmp_path / "tiny.gguf").resolve())
    assert tokenizer.get_vocab().items() >= arch_tokenizer.get_vocab().items()  # Gemma's class adds a <mask>
    assert start_token(tokenizer) == start_token(arch_tokenizer)  # Gemma's: the <bos> its tokenizer prepends
    ids = torch.tensor([[start_token(tokenizer), *arch_tokenizer(local_texts[0], add_special_tokens=False).input_ids]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, arch_model(input_ids=ids).logits)
    monkeypatch.setattr(privft.models, "_convert_gguf", pytest.fail)  # later loads read the converted copy
    assert load_model(str(tmp_path / "tiny.gguf"))[0].config.to_dict() == model.config.to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # peft's "Could not find a config file" for a non-hub base
        with hub_lookups_skipped(model.name_or_path):  # as `privft train` saves adapters
            get_peft_model(model, LoraSettings(rank=4).to_peft()).save_pretrained(tmp_path / "adapters")
    assert isinstance(load_model(str(tmp_path / "adapters"))[0], PeftModel)  # its base: the GGUF, by path
