#!/usr/bin/env bash
# tf32_hc_prenorm_gemm, einsum and fp8_einsum on one H200 within 5 minutes; logs under $OUT
# (or /tmp/hc_einsum_out), a short table last.
#   OUT=/tmp/out PY=python3 bash tools/hc_einsum_device.sh
# Phase 0: a smoke under the watchdog build (DEEP_TILE_WATCHDOG=1: a wrong barrier phase traps
# instead of hanging) with a short timeout: the pre-norm GEMM with one and two math warpgroups,
# pieces of caller's splits and own splits, and the per-head einsum. Phase 1 (parallel, each under
# a timeout): the GPU tests of tests/test_hc_einsum.py; memcheck, racecheck and synccheck on small
# cases (pre-norm GEMM: one row block with a tail, split partials with more splits than K blocks,
# strided views, several work items per CTA, one math warpgroup with pieces; einsum 'bmk,bnk->mn'
# with float32 and bf16 d, the per-head expressions by torch.bmm, by deep_tile's BF16 GEMM per head and by
# its batched BF16 GEMM (one launch over the heads);
# fp8_einsum per head, grouped, block-diagonal and head-strided); one untimed pass of the benchmark (both libraries' kernels
# compiled). Phase 2: benchmarks/bench_hc_einsum.py (DeepGEMM beside deep_tile when
# `import deep_gemm` finds it): the default paths, the first implementations ("old", "torch",
# "copy") and the alternatives, in one round robin.
set -u
cd "$(dirname "$0")/.."
. tools/family_device_lib.sh /tmp/hc_einsum_out
cat > "$OUT/smoke_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
import gpu_hc_einsum_cases as cases
results = [cases.hc(13, 24, 28672, num_splits=16), cases.hc(137, 24, 7168), cases.hc(13, 24, 7168, num_splits=16, sub=3),
           cases.hc(8192, 24, 7168, variant="prev"), cases.hc(137, 24, 7168, num_splits=16, variant="short_path"),
           cases.hc(300, 24, 1024, num_splits=2, groups=2, sub=2), cases.hc(4096, 24, 7168, num_splits=16),
           cases.einsum_case("bhr,hdr->bhd", dict(b=4, h=8, r=512, d=128), "bfloat16"),
           cases.einsum_case("bhd,hdr->bhr", dict(b=4, h=8, r=512, d=128), "bfloat16"),
           cases.einsum_case("bhr,hdr->bhd", dict(b=4, h=128, r=512, d=128), "bfloat16", path="batched", batched=True),
           cases.einsum_case("bhd,hdr->bhr", dict(b=300, h=128, r=512, d=128), "bfloat16", path="batched",
                             batched=True)]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
print("smoke ok")
PYEOF
( DEEP_TILE_WATCHDOG=1 timeout 90 $PY "$OUT/smoke_case.py" > "$OUT/smoke.log" 2>&1; echo $? > "$OUT/smoke.rc" )
run tests 220 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_hc_einsum.py
cat > "$OUT/san_case.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
import gpu_hc_einsum_cases as cases
results = [cases.hc(137, 24, 1024),
           cases.hc(70, 32, 256, num_splits=6),
           cases.hc(65, 16, 640, num_splits=3, a_row_stride=704, d_row_stride=20),
           cases.hc(600, 24, 640, num_splits=3, num_sms=4),
           cases.hc(13, 24, 2048, num_splits=2, groups=1, sub=3),
           cases.hc(200, 24, 1344, num_splits=2, groups=2, variant="prev"),
           cases.hc(70, 32, 960, num_sms=2, groups=1, variant="hint"),
           cases.einsum_case("bmk,bnk->mn", dict(b=5, m=192, n=128, k=128), "float32"),
           cases.einsum_case("bmk,bnk->mn", dict(b=3, m=64, n=320, k=64), "bfloat16"),
           cases.einsum_case("bhr,hdr->bhd", dict(b=37, h=3, r=192, d=136), "bfloat16", path="heads", d_pad=8),
           cases.einsum_case("bhd,hdr->bhr", dict(b=37, h=3, r=192, d=136), "bfloat16", path="bmm", d_pad=8),
           cases.einsum_case("bhr,hdr->bhd", dict(b=37, h=3, r=200, d=72), "bfloat16", path="batched", d_pad=8,
                             batched=True),
           cases.einsum_case("bhd,hdr->bhr", dict(b=1, h=3, r=520, d=40), "bfloat16", path="batched", batched=True),
           cases.einsum_case("bhd,hdr->bhr", dict(b=70, h=2, r=136, d=200), "bfloat16", path="batched", d_pad=8,
                             batched=True),
           cases.fp8_einsum_case(300, 2, 384, 264, with_c=True, path="heads", d_pad=8),
           cases.fp8_einsum_case(64, 4, 512, 256, with_c=True, path="masked"),
           cases.fp8_einsum_case(4, 8, 512, 256, path="diag"),
           cases.fp8_einsum_case(100, 3, 512, 256, path="strided", in_place=True)]
for r in results:
    print(r)
assert all(r["ok"] for r in results)
PYEOF
if command -v compute-sanitizer > /dev/null; then
  run memcheck 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 $PY "$OUT/san_case.py"
  run racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/san_case.py"
  run synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 99 $PY "$OUT/san_case.py"
else
  for s in memcheck racecheck synccheck; do echo "compute-sanitizer not found" > "$OUT/$s.log"; echo 127 > "$OUT/$s.rc"; done
fi
run bench_warm 150 $PY benchmarks/bench_hc_einsum.py --hc 13:24:7168:0 13:24:28672:16 4096:24:7168:16 \
  --einsum 'bmk,bnk->mn:129x128x384x128:f32' 'bmk,bnk->mn:129x128x384x128:bf16' 'bhr,hdr->bhd:4x8x4096x1024:bf16' \
  'bhd,hdr->bhr:4x8x4096x1024:bf16' --fp8-einsum 4x8x4096x1024 32x8x4096x1024 4096x8x4096x1024 --iters 1
wait
phase1=$(( $(date +%s) - start ))
left=$(( 285 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY benchmarks/bench_hc_einsum.py --iters 15 --json "$OUT/bench_hc_einsum.json"
wait
{
  echo "== hc_einsum_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in smoke tests memcheck racecheck synccheck bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" \
      "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log" "$OUT/synccheck.log" 2>/dev/null
  grep -h "'ok': False" "$OUT/smoke.log" "$OUT/memcheck.log" "$OUT/racecheck.log" "$OUT/synccheck.log" 2>/dev/null \
    | cut -c1-300 | head -8
  grep -E "^FAILED|passed|failed|Error" "$OUT/tests.log" 2>/dev/null | cut -c1-300 | head -8
  grep -E "^# |^op|^hc |^einsum|^fp8_einsum|geomean" "$OUT/bench.log" 2>/dev/null | cut -c1-260
} | tee "$OUT/summary.txt"
