#!/usr/bin/env bash
# fp8_paged_mqa_logits / get_paged_mqa_logits_metadata (DeepSeek-V3.2's paged indexer logits) on one
# H200 in about five minutes; logs under $OUT (or /tmp/mqa_paged_out), a short table last.
#   OUT=/tmp/x PY=python3 bash tools/mqa_paged_device.sh
# Phase 0: a smoke of every kernel design under the watchdog build (DEEP_TILE_WATCHDOG=1), short
# timeout: a failure or hang of a TMA design or the fallback (four_ctas) stops the script here;
# of another design drops it from the benchmark. Phase 1 (parallel, each under a timeout): the GPU
# tests of tests/test_mqa_logits_paged.py, compute-sanitizer memcheck, racecheck and synccheck on
# small cases (lengths off the block size with cleaning, zero lengths, more slots than units, spaced
# cache blocks and block-table entries outside the cache, many short sequences at N 128 where the
# TMA designs hold one q slot, blocks off the TMA's rows: the fallback). Phase 2:
# benchmarks/bench_mqa_logits_paged.py, the default (pick_design's) beside the two loader designs named
# (tma_loader, tma_loader_wg: the default's own at some N, the other's elsewhere) when they passed, and
# DeepGEMM (when `import deep_gemm` finds it).
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/mqa_paged_out
cat > "$OUT/smoke_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_mqa_paged_cases import paged
# tma_loader_wg last: its waits are untimed even in this build, so a hang of it is the timeout's, after the others' verdicts
for design in ("four_ctas", "tma", "tma_one_chain", "two_slots", "tma_lean", "tma_loader", "tma_loader_wg"):  # the fallback first: its verdict comes before any hang
    results = [paged(2, 2, 64, 100, clean=True, design=design), paged(2, 1, 32, 100, design=design),
               paged(2, 2, 32, 100, design=design), paged(2, 1, 64, 100, design=design),
               paged(60, 2, 64, 70, lengths="tiny", clean=True, num_sms=3, design=design),
               paged(9, 1, 32, 300, bad_entries=True, clean=True, design=design),
               paged(1, 1, 32, 1, design=design), paged(7, 2, 64, 300, lengths="zero", clean=True, design=design)]
    for r in results:
        print(r)
    print(f"smoke {design} {'ok' if all(r['ok'] for r in results) else 'FAILED'}", flush=True)
PYEOF
# the watchdog build traps a stuck mbarrier wait instead of hanging
DEEP_TILE_WATCHDOG=1 timeout 90 $PY "$OUT/smoke_case.py" > "$OUT/smoke.log" 2>&1; echo $? > "$OUT/smoke.rc"
if ! grep -q "smoke four_ctas ok" "$OUT/smoke.log" || ! grep -q "smoke tma_loader ok" "$OUT/smoke.log"; then
  echo "== mqa_paged_device: the watchdog smoke failed (rc $(cat "$OUT/smoke.rc")); stopping"
  grep -v "'ok': True" "$OUT/smoke.log" | tail -20 | cut -c1-300
  exit 1
fi
OTHER="tma_loader"  # the designs timed beside the default
grep -q "smoke tma_loader_wg ok" "$OUT/smoke.log" && OTHER="$OTHER tma_loader_wg"
cat > "$OUT/san_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_mqa_paged_cases import paged
results = []
for design in ("tma_loader", "tma_loader_wg", "tma_lean", "tma_one_chain", "tma", "four_ctas"):  # the default, the other TMA designs, the fallback
    results += [paged(5, 2, 64, 150, clean=True, design=design),
                paged(6, 1, 32, 100, lengths="zero", clean=True, design=design),
                paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design=design),
                paged(12, 2, 64, 90, lengths="tiny", clean=True, num_sms=2, bad_entries=True, design=design)]
results += [paged(3, 1, 64, 200, block_stride=64 * 132 + 16, clean=True),  # off the TMA rows: the fallback
            paged(5, 2, 64, 150, clean=True, num_sms=3, design="tma"),
            # tma_loader: short sequences at N 128 (the q copy waiting for the one slot while the next blocks' go)
            paged(40, 2, 64, 150, clean=True, num_sms=3, design="tma_loader"),
            paged(40, 2, 64, 150, clean=True, num_sms=3, design="tma_loader_wg")]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
# the plain build compiles once, before the parallel stages race to build it
timeout 60 $PY -c "
import sys; sys.path.insert(0, 'tests')
from gpu_mqa_paged_cases import paged
print(paged(2, 2, 64, 100, clean=True, design='tma_loader'))
print(paged(2, 2, 64, 100, clean=True, design='tma_loader_wg'))
" > "$OUT/build.log" 2>&1; echo $? > "$OUT/build.rc"
run tests 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_mqa_logits_paged.py
if command -v compute-sanitizer > /dev/null; then
  run memcheck 240 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 $PY "$OUT/san_case.py"
  run racecheck 240 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/san_case.py"
  run synccheck 240 compute-sanitizer --tool synccheck --error-exitcode 99 $PY "$OUT/san_case.py"
else
  for s in memcheck racecheck synccheck; do echo "compute-sanitizer not found" > "$OUT/$s.log"; echo 127 > "$OUT/$s.rc"; done
fi
# one untimed pass: DeepGEMM's kernels JIT-compiled before the timed run
run bench_warm 80 $PY benchmarks/bench_mqa_logits_paged.py --shapes 256:1:32:8192 256:1:64:8192 256:2:32:8192 \
  256:2:64:8192 --iters 1 --designs
wait
# a design whose GPU tests failed leaves the timed run
grep -q "FAILED.*tma" "$OUT/tests.log" && OTHER=""  # (the default still runs: its verdict is the tests')
phase1=$(( $(date +%s) - start ))
left=$(( 360 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY benchmarks/bench_mqa_logits_paged.py --iters 10 --json "$OUT/bench_mqa_logits_paged.json" --designs $OTHER
wait
{
  echo "== mqa_paged_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s; default pick_design's, timed beside: $OTHER"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in smoke build tests memcheck racecheck synccheck bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log" "$OUT/synccheck.log" 2>/dev/null
  grep "^smoke " "$OUT/smoke.log" | tr '\n' ' '; echo
  if grep -q "geomean" "$OUT/bench.log" 2>/dev/null; then
    grep -E "^# |^shape|^[0-9]+:[0-9]|geomean" "$OUT/bench.log" | cut -c1-160
  else  # cut short: the shapes it timed
    grep -E "^row " "$OUT/bench.log" 2>/dev/null | cut -c1-160
  fi
  grep -h "'ok': False" "$OUT/smoke.log" "$OUT/build.log" "$OUT/memcheck.log" "$OUT/racecheck.log" \
    "$OUT/synccheck.log" 2>/dev/null | head -8 | cut -c1-300
  grep -hE "Error|error" "$OUT/smoke.log" 2>/dev/null | tail -3 | cut -c1-300
  grep -E "^FAILED|passed|failed" "$OUT/tests.log" 2>/dev/null | cut -c1-300
} | tee "$OUT/summary.txt"
