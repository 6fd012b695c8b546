"""A training step of a DeepSeek-V3 MLP block (and, with --moe, routed experts) in FP8 (deep_tile.nn) against BF16.

    python benchmarks/bench_layers.py                       # T = 8192 and 16384 tokens
    python benchmarks/bench_layers.py --tokens 4096 --hidden 7168 --inter 18432 --json layers.json

The block: ``down(silu(gate) * up)`` with ``gate, up = gate_up(x).chunk(2)``, gate_up
``hidden -> 2 * inter`` and down ``inter -> hidden`` (DeepSeek-V3: 7168 -> 2 x 18432 -> 7168), no
bias. One step is its forward and backward for a fixed random output gradient; the BF16 block's
weight gradients (torch.nn.Linear, cuBLAS) are added by autograd into bf16 ``.grad``; the FP8
block's (``--grad main``, the default) in place into FP32 main gradients by the weight-gradient
GEMM's epilogue (deep_tile.nn.Fp8Linear, as a Megatron-style trainer keeps them), or (``--grad
plain``) written in bf16 by the GEMM and added into ``.grad`` by autograd exactly as the BF16
block's are. Each step is timed with CUDA events, the two blocks
interleaved, median of ``--iters``; TFLOPS count the six GEMMs (3 x the forward's 2 T (H 2I + I H)
FLOP). The share of the FP8 step spent in casts comes from the profiler (kernel time by name).
``--moe``: the routed experts of an MoE block (``--experts`` E SwiGLU experts, ``hidden -> 2 x
--moe-inter -> hidden``, tokens sorted by expert with uneven random counts), deep_tile.nn.Fp8Experts
against the same experts in BF16 through ``torch._grouped_mm`` (or a per-expert loop where that
does not run; the row says which). ``--host``: deep_tile's GEMMs launched from the native C++
host path, built before anything is timed (the default), or from the Python one; the first line
printed names the path (docs/host-paths.md).
Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import os
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


class Bf16Experts(torch.nn.Module):
    """The routed experts in BF16 (``torch._grouped_mm`` when it runs here, else a loop of
    ``torch.matmul`` per expert): the baseline of :class:`deep_tile.nn.Fp8Experts`."""

    def __init__(self, fp8: "dnn.Fp8Experts", sizes: list):
        super().__init__()
        self.w13 = torch.nn.Parameter(fp8.w13.detach().clone())
        self.w2 = torch.nn.Parameter(fp8.w2.detach().clone())
        self.sizes = sizes
        self.ends = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
        self.grouped = True
        try:  # forward and backward once, and the forward against the loop's
            x = torch.randn(sum(sizes), self.w13.shape[2], device="cuda", dtype=torch.bfloat16, requires_grad=True)
            y = self(x, None)
            y.backward(torch.randn_like(y))  # a real gradient: torch 2.11 refused the stride-0 one of y.sum()
            self.grouped = False
            loop = self(x, None)
            error = ((y.float() - loop.float()).norm() / loop.float().norm()).item()
            self.grouped = error < 1e-2
            self.why = "" if self.grouped else f"torch._grouped_mm differs from the loop: {error:.2e}"
        except Exception as exc:  # noqa: BLE001 -- no grouped BF16 GEMM here: the loop
            self.grouped = False
            self.why = f"torch._grouped_mm: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        self.w13.grad = self.w2.grad = None

    def forward(self, x, _sizes):
        inter = self.w2.shape[2]
        if self.grouped:
            h13 = torch._grouped_mm(x, self.w13.transpose(1, 2), offs=self.ends)
            gate, up = h13[:, :inter], h13[:, inter:]
            return torch._grouped_mm(torch.nn.functional.silu(gate) * up, self.w2.transpose(1, 2), offs=self.ends)
        outs, start = [], 0
        for e, n in enumerate(self.sizes):
            h13 = x[start:start + n] @ self.w13[e].t()
            gate, up = h13[:, :inter], h13[:, inter:]
            outs.append((torch.nn.functional.silu(gate) * up) @ self.w2[e].t())
            start += n
        return torch.cat(outs)


def moe_rows(args) -> list:
    """FP8 against BF16 routed experts (forward + backward) at each ``--moe-tokens`` and ``--experts``."""
    rows = []
    print(f"\n{'experts':>7} {'tokens':>7} {'FP8 ms':>8} {'BF16 ms':>8} {'speedup':>7} {'FP8 TFLOPS':>10} "
          f"{'BF16 TFLOPS':>11} {'casts %':>7} {'BF16 path':>9}")
    for experts in args.experts:
        for tokens in args.moe_tokens:
            gen = torch.Generator().manual_seed(experts + tokens)
            weights = torch.rand(experts, generator=gen) + 0.5
            sizes = (weights / weights.sum() * tokens).long().tolist()
            sizes[0] += tokens - sum(sizes)
            fp8 = dnn.Fp8Experts(experts, args.hidden, args.moe_inter, main_grad=args.grad == "main", device="cuda")
            bf16 = Bf16Experts(fp8, sizes)
            sizes_t = torch.tensor(sizes, dtype=torch.int32, device="cuda")
            x = torch.randn(tokens, args.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dy = torch.randn(tokens, args.hidden, device="cuda", dtype=torch.bfloat16)

            def step(block):
                def run():
                    x.grad = None
                    block(x, sizes_t).backward(dy)
                return run
            fns = {"fp8": step(fp8), "bf16": step(bf16)}
            for fn in fns.values():
                fn(), fn()
            times = time_interleaved(fns, args.iters)
            shares = kernel_shares(fns["fp8"])
            flop = 3 * 2 * tokens * (args.hidden * 2 * args.moe_inter + args.moe_inter * args.hidden)
            row = {"experts": experts, "tokens": tokens, "sizes": sizes, "hidden": args.hidden, "inter": args.moe_inter,
                   "fp8_us": times["fp8"], "bf16_us": times["bf16"], "speedup": times["bf16"] / times["fp8"],
                   "fp8_tflops": flop / times["fp8"] / 1e6, "bf16_tflops": flop / times["bf16"] / 1e6,
                   "kernel_us": shares, "bf16_path": "grouped_mm" if bf16.grouped else "loop", "bf16_why": bf16.why}
            rows.append(row)
            print(f"{experts:>7} {tokens:>7} {times['fp8'] / 1e3:>8.2f} {times['bf16'] / 1e3:>8.2f} "
                  f"{row['speedup']:>7.3f} {row['fp8_tflops']:>10.0f} {row['bf16_tflops']:>11.0f} "
                  f"{100 * shares['casts'] / sum(shares.values()):>7.1f} {row['bf16_path']:>9} {bf16.why}", flush=True)
    return rows


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
        # deep_tile's cast kernels (torch's elementwise kernels carry "nocast" in their names: "other")
        kind = ("casts" if "deep_tile" in name and "cast" in name else "fp8_gemm" if "deep_tile_fp8_gemm" in name
                else "other")
        shares[kind] += us
    return shares


def choose_host_path(host: str) -> str:
    """Pin the host path of every deep_tile GEMM this run launches (``DEEP_TILE_NATIVE``, read on
    the first launch): ``native`` builds the C++ extension now and waits for it, so no row runs on
    the Python path while it builds in the background (the default ``auto`` would switch paths
    partway through the run); ``python`` turns it off. Returns the path in use."""
    if host == "python":
        os.environ["DEEP_TILE_NATIVE"] = "off"
        return "python"
    os.environ["DEEP_TILE_NATIVE"] = "wait"
    from deep_tile import native

    if native.build(wait=True):
        return "native"
    return f"python (the native extension is unavailable: {native.status()['reason']})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--inter", type=int, default=18432)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--moe", action="store_true", help="also the routed experts (deep_tile.nn.Fp8Experts)")
    p.add_argument("--experts", type=int, nargs="+", default=[8, 32])
    p.add_argument("--moe-tokens", type=int, nargs="+", default=[16384, 32768])
    p.add_argument("--moe-inter", type=int, default=2048)
    p.add_argument("--no-mlp", action="store_true", help="skip the dense MLP block")
    p.add_argument("--grad", choices=("main", "plain"), default="main",
                   help="FP8 weight gradients into FP32 main gradients, or into bf16 .grad as BF16's (module doc)")
    p.add_argument("--host", choices=("native", "python"), default="native",
                   help="the GEMMs' host path: the C++ one, built before timing (what a training job runs "
                        "once its first minute has built it), or the Python one (docs/host-paths.md)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    host = choose_host_path(args.host)
    print(f"FP8 weight gradients: {'FP32 main_grad (in place)' if args.grad == 'main' else 'bf16 .grad (autograd)'}; "
          f"BF16 weight gradients: bf16 .grad (autograd); deep_tile host path: {host}")
    torch.manual_seed(0)
    fp8 = Block(args.hidden, args.inter, lambda i, o: dnn.Fp8Linear(i, o, main_grad=args.grad == "main", device="cuda"))
    bf16 = Block(args.hidden, args.inter,
                 lambda i, o: torch.nn.Linear(i, o, bias=False, device="cuda", dtype=torch.bfloat16))
    with torch.no_grad():
        for a, b in ((fp8.gate_up, bf16.gate_up), (fp8.down, bf16.down)):
            b.weight.copy_(a.weight)
    rows = []
    print(f"{'tokens':>7} {'FP8 ms':>8} {'BF16 ms':>8} {'speedup':>7} {'FP8 TFLOPS':>10} {'BF16 TFLOPS':>11} "
          f"{'casts %':>7} {'GEMM %':>6} {'rel err y':>9}")
    for tokens in ([] if args.no_mlp else args.tokens):
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
    moe = moe_rows(args) if args.moe else []
    if args.json:
        env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
        Path(args.json).write_text(json.dumps({"environment": env, "grad": args.grad, "host": host, "rows": rows,
                                               "moe": moe}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
