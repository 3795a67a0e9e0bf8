"""Poisson sampling of logical batches: every sequence joins each batch independently with probability q.

This is the sampling the accountant assumes. A shuffled fixed-size batch accounted as Poisson
(what most public DP fine-tuning code does) under-reports ε. An empty draw is a valid batch: it
still gets a noise-only step (see `privft.dp.trainer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from torch.utils.data import DataLoader, Dataset

EMPTY = "empty"  # key of the batch served for an empty Poisson draw


def empty_batch() -> dict[str, Any]:
    """The batch of an empty Poisson draw: no sequences at all."""
    return {EMPTY: True, "input_ids": torch.zeros((0, 1), dtype=torch.long)}


def is_empty(batch: dict[str, Any]) -> bool:
    """Whether `batch` is the batch of an empty Poisson draw."""
    return bool(batch.get(EMPTY, False))


def poisson_dataloader(dataset: Dataset, collate_fn: Callable[[list], Any], *, sample_rate: float,
                       steps_per_epoch: int, generator: torch.Generator, num_workers: int = 0) -> DataLoader:
    """A loader of `steps_per_epoch` Poisson-sampled batches per epoch; an empty draw yields `empty_batch()`.

    `generator` must be secret and serve nothing else (`DPLoraEngine.generator(SAMPLING)`): the
    accountant assumes nobody can tell which sequences a batch holds. Epochs continue its stream.
    """

    def collate(samples: list) -> Any:
        return collate_fn(samples) if samples else empty_batch()

    sampler = UniformWithReplacementSampler(num_samples=len(dataset), sample_rate=sample_rate, generator=generator,
                                            steps=steps_per_epoch)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
