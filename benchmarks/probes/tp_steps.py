"""Where a tensor-parallel ring's time goes on one GPU (deep_tile.tp over a LoopbackRing).

    python benchmarks/probes/tp_steps.py                       # a simulated world of 4, 8192 tokens
    python benchmarks/probes/tp_steps.py --world 8 --tokens 16384 --sms 120
    DEEP_TILE_NATIVE=off python benchmarks/probes/tp_steps.py  # the Python host path throughout

For each of bench_tp.py's layers (rank 0 of a simulated world), in one process, timed with CUDA
events (median of ``--iters`` after two untimed calls):

- ``overlap``: the overlapped ring (``all_gather_fp8_gemm`` / ``fp8_gemm_reduce_scatter``);
- ``seq``: its sequential form over the same ring;
- ``chunks``: the ring's GEMMs alone, one per step, on the same chunk shapes (no copies, no sums);
- ``whole``: the one GEMM the sequential form runs;
- ``copies``: the ring's transfers alone (side-stream copies);
- ``host``: host microseconds of one overlapped call (no synchronisation inside), and ``host_gemm`` of
  one chunk GEMM: where ``host`` exceeds ``overlap``'s device time, the host sets the pace;
- ``sms``: the overlapped ring with deep_tile's GEMMs limited to ``--sms`` SMs.

The question it answers: is a losing ring bound by the host, by the copies competing with the
GEMM for HBM, or by the GEMMs' shape (``chunks`` against ``whole``)?
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deep_tile import tp  # noqa: E402
from deep_tile.device import set_num_sms  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import synced_call_us  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_tp import COLUMN_LAYERS, ROW_LAYERS  # noqa: E402

DEVICE = "cuda"  # the probe's tensors (a CPU run of the callables, with a stand-in GEMM, checks the probe itself)
COLUMNS = ("overlap", "seq", "chunks", "whole", "copies", "host", "host_gemm", "sms")


def device_us(fn, iters: int) -> float:
    """Median device microseconds of ``fn`` (CUDA events around one call, the device drained before it)."""
    return synced_call_us(fn, iters)[0]


def host_us(fn, iters: int) -> float:
    """Median host microseconds of one call of ``fn`` (the device drained before each)."""
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def column_fns(world: int, tokens: int, n: int, k: int) -> dict:
    t, n_r = tokens // world, n // world
    x, xs, w, ws = make_fp8_problem(t, n_r, k, DEVICE, seed=0)
    x_all, xs_all, _, _ = make_fp8_problem(tokens, 16, k, DEVICE, seed=1)
    ring = tp.LoopbackRing(world, 0, [tp.pack_chunk(x, xs) for _ in range(world)])
    bufs = [torch.empty_like(b) for b in ring.peers[0]]
    out = torch.empty(tokens, n_r, device=DEVICE, dtype=torch.bfloat16)
    return {
        "overlap": lambda: tp.all_gather_fp8_gemm(x, xs, w, ws, check=False, ring=ring),
        "seq": lambda: tp.all_gather_then_gemm(x, xs, w, ws, ring=ring),
        "chunks": lambda: [tp.chunk_gemm(x, xs, w, ws, out[i * t:(i + 1) * t]) for i in range(world)],
        "whole": lambda: tp.chunk_gemm(x_all, xs_all, w, ws),
        "copies": lambda: [ring.shift(None, bufs, s).wait() for s in range(1, world)],
        "host_gemm": lambda: tp.chunk_gemm(x, xs, w, ws, out[:t]),
    }


def row_fns(world: int, tokens: int, n: int, k: int) -> dict:
    t, k_r = tokens // world, k // world
    x, xs, w, ws = make_fp8_problem(tokens, n, k_r, DEVICE, seed=0)
    ring = tp.LoopbackRing(world, 0, [[torch.randn(t, n, device=DEVICE)] for _ in range(world)])
    buf = [torch.empty(t, n, device=DEVICE)]
    out = torch.empty(t, n, device=DEVICE)
    return {
        "overlap": lambda: tp.fp8_gemm_reduce_scatter(x, xs, w, ws, check=False, ring=ring),
        "seq": lambda: tp.gemm_then_reduce_scatter(x, xs, w, ws, ring=ring),
        "chunks": lambda: [tp.chunk_gemm(x[i * t:(i + 1) * t], xs[i * t:(i + 1) * t], w, ws, out)
                           for i in range(world)],
        "whole": lambda: tp.chunk_gemm(x, xs, w, ws, out_dtype=torch.float32),
        "copies": lambda: [ring.send_recv(None, 0, buf, s).wait() for s in range(1, world)],
        "host_gemm": lambda: tp.chunk_gemm(x[:t], xs[:t], w, ws, out),
    }


def measure(fns: dict, iters: int, sms: int) -> dict:
    row = {key: device_us(fns[key], iters) for key in ("overlap", "seq", "chunks", "whole", "copies")}
    row["host"] = host_us(fns["overlap"], iters)
    row["host_gemm"] = host_us(fns["host_gemm"], iters)
    set_num_sms(sms)
    try:
        row["sms"] = device_us(fns["overlap"], iters)
    finally:
        set_num_sms(None)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--sms", type=int, default=120, help="SMs for the last column's GEMMs")
    args = p.parse_args()
    print(f"{torch.cuda.get_device_name()}, simulated world {args.world}, {args.tokens} tokens, us")
    print(f"{'layer':>12} " + " ".join(f"{c:>9}" for c in COLUMNS))
    layers = [(name, column_fns, nk) for name, nk in COLUMN_LAYERS.items()]
    layers += [(name, row_fns, nk) for name, nk in ROW_LAYERS.items()]
    for name, make, (n, k) in layers:
        row = measure(make(args.world, args.tokens, n, k), args.iters, args.sms)
        print(f"{name:>12} " + " ".join(f"{row[c]:9.1f}" for c in COLUMNS), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
