#!/usr/bin/env bash
# compute-sanitizer over one small problem of every FP8 GEMM kernel family and the casts
# (tools/sanitize_cases.py) and over the grouped kinds with and without multicast pairs
# (tools/sanitize_grouped.py), with memcheck, racecheck, synccheck and initcheck. Needs a GPU.
# Exits non-zero when any tool reports a device error or a case fails its check. Arguments, if
# any, are config texts of tools/sanitize_cases.py's CASES to run alone (e.g. 64x48:b1:k8; the
# grouped cases are then left out). SANITIZE_SCRIPTS overrides the scripts run, SANITIZE_TOOLS the
# tools.
#
# NOTES: memcheck runs with --report-api-errors no. cuda-bindings resolves the driver's entry
# points with cuGetProcAddress when it is first used, and every version it probes that the driver
# lacks returns CUDA_ERROR_INVALID_VALUE; memcheck reports each of those 34 host API return codes
# as an error although no device access is involved. Device errors are still reported.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
OUT=${OUT:-/tmp/dt_out}; mkdir -p "$OUT"
scripts=${SANITIZE_SCRIPTS:-tools/sanitize_cases.py tools/sanitize_grouped.py}
[ $# -gt 0 ] && scripts=tools/sanitize_cases.py
status=0
for script in $scripts; do
  name=$(basename "$script" .py)
  # Build every kernel outside the sanitizer first (compiling under it is slow, and not what it checks).
  timeout 300 python3 "$script" "$@" > "$OUT/${name}_plain.txt" 2>&1 || { cat "$OUT/${name}_plain.txt"; exit 1; }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    extra=""
    [ "$tool" = memcheck ] && extra="--report-api-errors no"
    log="$OUT/${name}_$tool.txt"
    timeout 900 compute-sanitizer --tool "$tool" $extra --error-exitcode 99 python3 "$script" "$@" > "$log" 2>&1
    rc=$?
    line=$(grep -aE "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    cases=$(grep -aE "cases" "$log" | tail -1)
    echo "$name $tool: rc=$rc ${line:-no summary} | ${cases:-no case summary}"
    [ "$rc" -eq 0 ] || status=1
  done
done
exit $status
