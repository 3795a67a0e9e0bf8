#!/usr/bin/env bash
# docs/results/frontier.md's cells (issue 31), one heavy job at a time; a rerun resumes (finished learning rates and
# cells are skipped, a killed run resumes from its last checkpoint). The cells the reading rests on run first, at
# both seeds; the order changes no number.
#  1. experiments/frontier.yaml's reading cells: tuned plain LoRA r 16, DP-LoRA ε = 8, SOFT default and Goldfish, on
#     the conversations split (its untuned cells are experiments/conversations.yaml's, shared through one cells_dir).
#  2. experiments/frontier-seed1.yaml: the same cells on a second split and training seed.
#  3. The rest of experiments/frontier.yaml: LoRA r 4, full fine-tuning, SOFT release with LLM rewrites, DP ε = 1.
#  4. The wiki scale grid's tuned plain LoRA r 16 (experiments/compare-scale.yaml).
# Finished cells' records are committed under experiments/records/ as they land and restored from there first
# (experiments/cell-records.sh), so a fresh checkout resumes after the last finished cell. So are the LLM
# paraphraser's rewrites (SOFT release's, about 3.5 s each on 2 cores), so a fresh checkout serves them from its cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source experiments/cell-records.sh
PRIVFT=${PRIVFT:-.venv/bin/privft}
pairs=(runs/conversations/cells experiments/records/conversations
       runs/frontier-seed1/cells experiments/records/frontier-seed1
       runs/scale/cells experiments/records/scale)
rewrites=$(.venv/bin/python -c 'from privft.paraphrase import ParaphraseCache
print(ParaphraseCache.default().within("llm").directory)')
for ((i = 0; i < ${#pairs[@]}; i += 2)); do restore_records "${pairs[i]}" "${pairs[i+1]}"; done
restore_files "$rewrites" experiments/records/paraphrases/llm
keep_all() {
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do
    keep_records "${pairs[i]}" "${pairs[i+1]}" "finished cells of ${pairs[i]}, as they land"
  done
  keep_files "$rewrites" experiments/records/paraphrases/llm "the LLM paraphraser's rewrites, as they land"
}
keep_every 300 keep_all
# Rows ran on more than one CPU model: time one workload (seed 1's tuned baseline at 1e-3, recorded on the AMD EPYC)
# again on this machine's CPU, once per CPU model, so the tables convert costs between them.
reference=experiments/records/cpu-reference.json
.venv/bin/python scripts/cpu_reference.py experiments/frontier-seed1.yaml "LoRA r=16, tuned" 0.001 "$reference"
git add "$reference" && { git diff --cached --quiet -- "$reference" || git commit -q -m "records: CPU reference" -- \
  "$reference"; } || echo "could not commit $reference; commit it by hand" >&2
first=experiments/frontier.yaml
"$PRIVFT" compare "$first" --cell "LoRA r=16, tuned" --cell "DP-LoRA ε=8 (r=16), tuned" \
  --cell "SOFT paper (r=16), tuned" --cell "Goldfish k=4 (r=16), tuned"
"$PRIVFT" compare experiments/frontier-seed1.yaml
"$PRIVFT" compare "$first"
"$PRIVFT" compare experiments/compare-scale.yaml --cell "LoRA r=16, tuned"
keep_all  # the last cells, which the 5-minute loop may not have reached
