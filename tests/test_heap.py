"""Freed heap memory goes back to the OS before each evaluation and after training, once per Trainer."""

from __future__ import annotations

import sys

import pytest
from transformers import Trainer, TrainerCallback

from privft.dp import make_private
from privft.heap import ReleaseFreedMemory, release_freed_memory
from privft.training import FinetuneSettings, LoraSettings, build_trainer, tokenize_for_training


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096


def _releasers(trainer: Trainer) -> list[int]:
    return [i for i, callback in enumerate(trainer.callback_handler.callbacks)
            if isinstance(callback, ReleaseFreedMemory)]


@pytest.fixture()
def trainer(tiny_model, tokenizer, tmp_path) -> Trainer:
    settings = FinetuneSettings(epochs=1, batch_size=2, max_length=32, output_dir=str(tmp_path),
                                lora=LoraSettings(rank=2, alpha=4, targets=("q_proj",)))
    return build_trainer(tiny_model, tokenizer, tokenize_for_training(tokenizer, ["a text", "another"], 32),
                         settings, max_grad_norm=0.0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_gives_freed_heap_pages_back():
    blocks = [bytearray(64 * 1024) for _ in range(8000)]  # ~500 MiB in blocks under glibc's mmap threshold
    del blocks[:-1]  # freed except the last, which pins the heap's top: glibc's own trimming cannot shrink it
    before = _resident_bytes()
    assert release_freed_memory()
    assert _resident_bytes() < before - 200 * 2**20


def test_privft_trainers_and_private_ones_release_once(trainer):
    assert len(_releasers(make_private(trainer, target_epsilon=8.0, max_grad_norm=1.0))) == 1


def test_a_users_trainer_made_private_releases_before_its_own_callbacks(trainer):
    for index in reversed(_releasers(trainer)):  # as a Trainer the user built
        del trainer.callback_handler.callbacks[index]
    trainer.add_callback(TrainerCallback())  # e.g. an audit at train end
    assert _releasers(make_private(trainer, target_epsilon=8.0, max_grad_norm=1.0)) == [0]
