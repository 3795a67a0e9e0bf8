#!/usr/bin/env bash
# Run a command on a quiet machine: pause the background experiments (SIGSTOP), run it, resume them (SIGCONT).
# On 2 cores a second heavy job slows both several-fold; a paused experiment loses no work.
# A paused experiment keeps its memory, and the OOM killer takes the largest process: the experiment. So below
# PAUSED_MIN_FREE_GIB (default 4) of available memory the command is refused, not run (a DP-LoRA step holds ~21 GiB).
set -uo pipefail
# the privft jobs' Python processes only: never this script, whose own command line may name one
pids=$(pgrep -f "^[^ ]*python[^ ]* [^ ]*(privft (compare|audit|tune)|scripts/cpu_reference\.py)" || true)
[ -n "$pids" ] && kill -STOP $pids
trap '[ -n "$pids" ] && kill -CONT $pids' EXIT
available_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
minimum_kib=$(( ${PAUSED_MIN_FREE_GIB:-4} * 1024 * 1024 ))
if [ "$available_kib" -lt "$minimum_kib" ]; then
  echo "paused.sh: only $(( available_kib / 1024 )) MiB available beside the paused experiment (pids: $pids); not" \
       "running '$*', which the OOM killer would answer by killing the experiment. Run it once the experiment's" \
       "memory-heavy phase (DP-LoRA training) is over, or set PAUSED_MIN_FREE_GIB lower." >&2
  exit 75
fi
"$@"
