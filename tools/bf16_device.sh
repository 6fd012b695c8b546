#!/usr/bin/env bash
# The BF16 GEMMs (deep_tile/bf16.py) on one H200 in about 300-450 s (its 37 GPU tests compile for most of it); logs under $OUT (or
# /tmp/bf16_out), a short table last.
#   OUT=/tmp/bf16_out PY=python3 bash tools/bf16_device.sh
# Phase 0: one small call per kernel kind and plan path (split K summed in the kernel, its tile
# counters back at zero and graph replay, short A box, 64-row tiles (one consumer warpgroup), odd widths, float32
# TMA store and reduce-add, B multicast to CTA pairs, the legacy plan) under a short timeout (a wrong mbarrier phase hangs:
# the watchdog build traps instead). Phase 1 (parallel, each under a timeout): the GPU tests of
# tests/test_bf16_gemm.py, compute-sanitizer memcheck, racecheck and synccheck on the same small
# cases, one untimed benchmark pass (both libraries' kernels compiled). Phase 2:
# benchmarks/bench_bf16_gemm.py: the new plan, the legacy plan (DEEP_TILE_BF16_LEGACY's) and
# DeepGEMM (when `import deep_gemm` finds it) timed in the same rounds.
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/bf16_out
cat > "$OUT/san_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_bf16_cases import batched, contiguous, dense, k_grouped, masked, split_counters
results = [dense(130, 264, 200, "nt"), dense(77, 200, 136, "tn", out="f32", accumulate="inplace"),
           dense(70, 136, 72, "tt", block_n=64), dense(65, 128, 64, "nn", accumulate="c"),
           dense(130, 200, 136, "nt", block_n=176), dense(70, 100, 200, "nt", out="f32", block_n=96),
           dense(140, 300, 136, "tn", out="f32", accumulate="inplace", block_n=192),
           dense(1, 300, 512, "nt", block_n=64, splits=3, box_m=16),
           dense(40, 200, 448, "tn", out="f32", accumulate="c", block_n=128, splits=4, box_m=64),
           dense(1, 1001, 512, "nt", accumulate="c", block_n=112, splits=5, box_m=16),
           dense(130, 260, 640, "nt", out="f32", block_n=96, splits=3),
           split_counters(70, 300, 512, 64, 4, 128, repeats=2),
           dense(130, 256, 1024, "nt", out="f32", accumulate="inplace"), dense(1, 1000, 2048, "nt"),
           dense(130, 264, 200, "tn", legacy=True),
           dense(300, 200, 136, "nt", block_n=176, cluster_m=2),
           dense(200, 100, 200, "tt", out="f32", accumulate="inplace", block_n=96, cluster_m=2),
           dense(520, 1296, 512, "nt", block_n=256, cluster_m=2, store_all=1),
           dense(1, 1000, 512, "nt", block_n=32, box_m=16, stages=16, block_m=64),
           dense(130, 600, 448, "nt", block_n=64, splits=3, box_m=64, block_m=64),
           dense(150, 300, 200, "tn", out="f32", accumulate="inplace", block_n=128, box_m=64, block_m=64),
           dense(130, 1296, 200, "nt", block_n=256, box_m=64, store_all=1, block_m=64),
           dense(128, 520, 1000, "nt", block_n=32, box_m=64, stages=6, block_m=64, k_merge=3),
           dense(1, 700, 1000, "nt", block_n=32, box_m=16, stages=4, block_m=64, k_merge=4),
           dense(30, 400, 1096, "nt", accumulate="c", block_n=64, splits=3, box_m=32, block_m=64, k_merge=2),
           dense(200, 300, 520, "nt", out="f32", block_n=128, k_merge=2),
           dense(1, 1000, 512, "nt", block_n=32, block_m=4),
           dense(3, 300, 200, "nt", out="f32", accumulate="inplace", block_n=32, block_m=4),
           contiguous(2, 100, 256, 128), masked(3, 192, 70, 256, 128),
           k_grouped([128, 0, 256], 72, 136),
           batched(3, 37, 136, 200), batched(4, 5, 520, 72, major_b="mn"),
           batched(3, 130, 200, 136, out="f32"), batched(3, 30, 200, 264, block_n=64, box_m=32, stages=6),
           batched(3, 300, 200, 136, d_pad=8), batched(4, 5, 520, 72, major_b="mn", d_pad=8)]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
# Phase 0: a hang here means a pipeline bug; the watchdog build traps instead of hanging forever
DEEP_TILE_WATCHDOG=1 run smoke 90 $PY "$OUT/san_case.py"
wait
DEEP_TILE_WATCHDOG=1 run tests 420 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_bf16_gemm.py
if command -v compute-sanitizer > /dev/null; then
  run memcheck 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 $PY "$OUT/san_case.py"
  run racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/san_case.py"
  run synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 99 $PY "$OUT/san_case.py"
else
  for s in memcheck racecheck synccheck; do echo "compute-sanitizer not found" > "$OUT/$s.log"; echo 127 > "$OUT/$s.rc"; done
fi
run bench_warm 150 $PY benchmarks/bench_bf16_gemm.py --iters 1
wait
phase1=$(( $(date +%s) - start ))
left=$(( 260 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY benchmarks/bench_bf16_gemm.py --iters 15 --json "$OUT/bench_bf16_gemm.json"
wait
{
  echo "== bf16_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in smoke tests memcheck racecheck synccheck bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK" "$OUT/memcheck.log" "$OUT/racecheck.log" "$OUT/synccheck.log" 2>/dev/null
  grep -E "^# |^shape|^alt shape|:nt:|:nn:|:tn:|:tt:|geomean" "$OUT/bench.log" 2>/dev/null | cut -c1-220
  grep -hE "Error|error:|Traceback" "$OUT/bench.log" "$OUT/smoke.log" 2>/dev/null | head -5 | cut -c1-200
  grep -h "'ok': False" "$OUT/smoke.log" "$OUT/memcheck.log" 2>/dev/null | cut -c1-300
  grep -E "^FAILED|passed|failed" "$OUT/tests.log" 2>/dev/null | cut -c1-300
} | tee "$OUT/summary.txt"
