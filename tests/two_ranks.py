"""Running a test script as two CPU processes: a free port for the launcher, and every rank's JSON record."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for the launcher's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks(command: list[str], out: Path) -> list[dict]:
    """Run the launcher `command` offline, one thread per rank, in `out`; return <out>/rank0.json and rank1.json."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
