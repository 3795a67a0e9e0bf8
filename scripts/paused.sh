#!/usr/bin/env bash
# Run a command on a quiet machine: pause the background experiments (SIGSTOP), run it, resume them (SIGCONT).
# On 2 cores a second heavy job slows both several-fold; a paused experiment loses no work.
set -uo pipefail
# the privft jobs' Python processes only: never this script, whose own command line may name one
pids=$(pgrep -f "^[^ ]*python[^ ]* [^ ]*privft (compare|audit|tune)" || true)
[ -n "$pids" ] && kill -STOP $pids
trap '[ -n "$pids" ] && kill -CONT $pids' EXIT
"$@"
