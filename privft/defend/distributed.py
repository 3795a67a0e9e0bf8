"""Decide on the main process, agree everywhere: run a computation on rank 0 and broadcast its result."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")


class MainProcessError(RuntimeError):
    """The computation failed on rank 0; raised on the other ranks so they do not wait forever."""


def on_main_then_broadcast(compute: Callable[[], T]) -> T:
    """`compute()` on global rank 0, its (picklable) result sent to every rank; just `compute()` when not distributed.

    Every rank must call this at the same point: the other ranks wait in the broadcast while rank
    0 computes, so `compute` must not itself need the other ranks (no sharded forward passes
    under FSDP or DeepSpeed ZeRO-3). If `compute` raises on rank 0, rank 0 re-raises it and the
    other ranks raise MainProcessError instead of hanging.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return compute()
    error: BaseException | None = None
    payload: list[object] = [None]
    if dist.get_rank() == 0:
        try:
            payload[0] = (True, compute())
        except Exception as err:  # any failure: sent to the other ranks, then re-raised here
            error, payload[0] = err, (False, f"{type(err).__name__}: {err}")
    dist.broadcast_object_list(payload, src=0)
    ok, value = payload[0]  # type: ignore[misc]
    if error is not None:
        raise error
    if not ok:
        raise MainProcessError(f"The computation failed on rank 0: {value}")
    return value  # type: ignore[return-value]
