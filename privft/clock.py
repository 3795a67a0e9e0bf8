"""Wall-clock and process CPU seconds, summed over the spans a clock timed."""

from __future__ import annotations

import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
CPU_NOT_RECORDED = "CPU not recorded"  # a record from before runs recorded their CPU


def cpu_fields() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (model name, flags, ...); empty where there is no such file."""
    lines = CPUINFO.read_text(encoding="utf-8").splitlines() if CPUINFO.exists() else []
    fields: dict[str, str] = {}
    for key, _, value in (line.partition(":") for line in lines):
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU's model name, recorded beside CPU seconds: they compare only between runs on the same model."""
    return cpu_fields().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


@dataclass
class Clock:
    """Seconds spent inside `span()`s: wall time, and this process's CPU time (`time.process_time`, all threads).

    CPU seconds do not grow while the process waits for a core that other work holds, so they keep
    a run's cost comparable on a busy machine where wall time does not.
    """

    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @contextmanager
    def span(self) -> Iterator[None]:
        """Time the block: its wall and CPU seconds are added, also when it raises."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - wall
            self.cpu_seconds += time.process_time() - cpu
