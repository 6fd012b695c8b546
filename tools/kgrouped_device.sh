#!/usr/bin/env bash
# The K-grouped GEMM in DeepGEMM's NT layout (layout="blocks") on one H200, within 9 minutes; logs
# under $OUT (or /tmp/kg_out), a short table last.
#   tools/kgrouped_device.sh
# Phase 1 (parallel, each under a timeout): the GPU tests of tests/test_k_grouped_blocks.py in three
# processes, the rows layout's public-API test (unchanged path), racecheck on one small blocks case,
# and the benchmark's kernels compiled (one untimed pass). Phase 2: the benchmark
# (benchmarks/bench_training.py --set kgrouped --compat; DeepGEMM beside it when deep_gemm imports).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
OUT=${OUT:-/tmp/kg_out}; mkdir -p "$OUT"
PY=${PY:-python}
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/info.log" 2>&1
$PY -c "import torch, deep_tile; print(torch.__version__, torch.version.cuda)" >> "$OUT/info.log" 2>&1
$PY -c "import deep_gemm; print('deep_gemm', getattr(deep_gemm, '__version__', '?'))" >> "$OUT/info.log" 2>&1 \
  || echo "deep_gemm: not importable (the benchmark runs without it)" >> "$OUT/info.log"

run() {  # name limit command...: one stage under a timeout, its exit status in $OUT/name.rc
  local name=$1 limit=$2; shift 2
  ( timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
}
T=tests/test_k_grouped_blocks.py
run t_api 320 $PY -m pytest -q -m gpu -p no:cacheprovider "$T" -k "public_api or bad_device"
run t_forced 320 $PY -m pytest -q -m gpu -p no:cacheprovider "$T" -k "forced_tiles or graph_replay"
run t_compat 320 $PY -m pytest -q -m gpu -p no:cacheprovider "$T" -k "compat_nt"
run t_rows 320 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_k_grouped.py -k "public_api"
cat > "$OUT/race_case.py" <<'PYEOF'
import torch
from deep_tile.gemm.k_grouped import k_grouped_fp8_gemm_1d1d
from deep_tile.reference import ref_k_grouped_fp8_gemm_1d1d
import deep_tile
m, n, sizes = 256, 384, [128, 0, 16, 240]
k = sum(sizes)
a, sa = deep_tile.per_token_cast_to_fp8(torch.randn(m, k, device="cuda").bfloat16())
b, sb = deep_tile.per_token_cast_to_fp8(torch.randn(n, k, device="cuda").bfloat16())
def blocks(x):
    parts, s = [], 0
    for size in sizes:
        parts.append(x[:, s:s + size].contiguous().view(-1)); s += size
    return torch.cat(parts)
out = torch.full((len(sizes), m, n), float("nan"), device="cuda")
k_grouped_fp8_gemm_1d1d(blocks(a), sa, blocks(b), sb, torch.tensor(sizes, dtype=torch.int32, device="cuda"), out,
                        layout="blocks")
torch.cuda.synchronize()
ref = ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes)
err = ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
print("max rel err", err); assert err < 1e-2, err
PYEOF
if command -v compute-sanitizer > /dev/null; then
  run race 320 compute-sanitizer --tool racecheck --error-exitcode 99 $PY "$OUT/race_case.py"
else
  echo "compute-sanitizer not found" > "$OUT/race.log"; echo 127 > "$OUT/race.rc"
fi
run bench_warm 320 $PY benchmarks/bench_training.py --set kgrouped --compat --warmup 1 --iters 1
wait
phase1=$(( $(date +%s) - start ))
left=$(( 520 - phase1 )); [ "$left" -lt 60 ] && left=60
run bench "$left" $PY benchmarks/bench_training.py --set kgrouped --compat --json "$OUT/bench_kgrouped.json"
wait
{
  echo "== kgrouped_device: phase 1 ${phase1}s, total $(( $(date +%s) - start ))s"
  printf "%-11s %4s  %s\n" stage rc "last line"
  for s in t_api t_forced t_compat t_rows race bench_warm bench; do
    printf "%-11s %4s  %s\n" "$s" "$(cat "$OUT/$s.rc" 2>/dev/null || echo -)" "$(grep -v '^\s*$' "$OUT/$s.log" 2>/dev/null | tail -1 | cut -c1-150)"
  done
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/race.log" 2>/dev/null
  grep -E "^kgrp|geomean|compat NT" "$OUT/bench.log" 2>/dev/null | cut -c1-400
} | tee "$OUT/summary.txt"
