"""Wall-clock and process CPU seconds, summed over the spans a clock timed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


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
