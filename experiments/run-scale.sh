#!/usr/bin/env bash
# Every cell of the scale split, one heavy job at a time: the SOFT study, then the rest of the comparison,
# then the full scale-cell benchmark (it would slow the cells several-fold if run beside them).
# Resumable: a rerun skips finished cells (runs/scale/cells/*/cell.json) and reuses the shared statistics cache.
# The LLM arm (experiments/soft-study-llm.yaml) is not included: hours of paraphrasing on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PRIVFT=${PRIVFT:-.venv/bin/privft}
"$PRIVFT" compare experiments/soft-study.yaml
"$PRIVFT" compare experiments/compare-scale.yaml
[ -f runs/scale/scale_cell.log ] || .venv/bin/python benchmarks/scale_cell.py > runs/scale/scale_cell.log 2>&1
