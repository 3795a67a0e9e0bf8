"""Every benchmark still runs: its --quick mode exits cleanly and ends with the headline line (opt-in, slow)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parent.parent / "benchmarks").glob("*.py"))
HEADLINE = re.compile(r"^\w+ -?[\d.]+ \(target (<=|>=|<|>) [\d.]+\)$")

pytestmark = pytest.mark.slow


def test_every_benchmark_is_found():
    assert {path.stem for path in BENCHMARKS} >= {"scoring", "scoring_memory", "soft_overhead", "dp_overhead",
                                                   "lira_fit", "scale_cell", "extraction_overhead",
                                                   "paraphrase_batch"}


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.stem)
def test_quick_run_ends_with_its_headline(script: Path):
    run = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert HEADLINE.match(run.stdout.strip().splitlines()[-1]), run.stdout[-1000:]
