# Sourced by the family device scripts (tools/mqa_device.sh, mqa_paged_device.sh, hc_einsum_device.sh,
# bf16_device.sh) from the repository root, with $1 the default of $OUT: the environment, $OUT
# (created), $PY (default python), $start (seconds), $OUT/info.log (GPU, torch, DeepGEMM if any),
# and run(), which starts one stage in the background under a timeout.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
OUT=${OUT:-$1}; mkdir -p "$OUT"
PY=${PY:-python}
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/info.log" 2>&1
$PY -c "import torch, deep_tile; print(torch.__version__, torch.version.cuda)" >> "$OUT/info.log" 2>&1
$PY -c "import deep_gemm; print('deep_gemm', getattr(deep_gemm, '__version__', '?'), deep_gemm.__file__)" \
  >> "$OUT/info.log" 2>&1 || echo "deep_gemm: not importable (the benchmark runs without it)" >> "$OUT/info.log"

run() {  # name limit command...: one stage under a timeout, its exit status in $OUT/name.rc
  local name=$1 limit=$2; shift 2
  ( timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
}
