"""Shared fixtures: a locally trained tokenizer (also with a Gemma-style `<bos>`) and tiny Llama models; nothing
touches the network."""

from __future__ import annotations

import json
import os
import pydoc_data.topics
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from privft.chat_templates import with_chat_template
from privft.models import build_tiny_llama, train_bpe_tokenizer, with_prepended_bos


@pytest.fixture(scope="session")
def local_texts() -> list[str]:
    """Paragraphs of the Python documentation that ship with Python itself."""
    paragraphs = (p.strip() for topic in pydoc_data.topics.topics.values() for p in topic.split("\n\n"))
    return [p for p in paragraphs if len(p.split()) >= 8]


@pytest.fixture(scope="session")
def write_texts(local_texts) -> Callable[..., Path]:
    """`write_texts(folder, count, min_chars=, max_chars=)`: `folder`/texts.json, a data file of the first `count`
    local texts of at least `min_chars` characters, each cut to `max_chars`; returns its path."""

    def write(folder: Path, count: int, *, min_chars: int, max_chars: int) -> Path:
        path = folder / "texts.json"
        path.write_text(json.dumps([text[:max_chars] for text in local_texts if len(text) >= min_chars][:count]))
        return path

    return write


@pytest.fixture(scope="session")
def tokenizer(local_texts):
    """A 1,024-token byte-level BPE tokenizer trained on local text."""
    return train_bpe_tokenizer(local_texts, vocab_size=1024)


@pytest.fixture(scope="session")
def bos_tokenizer(tokenizer):
    """The same tokenizer with a `<bos>` that it prepends to every text, as Gemma's tokenizer does."""
    return with_prepended_bos(tokenizer)


@pytest.fixture(scope="session")
def chat_tokenizer(tokenizer):
    """The same tokenizer with SmolLM2-Instruct's chat template and its special tokens."""
    return with_chat_template(tokenizer)


@pytest.fixture()
def tiny_model(tokenizer):
    """A fresh, randomly initialised two-layer Llama."""
    return build_tiny_llama(tokenizer)


@pytest.fixture()
def tiny_model_dir(tiny_model, tokenizer, tmp_path):
    """The tiny model and its tokenizer saved in a folder, as `RunConfig.model` names one."""
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    return str(tmp_path / "base")


@pytest.fixture()
def one_thread():
    """Run torch on one thread: on a shared two-core machine, two threads make tiny steps far slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
