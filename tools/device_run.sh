#!/usr/bin/env bash
# One device session: environment facts, smoke checks, GPU tests, benchmark. Stages are picked by
# arguments (default: smoke tests). Every step runs under `timeout` so a hung kernel cannot
# stall the machine; logs go to $OUT (set by the device tool) or /tmp/dt_out.
#   tools/device_run.sh smoke tests bench
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
OUT=${OUT:-/tmp/dt_out}; mkdir -p "$OUT"
stages=${*:-smoke tests}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -c "import sys, torch, cuda.bindings; from deep_tile.jit.compiler import default_compiler, compiler_version as v; c=default_compiler(); print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cuda.bindings.__version__, 'compiler', c, v(c))" 2>&1 | tee -a "$OUT/gpu.txt"
for stage in $stages; do
  case $stage in
    smoke)
      echo "== smoke"
      echo '{"function": "gemm", "cases": [
        {"m": 256, "n": 256, "k": 256}, {"m": 64, "n": 2112, "k": 7168}, {"m": 4096, "n": 7168, "k": 2048},
        {"m": 4096, "n": 4096, "k": 7168}, {"m": 129, "n": 136, "k": 144}]}' |
        timeout 180 python3 tests/gpu_cases.py 2>&1 | tee "$OUT/smoke.txt" | cut -c1-400
      echo "smoke exit: ${PIPESTATUS[1]}" ;;
    tests)
      echo "== gpu tests"
      timeout 540 python3 -m pytest -q -m gpu tests/ -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40 ;;
    alltests)
      echo "== all tests"
      timeout 540 python3 -m pytest -q tests/ -p no:cacheprovider 2>&1 | tee "$OUT/pytest_all.txt" | tail -40 ;;
    bench)
      echo "== benchmark"
      timeout 400 python3 benchmarks/bench_fp8_gemm.py --json "$OUT/bench.json" --csv "$OUT/bench.csv" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.txt" | tail -45 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
