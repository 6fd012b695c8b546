#!/usr/bin/env bash
# The native host path on a Hopper GPU (docs/host-paths.md), each step under `timeout`, the whole
# within NATIVE_BUDGET_S seconds (default 290: under 5 minutes on one H200):
#   1. versions and the GPU; the native extension built (DEEP_TILE_NATIVE=wait) and loaded
#   2. the GPU tests of tests/test_native.py (every op family native vs Python bitwise, CUDA
#      graphs with new counts and group sizes, errors on CUDA tensors, the SM limit, rebuilds)
#   3. benchmarks/bench_host.py per-call table (host us/call of the native and Python paths)
#   4. the GPU tests of tests/test_pdl.py and tests/test_training.py that run the native path
#   5. bench_host.py's first-call rows, if the budget allows
#   6. a short summary: every step's status, the pytest counts and the host us/call rows
# Usage: bash tools/native_device.sh
# $OUT (default /tmp/native_out) gets native_summary.txt (what is printed last), the bench's JSON
# bench_host.json and native_logs.tgz (every step's log), made on exit even after a failure.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache} DEEP_TILE_NATIVE=${DEEP_TILE_NATIVE:-wait}
OUT=${OUT:-/tmp/native_out}; mkdir -p "$OUT"
LOG=$(mktemp -d /tmp/native_logs.XXXXXX)  # the steps' logs, bundled into $OUT on exit
BUDGET=${NATIVE_BUDGET_S:-290}
START=$SECONDS
: > "$LOG/steps.txt"

left() { echo $(( BUDGET - (SECONDS - START) )); }

# step NAME CAP CMD...: CMD under timeout (CAP, or what the budget has left less 15 s), its
# output in $LOG/NAME.txt, its status and time in $LOG/steps.txt; skipped when under 15 s are left.
step() {
  local name=$1 cap=$2 limit t0 rc; shift 2
  limit=$(( $(left) - 15 )); [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 15 ]; then echo "$name: SKIPPED ($(left) s left)" | tee -a "$LOG/steps.txt"; return 1; fi
  echo "== $name (limit ${limit}s, $(left)s left)"
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$LOG/$name.txt" 2>&1; rc=$?
  echo "$name: rc=$rc in $(( SECONDS - t0 ))s$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ' TIMED OUT')" | tee -a "$LOG/steps.txt"
  return $rc
}

summary() {
  {
    echo "== steps"; cat "$LOG/steps.txt"
    echo "== pytest"
    for f in "$LOG"/pytest_*.txt; do
      [ -f "$f" ] && echo "$(basename "$f" .txt): $(grep -E '[0-9]+ (passed|failed|error)' "$f" | tail -1)"
      [ -f "$f" ] && grep -E '^(FAILED|ERROR) ' "$f" | head -10
    done
    echo "== host us/call (bench_host.py)"
    [ -f "$LOG/bench_host.txt" ] && grep -iE 'deep_tile|scaled_mm|deep_gemm|host us' "$LOG/bench_host.txt" | head -12
  } > "$OUT/native_summary.txt"
  cp "$LOG"/bench_host*.json "$OUT/" 2>/dev/null
  tar czf "$OUT/native_logs.tgz" -C "$LOG" .
  cat "$OUT/native_summary.txt"
}
trap summary EXIT

step versions 30 bash -c 'nvidia-smi -L; python -c "import torch, deep_tile; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"'
step build 120 python -c "
from deep_tile import native
ok = native.build(wait=True)
print(native.status())
raise SystemExit(0 if ok and native.module().ops_registered() else 1)"
step pytest_native 170 python -m pytest -q -m gpu tests/test_native.py -p no:cacheprovider
step bench_host 60 python benchmarks/bench_host.py --skip-first-call --calls 2000 --json "$LOG/bench_host.json"
step pytest_training 120 python -m pytest -q -m gpu tests/test_pdl.py tests/test_training.py -p no:cacheprovider \
  -k "host_paths or public_api or graph_replay or every_output_family or every_1d1d_family"
step bench_host_first_call 90 python benchmarks/bench_host.py --calls 200 --procs 2 --json "$LOG/bench_host_first.json"
exit 0
