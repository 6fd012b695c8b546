"""A training step of a DeepSeek-V3 MLP block in FP8 (deep_tile.nn) against the same block in BF16.

    python benchmarks/bench_layers.py                       # T = 8192 and 16384 tokens
    python benchmarks/bench_layers.py --tokens 4096 --hidden 7168 --inter 18432 --json layers.json

The block: ``down(silu(gate) * up)`` with ``gate, up = gate_up(x).chunk(2)``, gate_up
``hidden -> 2 * inter`` and down ``inter -> hidden`` (DeepSeek-V3: 7168 -> 2 x 18432 -> 7168), no
bias. One step is its forward and backward for a fixed random output gradient; the FP8 block's
weight gradients are added into FP32 main gradients (deep_tile.nn.Fp8Linear), the BF16 block's
(torch.nn.Linear, cuBLAS) into bf16 ``.grad``. Each step is timed with CUDA events, the two blocks
interleaved, median of ``--iters``; TFLOPS count the six GEMMs (3 x the forward's 2 T (H 2I + I H)
FLOP). The share of the FP8 step spent in casts comes from the profiler (kernel time by name).
Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from deep_tile import nn as dnn  # noqa: E402


class Block(torch.nn.Module):
    """The MLP block, with ``linear(in, out)`` making its two layers."""

    def __init__(self, hidden: int, inter: int, linear):
        super().__init__()
        self.gate_up, self.down = linear(hidden, 2 * inter), linear(inter, hidden)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.silu(gate) * up)


def step_fn(block, x, dy):
    def step():
        x.grad = None
        block(x).backward(dy)
    return step


def time_interleaved(fns: dict, iters: int) -> dict:
    times = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def kernel_shares(fn) -> dict:
    """Kernel time of one call of ``fn`` by kind (profiler): casts, FP8 GEMMs, the rest; us."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    shares = {"casts": 0.0, "fp8_gemm": 0.0, "other": 0.0}
    for event in prof.key_averages():
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        name = event.key.lower()
        kind = "casts" if "cast" in name else "fp8_gemm" if "deep_tile_fp8_gemm" in name else "other"
        shares[kind] += us
    return shares


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--inter", type=int, default=18432)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    torch.manual_seed(0)
    fp8 = Block(args.hidden, args.inter, lambda i, o: dnn.Fp8Linear(i, o, device="cuda"))
    bf16 = Block(args.hidden, args.inter,
                 lambda i, o: torch.nn.Linear(i, o, bias=False, device="cuda", dtype=torch.bfloat16))
    with torch.no_grad():
        for a, b in ((fp8.gate_up, bf16.gate_up), (fp8.down, bf16.down)):
            b.weight.copy_(a.weight)
    rows = []
    print(f"{'tokens':>7} {'FP8 ms':>8} {'BF16 ms':>8} {'speedup':>7} {'FP8 TFLOPS':>10} {'BF16 TFLOPS':>11} "
          f"{'casts %':>7} {'GEMM %':>6} {'rel err y':>9}")
    for tokens in args.tokens:
        x = torch.randn(tokens, args.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(tokens, args.hidden, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            err = ((fp8(x).double() - bf16(x).double()).norm() / bf16(x).double().norm()).item()
        fns = {"fp8": step_fn(fp8, x, dy), "bf16": step_fn(bf16, x, dy)}
        for fn in fns.values():  # warm-up: kernels compiled, allocator settled
            fn(), fn()
        times = time_interleaved(fns, args.iters)
        shares = kernel_shares(fns["fp8"])
        total = sum(shares.values())
        flop = 3 * 2 * tokens * (args.hidden * 2 * args.inter + args.inter * args.hidden)
        row = {"tokens": tokens, "hidden": args.hidden, "inter": args.inter, "fp8_us": times["fp8"],
               "bf16_us": times["bf16"], "speedup": times["bf16"] / times["fp8"],
               "fp8_tflops": flop / times["fp8"] / 1e6, "bf16_tflops": flop / times["bf16"] / 1e6,
               "kernel_us": shares, "rel_err_y_vs_bf16": err}
        rows.append(row)
        print(f"{tokens:>7} {times['fp8'] / 1e3:>8.2f} {times['bf16'] / 1e3:>8.2f} {row['speedup']:>7.3f} "
              f"{row['fp8_tflops']:>10.0f} {row['bf16_tflops']:>11.0f} {100 * shares['casts'] / total:>7.1f} "
              f"{100 * shares['fp8_gemm'] / total:>6.1f} {err:>9.2e}", flush=True)
    if args.json:
        env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
        Path(args.json).write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
