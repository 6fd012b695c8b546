#!/usr/bin/env bash
# The K-grouped GEMM through DeepGEMM's API on one H200 within about 5 minutes: the NT form (layout="blocks")
# and the TN form (tokens-as-rows operands, turned K-major by deep_tile's byte transposition);
# logs under $OUT (or /tmp/kg_out), a short table last.
#   OUT=/tmp/kg_out PY=python3 bash tools/kgrouped_device.sh
# Phase 0: a small TN and NT call under the watchdog build (a wrong mbarrier phase traps instead of
# hanging) and the transposition checked bit for bit against torch. Phase 1 (parallel, each under a
# timeout): the GPU tests of tests/test_k_grouped_blocks.py and the compat tests' K-grouped and
# transposition checks; compute-sanitizer memcheck, racecheck and synccheck on the small case; one
# untimed benchmark pass (kernels compiled). Phase 2: benchmarks/bench_training.py --set kgrouped
# --compat at 4 x ~8192 and 16 x ~2048 tokens: deep_tile rows, compat NT, compat TN with the
# transposition kernel and with torch's copy (DEEP_TILE_KGROUPED_TN_TRANSPOSE), DeepGEMM when importable;
# then benchmarks/probes/k_grouped_configs.py at 16 x ~2048: the rule's pick beside the old one.
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/kg_out
cat > "$OUT/small_case.py" <<'PYEOF'
import os
import sys
sys.path.insert(0, "tests")
import torch
from gpu_compat_cases import k_grouped, transpose_bytes
ok = True
shapes = [[(256, 400), (256, 528)]] + ([] if "--small" in sys.argv else [[(4096, 7168)]])  # small: the sanitizers
for r in [transpose_bytes(s, seed=i) for i, s in enumerate(shapes)]:
    print(r); ok &= r["wrong"] == 0 and r["kernel"]
for case in [dict(form="tn", m=272, n=400, ks=[256, 0, 128, 384], seed=3),
             dict(form="tn", m=144, n=528, ks=[128, 128], in_place=False, seed=4),
             dict(form="nt", m=256, n=384, ks=[128, 0, 256], seed=5)]:
    r = k_grouped(**case)
    print(r); ok &= r["diff"] < 1e-3 and r["nan_computed"] == 0 and r["untouched_written"] == 0 and r["computed"] > 0
print("small case", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PYEOF
DEEP_TILE_WATCHDOG=1 run smoke 100 $PY "$OUT/small_case.py"
wait
T=tests/test_k_grouped_blocks.py
run t_blocks 150 $PY -m pytest -q -m gpu -p no:cacheprovider "$T" -k "public_api or compat_nt or graph_replay"
run t_forced 150 $PY -m pytest -q -m gpu -p no:cacheprovider "$T" -k "forced_tiles or misaligned"
run t_compat 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_compat_deepgemm.py \
  -k "k_grouped or transpose_bytes"
run t_rows 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_k_grouped.py -k "public_api"
if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck synccheck; do
    extra=""; [ "$tool" = memcheck ] && extra="--report-api-errors no"
    run "$tool" 150 compute-sanitizer --tool "$tool" $extra --error-exitcode 99 $PY "$OUT/small_case.py" --small
  done
else
  for tool in memcheck racecheck synccheck; do echo "compute-sanitizer not found" > "$OUT/$tool.log"; echo 127 > "$OUT/$tool.rc"; done
fi
BENCH="benchmarks/bench_training.py --set kgrouped --compat --groups 4x~8192 --groups 16x~2048"
run bench_warm 150 $PY $BENCH --warmup 1 --iters 1
wait
phase1=$(( $(date +%s) - start ))
left=$(( 235 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY $BENCH --iters 20 --json "$OUT/bench_kgrouped.json"
wait
# the rule's pick at 16 x ~2048 (auto: pairs at m > n) beside the old pick (128x128 staged) and 128x160 staged
left=$(( 290 - $(date +%s) + start )); [ "$left" -lt 30 ] && left=30
run probe "$left" $PY benchmarks/probes/k_grouped_configs.py --shapes 7168,2048,16x2048 4096,7168,16x2048 \
  --configs auto,128x128:st,128x160:st --iters 10
wait
{
  echo "== kgrouped_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s; $(tr '\n' ' ' < "$OUT/info.log" | cut -c1-160)"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in smoke t_blocks t_forced t_compat t_rows memcheck racecheck synccheck bench_warm bench probe; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  for tool in memcheck racecheck synccheck; do
    echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.log" 2>/dev/null | tr '\n' ' ')"
  done
  grep -E "^kgrp|geomean|compat NT|compat TN" "$OUT/bench.log" 2>/dev/null | cut -c1-420
  grep -E "tokens\)| TFLOPS|^  !" "$OUT/probe.log" 2>/dev/null | cut -c1-120
} | tee "$OUT/summary.txt"
