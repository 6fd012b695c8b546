"""The hyper-connection pre-norm GEMM (and the einsum expressions): deep_tile against DeepGEMM
(when ``import deep_gemm`` finds DeepGEMM itself, not deep_tile's alias), on the same inputs, L2
flushed before every call, median of interleaved runs (deep_tile.testing.timing.bench_round_robin).

``tf32_hc_prenorm_gemm`` shapes (``--hc``, ``m:n:k:splits``, splits 0 for None): DeepGEMM's test,
m in 13, 137, 4096, 8192; (n, k) in (24, 28672), (24, 7680), (24, 7168); splits None and 16. Up to
m 1024 the rows also time the first implementation's kernel shape ("old": two math warpgroups,
no pieces; its own splits are summed by the current reduce kernel), and every row one math
warpgroup without pieces ("g1"), and above 1024 rows two math warpgroups ("g2"; without splits
also with the earlier kernel, "g2prev"), through
deep_tile.hyper_connection's variables, and the default plan with each other kernel variant of
``DEEP_TILE_HC_VARIANT`` (``--hc-variants``; "prev" the earlier kernel).
Columns: microseconds, GB/s of the bytes the call moves (a, b read; d, sqr_sum written, as
DeepGEMM's test counts them) and that as a share of the measured HBM copy rate, TFLOP/s,
DeepGEMM's time and the speedup (DeepGEMM us / deep_tile us), and the largest difference of the
two results (summed over splits) over the largest value.

``einsum`` shapes (``--einsum``, ``expr:dims:dtype``): DeepGEMM's test of ``'bmk,bnk->mn'`` (s in
129, 4096, 8192; (m, n, k) in (128, 384, 128), (256, 256, 256), (384, 128, 384); float32 d
accumulated with ``c=d``, and bf16 d), and of its per-head ``'bhr,hdr->bhd'`` / ``'bhd,hdr->bhr'``
((h, r, d) in (128, 512, 128), (8, 4096, 1024); b in 4, 32, 128, 4096, 8192). Bytes as DeepGEMM's
test counts them (a, b, and d as float32 / the operands and d). The per-head rows also time the
other paths of ``DEEP_TILE_BH_EINSUM`` (deep_tile.einsums.BH_PATHS), and the fp8_einsum rows those
of ``DEEP_TILE_FP8_EINSUM`` (FP8_PATHS, or those of ``--fp8-paths``), in the same round robin: the
column "other paths" (the per-head ``batched`` path: deep_tile's batched BF16 GEMM); each path's d is
checked against the default's (a max rel diff line).

``fp8_einsum`` shapes (``--fp8-einsum``, ``b x h x r x d``): DeepGEMM's test of ``'bhr,hdr->bhd'``
(h, r, d = 8, 4096, 1024; b in 4, 32, 128, 4096, 8192), x cast per token and y per 128x128 block.
``--json PATH`` writes the rows. Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.testing.baselines import load_deepgemm  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth  # noqa: E402

HC_SHAPES = tuple(f"{m}:24:{k}:{splits}" for m in (13, 137, 4096, 8192) for k in (28672, 7680, 7168)
                  for splits in (0, 16))
"""Default ``m:n:k:splits`` cases of the pre-norm GEMM (DeepGEMM's test shapes; splits 0 = None)."""
EINSUM_SHAPES = tuple(f"bmk,bnk->mn:{s}x{m}x{n}x{k}:{dt}" for s in (129, 4096, 8192)
                      for m, n, k in ((128, 384, 128), (256, 256, 256), (384, 128, 384)) for dt in ("f32", "bf16")) + \
    tuple(f"{e}:{b}x{h}x{r}x{d}:bf16" for e in ("bhr,hdr->bhd", "bhd,hdr->bhr")
          for h, r, d in ((128, 512, 128), (8, 4096, 1024)) for b in (4, 32, 128, 4096, 8192))
"""Default ``expr:dims:dtype`` einsum cases (dims s x m x n x k, or b x h x r x d for the per-head
expressions; DeepGEMM's test shapes)."""


def rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest |got - want| over the largest |want|."""
    scale = want.abs().max().clamp(min=1e-30)
    return float((got - want).abs().max() / scale) if want.numel() else 0.0


def with_env(name: str, value: str, fn):
    """A callable running fn() with the environment variable ``name`` set to ``value`` (restored after)."""
    def call():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            fn()
        finally:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
    return call


def others_of(times: dict) -> dict:
    """The timings of the alternative paths (keys ``path:<name>``) as name -> us."""
    return {k.split(":", 1)[1]: v for k, v in times.items() if k.startswith("path:")}


def run_hc(spec: str, iters: int, copy_rate: float, dg, variants=("prev", "short_path", "hint"),
           old_paths: bool = True) -> dict:
    """One row: the pre-norm GEMM of shape ``spec``; ``variants``: the kernel variants timed beside
    the default (DEEP_TILE_HC_VARIANT, same plan); ``old_paths``: the forced-plan paths too."""
    m, n, k, splits = map(int, spec.split(":"))
    num_splits = splits or None
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=gen)
    lead = () if num_splits is None else (num_splits,)
    d, s = torch.empty(*lead, m, n, device="cuda"), torch.empty(*lead, m, device="cuda")
    fns = {"deep_tile": lambda: deep_tile.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits)}
    from deep_tile.hyper_connection import GROUPS_ENV, SUB_SPLITS_ENV, VARIANT_ENV
    d_alt, s_alt = torch.empty_like(d), torch.empty_like(s)
    alt = lambda: deep_tile.tf32_hc_prenorm_gemm(a, b, d_alt, s_alt, num_splits=num_splits)  # noqa: E731
    if old_paths:
        if m <= 1024:  # the first kernel shape differs from the default at small m only
            fns["path:old"] = with_env(GROUPS_ENV, "2", with_env(SUB_SPLITS_ENV, "1", alt))
        fns["path:g1"] = with_env(GROUPS_ENV, "1", with_env(SUB_SPLITS_ENV, "1", alt))
        if m > 1024:  # two math warpgroups, the default there before the one-group rule for short K
            fns["path:g2"] = with_env(GROUPS_ENV, "2", alt)
            if num_splits is None:  # and with the earlier kernel: the earlier default at long K
                fns["path:g2prev"] = with_env(GROUPS_ENV, "2", with_env(VARIANT_ENV, "prev", alt))
    for variant in variants:  # the default plan, another kernel variant
        fns[f"path:{variant}"] = with_env(VARIANT_ENV, variant, alt)
    diff = None
    if dg is not None:
        d_dg, s_dg = torch.empty_like(d), torch.empty_like(s)
        fns["deepgemm"] = lambda: dg.tf32_hc_prenorm_gemm(a, b, d_dg, s_dg, num_splits=num_splits)
        fns["deep_tile"]()
        fns["deepgemm"]()
        total = (lambda t: t) if num_splits is None else (lambda t: t.sum(0))
        diff = max(rel_diff(total(d), total(d_dg)), rel_diff(total(s), total(s_dg)))
    times = bench_round_robin(fns, iters=iters)
    nbytes = a.numel() * 2 + 4 * (b.numel() + d.numel() + s.numel())
    us = times["deep_tile"]
    return {"op": "hc", "shape": spec, "us": us, "others": others_of(times), "gbs": nbytes / us / 1e3,
            "share": nbytes / us / 1e3 * 1e9 / copy_rate,
            "tflops": 2 * m * n * k / us / 1e6, "mbytes": nbytes / 1e6, "deepgemm_us": times.get("deepgemm"),
            "deepgemm_share": nbytes / times["deepgemm"] / 1e3 * 1e9 / copy_rate if "deepgemm" in times else None,
            "speedup": times["deepgemm"] / us if "deepgemm" in times else None, "max_rel_diff": diff}


def run_einsum(spec: str, iters: int, copy_rate: float, dg) -> dict:
    """One row: the einsum case ``spec``."""
    expr, dims, dt = spec.split(":")
    sizes = list(map(int, dims.split("x")))
    gen = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)  # noqa: E731
    if expr == "bmk,bnk->mn":
        s_, m, n, k = sizes
        a, b = rand(s_, m, k), rand(s_, n, k)
        dtype = torch.float32 if dt == "f32" else torch.bfloat16
        d = torch.zeros(m, n, dtype=dtype, device="cuda")
        c = d if dtype == torch.float32 else None
        flops, nbytes = 2 * s_ * m * n * k, 2 * (a.numel() + b.numel()) + 4 * d.numel()
    else:
        bs, h, r, dd = sizes
        if expr == "bhr,hdr->bhd":
            a, b, d = rand(bs, h, r), rand(h, dd, r + 128)[:, :, :r], torch.empty(bs, h, dd, dtype=torch.bfloat16,
                                                                                 device="cuda")
        else:
            a, b, d = rand(bs, h, dd), rand(h, dd, r + 128)[:, :, :r], torch.empty(bs, h, r, dtype=torch.bfloat16,
                                                                                  device="cuda")
        c, flops = None, 2 * bs * h * r * dd
        nbytes = 2 * (a.numel() + b.numel() + d.numel())
    fns = {"deep_tile": lambda: deep_tile.einsum(expr, a, b, d, c=c)}
    path_diffs = {}
    if expr != "bmk,bnk->mn":
        from deep_tile.einsums import BH_PATH_ENV, BH_PATHS
        d_alt = torch.empty_like(d)
        fns["deep_tile"]()
        for path in BH_PATHS[1:]:
            if path == "heads" and sizes[1] > 16:  # a launch per head: the CPU, not the GPU, would be timed
                continue
            fns[f"path:{path}"] = with_env(BH_PATH_ENV, path, lambda: deep_tile.einsum(expr, a, b, d_alt))
            d_alt.fill_(float("nan"))  # rows a path leaves unwritten show as NaN
            fns[f"path:{path}"]()
            path_diffs[path] = rel_diff(d_alt.float(), d.float())
    diff = None
    if dg is not None:
        d_dg = d.clone()
        c_dg = d_dg if c is not None else None
        fns["deepgemm"] = lambda: dg.einsum(expr, a, b, d_dg, c=c_dg)
        if c is None:
            fns["deep_tile"]()
            fns["deepgemm"]()
            diff = rel_diff(d.float(), d_dg.float())
        else:  # accumulated: one call each from the same start
            d.zero_()
            d_dg.zero_()
            fns["deep_tile"]()
            fns["deepgemm"]()
            diff = rel_diff(d, d_dg)
    times = bench_round_robin(fns, iters=iters)
    us = times["deep_tile"]
    return {"op": "einsum", "shape": spec, "us": us, "others": others_of(times), "path_rel_diffs": path_diffs,
            "gbs": nbytes / us / 1e3,
            "share": nbytes / us / 1e3 * 1e9 / copy_rate, "tflops": flops / us / 1e6, "mbytes": nbytes / 1e6,
            "deepgemm_us": times.get("deepgemm"),
            "deepgemm_share": nbytes / times["deepgemm"] / 1e3 * 1e9 / copy_rate if "deepgemm" in times else None,
            "speedup": times["deepgemm"] / us if "deepgemm" in times else None, "max_rel_diff": diff}


FP8_EINSUM_SHAPES = tuple(f"{b}x8x4096x1024" for b in (4, 32, 128, 4096, 8192))
"""Default ``b x h x r x d`` cases of fp8_einsum('bhr,hdr->bhd') (DeepGEMM's test shapes)."""


def run_fp8_einsum(spec: str, iters: int, copy_rate: float, dg, paths=None) -> dict:
    """One row: fp8_einsum('bhr,hdr->bhd') of shape ``spec``; ``paths``: the other paths timed
    (None: every one of FP8_PATHS but auto), each checked against the default's d."""
    bs, h, r, dd = map(int, spec.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(bs * h, r, device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.randn(h, dd, r, device="cuda", generator=gen).to(torch.bfloat16)
    xq, sx = deep_tile.per_token_cast_to_fp8(x)
    a = (xq.view(bs, h, r), sx.contiguous().view(bs, h, -1))
    pairs = [deep_tile.per_block_cast_to_fp8(y[i]) for i in range(h)]
    b = (torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]))
    d = torch.empty(bs, h, dd, dtype=torch.bfloat16, device="cuda")
    fns = {"deep_tile": lambda: deep_tile.fp8_einsum("bhr,hdr->bhd", a, b, d)}
    from deep_tile.einsums import FP8_PATH_ENV, FP8_PATHS
    d_alt = torch.empty_like(d)
    path_diffs = {}
    fns["deep_tile"]()
    for path in FP8_PATHS[1:] if paths is None else paths:
        fns[f"path:{path}"] = with_env(FP8_PATH_ENV, path, lambda: deep_tile.fp8_einsum("bhr,hdr->bhd", a, b, d_alt))
        d_alt.fill_(float("nan"))  # a path that leaves rows unwritten shows as NaN, not as the last path's values
        fns[f"path:{path}"]()
        path_diffs[path] = rel_diff(d_alt.float(), d.float())
    diff = None
    if dg is not None:
        d_dg = torch.empty_like(d)
        fns["deepgemm"] = lambda: dg.fp8_einsum("bhr,hdr->bhd", a, b, d_dg)
        fns["deep_tile"]()
        fns["deepgemm"]()
        diff = rel_diff(d.float(), d_dg.float())
    times = bench_round_robin(fns, iters=iters)
    us = times["deep_tile"]
    nbytes = a[0].numel() + b[0].numel() + 4 * (a[1].numel() + b[1].numel()) + 2 * d.numel()
    return {"op": "fp8_einsum", "shape": f"bhr,hdr->bhd:{spec}", "us": us, "others": others_of(times),
            "path_rel_diffs": path_diffs,
            "gbs": nbytes / us / 1e3,
            "share": nbytes / us / 1e3 * 1e9 / copy_rate, "tflops": 2 * bs * h * r * dd / us / 1e6,
            "mbytes": nbytes / 1e6, "deepgemm_us": times.get("deepgemm"),
            "deepgemm_share": nbytes / times["deepgemm"] / 1e3 * 1e9 / copy_rate if "deepgemm" in times else None,
            "speedup": times["deepgemm"] / us if "deepgemm" in times else None, "max_rel_diff": diff}


def others_text(row: dict) -> str:
    """The other paths' times, with DeepGEMM's time over each when DeepGEMM ran."""
    parts = []
    for path, us in row.get("others", {}).items():
        ratio = f" {row['deepgemm_us'] / us:.2f}x" if row["deepgemm_us"] else ""
        parts.append(f"{path} {us:.1f}{ratio}")
    return ", ".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hc", nargs="*", default=list(HC_SHAPES), help="m:n:k:splits (splits 0 = None)")
    parser.add_argument("--einsum", nargs="*", default=list(EINSUM_SHAPES),
                        help="expr:dims:dtype, dims s x m x n x k or b x h x r x d, dtype f32 or bf16")
    parser.add_argument("--fp8-einsum", nargs="*", default=list(FP8_EINSUM_SHAPES), help="b x h x r x d")
    parser.add_argument("--fp8-paths", nargs="*", default=None,
                        help="the fp8_einsum paths timed beside the default (default: every one)")
    parser.add_argument("--hc-variants", nargs="*", default=["prev", "short_path", "hint"],
                        help="the pre-norm GEMM's kernel variants (DEEP_TILE_HC_VARIANT) timed beside the default")
    parser.add_argument("--hc-no-plans", action="store_true",
                        help="leave out the pre-norm GEMM's forced-plan paths (old, g1, g2)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    copy_rate = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"HBM copy {copy_rate / 1e9:.0f} GB/s | median of {args.iters} interleaved runs, L2 flushed")
    rows = []
    if args.hc:
        dg = load_deepgemm("tf32_hc_prenorm_gemm")
        rows += [run_hc(spec, args.iters, copy_rate, dg, args.hc_variants, not args.hc_no_plans) for spec in args.hc]
    if args.einsum:
        dg = load_deepgemm("einsum")
        rows += [run_einsum(spec, args.iters, copy_rate, dg) for spec in args.einsum]
    if args.fp8_einsum:
        dg = load_deepgemm("fp8_einsum")
        rows += [run_fp8_einsum(spec, args.iters, copy_rate, dg, args.fp8_paths) for spec in args.fp8_einsum]
    print_table(["op", "shape", "MB", "us", "GB/s", "% copy", "TFLOP/s", "DeepGEMM us", "DG % copy", "speedup",
                 "max rel diff", "other paths (us, DG us / us)"],
                [(r["op"], r["shape"], f"{r['mbytes']:.1f}", f"{r['us']:.1f}", f"{r['gbs']:.0f}",
                  f"{100 * r['share']:.1f}", f"{r['tflops']:.1f}",
                  "" if r["deepgemm_us"] is None else f"{r['deepgemm_us']:.1f}",
                  "" if r["deepgemm_share"] is None else f"{100 * r['deepgemm_share']:.1f}",
                  "" if r["speedup"] is None else f"{r['speedup']:.3f}",
                  "" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.1e}", others_text(r)) for r in rows],
                aligns=["<", "<"] + [">"] * 9 + ["<"])
    for op in sorted({r["op"] for r in rows}):
        speedups = [r["speedup"] for r in rows if r["speedup"] and r["op"] == op]
        if speedups:
            print(f"{op}: speedup over DeepGEMM geomean {geomean(speedups):.3f}, min {min(speedups):.3f}, "
                  f"max {max(speedups):.3f}")
        for path in sorted({p for r in rows if r["op"] == op for p in r.get("others", {})}):
            pairs = [(r["deepgemm_us"], r["others"][path]) for r in rows
                     if r["op"] == op and r["deepgemm_us"] and path in r.get("others", {})]
            if pairs:
                ratios = [dg / us for dg, us in pairs]
                print(f"{op} path {path}: speedup over DeepGEMM geomean {geomean(ratios):.3f}, min {min(ratios):.3f}, "
                      f"max {max(ratios):.3f} over {len(ratios)} rows")
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bytes_per_s": copy_rate,
                                         "rows": rows}, indent=1))
    for r in rows:
        if r.get("path_rel_diffs"):
            print(f"{r['shape']}: max rel diff of each path to the default's d: "
                  + ", ".join(f"{p} {v:.1e}" for p, v in r["path_rel_diffs"].items()))
    bad = [r for r in rows if (r["max_rel_diff"] or 0.0) > 1e-2
           or not all(v <= 1e-2 for v in r.get("path_rel_diffs", {}).values())]  # NaN (rows unwritten) is bad too
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
