#!/usr/bin/env bash
# fp8_mqa_logits' default design beside its alternatives (benchmarks/bench_mqa_logits.py ALTERNATIVES)
# and DeepGEMM on one H200 within about 90 s; logs under $OUT (or /tmp/mqa_alt_out), a short table last.
#   PY=python3 tools/mqa_alt_device.sh
# Stage smoke: persistent_regs (setmaxnreg, 640 threads) on small cases in the watchdog build (a wrong
# register budget or barrier phase traps instead of hanging): the float64 formula and the same bits as
# persistent_lean. Stage bench (after it, each alternative's bits checked against the default there):
# bench_mqa_logits.py --alt on the seven default shapes, median of 20 interleaved runs, L2 flushed
# (without persistent_regs when the smoke stage failed).
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/mqa_alt_out
cat > "$OUT/smoke_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
from gpu_mqa_cases import mqa, same_logits
results = [mqa(9, 300, 64, "wide", design="persistent_regs"),
           mqa(1100, 300, 64, "random", design="persistent_regs"),  # more items than CTAs: the q stages wrap
           mqa(2, 3000, 32, "wide", design="persistent_regs"),
           same_logits(257, 3001, 64, "random", design="persistent_regs", base="persistent_lean"),
           same_logits(1030, 2500, 32, "causal", clean=False, design="persistent_regs", base="persistent_lean"),
           same_logits(33, 4097, 64, "wide", clean=False, max_seqlen_k=600, design="persistent_regs",
                       base="persistent_lean")]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
run smoke 40 env DEEP_TILE_WATCHDOG=1 $PY "$OUT/smoke_case.py"
# the plain build and DeepGEMM's kernels compile meanwhile (one untimed pass)
run bench_warm 40 $PY benchmarks/bench_mqa_logits.py --alt --shapes 2048:4096:causal --iters 1
wait
left=$(( 88 - ($(date +%s) - start) )); [ "$left" -lt 30 ] && left=30
skip=""; [ "$(cat "$OUT/smoke.rc")" = 0 ] || skip="--alt-skip regs"  # a failed or hung persistent_regs stays out of the timing
run bench "$left" $PY benchmarks/bench_mqa_logits.py --alt --iters 20 $skip
wait
{
  echo "== mqa_alt_device: total $(( $(date +%s) - start ))s"
  for s in smoke bench_warm bench; do
    printf "%-10s rc %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -h "'ok': False" "$OUT/smoke.log" 2>/dev/null | cut -c1-250 | head -4
  grep -hE "trap|illegal|Error" "$OUT/smoke.log" "$OUT/bench.log" 2>/dev/null | head -4 | cut -c1-200
  grep -vE "^\s*$" "$OUT/bench.log" 2>/dev/null | head -16 | cut -c1-200
} | tee "$OUT/summary.txt"
