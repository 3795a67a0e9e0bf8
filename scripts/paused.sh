#!/usr/bin/env bash
# Run a command on a quiet machine: pause the background experiments (SIGSTOP), run it, resume them (SIGCONT).
# On 2 cores a second heavy job slows both several-fold; a paused experiment loses no work.
set -uo pipefail
pids=$(pgrep -f "privft (compare|audit|tune)" | grep -vx "$$" || true)  # never this script itself
[ -n "$pids" ] && kill -STOP $pids
trap '[ -n "$pids" ] && kill -CONT $pids' EXIT
"$@"
