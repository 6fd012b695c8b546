#!/usr/bin/env bash
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEEP_TILE_CACHE_DIR=/tmp/dt_cache DG_JIT_CACHE_DIR=/tmp/dg_cache
O=${OUT:-/tmp/o}; mkdir -p $O
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
[ -f /tmp/deepgemm-latest/deep_gemm/.built ] || (bash .baselines/build_deepgemm_latest.sh .baselines/deepgemm-latest-54e2261.tar.xz > /tmp/dgbuild.env 2> /tmp/dgbuild.err; echo $? > /tmp/dgbuild.rc) &
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_hc_einsum.py -k fp8_einsum > $O/fp8_einsum.txt 2>&1; echo "fp8_einsum rc=$? $(el)s"
grep -aE "'ok': False|\"ok\": false|ok.: False" $O/fp8_einsum.txt | head -8 | cut -c1-400
grep -aE "^E  " $O/fp8_einsum.txt | head -30 | cut -c1-300
wait
echo "dg $(el)s"
export PYTHONPATH=$PWD:/tmp/deepgemm-latest LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6
timeout 330 python3 benchmarks/probes/k_grouped_configs.py --shapes 7168,2048,4x8192 7168,2048,8x4096 7168,2048,16x2048 \
  4096,7168,4x8192 4096,7168,8x4096 4096,7168,16x2048 --configs auto,128x160:st,128x128:mcB:st --iters 10 > $O/kg.txt 2>&1
echo "kg rc=$? $(el)s"
grep -vE "^\s*$" $O/kg.txt | tail -40 | cut -c1-150
