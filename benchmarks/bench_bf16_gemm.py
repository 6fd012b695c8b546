"""deep_tile's BF16 GEMMs against DeepGEMM's ``bf16_gemm_<layout>`` (when ``import deep_gemm``
finds DeepGEMM itself, not deep_tile's alias) and torch.matmul (cuBLAS), on the same inputs, L2
flushed before every call, median of interleaved runs (deep_tile.testing.timing.bench_round_robin).

Shapes (``--shapes``, ``m:n:k:layout:out[:acc]``): DeepGEMM's own BF16 test shapes
(tests/test_bf16.py's enumerate_normal): the forward GEMMs at m = 4096, 128 and 1 over its (n, k)
list, a float32-output one, and the backward layouts (dgrad NN, wgrad TN with float32
accumulation). Columns: microseconds; the plan (tile width / K splits / A box / multicast CTAs);
TFLOP/s; the bytes the call must move per second as a share of the measured HBM copy rate; the
legacy selection's time (``DEEP_TILE_BF16_LEGACY``'s plan, timed in the same rounds) and DeepGEMM's
and cuBLAS's, and the speedups (their us / deep_tile us; cuBLAS writes bf16 and does not
accumulate). Before timing, both deep_tile paths' results are compared with float32 torch
(calc_diff). ``--json PATH`` writes the
rows. ``--alt SHAPE=PLAN,...`` times forced plans (``block_n/splits/box_m/cluster_m[/stages[/store_all[/block_m[/k_merge]]]]``)
of a shape in the same rounds, printed as a second table (the defaults: the weak and uncertain shapes'
nearest alternatives); ``--weak`` times only the shapes below parity with DeepGEMM.
Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
import deep_tile.bf16 as bf16_host  # noqa: E402
from deep_tile.testing.baselines import load_deepgemm  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth  # noqa: E402

SHAPES = ("4096:2112:7168:nt:bf16", "4096:576:7168:nt:bf16", "4096:24576:1536:nt:bf16", "4096:32768:512:nt:bf16",
          "4096:7168:16384:nt:bf16", "4096:4096:7168:nt:bf16", "4096:7168:2048:nt:bf16", "128:2112:7168:nt:bf16",
          "1:4096:7168:nt:bf16", "4096:256:7168:nt:f32", "4096:2048:7168:nn:bf16", "7168:2048:4096:tn:f32:acc")
"""Default cases (see the module doc): 12 of DeepGEMM's BF16 test shapes."""
ALTS = ("4096:2112:7168:nt:bf16=176/1/128/2", "7168:2048:4096:tn:f32:acc=256/1/128/1",
        "4096:24576:1536:nt:bf16=240/1/128/1,256/1/128/1/0/1,256/1/128/2/0/1,240/1/128/2",
        "4096:32768:512:nt:bf16=256/1/128/1/0/1,256/1/128/2/0/1,256/1/128/2",
        "128:2112:7168:nt:bf16=48/3/128/1/10,64/4/128/1,32/1/64/1/16/0/64,48/1/64/1/0/0/64,64/2/64/1/0/0/64,"
        "32/2/64/1/0/0/64,32/1/64/1/6/0/64/3,32/1/64/1/4/0/64/4,32/1/64/1/8/0/64/2,64/2/64/1/4/0/64/3",
        "1:4096:7168:nt:bf16=128/4/16/1,32/1/16/1/16,32/1/16/1/0/0/64,128/4/16/1/0/0/64,64/2/16/1/0/0/64,"
        "32/1/16/1/12/0/64,32/1/16/1/0/0/4,32/1/16/1/6/0/64/3,32/1/16/1/4/0/64/4,32/1/16/1/8/0/64/2,"
        "64/2/16/1/4/0/64/3",
        "4096:256:7168:nt:f32=64/1/128/1,128/1/64/1/0/0/64,128/1/64/1/8/0/64,64/1/64/1/0/0/64")
"""Default ``--alt``: forced plans beside the chosen one where DeepGEMM leads or the cost model is
least sure (``block_n/splits/box_m/cluster_m[/stages[/store_all[/block_m[/k_merge]]]]``; forced plans without
stages run the default ring; ``block_m`` 64: 64-row tiles, one consumer warpgroup). 4096 x 24576 x 1536 and 4096 x 32768 x 512 (DeepGEMM: 128 x 240 with B
multicast, 256 x 128 with A multicast, both staging the whole tile of d): the 240 width the
model took before, d staged a buffer per box (one wait per tile instead of one per box), with and
without B multicast. 128 x 2112 and 1 x 4096 (DeepGEMM: 64 x 32 and 16 x 32 tiles, 132 and 128
CTAs, no split, 16 stages): the earlier 128-row split plans against 64-row tiles unsplit or split
in two (the model's 64-row picks, taken by default only with PLAN_ROWS64: 64 x 64 split in two at
128 x 2112, 32 wide unsplit at m = 1, DeepGEMM's own tile), and at
m = 1 the stream over B (``block_m`` 4: a warp per column, no tiles); at both, DeepGEMM's 64-row ring
as it runs it (16 stages merged into 5 of 192 k) with stages of 3, 4 or 2 64-k blocks (``k_merge``). 4096 x 256
float32 (DeepGEMM: 64 x 128, 8 stages, d through shared memory): the chosen 128 x 64 against
64 x 128 with d by TMA (DeepGEMM's tile and ring) or from registers, and 64 x 64."""
WEAK = ("4096:24576:1536:nt:bf16", "4096:32768:512:nt:bf16", "128:2112:7168:nt:bf16", "1:4096:7168:nt:bf16",
        "4096:256:7168:nt:f32")
"""``--weak``: the shapes below parity with DeepGEMM, timed with their ALTS alone (a short device run)."""


def make(m: int, n: int, k: int, layout: str, out: str, acc: bool, seed: int = 0) -> tuple:
    """(a_arg, b_arg, a [m, k] view, b [n, k] view, d, c) on the GPU, as ``bf16_gemm_<layout>`` takes them."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a_arg = torch.randn((k, m) if layout[0] == "t" else (m, k), device="cuda", generator=gen).to(torch.bfloat16)
    b_arg = torch.randn((k, n) if layout[1] == "n" else (n, k), device="cuda", generator=gen).to(torch.bfloat16)
    a = a_arg.T if layout[0] == "t" else a_arg
    b = b_arg.T if layout[1] == "n" else b_arg
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    d = torch.empty(m, n, dtype=dtype, device="cuda")
    c = torch.randn(m, n, device="cuda", generator=gen).to(dtype) if acc else None
    return a_arg, b_arg, a, b, d, c


def run_shape(spec: str, iters: int, copy_rate: float, dg, alts: tuple = ()) -> dict:
    """One row for shape ``spec``; ``alts``: forced plans (strings) timed beside it."""
    parts = spec.split(":")
    m, n, k = map(int, parts[:3])
    layout, out, acc = parts[3], parts[4], len(parts) > 5 and parts[5] == "acc"
    a_arg, b_arg, a, b, d, c = make(m, n, k, layout, out, acc)
    ours = getattr(deep_tile, f"bf16_gemm_{layout}")

    def with_override(attr, value):  # one call into d_legacy with deep_tile.bf16's run-time override set
        def call():
            setattr(bf16_host, attr, value)
            try:
                ours(a_arg, b_arg, d_legacy, c=c)
            finally:
                setattr(bf16_host, attr, None)
        return call

    legacy = with_override("LEGACY", True)
    want = a.float() @ b.float().T + (c.float() if c is not None else 0)
    d_legacy = torch.empty_like(d)
    ours(a_arg, b_arg, d, c=c)
    legacy()
    diff = max(float(calc_diff(d.float(), want)), float(calc_diff(d_legacy.float(), want)))
    d_cublas = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    fns = {"deep_tile": lambda: ours(a_arg, b_arg, d, c=c), "legacy": legacy,
           "cublas": lambda: torch.matmul(a, b.T, out=d_cublas)}

    alt_diffs = {}
    for text in alts:
        fns[f"alt {text}"] = with_override("FORCE_PLAN", bf16_host.parse_plan(text))
        fns[f"alt {text}"]()
        alt_diffs[text] = float(calc_diff(d_legacy.float(), want))
    if dg is not None:
        d_dg = torch.empty_like(d)
        theirs = getattr(dg, f"bf16_gemm_{layout}")
        fns["deepgemm"] = lambda: theirs(a_arg, b_arg, d_dg, c=c)
    times = bench_round_robin(fns, iters=iters)
    us = times["deep_tile"]
    nbytes = 2 * (m * k + n * k) + d.element_size() * m * n * (2 if acc else 1)
    pl = bf16_host.bf16_plan(m, n, k, "mn" if layout[0] == "t" else "k", "mn" if layout[1] == "n" else "k",
                             out_f32=out == "f32", accumulate=acc)
    return {"shape": spec, "m": m, "n": n, "k": k, "layout": layout, "out": out, "acc": acc, "us": us,
            "plan": f"{pl.block_n}/{pl.splits}/{pl.box_m}/{pl.cluster_m}{'' if pl.block_m == 128 else ' m64'}",
            "legacy_us": times["legacy"],
            "legacy_speedup": times["deepgemm"] / times["legacy"] if "deepgemm" in times else None,
            "tflops": 2 * m * n * k / us / 1e6, "gbs": nbytes / us / 1e3, "share": nbytes / us / 1e3 * 1e9 / copy_rate,
            "deepgemm_us": times.get("deepgemm"), "cublas_us": times["cublas"],
            "speedup": times["deepgemm"] / us if "deepgemm" in times else None,
            "vs_cublas": times["cublas"] / us, "diff": diff,
            "alts": [(text, times[f"alt {text}"], alt_diffs[text]) for text in alts]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="m:n:k:layout:out[:acc]")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--alt", nargs="*", default=list(ALTS),
                        help="SHAPE=PLAN[,PLAN...] (block_n/splits/box_m/cluster_m[/stages[/store_all[/block_m[/k_merge]]]])")
    parser.add_argument("--weak", action="store_true", help="time only the WEAK shapes (overrides --shapes)")
    args = parser.parse_args(argv)
    if args.weak:
        args.shapes = list(WEAK)
    alts = {spec: tuple(plans.split(",")) for spec, plans in (a.split("=") for a in args.alt)}
    dg = load_deepgemm("bf16_gemm_nt", "timing deep_tile and cuBLAS")
    copy_rate = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"HBM copy {copy_rate / 1e9:.0f} GB/s | median of {args.iters} interleaved runs, L2 flushed")
    rows = [run_shape(spec, args.iters, copy_rate, dg, alts.get(spec, ())) for spec in args.shapes]
    print_table(["shape", "us", "plan n/s/box/cl", "TFLOP/s", "% copy", "legacy us", "DeepGEMM us", "vs DeepGEMM",
                 "legacy vs DG", "cuBLAS us", "vs cuBLAS", "calc_diff"],
                [(r["shape"], f"{r['us']:.1f}", r["plan"], f"{r['tflops']:.0f}", f"{100 * r['share']:.1f}",
                  f"{r['legacy_us']:.1f}", "" if r["deepgemm_us"] is None else f"{r['deepgemm_us']:.1f}",
                  "" if r["speedup"] is None else f"{r['speedup']:.3f}",
                  "" if r["legacy_speedup"] is None else f"{r['legacy_speedup']:.3f}", f"{r['cublas_us']:.1f}",
                  f"{r['vs_cublas']:.3f}", f"{r['diff']:.1e}") for r in rows],
                aligns=["<", ">", "<"] + [">"] * 9)
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    if speedups:
        print(f"speedup over DeepGEMM geomean {geomean(speedups):.3f}, min {min(speedups):.3f}, max {max(speedups):.3f}")
        old = [r["legacy_speedup"] for r in rows if r["legacy_speedup"]]
        print(f"legacy plan over DeepGEMM geomean {geomean(old):.3f}, min {min(old):.3f}, max {max(old):.3f}")
    print(f"speedup over cuBLAS geomean {geomean([r['vs_cublas'] for r in rows]):.3f}")
    alt_rows = [(r["shape"], r["plan"], f"{r['us']:.1f}", text, f"{us:.1f}",
                 "" if r["deepgemm_us"] is None else f"{r['deepgemm_us'] / us:.3f}", f"{diff:.1e}")
                for r in rows for text, us, diff in r["alts"]]
    if alt_rows:
        print_table(["alt shape", "chosen", "us", "forced plan", "us", "forced vs DG", "calc_diff"], alt_rows,
                    aligns=["<", "<", ">", "<", ">", ">", ">"])
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bytes_per_s": copy_rate,
                                         "rows": rows}, indent=1))
    return 1 if any(r["diff"] > 1e-5 for r in rows) or any(a[2] > 1e-5 for r in rows for a in r["alts"]) else 0


if __name__ == "__main__":
    sys.exit(main())
