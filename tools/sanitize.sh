#!/usr/bin/env bash
# compute-sanitizer over every kernel family the library ships, one command (needs a GPU):
#   tools/sanitize_cases.py     dense: persistent, multicast, 256-row tiles, split-K, swap-AB, K fixed,
#                               the stage ring, M = 1, row-major a_scale
#   tools/sanitize_grouped.py   contiguous, offsets, masked, psum: forced tiles and the selector's picks
#                               on empty experts, one-row experts, partial blocks, expected_m far from
#                               the counts, 64-256 experts, M = 1
#   tools/sanitize_training.py  FP32 output and C (aliased and separate), 1D1D, K-grouped (multicast
#                               pairs, the staged epilogue), the M-grouped output variants
#   tools/sanitize_casts.py     the casts and cast-transposes (weight stacks, grouped), SwiGLU
#   tools/sanitize_moe_layout.py  the psum layout kernel, the masked kind with completion signals
#   tools/sanitize_new_families.py  the indexer logits (ring, wgmma), the paged ones, the pre-norm GEMM,
#                               the einsum, the BF16 GEMMs
# with memcheck, racecheck, synccheck and initcheck. Each script first runs once without the
# sanitizer (it builds its kernels and checks its answers), then under each tool; the runs go
# SANITIZE_JOBS at a time (default two per GPU, SANITIZE_DEVICES) and each log lands in $OUT/<script>_<tool>.txt. Prints one
# line per run and exits non-zero when any run fails, a tool reports a device error or a hazard, or
# a case fails its check.
# Arguments, if any, are config texts of tools/sanitize_cases.py's CASES to run alone (e.g.
# 64x48:b1:k8). SANITIZE_SCRIPTS overrides the scripts run (paths, space-separated; a script's
# arguments after a colon, e.g. tools/sanitize_grouped.py:edge), SANITIZE_TOOLS the tools.
#
# NOTES: memcheck runs with --report-api-errors no. cuda-bindings resolves the driver's entry
# points with cuGetProcAddress when it is first used, and every version it probes that the driver
# lacks returns CUDA_ERROR_INVALID_VALUE; memcheck reports each of those host API return codes as
# an error although no device access is involved. Device errors are still reported.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
OUT=${OUT:-/tmp/dt_out}; mkdir -p "$OUT"
scripts=${SANITIZE_SCRIPTS:-tools/sanitize_cases.py tools/sanitize_grouped.py tools/sanitize_training.py \
tools/sanitize_casts.py tools/sanitize_moe_layout.py tools/sanitize_new_families.py}
[ $# -gt 0 ] && scripts=tools/sanitize_cases.py
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
# the runs spread over the GPUs (SANITIZE_DEVICES, default every one nvidia-smi lists), two per GPU
read -r -a devices <<< "${SANITIZE_DEVICES:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ')}"
[ ${#devices[@]} -gt 0 ] || devices=(0)
jobs=${SANITIZE_JOBS:-$(( 2 * ${#devices[@]} ))}
limit=${SANITIZE_TIMEOUT:-1500}

name_of() { local base=${1%%:*}; base=$(basename "$base" .py); [ "$1" = "${1%%:*}" ] || base="${base}_${1#*:}"; echo "$base"; }
args_of() { [ "$1" = "${1%%:*}" ] && return; echo "${1#*:}" | tr ',' ' '; }

# 1. every script once without the sanitizer: builds its kernels (compiling under the sanitizer is
#    slow, and not what it checks) and checks its answers.
status=0
slot=0
for script in $scripts; do
  name=$(name_of "$script")
  (CUDA_VISIBLE_DEVICES=${devices[$slot % ${#devices[@]}]} timeout 600 python3 "${script%%:*}" $(args_of "$script") "$@" > "$OUT/${name}_plain.txt" 2>&1
   echo $? > "$OUT/${name}_plain.rc") &
  slot=$((slot + 1))
done
wait
for script in $scripts; do
  name=$(name_of "$script")
  rc=$(cat "$OUT/${name}_plain.rc")
  echo "$name plain: rc=$rc | $(grep -aE "cases|families" "$OUT/${name}_plain.txt" | tail -1)"
  if [ "$rc" -ne 0 ]; then tail -20 "$OUT/${name}_plain.txt"; status=1; fi
done
[ $status -eq 0 ] || exit 1

# 2. each script under each tool, `jobs` at a time.
run_one() {  # script tool slot [config texts]
  local name; name=$(name_of "$1")
  local extra=""
  [ "$2" = memcheck ] && extra="--report-api-errors no"
  CUDA_VISIBLE_DEVICES=${devices[$3 % ${#devices[@]}]} timeout "$limit" compute-sanitizer --tool "$2" $extra --error-exitcode 99 python3 "${1%%:*}" $(args_of "$1") \
    "${@:4}" > "$OUT/${name}_$2.txt" 2>&1
  echo $? > "$OUT/${name}_$2.rc"
}
slot=0
for tool in $tools; do
  for script in $scripts; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    run_one "$script" "$tool" "$slot" "$@" &
    slot=$((slot + 1))
  done
done
wait
for tool in $tools; do
  for script in $scripts; do
    name=$(name_of "$script")
    log="$OUT/${name}_$tool.txt"
    rc=$(cat "$OUT/${name}_$tool.rc" 2>/dev/null || echo 1)
    line=$(grep -aE "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    cases=$(grep -aE "cases|families" "$log" | tail -1)
    echo "$name $tool: rc=$rc ${line:-no summary} | ${cases:-no case summary}"
    [ "$rc" -eq 0 ] || status=1
    # a summary of 0 is the tool's own verdict; anything else (or none) fails the run
    echo "$line" | grep -qE "SUMMARY: 0 (errors|hazards)" || status=1
  done
done
exit $status
