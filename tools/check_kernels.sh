#!/usr/bin/env bash
# Compile FP8 GEMM kernel variants with nvcc for sm_90a and print ptxas' resource line per variant.
# Usage: tools/check_kernels.sh "BM BN STAGES MC ON_A" ...
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-/tmp/dt_check}; mkdir -p "$out"
for cfg in "$@"; do
  set -- $cfg
  f="$out/g_$1_$2_$3_$4_$5.cubin"
  log=$(nvcc -gencode=arch=compute_90a,code=sm_90a -cubin -O3 -std=c++17 -Xptxas -v -I"$root/include" \
    -DDT_BLOCK_M=$1 -DDT_BLOCK_N=$2 -DDT_NUM_STAGES=$3 -DDT_NUM_MULTICAST=$4 -DDT_MULTICAST_ON_A=$5 \
    -o "$f" "$root/csrc/entry/fp8_gemm_sm90.cu" 2>&1)
  regs=$(grep -o "Used [0-9]* registers" <<<"$log"); spill=$(grep -o "[0-9]* bytes stack frame, [0-9]* bytes spill stores" <<<"$log")
  warn=$(grep -c "warning\|error" <<<"$log")
  printf "%-22s %-20s %-45s warnings=%s\n" "$cfg" "$regs" "$spill" "$warn"
done
