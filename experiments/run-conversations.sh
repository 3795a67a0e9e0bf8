#!/usr/bin/env bash
# docs/results/conversations.md's numbers (issue 29), one heavy job at a time; a rerun resumes.
#  1. `privft compare`: every cell (pretrained, LoRA r 16, SOFT at privft's default, DP-LoRA ε = 8) trains
#     completion-only and audits the completions, with canaries and extraction of replies from their prompts
#     (finished cells are skipped; a cell cut off mid-training resumes from its last checkpoint, every 25 steps).
#  2. The prompt side of each cell: the same split scored on the prompt tokens, which no cell trained on (were these
#     customers' tickets in the training set?). The grid writes it inside each cell (grid.prompt_side), from the cell's
#     own audit passes; the loop below audits it for cells run before that, and skips every cell that has one.
#  3. Finished cells' records (rows, reports, splits; no weights) are committed to experiments/records/conversations
#     as they land and restored from there first (experiments/cell-records.sh), so a fresh checkout resumes too.
set -euo pipefail
cd "$(dirname "$0")/.."
source experiments/cell-records.sh
PRIVFT=${PRIVFT:-.venv/bin/privft}
config=experiments/conversations.yaml
cells=runs/conversations/cells
records=experiments/records/conversations
prompt_sides() {  # every finished cell's prompt side, skipped where its report exists
  for cell in "$cells"/*/; do
    [ -f "$cell/cell.json" ] || continue
    out="$cell/prompt-side"
    [ -f "$out/report.json" ] && continue
    model="$cell/model"
    case "$cell" in */pretrained-not-fine-tuned/) model=smollm2-135m ;; esac  # the pretrained row: the base model
    if [ ! -d "$model" ] && [ "$model" != smollm2-135m ]; then
      echo "skipping the prompt side of $cell: no model here (its records were restored; they hold no weights)" >&2
      continue
    fi
    "$PRIVFT" audit --split "$cell/split.json" --model "$model" --scored prompt --max-fpr 0.01 --max-fpr 0.001 \
      --batch-size 16 --cache-dir runs/conversations/prompt-side-cache --out "$out"
  done
}
restore_records "$cells" "$records"
keep_every 300 keep_records "$cells" "$records" "finished cells of $cells, as they land"
# One cell at a time, each followed by its prompt side, so every finished row is whole (the pretrained and
# plain-LoRA rows run with the first; the names are the grid's in experiments/conversations.yaml).
for name in "LoRA r=16" "SOFT paper (r=16)" "DP-LoRA ε=8 (r=16)"; do
  "$PRIVFT" compare "$config" --cell "$name"
  prompt_sides
  keep_records "$cells" "$records" "docs/results/conversations.md's cells up to $name"
done
