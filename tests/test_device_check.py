"""scripts/device_check.sh --dry-run: the plan, its files, and the gpu tests, which skip without CUDA (opt-in, slow:
the gpu tests' imports take several seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_check.sh"

pytestmark = pytest.mark.slow


def _run(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env,
                          cwd=ROOT)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the gpu tests run instead of skipping")
def test_the_dry_run_prints_the_plan_and_runs_the_gpu_tests_which_skip(tmp_path):
    run = _run("--dry-run", out=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for step in ("gpu-tests", "scoring-benchmark", "dp-overhead-tiny", "dp-overhead-smollm2"):
        assert f"  {step} (timeout " in run.stdout
    summary = (tmp_path / "device-check.md").read_text()
    assert "(dry run: only the gpu tests ran)" in summary and "## gpu-tests (rc 0," in summary
    assert "5 skipped" in (tmp_path / "gpu-tests.log").read_text()
    assert "## scoring-benchmark" not in summary  # the benchmarks need the device


def test_an_unknown_option_is_refused(tmp_path):
    run = _run("--dryrun", out=tmp_path)
    assert run.returncode == 2 and "usage: scripts/device_check.sh [--dry-run]" in run.stderr
    assert not list(tmp_path.iterdir())
