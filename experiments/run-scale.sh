#!/usr/bin/env bash
# Every cell of the scale split, one heavy job at a time: the SOFT study (its LLM arm second), DP-LoRA at ε 8,
# the LoRA rank curve, then the rest of the comparison, then the full scale-cell benchmark (it would slow the
# cells several-fold if run beside them).
# Resumable: a rerun skips finished cells (runs/scale/cells/*/cell.json) and reuses the shared statistics cache.
# The cells that answer the open questions run first (--cell); the order changes no number.
set -euo pipefail
cd "$(dirname "$0")/.."
PRIVFT=${PRIVFT:-.venv/bin/privft}
study=experiments/soft-study.yaml
scale=experiments/compare-scale.yaml
[ -f runs/support-tickets/support-tickets.md ] ||                                  # seed 000's walk-through
  "$PRIVFT" example support-tickets --out runs/support-tickets                     # (docs/examples/support-tickets.md)
"$PRIVFT" compare "$study" --cell "SOFT release, prefix kept + rewritten suffix"  # format: the kept prefix
"$PRIVFT" compare "$study" --cell "SOFT release, suffix rewritten by the LLM"       # the LLM arm (~2 h; rewrites cached)
"$PRIVFT" compare "$study"                                                        # the rest of the study
"$PRIVFT" compare "$scale" --cell "DP-LoRA ε=8 (r=16)"                            # DP beside SOFT
"$PRIVFT" compare "$scale" --cell "LoRA r=4" --cell "LoRA r=64"                   # the rank curve
"$PRIVFT" compare "$scale" --cell "full fine-tuning"                              # Table 1's FT column
"$PRIVFT" compare "$scale"                                                        # the rest of the grid
[ -f runs/scale/scale_cell.log ] || .venv/bin/python benchmarks/scale_cell.py > runs/scale/scale_cell.log 2>&1
