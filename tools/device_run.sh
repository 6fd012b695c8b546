#!/usr/bin/env bash
# One device run, stages picked by arguments, each under `timeout` so a hung kernel cannot
# stall the machine; logs go to $OUT (set by the device tool) or /tmp/dt_out.
#   tools/device_run.sh info dgbuild compile tests sweep-large sweep-small bench
# Stages:
#   info         GPU, driver, clocks, versions
#   dgbuild      start building DeepGEMM latest (.baselines/, see ../shared/baselines) in the background
#   dgwait       wait for that build (the later stages use it when it succeeded)
#   dgwarm       compile DeepGEMM's kernels for the sweep/bench shapes in 8 processes
#   compile      fill deep_tile's cache with every sweep configuration (16 processes)
#   smoke        one small shape of every family (tools/sanitize_cases.py), the resident-cluster cap
#   families     the GPU test of every config family on four shapes
#   tests        the GPU tests (pytest -m gpu)
#   sweep-large / sweep-small / sweep-decode   forced configs + the model's top candidates
#   bench        benchmarks/bench_fp8_gemm.py (18 shapes + 8192^3) with the baselines
#   decode       benchmarks/bench_fp8_gemm.py --decode
#   chain-warm   compile bench_decode.py's kernels ($CHAIN_ARGS) in 8 processes
#   chain        benchmarks/bench_decode.py $CHAIN_ARGS (the layer's GEMMs chained in a CUDA graph); CHAIN_TAG
#                names the output files, so several chain stages in one call keep their logs
#   sustained    benchmarks/bench_fp8_gemm.py --sustained at 4096x7168x16384
#   dg2025       the benchmark with DeepGEMM's 2025 version as the baseline
#   sanitize     tools/sanitize.sh
#   tp           tensor parallelism on every GPU of the machine (docs/tp.md): the GPU test of tests/test_tp.py,
#                the NCCL cases at the machine's world size, examples/tp_mlp.py, bench_tp.py with and without
#                --gemm-sms $TP_GEMM_SMS at $TP_TOKENS tokens, and the one-GPU probe benchmarks/probes/tp_steps.py
#   host         benchmarks/bench_host.py (CPU us per call, first-call latency)
#   explore      tools/explore_overheads.py (launch overhead, flush kinds, cluster cap)
#   ncu          Nsight Compute on a small-M and a large-M shape
#   ncu-warm     run each NCU_SPECS at NCU_SHAPE once, in parallel (fills the JIT caches for ncu-cmp)
#   ncu-cmp      Nsight Compute (full set, base clocks, SASS stall table) on NCU_SPECS (deepgemm and/or
#                configs, default: DeepGEMM beside 256x128, 256x128:mcA and 128x256) at NCU_SHAPE
#                (tools/profile_one.py's arguments: "M N K" or "--grouped KIND,G,E N K"); NCU_TAG
#                prefixes the file names
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
export DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dg_cache}
OUT=${OUT:-/tmp/dt_out}; mkdir -p "$OUT"
SWEEP_LARGE=${SWEEP_LARGE:-auto,128x192:mcA,128x192:mcB,256x64:mcB,128x128:b1,128x128:b2,128x128:mcA,256x128,256x128:mcA,256x128:mcB,128x256:mcA,128x256:mcB,128x256,256x64:b1,256x64:b2,256x64:mcA,128x192,128x160,256x112:mcA}
SWEEP_SMALL=${SWEEP_SMALL:-auto,64x16:b1,64x16:b2,64x32:b2,64x64:b2,64x128:b2,128x128:b2,64x32:b2:k4,64x64:b2:k2,64x64:b2:k4,64x64:b2:k8,64x128:b2:k4,64x128:b2:k8,128x64:b2:k4,128x128:b2:k4}
NCU_SPECS=${NCU_SPECS:-deepgemm 256x128 256x128:mcA 128x256}  # ncu-warm / ncu-cmp
NCU_SHAPE=${NCU_SHAPE:-4096 7168 16384}
TP_TOKENS=${TP_TOKENS:-8192 16384 32768}  # tp
TP_GEMM_SMS=${TP_GEMM_SMS:-120}
dg_env() {  # use DeepGEMM latest when its build finished
  if [ -f /tmp/deepgemm-latest/deep_gemm/.built ]; then
    export PYTHONPATH=$PWD:/tmp/deepgemm-latest LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6
  fi
}
for stage in ${*:-info smoke}; do
  echo "== $stage $(date +%T)"
  case $stage in
    info)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv | tee "$OUT/gpu.txt"
      python3 -c "import sys, torch, cuda.bindings; from deep_tile.jit.compiler import default_compiler, compiler_version as v; c=default_compiler(); print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cuda.bindings.__version__, 'compiler', c, v(c)); print('nvcc', v('nvcc'))" 2>&1 | tee -a "$OUT/gpu.txt" ;;
    dgbuild)
      (bash .baselines/build_deepgemm_latest.sh .baselines/deepgemm-latest-54e2261.tar.xz > /tmp/dgbuild.env 2> /tmp/dgbuild.err; echo $? > /tmp/dgbuild.rc) &
      echo "building DeepGEMM latest in the background" ;;
    dgwait)
      for _ in $(seq 300); do [ -f /tmp/dgbuild.rc ] && break; sleep 1; done
      echo "DeepGEMM build rc=$(cat /tmp/dgbuild.rc 2>/dev/null || echo timeout)"; tail -3 /tmp/dgbuild.err ;;
    dgwarm)
      ( dg_env; for i in 0 1 2 3 4 5 6 7; do timeout 400 python3 tools/deepgemm_warm.py --set large --set small --set decode --part $i/8 > "/tmp/dgwarm$i.log" 2>&1 & done; wait )
      for f in /tmp/dgwarm*.log; do tail -n 1 "$f"; done; grep -il "error\|not importable" /tmp/dgwarm*.log && head -5 /tmp/dgwarm0.log ;;
    compile)
      timeout 300 python3 benchmarks/probes/sweep_configs.py --set large --configs "$SWEEP_LARGE" --top 4 --compile-only --jobs 16 2>&1 | tail -5
      timeout 300 python3 benchmarks/probes/sweep_configs.py --set small --set decode --configs "$SWEEP_SMALL" --top 8 --compile-only --jobs 16 2>&1 | tail -5 ;;
    smoke)
      timeout 150 python3 tools/sanitize_cases.py 2>&1 | tee "$OUT/smoke.txt" | tail -20
      python3 -c "from deep_tile.gemm import _plan_for_config as p; from deep_tile.testing.configs import parse_config as c
for t in ('256x128:mcA', '128x128:mcA', '64x64:mcA'): print(t, 'grid capped at resident clusters:', p(c(t, 8192, 8192, 132), 8192, 8192).grid)" 2>&1 | tee -a "$OUT/smoke.txt" ;;
    families)
      timeout 400 python3 -m pytest -q -x -p no:cacheprovider tests/test_fp8_gemm.py -k family 2>&1 | tee "$OUT/families.txt" | tail -15 ;;
    tests)
      timeout 560 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -25 ;;
    sweep-large)
      ( dg_env; timeout 200 python3 benchmarks/probes/sweep_configs.py --set large --configs "$SWEEP_LARGE" --top 4 --baselines --iters 20 --json "$OUT/sweep_large.json" > "$OUT/sweep_large.txt" 2>&1 ); tail -3 "$OUT/sweep_large.txt" ;;
    sweep-small)
      ( dg_env; timeout 290 python3 benchmarks/probes/sweep_configs.py --set small --set decode --configs "$SWEEP_SMALL" --top 6 --baselines --iters 20 --json "$OUT/sweep_small.json" > "$OUT/sweep_small.txt" 2>&1 ); tail -3 "$OUT/sweep_small.txt" ;;
    bench)
      ( dg_env; timeout 500 python3 benchmarks/bench_fp8_gemm.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" | tail -40 ) ;;
    decode)
      ( dg_env; timeout 500 python3 benchmarks/bench_fp8_gemm.py --decode --json "$OUT/decode.json" 2>&1 | tee "$OUT/decode.txt" | tail -60 ) ;;
    chain-warm)
      ( dg_env; for i in 0 1 2 3 4 5 6 7; do timeout 300 python3 benchmarks/bench_decode.py $CHAIN_ARGS --warm $i/8 > "/tmp/chainwarm$i.log" 2>&1 & done; wait )
      for f in /tmp/chainwarm*.log; do tail -n 1 "$f"; done ;;
    chain)
      ( dg_env; timeout 500 python3 benchmarks/bench_decode.py $CHAIN_ARGS --json "$OUT/chain_${CHAIN_TAG:-run}.json" 2>&1 | tee "$OUT/chain_${CHAIN_TAG:-run}.txt" | tail -${CHAIN_TAIL:-60} ) ;;
    sustained)
      ( dg_env; timeout 300 python3 benchmarks/bench_fp8_gemm.py --sustained --shapes 4096,7168,16384 --json "$OUT/sustained.json" 2>&1 | tee "$OUT/sustained.txt" | tail -8 ) ;;
    dg2025)  # the 2025 DeepGEMM (pure Python JIT) in place of the latest, for the 18 shapes + 8192^3
      mkdir -p /tmp/dg2025 && tar -xJf .baselines/deepgemm-03d0be3.tar.xz -C /tmp/dg2025
      ( export PYTHONPATH=$PWD:/tmp/dg2025; timeout 500 python3 benchmarks/bench_fp8_gemm.py --json "$OUT/bench_dg2025.json" 2>&1 | tee "$OUT/bench_dg2025.txt" | tail -40 ) ;;
    explore)
      timeout 300 python3 tools/explore_overheads.py 2>&1 | tee "$OUT/explore.txt" ;;
    clusters)
      timeout 100 python3 tools/explore_overheads.py --clusters-only 2>&1 | tee "$OUT/clusters.txt" ;;
    sweep-custom)  # SWEEP_SHAPES / SWEEP_CUSTOM configs, no baselines
      timeout 300 python3 benchmarks/probes/sweep_configs.py --shapes $SWEEP_SHAPES --configs "$SWEEP_CUSTOM" --compile-only --jobs 16 2>&1 | tail -2
      timeout 300 python3 benchmarks/probes/sweep_configs.py --shapes $SWEEP_SHAPES --configs "$SWEEP_CUSTOM" --iters 20 --json "$OUT/sweep_${SWEEP_NAME:-custom}.json" > "$OUT/sweep_${SWEEP_NAME:-custom}.txt" 2>&1; tail -3 "$OUT/sweep_${SWEEP_NAME:-custom}.txt" ;;
    ncu)
      for spec in "64 2112 7168 64x64:b2:k2" "64 2112 7168 64x16:b2" "4096 7168 16384 256x128"; do
        name=$(echo $spec | tr ' :' '__')
        timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
          --section SchedulerStats -k deep_tile_fp8_gemm_sm90 -s 2 -c 1 python3 tools/profile_one.py $spec > "$OUT/ncu_$name.txt" 2>&1
        grep -E "Duration|SM Frequency|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Stall|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" "$OUT/ncu_$name.txt" | head -24 | sed "s/^/[$spec] /"
      done ;;
    ncu-warm)  # run every ncu-cmp spec once, in parallel, outside ncu: compiles the kernels (JIT caches)
      ( dg_env; for spec in $NCU_SPECS; do
          timeout 240 python3 tools/profile_one.py $NCU_SHAPE $spec > "$OUT/ncuwarm_${NCU_TAG:-}$(echo $spec | tr ':' '_').log" 2>&1 &
        done; wait )
      tail -qn1 "$OUT"/ncuwarm_*.log ;;
    ncu-cmp)  # deep_tile configs beside DeepGEMM at one shape, clocks locked to base (per-clock comparison; tools/ncu_summary.py prints them side by side)
      for spec in $NCU_SPECS; do
        name=${NCU_TAG:-}$(echo $spec | tr ':' '_')
        ( dg_env; timeout 240 ncu --clock-control base --set full --import-source no \
          -k regex:"deep_tile_fp8_gemm|sm90_fp8_gemm_1d2d" -s 2 -c 1 -o "/tmp/ncucmp_$name" -f \
          python3 tools/profile_one.py $NCU_SHAPE $spec > "$OUT/ncucmp_$name.log" 2>&1 )
        ncu -i "/tmp/ncucmp_$name.ncu-rep" --page details --print-details all > "$OUT/ncucmp_details_$name.txt" 2>&1
        ncu -i "/tmp/ncucmp_$name.ncu-rep" --page raw --csv > "$OUT/ncucmp_raw_$name.csv" 2>&1
        ncu -i "/tmp/ncucmp_$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncucmp_sass_$name.csv" 2>&1
        grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Warp Cycles Per Issued|Registers Per" "$OUT/ncucmp_details_$name.txt" | head -12 | sed "s/^/[$spec] /"
        tail -2 "$OUT/ncucmp_$name.log"
      done ;;
    host)
      ( dg_env; timeout 400 python3 benchmarks/bench_host.py --json "$OUT/host.json" 2>&1 | tee "$OUT/host.txt" | tail -40 ) ;;
    tp)
      gpus=$(nvidia-smi -L | wc -l)
      timeout 600 python3 -m pytest -q -m gpu tests/test_tp.py 2>&1 | tee "$OUT/tp_pytest.txt" | tail -3
      if [ "$gpus" -gt 1 ]; then
        for r in $(seq 0 $((gpus - 1))); do
          timeout 300 python3 -m deep_tile.testing.tp_cases --world "$gpus" --rank "$r" --init "file:///tmp/tp_rdv_$$" \
            --device cuda --shapes 512,7168,2304 256,2048,1024 > "$OUT/tp_nccl_w${gpus}_r$r.txt" 2>&1 &
        done
        wait
        grep -h -c '"bitwise": true' "$OUT"/tp_nccl_w"${gpus}"_r*.txt | paste -sd' ' | sed "s/^/bitwise-equal cases per rank: /"
        grep -h '"bitwise": false\|Error' "$OUT"/tp_nccl_w"${gpus}"_r*.txt | head -5
      fi
      timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node "$gpus" examples/tp_mlp.py \
        --tokens 8192 2>&1 | tee "$OUT/tp_mlp_w$gpus.txt" | tail -7
      for sms in 0 "$TP_GEMM_SMS"; do
        timeout 500 python3 -m torch.distributed.run --standalone --nproc_per_node "$gpus" benchmarks/bench_tp.py \
          --tokens $TP_TOKENS --gemm-sms "$sms" --json "$OUT/tp_bench_w${gpus}_sms$sms.json" 2>&1 \
          | tee "$OUT/tp_bench_w${gpus}_sms$sms.txt" | tail -14
      done
      timeout 300 python3 benchmarks/probes/tp_steps.py --world "$(( gpus > 1 ? gpus : 4 ))" --tokens 8192 2>&1 | tee "$OUT/tp_steps.txt" | tail -6 ;;
    sanitize)
      timeout 560 bash tools/sanitize.sh 2>&1 | tee "$OUT/sanitize.txt" | tail -30 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
# The device tool returns at most 8 files: everything under $OUT travels in one archive.
# Each run of this script adds its own bundle, so several runs in one device call keep all logs.
# NOTES: the bundle takes and removes every file in $OUT, also one that another process is still
# writing (a pytest started in the background before a later stage of this script lost its log so,
# RESULTS.md 2026-11-25 'In-place weight gradients added by the TMA unit'): such a process writes
# elsewhere and copies its log into $OUT after this script's last run.
( cd "$OUT" && ls | grep -v '^bundle.*\.tgz$' > /tmp/bundle.list && [ -s /tmp/bundle.list ] && tar czf "bundle_$(date +%H%M%S)_$$.tgz" -T /tmp/bundle.list && xargs rm -rf < /tmp/bundle.list )
echo "== done $(date +%T)"
