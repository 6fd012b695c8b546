#!/usr/bin/env bash
# fp8_mqa_logits (DeepSeek-V3.2's indexer logits) on one H200 within about 150 s; logs under $OUT (or
# /tmp/mqa_out), a short table last.
#   tools/mqa_device.sh
# Phase 0: a smoke run of the ring and the three persistent designs in the watchdog build
# (a wrong barrier phase traps instead of hanging). Phase 1 (parallel, each under a timeout): the
# GPU tests of tests/test_mqa_logits.py for the persistent designs (the float64 formula, the lean
# epilogue's bits against the persistent one's; the other designs' SASS is unchanged by the lean
# epilogue); memcheck, racecheck and synccheck on small cases of the lean and register-weight designs (ranges
# past both ends; the compressed form; causal without cleaning; several items per CTA); one
# untimed pass of the benchmark (both libraries' kernels compiled). Phase 2:
# benchmarks/bench_mqa_logits.py, the three persistent designs (persistent_regs the default) beside
# DeepGEMM when `import deep_gemm` finds it.
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/mqa_out
cat > "$OUT/san_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_mqa_cases import mqa
designs = sys.argv[1:] or ["cuda_core", "wgmma", "ring", "persistent", "persistent_lean", "persistent_regs"]
results = [r for design in designs
           for r in (mqa(9, 300, 64, "wide", design=design),
                     mqa(5, 200, 32, "random", clean=False, max_seqlen_k=150, design=design),
                     mqa(3, 129, 32, "causal", clean=False, design=design))]
for design in ("persistent", "persistent_lean", "persistent_regs"):  # more items than CTAs: the q stages wrap, items end empty or split
    if design in designs:
        results += [mqa(1100, 300, 64, "random", design=design), mqa(2, 3000, 32, "wide", design=design)]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
run smoke 45 env DEEP_TILE_WATCHDOG=1 $PY "$OUT/san_case.py" ring persistent persistent_lean persistent_regs
wait
run tests 90 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_mqa_logits.py -k "persistent or lean"
if command -v compute-sanitizer > /dev/null; then
  run memcheck 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 $PY "$OUT/san_case.py" persistent_lean persistent_regs
  run racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/san_case.py" persistent_lean persistent_regs
  run synccheck 90 compute-sanitizer --tool synccheck --error-exitcode 99 $PY "$OUT/san_case.py" persistent_lean persistent_regs
else
  for s in memcheck racecheck synccheck; do echo "compute-sanitizer not found" > "$OUT/$s.log"; echo 127 > "$OUT/$s.rc"; done
fi
run bench_warm 90 $PY benchmarks/bench_mqa_logits.py --shapes 2048:4096:causal 64:32768:full --iters 1 \
  --design persistent persistent_lean persistent_regs
wait
phase1=$(( $(date +%s) - start ))
left=$(( 150 - phase1 )); [ "$left" -lt 45 ] && left=45
run bench "$left" $PY benchmarks/bench_mqa_logits.py --design persistent persistent_lean persistent_regs --iters 20 --json "$OUT/bench_mqa_logits.json"
wait
{
  echo "== mqa_device: phase 0+1 ${phase1}s, total $(( $(date +%s) - start ))s"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in smoke tests memcheck racecheck synccheck bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Barrier error" "$OUT/memcheck.log" "$OUT/racecheck.log" \
    "$OUT/synccheck.log" 2>/dev/null | sort | uniq -c | head -8
  grep -h "'ok': False" "$OUT/smoke.log" "$OUT/memcheck.log" "$OUT/racecheck.log" 2>/dev/null | cut -c1-300 | head -6
  grep -hE "trap|illegal|Error" "$OUT/smoke.log" 2>/dev/null | head -4 | cut -c1-200
  grep -E "^FAILED|passed|failed" "$OUT/tests.log" 2>/dev/null | cut -c1-300 | head -8
  grep -E "^# |^shape|^-|:causal|:full|geomean" "$OUT/bench.log" 2>/dev/null | cut -c1-200
} | tee "$OUT/summary.txt"
