#!/usr/bin/env bash
# fp8_mqa_logits (DeepSeek-V3.2's indexer logits) on one H200 within 5 minutes; logs under $OUT (or
# /tmp/mqa_out), a short table last.
#   tools/mqa_device.sh
# Phase 1 (parallel, each under a timeout): the GPU tests of tests/test_mqa_logits.py, memcheck and
# racecheck on three small cases per kernel design (ranges past both ends; the compressed form;
# causal without cleaning), and one untimed pass
# of the benchmark (both libraries' kernels compiled). Phase 2: benchmarks/bench_mqa_logits.py
# (DeepGEMM beside deep_tile when `import deep_gemm` finds it).
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/mqa_out
run tests 230 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_mqa_logits.py
cat > "$OUT/san_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_mqa_cases import mqa
results = [r for design in ("cuda_core", "wgmma")
           for r in (mqa(9, 300, 64, "wide", design=design),
                     mqa(5, 200, 32, "random", clean=False, max_seqlen_k=150, design=design),
                     mqa(3, 129, 32, "causal", clean=False, design=design))]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
if command -v compute-sanitizer > /dev/null; then
  run memcheck 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 $PY "$OUT/san_case.py"
  run racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/san_case.py"
else
  for s in memcheck racecheck; do echo "compute-sanitizer not found" > "$OUT/$s.log"; echo 127 > "$OUT/$s.rc"; done
fi
run bench_warm 150 $PY benchmarks/bench_mqa_logits.py --shapes 2048:4096:causal 64:32768:full --iters 1
wait
phase1=$(( $(date +%s) - start ))
left=$(( 280 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY benchmarks/bench_mqa_logits.py --json "$OUT/bench_mqa_logits.json"
wait
{
  echo "== mqa_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in tests memcheck racecheck bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log" 2>/dev/null
  grep -E "^# |^shape|:causal|:full|geomean" "$OUT/bench.log" 2>/dev/null | cut -c1-200
  grep -h "'ok': False" "$OUT/memcheck.log" "$OUT/racecheck.log" 2>/dev/null | cut -c1-300
  grep -E "^FAILED|passed|failed" "$OUT/tests.log" 2>/dev/null | cut -c1-300
} | tee "$OUT/summary.txt"
