#!/usr/bin/env bash
# docs/results/extraction.md: the audits beyond membership on SmolLM2 fine-tunes.
# 1. The scale split's plain LoRA r 16 and SOFT (paper rule) models (experiments/run-scale.sh trains them):
#    extraction (probabilistic on all 2,500 texts, greedy on 200 members + 200 non-members) and dataset inference.
#    The lowercase attack is left out (a third pass over 2,500 texts); the reference pass comes from the grid's cache.
# 2. One DP-LoRA run (ε = 8) with one-run canaries: the ε lower bound beside the accountant's.
# Resumable: a finished step (its report.json) is skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
PRIVFT=${PRIVFT:-.venv/bin/privft}
for cell in lora-r-16 soft-paper-r-16; do
  out=runs/extraction/$cell
  [ -f "$out/report.json" ] || "$PRIVFT" audit --model "runs/scale/cells/$cell/model" \
    --split "runs/scale/cells/$cell/split.json" --max-fpr 0.01 --max-fpr 0.001 --batch-size 16 \
    --attacks loss,loss_bpb,zlib,min_k,min_k_pp,ref_ratio,ref_ratio_bpb \
    --cache-dir runs/scale/stats-cache --extraction --extraction-max-texts 200 --dataset-inference --out "$out"
done
[ -f runs/extraction/dp-one-run/report.json ] || "$PRIVFT" train experiments/extraction/dp-one-run.yaml
[ -f runs/extraction/dp-one-run-single/report.json ] || "$PRIVFT" train experiments/extraction/dp-one-run-single.yaml
