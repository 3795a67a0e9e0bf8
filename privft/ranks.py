"""Work shared across torch.distributed ranks: which rank this process is, and every rank's share gathered in order.

Without an initialised process group the world is one process and nothing here communicates.
`init_from_launcher` is the one function that joins a group: a command calls it once when
`torchrun` or `accelerate launch` started it (the Trainer joins its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


class RankError(RuntimeError):
    """Another rank failed its share of the work; raised on every rank so that none waits forever."""


def rank_and_world() -> tuple[int, int]:
    """(global rank, world size) under an initialised process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_rank() -> bool:
    """Whether this process is global rank 0 (always, without a process group)."""
    return rank_and_world()[0] == 0


def gather_shares(compute: Callable[[], T]) -> list[T]:
    """Every rank's (picklable) `compute()` result, in rank order, on every rank; `[compute()]` in a world of one.

    Collective: every rank calls it at the same point. If `compute` raises on a rank, that rank
    re-raises its error after the exchange and the other ranks raise RankError naming it.
    """
    rank, world = rank_and_world()
    if world == 1:
        return [compute()]
    error: BaseException | None = None
    try:
        share: tuple[bool, object] = (True, compute())
    except Exception as err:  # sent to the other ranks, then re-raised here
        error, share = err, (False, f"{type(err).__name__}: {err}")
    shares: list[tuple[bool, object] | None] = [None] * world
    dist.all_gather_object(shares, share)
    if error is not None:
        raise error
    failed = [(r, message) for r, (ok, message) in enumerate(shares) if not ok]  # type: ignore[misc]
    if failed:
        raise RankError(f"Rank {failed[0][0]} failed its share of the work: {failed[0][1]}")
    return [value for _, value in shares]  # type: ignore[misc]


def init_from_launcher() -> torch.device | None:
    """Join the process group `torchrun` / `accelerate launch` describe and return this rank's device.

    None when the environment names no world of several processes (WORLD_SIZE unset or 1). On a
    machine with CUDA each rank takes GPU LOCAL_RANK and NCCL; otherwise the CPU and gloo.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))), "nccl"
        torch.cuda.set_device(device)  # NCCL's object collectives stage through the current device
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return device
