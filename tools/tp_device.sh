#!/usr/bin/env bash
# Tensor parallelism (deep_tile.tp, docs/tp.md) over every GPU of this machine, each step under
# `timeout`, the whole within TP_BUDGET_S seconds (default 450: under 8 minutes on 4 H200s):
#   1. versions and GPUs; the bench's kernels compiled in the background (one-GPU simulated worlds)
#   2. the NCCL cases (deep_tile.testing.tp_cases) at world N on every rank, each case 3 times
#   3. the GPU tests of tests/test_tp.py (simulated world, NCCL worlds of 1, 2 and 4)
#   4. benchmarks/bench_tp.py at $TP_TOKENS tokens (DeepSeek-V3's gate_up, q_b, down, o), JSON in $OUT
#   5. examples/tp_mlp.py under torch.distributed.run at world N
#   6. the NCCL cases again (3 more repeats), if the budget allows
#   7. a short summary: every step's status, and per layer GEMM alone / comm alone / sequential /
#      overlapped / hidden / bitwise
# Usage: bash tools/tp_device.sh
# $OUT (default /tmp/tp_out) gets three files: tp_summary.txt (what is printed last), the bench's
# JSON tp_bench_wN.json and tp_logs.tgz (every step's log), made on exit even after a failure.
# TP_WORLD=N uses the first N GPUs (with CUDA_VISIBLE_DEVICES); TP_PYTEST=0 skips the pytest step;
# TP_COMPARE_NCCL=1 runs the bench a second time over NCCL alone (DEEP_TILE_TP_TRANSPORT=nccl);
# TP_BENCH_ARGS adds arguments to the bench (e.g. --async-tp).
# TP_DEVICE=cpu TP_WORLD=2 runs the same steps on gloo with the stand-in GEMM at small shapes: a
# check of this script on a machine without GPUs, which measures nothing.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export DEEP_TILE_CACHE_DIR=${DEEP_TILE_CACHE_DIR:-/tmp/dt_cache}
# NVLink multicast (NVLS) stays off for NCCL, symmetric memory and NVSHMEM alike.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/tp_out}; mkdir -p "$OUT"
LOG=$(mktemp -d /tmp/tp_logs.XXXXXX)  # the steps' logs, bundled into $OUT on exit (few files may come back)
bundle() { cp "$LOG"/tp_bench_w*.json "$OUT/" 2>/dev/null; tar czf "$OUT/tp_logs.tgz" -C "$LOG" .; }
trap bundle EXIT
BUDGET=${TP_BUDGET_S:-450}
DEV=${TP_DEVICE:-cuda}
ITERS=${TP_ITERS:-10}
if [ "$DEV" = cuda ]; then
  N=${TP_WORLD:-$(nvidia-smi -L | wc -l)}
  TOKENS=${TP_TOKENS:-8192 16384 32768}
  SHAPES="512,7168,2304 256,2048,1024"  # T,K,N of the cases: the selector splits K for no GEMM of them
  PYTEST_ARGS="-m gpu"
  EXAMPLE_ARGS="--tokens 8192 --iters 5"
else
  N=${TP_WORLD:-2}
  TOKENS=${TP_TOKENS:-64 128}
  SHAPES="48,384,144"
  PYTEST_ARGS="-k gloo"
  EXAMPLE_ARGS="--device cpu --tokens 64 --hidden 256 --intermediate 512"
fi
START=$SECONDS
: > "$LOG/steps.txt"

left() { echo $(( BUDGET - (SECONDS - START) )); }

# step NAME CAP CMD...: CMD under timeout (CAP, or what the budget has left less 20 s), its
# output in $LOG/NAME.txt, its status and time in $LOG/steps.txt; skipped when under 20 s are left.
step() {
  local name=$1 cap=$2 limit t0 rc; shift 2
  limit=$(( $(left) - 20 )); [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 20 ]; then echo "$name: SKIPPED ($(left) s left)" | tee -a "$LOG/steps.txt"; return 1; fi
  echo "== $name (limit ${limit}s, $(left)s left)"
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$LOG/$name.txt" 2>&1; rc=$?
  echo "$name: rc=$rc in $(( SECONDS - t0 ))s$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo ' TIMED OUT')" | tee -a "$LOG/steps.txt"
  return $rc
}

# cases TAG: tp_cases at world N, one process per GPU (each under the step's timeout)
cases() {
  local tag=$1 cap=$2 limit t0 pids="" rc=0 r
  limit=$(( $(left) - 20 )); [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 20 ]; then echo "cases_$tag: SKIPPED ($(left) s left)" | tee -a "$LOG/steps.txt"; return 1; fi
  echo "== cases_$tag: world $N (limit ${limit}s)"
  rm -f "/tmp/tp_rdv_$$_$tag"; t0=$SECONDS
  for r in $(seq 0 $((N - 1))); do
    timeout -k 10 "$limit" python3 -m deep_tile.testing.tp_cases --world "$N" --rank "$r" \
      --init "file:///tmp/tp_rdv_$$_$tag" --device "$DEV" --shapes $SHAPES --repeat 3 \
      > "$LOG/cases_${tag}_r$r.txt" 2>&1 &
    pids="$pids $!"
  done
  for pid in $pids; do wait "$pid" || rc=$?; done
  echo "cases_$tag: rc=$rc in $(( SECONDS - t0 ))s" | tee -a "$LOG/steps.txt"
  python3 - "$LOG" "$tag" "$N" <<'EOF' | tee -a "$LOG/steps.txt"
import json, sys
out, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for r in range(n):
    text = open(f"{out}/cases_{tag}_r{r}.txt").read().splitlines()
    lines = [json.loads(l) for l in text if l.startswith("{")]
    if not lines:
        print(f"  rank {r}: no case ran; last line: {text[-1][:200] if text else '(none)'}")
        continue
    cases = [l for l in lines if "bitwise" in l]
    errors = [l for l in lines if "error" in l]
    summary = [l for l in lines if l["case"] == "summary"]
    bad = [l["case"] for l in cases if not (l["bitwise"] and l.get("local_bitwise", True) and l["nan"] == 0)]
    splits = sorted({v for l in cases for v in l.get("k_split", {}).values()})
    print(f"  rank {r}: {len(cases)} cases, bitwise {sum(l['bitwise'] for l in cases)}, "
          f"local {sum(l.get('local_bitwise', False) for l in cases)}, max_rel "
          f"{max((l['max_rel'] for l in cases), default=float('nan')):.1e}, k splits {splits}, repeats identical "
          f"{summary[0]['repeats_identical'] if summary else '-'}, transport "
          f"{summary[0].get('transport') if summary else '-'}, errors {len(errors)}"
          + (f" FIRST ERROR {errors[0]['error'][:160]}" if errors else "") + (f" NOT EQUAL {bad[:3]}" if bad else ""))
EOF
  return $rc
}

echo "== tp_device: $N GPU(s), budget ${BUDGET}s, out $OUT"
[ "$DEV" = cuda ] && step info 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv;
  python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"nccl\", torch.cuda.nccl.version())";
  nvidia-smi topo -m'
[ "$DEV" = cuda ] && head -n "$(( N + 3 ))" "$LOG/info.txt"

# The bench's kernels (every GEMM of a world of N), compiled meanwhile on the GPUs' spare time:
# one simulated world per token count, each form called once.
warm_pids=""
if [ "$N" -gt 1 ] && [ "$DEV" = cuda ]; then
  i=0
  for tokens in $TOKENS; do
    CUDA_VISIBLE_DEVICES=$(( i % N )) timeout -k 10 240 python3 benchmarks/bench_tp.py --loopback "$N" --tokens "$tokens" \
      --iters 0 > "$LOG/warm_$tokens.txt" 2>&1 &
    warm_pids="$warm_pids $!"; i=$(( i + 1 ))
  done
fi

[ "$N" -gt 1 ] && cases a 90
# TP_PYTEST=0 leaves the pytest step out (a second world on the same machine: its NCCL tests ran in the first)
if [ "${TP_PYTEST:-1}" != 0 ]; then
  step pytest 170 python3 -m pytest -q $PYTEST_ARGS tests/test_tp.py -p no:cacheprovider
  tail -n 4 "$LOG/pytest.txt"
fi

# the compile jobs: waited for while 200 s of the budget remain, then ended (they would perturb the timings)
warm_alive() { local pid; for pid in $warm_pids; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
while warm_alive && [ "$(left)" -gt 200 ]; do sleep 2; done
for pid in $warm_pids; do kill "$pid" 2>/dev/null && echo "compile job $pid ended early"; wait "$pid" 2>/dev/null; done
tail -qn 1 "$LOG"/warm_*.txt 2>/dev/null
if [ "$N" -gt 1 ]; then
  step bench 240 python3 -m torch.distributed.run --standalone --nproc_per_node "$N" benchmarks/bench_tp.py \
    --tokens $TOKENS --iters "$ITERS" --device "$DEV" --json "$LOG/tp_bench_w$N.json" ${TP_BENCH_ARGS:-}
else
  step bench 240 python3 benchmarks/bench_tp.py --loopback 4 --tokens $TOKENS --iters "$ITERS" --device "$DEV" \
    --json "$LOG/tp_bench_w$N.json"
fi
grep -v "^W\|^\*\*\*\|OMP_NUM_THREADS" "$LOG/bench.txt" | tail -n 30
# TP_COMPARE_NCCL=1: the bench again with every transfer over NCCL (DEEP_TILE_TP_TRANSPORT=nccl), same run
if [ "${TP_COMPARE_NCCL:-0}" = 1 ] && [ "$N" -gt 1 ]; then
  DEEP_TILE_TP_TRANSPORT=nccl step bench_nccl 240 python3 -m torch.distributed.run --standalone --nproc_per_node "$N" \
    benchmarks/bench_tp.py --tokens $TOKENS --iters "$ITERS" --device "$DEV" --json "$LOG/tp_bench_w${N}_nccl.json"
fi

step example 100 python3 -m torch.distributed.run --standalone --nproc_per_node "$N" examples/tp_mlp.py $EXAMPLE_ARGS
tail -n 7 "$LOG/example.txt"
[ "$N" -gt 1 ] && cases b 75

{
echo "== summary ($(( SECONDS - START ))s, $N GPU(s), device $DEV)"
cat "$LOG/steps.txt"
python3 benchmarks/bench_tp.py --table "$LOG/tp_bench_w$N.json" || echo "no bench JSON"
[ -f "$LOG/tp_bench_w${N}_nccl.json" ] && echo "-- the same over NCCL" && python3 benchmarks/bench_tp.py --table "$LOG/tp_bench_w${N}_nccl.json"
echo "== done in $(( SECONDS - START ))s"
} 2>&1 | tee "$OUT/tp_summary.txt"
# status 1 when a step failed, timed out or was skipped
! grep -q "rc=[1-9]\|SKIPPED" "$LOG/steps.txt"
