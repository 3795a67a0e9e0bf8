"""CPU seconds across CPU models: one training workload timed on each, the factor that converts a cost between them.

Process CPU seconds compare between runs on one CPU model only. Where a study's rows were trained on two, the same
seeded run (one learning rate of one tuned cell, on the same split) timed on both gives the factor: a row's CPU
seconds on model A times seconds(B) / seconds(A) estimate its cost on B. One workload stands for all: the factor is
an estimate for cells that train a different mix (full fine-tuning, DP's per-sample gradients).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CpuReference:
    """The reference workload's CPU seconds on each CPU model it ran on (`runs`: one record per run)."""

    workload: str  # what ran, e.g. the cell, learning rate and config
    command: str  # the committed command that measures it on the machine at hand
    runs: tuple[dict[str, Any], ...] = ()  # each {"cpu", "train_cpu_seconds", "train_seconds", "record", ...}

    @classmethod
    def load(cls, path: str | Path) -> CpuReference:
        """Read a reference file (`save`'s JSON); refuse one that is missing, naming the command that writes it."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"The CPU reference {path} does not exist: measure it on each machine with "
                                    "scripts/cpu_reference.py (docs/cli.md, Cost across CPU models), or set "
                                    "cpu_reference: null to leave costs on different CPUs unconverted.")
        saved = json.loads(path.read_text(encoding="utf-8"))
        return cls(saved["workload"], saved["command"], tuple(saved["runs"]))

    def save(self, path: str | Path) -> None:
        """Write the reference as JSON."""
        Path(path).write_text(json.dumps({"workload": self.workload, "command": self.command,
                                          "runs": list(self.runs)}, indent=1) + "\n", encoding="utf-8")

    def with_run(self, run: dict[str, Any]) -> CpuReference:
        """This reference with one more run; one from the same record as an earlier run replaces it in its place."""
        runs = tuple(run if old["record"] == run["record"] else old for old in self.runs)
        new = () if any(old["record"] == run["record"] for old in self.runs) else (run,)
        return CpuReference(self.workload, self.command, runs + new)

    def seconds(self, cpu: str) -> float | None:
        """The workload's mean CPU seconds on `cpu`; None where it never ran there."""
        times = [run["train_cpu_seconds"] for run in self.runs if run["cpu"] == cpu]
        return statistics.fmean(times) if times else None

    def factor(self, from_cpu: str, to_cpu: str) -> float | None:
        """What one CPU second on `from_cpu` costs on `to_cpu`; None unless the workload ran on both."""
        source, target = self.seconds(from_cpu), self.seconds(to_cpu)
        return target / source if source and target else None

    def describe(self) -> str:
        """The workload and its seconds on each CPU, for a table's note."""
        by_cpu = sorted({run["cpu"] for run in self.runs})
        return (f"{self.workload} took " + " and ".join(
            f"{self.seconds(cpu):,.0f} CPU s on {cpu}" for cpu in by_cpu) + f" (`{self.command}`)")
