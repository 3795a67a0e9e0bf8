#!/usr/bin/env bash
# docs/results/epsilon-audit.md's evaluated cells (issue 32), one heavy job at a time; a rerun resumes (finished cells
# are skipped, a cell cut off mid-training resumes from its last checkpoint, every 25 steps). DP-LoRA at ε = 8, the
# issue's white-box goal, runs first. The pilot that chose the canary design is not rerun here; it is
# `privft compare experiments/epsilon-audit-pilot.yaml`.
set -euo pipefail
cd "$(dirname "$0")/.."
PRIVFT=${PRIVFT:-.venv/bin/privft}
"$PRIVFT" compare experiments/epsilon-audit.yaml --cell "DP-LoRA ε=8 (r=16)"
"$PRIVFT" compare experiments/epsilon-audit.yaml
.venv/bin/python scripts/epsilon_audit_cells.py runs/epsilon-audit/cells
