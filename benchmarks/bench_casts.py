"""The fused FP8 casts (deep_tile/casts/cast_transpose.py) against the HBM copy rate: one process, L2
flushed before every call, median of interleaved runs (deep_tile.testing.timing.bench_round_robin).

For each ``T`` (``--tokens``) and ``D`` (``--dims``) of a bf16 ``x [T, D]``, each cast is timed
beside a torch copy (``dst.copy_(src)`` of uint8 buffers) that reads and writes the same number of
bytes as the cast (half each way), so ``% copy`` is the cast's achieved bandwidth over the copy's:

- ``token+T``: ``per_token_cast_transpose_to_fp8(x)``: reads 2TD bytes, writes q (TD), qt (D*Tp),
  both scales.
- ``token``: the same with ``transpose=False``: reads 2TD, writes TD and the scales.
- ``block+T``: ``per_block_cast_transpose_to_fp8(x)`` (x as a weight [N=T, K=D]): reads 2TD,
  writes q and qt (2TD) and both scales.
- ``unfused``: for scale, the existing casts doing the work of ``token+T``:
  ``per_token_cast_to_fp8(x)`` plus ``per_token_cast_to_fp8(x.t().contiguous())`` (its time, in
  the last column, beside ``token+T``'s).

``--design`` (one or more of ``deep_tile.kernels.cast_transpose.DESIGNS``; default the contract's
``DESIGN``) times each kernel design in the same run, its name after the cast's (``token+T pipe``).
Before timing, every cast's outputs are compared bitwise with the torch reference run on the GPU
(``--no-check`` skips it). The target is >= 85% of the copy rate. ``--json PATH``
writes the rows. Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.casts.cast_transpose import per_block_cast_transpose_to_fp8, per_token_cast_transpose_to_fp8  # noqa: E402
from deep_tile.casts.cast_transpose_ref import block_cast_transpose_ref, token_cast_transpose_ref  # noqa: E402
from deep_tile.common import align_up, ceil_div  # noqa: E402
from deep_tile.kernels import cast_transpose as contract  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402

TOKENS = (4096, 16384)
DIMS = (7168, 2048, 18432)
TARGET = 0.85


def cast_bytes(kind: str, t: int, d: int) -> int:
    """Bytes a cast reads and writes (input, FP8 outputs, float32 scales)."""
    rows_scales = 4 * t * ceil_div(d, 128)
    if kind == "token":
        return 2 * t * d + t * d + rows_scales
    if kind == "token+T":
        return 2 * t * d + t * d + d * align_up(t, 16) + rows_scales + 4 * d * ceil_div(t, 128)
    return 2 * t * d + 2 * t * d + 8 * ceil_div(t, 128) * ceil_div(d, 128)  # block+T


CASTS = {
    "token+T": (lambda x: per_token_cast_transpose_to_fp8(x), lambda x: token_cast_transpose_ref(x, True)),
    "token": (lambda x: per_token_cast_transpose_to_fp8(x, transpose=False),
              lambda x: token_cast_transpose_ref(x, False)),
    "block+T": (lambda x: per_block_cast_transpose_to_fp8(x), lambda x: block_cast_transpose_ref(x, True)),
}


def with_design(fn, design: str):
    """``fn`` run with the casts' kernel design set to ``design`` (contract.DESIGN, restored after)."""
    def run(x):
        saved, contract.DESIGN = contract.DESIGN, design
        try:
            return fn(x)
        finally:
            contract.DESIGN = saved
    return run


def same(got, want) -> bool:
    """Bitwise equal (NaN-free inputs here)."""
    for g, w in zip(got, want):
        if (g is None) != (w is None):
            return False
        if g is None:
            continue
        if g.dtype == torch.float8_e4m3fn:
            g, w = g.view(torch.uint8), w.view(torch.uint8)
        if g.shape != w.shape or not torch.equal(g, w):
            return False
    return True


def run_shape(t: int, d: int, check: bool, iters: int, flush: str, designs: list) -> list:
    x = torch.randn(t, d, device="cuda").bfloat16()
    rows = []
    for (kind, (plain_cast, ref)), design in [(item, design) for item in CASTS.items() for design in designs]:
        cast = with_design(plain_cast, design)
        ok = "-"
        if check:
            ok = "ok" if same(cast(x), ref(x)) else "MISMATCH"
        nbytes = cast_bytes(kind, t, d)
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns = {"cast": lambda: cast(x), "copy": lambda: dst.copy_(src)}
        if kind == "token+T":
            fns["unfused"] = lambda: (deep_tile.per_token_cast_to_fp8(x),
                                      deep_tile.per_token_cast_to_fp8(x.t().contiguous()))
        times = bench_round_robin(fns, iters=iters, flush_kind=flush, shuffle_seed=0)
        cast_gbs, copy_gbs = nbytes / times["cast"] / 1e3, 2 * (nbytes // 2) / times["copy"] / 1e3
        label = kind if len(designs) == 1 else f"{kind} {design}"
        rows.append(dict(tokens=t, dim=d, cast=label, design=design, mbytes=nbytes / 2**20, cast_us=times["cast"],
                         cast_gbs=cast_gbs, copy_us=times["copy"], copy_gbs=copy_gbs, share=cast_gbs / copy_gbs,
                         unfused_us=times.get("unfused"), check=ok))
        del src, dst
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--flush", choices=("write", "read"), default="write",
                        help="how the L2 is flushed before each call (deep_tile.testing.timing.L2Flush)")
    parser.add_argument("--design", nargs="+", choices=contract.DESIGNS, default=[contract.DESIGN],
                        help="kernel design(s) of the casts to time (deep_tile/kernels/cast_transpose.py)")
    parser.add_argument("--no-check", action="store_true", help="skip the bitwise check against the torch reference")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"L2 flush: {args.flush} | median of {args.iters} interleaved runs | design {' '.join(args.design)}")
    rows = []
    for t in args.tokens:
        for d in args.dims:
            rows += run_shape(t, d, not args.no_check, args.iters, args.flush, args.design)
    print_table(["T", "D", "cast", "MB", "us", "GB/s", "copy us", "copy GB/s", "% copy", "unfused us", "check"],
                [(r["tokens"], r["dim"], r["cast"], f"{r['mbytes']:.0f}", f"{r['cast_us']:.1f}", f"{r['cast_gbs']:.0f}",
                  f"{r['copy_us']:.1f}", f"{r['copy_gbs']:.0f}", f"{100 * r['share']:.1f}",
                  "" if r["unfused_us"] is None else f"{r['unfused_us']:.1f}", r["check"]) for r in rows],
                aligns=[">", ">", "<"] + [">"] * 7 + ["<"])
    for kind in dict.fromkeys(r["cast"] for r in rows):
        shares = [r["share"] for r in rows if r["cast"] == kind]
        print(f"{kind}: geomean {100 * geomean(shares):.1f}% of the copy rate, min {100 * min(shares):.1f}% "
              f"(target {100 * TARGET:.0f}%)")
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    bad = [r for r in rows if r["check"] == "MISMATCH"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
