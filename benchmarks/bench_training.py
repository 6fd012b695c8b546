"""The FP8 training GEMMs beside DeepGEMM latest and cuBLAS blockwise: one process, same inputs,
L2 flushed before every call, median of interleaved runs (deep_tile.testing.timing.bench_round_robin).

Sets (``--set``, repeatable):

- ``dense``: ``main_grad += A.B^T`` with A 1x128 and B 128x128 scaled (the 1D2D operands: dgrad's
  form, accumulated into an FP32 output), DeepSeek-V3's (N, K) pairs at ``--tokens`` rows.
  deep_tile accumulates in place (``fp8_gemm(..., out=d, c=d)``, FP32; ``deep_tile_write``: the
  same product written to an FP32 output without accumulating, for scale). DeepGEMM latest's 1D2D
  kernel has neither FP32 output nor C: its bf16 ``fp8_gemm_nt`` is shown for scale only, not in
  the ratio. cuBLAS blockwise (``torch._scaled_mm``, 1x128 x 128x128, FP32 out) writes the product
  without accumulating (the add it would need is not timed in the ratio); ``cublas_add`` is that
  product added into the FP32 tensor (``main_grad.add_(...)``, what a cuBLAS user runs). Two
  like-for-like ratios are printed besides: deep_tile's FP32 store against cuBLAS's, and deep_tile
  in place against cuBLAS + add.

- ``wgrad``: the weight gradient ``dW[N, K] += dY^T X`` (1D1D: both operands 1x128 along the
  tokens) over ``--tokens`` tokens for each of :data:`WGRAD_NK`. deep_tile
  (``fp8_gemm_1d1d(..., out=dw, c=dw)``) and DeepGEMM latest (``fp8_gemm_nt(..., dw, c=dw,
  recipe=(1, 1, 128))``) accumulate in place into FP32; cuBLAS blockwise (``torch._scaled_mm``,
  1x128 x 1x128, FP32 out) writes without accumulating (the add it would need is not timed).

- ``kgrouped``: MoE weight gradients, ``d[g] += a_g b_g^T`` over each group's tokens (1D1D), at
  DeepGEMM's k-grouped test shapes (m, n) = (4096, 7168) and (7168, 2048) with 4 / 8 / 16 groups of
  8192 / 4096 / 2048 tokens x U(0.7, 1.3) (multiples of 128, one group empty), plus 32 and 64
  groups of ~1024 tokens and 8 groups sharing 2048 tokens (0, 128, 256, ...). deep_tile
  (``k_grouped_fp8_gemm_1d1d(..., out=d, c=d)``, operands [m, T] with the groups' tokens side by
  side) and DeepGEMM latest (``k_grouped_fp8_gemm_nt_contiguous(..., c=d, recipe=(1, 1, 128))``,
  each group's [m, k_g] block K-major, its own layout of the same FP8 values) accumulate in place
  into FP32. ``deep_tile_dense`` (not in the ratio): deep_tile's dense 1D1D GEMM over all T tokens
  into one [m, n] output, the same FLOPs, for the k-grouped kernel's efficiency against it.

``--compat`` adds deep_tile called through ``deep_tile.compat.deepgemm`` with DeepGEMM's own
arguments (``compat``: ``fp8_gemm_nt(..., c=d, recipe=(1, 1, 128))``; k-grouped
``k_grouped_fp8_gemm_nt_contiguous`` on DeepGEMM's per-group blocks, read as they are by the
blocks layout's kernel (no operand copy: its time is the map-table kernel and the GEMM), and
``compat_tn``, ``k_grouped_fp8_gemm_tn_contiguous`` on the tokens-as-rows [sum(k), m] operands of
the same values, for which DeepGEMM has no SM90 kernel (each operand transposed by deep_tile's byte
transposition; ``compat_tn_torch``: by torch's copy, as before)),
with ``compat_speedup`` (DeepGEMM over compat), ``tn_vs_nt`` and ``blocks_vs_rows`` (deep_tile's
side-by-side layout over the compat NT call: what reading the blocks costs or saves).

Each row checks every library's output against the float64 reference of the quantised operands
(``calc_diff`` < 1e-3; deep_tile's from a NaN-free known C) and prints microseconds, TFLOPS and
the ratio of deep_tile's time to the faster baseline's. ``--json PATH`` writes the rows.

Needs an sm_90 GPU; DeepGEMM when ``import deep_gemm`` works (tools/device_run.sh dg_env).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.gemm import fp8_gemm_1d1d  # noqa: E402
from deep_tile.gemm.k_grouped import k_grouped_fp8_gemm_1d1d  # noqa: E402
from deep_tile.gemm.problem import Problem, ProblemKind  # noqa: E402
from deep_tile.reference import ref_fp8_gemm, ref_fp8_gemm_1d1d  # noqa: E402
from deep_tile.select.api import get_problem_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402
from deep_tile.testing.shapes import MODEL_NK, WGRAD_NK  # noqa: E402
from deep_tile.testing.table import geomean  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402

DENSE_NK = MODEL_NK + [(7168, 4608)]
"""(N, K) of the dense set: DeepGEMM's DeepSeek-V3 pairs plus the MoE shared expert's down
projection."""

KGROUPED_MN = [(4096, 7168), (7168, 2048)]
"""(m, n) of the k-grouped set: DeepGEMM's k-grouped test shapes (output [G, m, n])."""


def kgrouped_sizes(seed: int) -> list:
    """``(label, sizes)`` of the k-grouped set: DeepGEMM's test groups (4 x 8192, 8 x 4096, 16 x 2048
    tokens, each x U(0.7, 1.3) rounded to 128, one group empty), 32 and 64 groups of ~1024 tokens,
    and 8 groups sharing 2048 tokens (0, 128, 256, 384, 512, then 256 each)."""
    rng = random.Random(seed)
    sets = []
    for groups, expected in ((4, 8192), (8, 4096), (16, 2048), (32, 1024), (64, 1024)):
        sizes = [max(128, round(expected * rng.uniform(0.7, 1.3) / 128) * 128) for _ in range(groups)]
        sizes[rng.randrange(groups)] = 0
        sets.append((f"{groups}x~{expected}", sizes))
    sets.append(("8 share 2048", [0, 128, 256, 384, 512, 256, 256, 256]))
    return sets


def deepgemm():
    """DeepGEMM latest (``fp8_gemm_nt``), or None."""
    try:
        import deep_gemm
    except ImportError:
        return None
    return deep_gemm if hasattr(deep_gemm, "fp8_gemm_nt") else None


def dense_row(m: int, n: int, k: int, args) -> dict:
    """One shape of the ``dense`` set: checked, then timed."""
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=args.seed, a_scale_layout="tma")
    ref = ref_fp8_gemm(a, a_scale, b, b_scale)
    start = torch.randn((m, n), device="cuda", dtype=torch.float32)
    d = start.clone()
    deep_tile.fp8_gemm(a, a_scale, b, b_scale, d, c=d)
    problem = Problem(m, n, k, out_dtype="float32", c_dtype="out")
    row = {"set": "dense", "m": m, "n": n, "k": k, "config": get_problem_config(problem).for_problem(problem).label,
           "diff": {"deep_tile": calc_diff(d.double(), start.double() + ref)}}
    fns = {"deep_tile": lambda: deep_tile.fp8_gemm(a, a_scale, b, b_scale, d, c=d)}
    # the same product written without accumulating (cuBLAS's work), for scale: not in the ratio
    plain = torch.empty((m, n), device="cuda", dtype=torch.float32)
    deep_tile.fp8_gemm(a, a_scale, b, b_scale, plain)
    row["diff"]["deep_tile_write"] = calc_diff(plain.double(), ref)
    fns["deep_tile_write"] = lambda: deep_tile.fp8_gemm(a, a_scale, b, b_scale, plain)
    if k % 128 == 0 and m % 4 == 0:
        sa, sb = a_scale.t().contiguous().t(), b_scale.contiguous().t()
        cublas = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        row["diff"]["cublas"] = calc_diff(cublas.double(), ref)
        fns["cublas"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        # what a cuBLAS user runs for main_grad += A.B^T: the product, then an add into main_grad
        summed = start.clone()
        summed.add_(torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32))
        row["diff"]["cublas_add"] = calc_diff(summed.double(), start.double() + ref)
        fns["cublas_add"] = lambda: summed.add_(torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb,
                                                                 out_dtype=torch.float32))
    dg = None if args.no_deepgemm else deepgemm()
    if dg is not None:
        bf16 = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        dg.fp8_gemm_nt((a, a_scale), (b, b_scale), bf16, recipe=(1, 128, 128), disable_ue8m0_cast=True)
        row["diff"]["deepgemm_bf16"] = calc_diff(bf16.double(), ref)
        fns["deepgemm_bf16"] = lambda: dg.fp8_gemm_nt((a, a_scale), (b, b_scale), bf16, recipe=(1, 128, 128),
                                                      disable_ue8m0_cast=True)
    del ref
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
    flops = 2.0 * m * n * k
    row["us"] = times
    row["tflops"] = {name: flops / us / 1e6 for name, us in times.items()}
    baselines = [times[name] for name in ("cublas",) if name in times]  # DeepGEMM's bf16 is not this GEMM
    row["speedup"] = min(baselines) / times["deep_tile"] if baselines else None
    if "cublas" in times:  # like for like: the FP32 store against cuBLAS's, in place against cuBLAS + add
        row["write_vs_cublas"] = times["cublas"] / times["deep_tile_write"]
        row["in_place_vs_cublas_add"] = times["cublas_add"] / times["deep_tile"]
    return row


def _cublas_1d1d(a, a_scale, b, b_scale):
    """A callable running cuBLAS's 1x128 x 1x128 blockwise GEMM on these operands (FP32 out), or
    the reason it cannot (a str): the scale layouts torch._scaled_mm accepts are tried in turn."""
    sa = a_scale.t().contiguous().t()
    errors = []
    for sb in (b_scale.t().contiguous().t(), b_scale.contiguous(), b_scale.t().contiguous()):
        try:
            torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001 -- recorded: cuBLAS or torch refuses this layout
            errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")
            continue
        return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    return "; ".join(errors)


def wgrad_operands(n: int, k: int, tokens: int, seed: int) -> tuple:
    """The weight gradient's operands: random dY^T [n, tokens] and X^T [k, tokens] quantised 1x128
    along the tokens, ``(a, a_scale, b, b_scale, a_scale_tma, b_scale_tma)`` (the scales also in
    the TMA-aligned layout the kernels read without a copy)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dy_t = torch.randn((n, tokens), generator=gen, device="cuda").to(torch.bfloat16)
    x_t = torch.randn((k, tokens), generator=gen, device="cuda").to(torch.bfloat16)
    a, a_scale = deep_tile.per_token_cast_to_fp8(dy_t)
    b, b_scale = deep_tile.per_token_cast_to_fp8(x_t)
    return a, a_scale, b, b_scale, deep_tile.get_tma_aligned_a_scale(a_scale), deep_tile.get_tma_aligned_a_scale(b_scale)


def wgrad_row(n: int, k: int, tokens: int, args) -> dict:
    """One weight gradient dW[n, k] += dY^T X over ``tokens`` (M = n, N = k, K = tokens): checked, timed."""
    a, a_scale, b, b_scale, a_scale_tma, b_scale_tma = wgrad_operands(n, k, tokens, args.seed)
    ref = ref_fp8_gemm_1d1d(a, a_scale, b, b_scale)
    start = torch.randn((n, k), device="cuda", dtype=torch.float32)
    dw = start.clone()
    fp8_gemm_1d1d(a, a_scale_tma, b, b_scale_tma, dw, c=dw)
    problem = Problem(n, k, tokens, out_dtype="float32", c_dtype="out", b_scale_1d=True)
    row = {"set": "wgrad", "m": n, "n": k, "k": tokens, "config": get_problem_config(problem).for_problem(problem).label,
           "diff": {"deep_tile": calc_diff(dw.double(), start.double() + ref)}}
    fns = {"deep_tile": lambda: fp8_gemm_1d1d(a, a_scale_tma, b, b_scale_tma, dw, c=dw)}
    cublas = _cublas_1d1d(a, a_scale, b, b_scale)
    if callable(cublas):
        row["diff"]["cublas"] = calc_diff(cublas().double(), ref)
        fns["cublas"] = cublas
    else:
        row["cublas_error"] = cublas
    if args.compat:  # the same call through deep_tile.compat.deepgemm, DeepGEMM's arguments
        import deep_tile.compat.deepgemm as compat

        compat_d = start.clone()
        compat.fp8_gemm_nt((a, a_scale_tma), (b, b_scale_tma), compat_d, c=compat_d, recipe=(1, 1, 128))
        torch.cuda.synchronize()
        row["diff"]["compat"] = calc_diff(compat_d.double(), start.double() + ref)
        fns["compat"] = lambda: compat.fp8_gemm_nt((a, a_scale_tma), (b, b_scale_tma), compat_d, c=compat_d,
                                                   recipe=(1, 1, 128))
    dg = None if args.no_deepgemm else deepgemm()
    if dg is not None:
        dg_d = start.clone()
        try:
            dg.fp8_gemm_nt((a, a_scale_tma), (b, b_scale_tma), dg_d, c=dg_d, recipe=(1, 1, 128))
            torch.cuda.synchronize()
            row["diff"]["deepgemm"] = calc_diff(dg_d.double(), start.double() + ref)
            fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, a_scale_tma), (b, b_scale_tma), dg_d, c=dg_d,
                                                     recipe=(1, 1, 128))
        except Exception as exc:  # noqa: BLE001 -- recorded, not fatal
            row["deepgemm_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    del ref
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
    flops = 2.0 * n * k * tokens
    row["us"] = times
    row["tflops"] = {name: flops / us / 1e6 for name, us in times.items()}
    baselines = [times[name] for name in ("cublas", "deepgemm") if name in times]
    row["speedup"] = min(baselines) / times["deep_tile"] if baselines else None
    if "compat" in times and "deepgemm" in times:
        row["compat_speedup"] = times["deepgemm"] / times["compat"]
    return row


def _k_major_blocks(x: torch.Tensor, ks: list) -> torch.Tensor:
    """DeepGEMM's NT K-grouped operand of ``x`` [rows, T] (tokens side by side): each group's
    [rows, k_g] block, K-major, one after another in a flat buffer."""
    starts = [0]
    for k in ks[:-1]:
        starts.append(starts[-1] + k)
    return torch.cat([x[:, s:s + k].contiguous().view(-1) for s, k in zip(starts, ks)])


def _kgrouped_diffs(outputs: dict, start: torch.Tensor, a, a_scale, b, b_scale, ks: list) -> dict:
    """calc_diff of each ``outputs[name]`` ([G, m, n]) against ``start + `` the float64 product of
    each group, one group at a time (the whole float64 output would not fit beside the rest)."""
    sums = {name: [0.0, 0.0] for name in outputs}
    s = 0
    for g, k in enumerate(ks):
        ref = start[g].double()
        if k:
            blocks = slice(s // 128, (s + k) // 128)
            ref += ref_fp8_gemm_1d1d(a[:, s:s + k], a_scale[:, blocks], b[:, s:s + k], b_scale[:, blocks])
        for name, out in outputs.items():
            x = out[g].double()
            sums[name][0] += float((x * ref).sum())
            sums[name][1] += float((x * x + ref * ref).sum())
        s += k
    return {name: (1.0 - 2.0 * xy / sq) if sq else 0.0 for name, (xy, sq) in sums.items()}


TN_MODES = {"compat_tn": "kernel", "compat_tn_torch": "torch"}
"""The TN form's timed variants: DEEP_TILE_KGROUPED_TN_TRANSPOSE of each (the default, torch's copy as before)."""


def _tn_call(compat, mode: str, a, b, d, ks, sizes) -> None:
    """The compatible TN form, in place, with DEEP_TILE_KGROUPED_TN_TRANSPOSE=mode (read at each call)."""
    os.environ["DEEP_TILE_KGROUPED_TN_TRANSPOSE"] = mode
    compat.k_grouped_fp8_gemm_tn_contiguous(a, b, d, ks, sizes, d, recipe=(1, 1, 128))


def kgrouped_row(m: int, n: int, label: str, ks: list, args) -> dict:
    """One k-grouped shape: checked, then timed."""
    tokens = sum(ks)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    dy_t = torch.randn((m, tokens), generator=gen, device="cuda").to(torch.bfloat16)
    x_t = torch.randn((n, tokens), generator=gen, device="cuda").to(torch.bfloat16)
    a, a_scale = deep_tile.per_token_cast_to_fp8(dy_t)
    b, b_scale = deep_tile.per_token_cast_to_fp8(x_t)
    del dy_t, x_t
    a_scale, b_scale = deep_tile.get_tma_aligned_a_scale(a_scale), deep_tile.get_tma_aligned_a_scale(b_scale)
    sizes = torch.tensor(ks, dtype=torch.int32, device="cuda")
    start = torch.randn((len(ks), m, n), device="cuda", dtype=torch.float32)
    d = start.clone()
    k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, d, c=d)
    problem = Problem(m, n, tokens, kind=ProblemKind.K_GROUPED, num_groups=len(ks), b_scale_1d=True,
                      out_dtype="float32", c_dtype="out")
    config = get_problem_config(problem).for_problem(problem).label
    row = {"set": "kgrp", "m": m, "n": n, "k": tokens, "groups": label, "config": config}
    outputs = {"deep_tile": d}
    fns = {"deep_tile": lambda: k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, d, c=d)}
    dense = torch.zeros((m, n), device="cuda", dtype=torch.float32)
    fns["deep_tile_dense"] = lambda: fp8_gemm_1d1d(a, a_scale, b, b_scale, dense, c=dense)
    dg = None if args.no_deepgemm else deepgemm()
    dg_a = dg_b = None
    if args.compat or dg is not None:
        dg_a, dg_b = _k_major_blocks(a, ks), _k_major_blocks(b, ks)
    if args.compat:  # through deep_tile.compat.deepgemm: DeepGEMM's NT layout, and the TN form on the same values
        import deep_tile.compat.deepgemm as compat

        nt_d = start.clone()
        a_tn, b_tn = a.t().contiguous(), b.t().contiguous()  # [sum(ks), m]: tokens as rows
        sfa_tn, sfb_tn = a_scale.t().contiguous(), b_scale.t().contiguous()  # [sum(ks) / 128, m]
        fns["compat"] = lambda: compat.k_grouped_fp8_gemm_nt_contiguous((dg_a, a_scale), (dg_b, b_scale), nt_d, ks,
                                                                        sizes, nt_d, recipe=(1, 1, 128))
        fns["compat"]()
        outputs["compat"] = nt_d
        for name, mode in TN_MODES.items():  # the TN form's copies, one process (DEEP_TILE_KGROUPED_TN_TRANSPOSE)
            tn_d = start.clone()
            fns[name] = functools.partial(_tn_call, compat, mode, (a_tn, sfa_tn), (b_tn, sfb_tn), tn_d, ks, sizes)
            fns[name]()
            outputs[name] = tn_d
        torch.cuda.synchronize()
    if dg is not None and hasattr(dg, "k_grouped_fp8_gemm_nt_contiguous"):
        dg_d = start.clone()
        try:
            dg.k_grouped_fp8_gemm_nt_contiguous((dg_a, a_scale), (dg_b, b_scale), dg_d, ks, sizes, dg_d,
                                                recipe=(1, 1, 128))
            torch.cuda.synchronize()
            outputs["deepgemm"] = dg_d
            fns["deepgemm"] = lambda: dg.k_grouped_fp8_gemm_nt_contiguous((dg_a, a_scale), (dg_b, b_scale), dg_d, ks,
                                                                          sizes, dg_d, recipe=(1, 1, 128))
        except Exception as exc:  # noqa: BLE001 -- recorded, not fatal
            row["deepgemm_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    row["diff"] = _kgrouped_diffs(outputs, start, a, a_scale, b, b_scale, ks)
    del start
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
    flops = 2.0 * m * n * tokens
    row["us"] = times
    row["tflops"] = {name: flops / us / 1e6 for name, us in times.items()}
    row["speedup"] = times["deepgemm"] / times["deep_tile"] if "deepgemm" in times else None
    row["vs_dense"] = times["deep_tile_dense"] / times["deep_tile"]
    if "compat" in times:
        row["compat_speedup"] = times["deepgemm"] / times["compat"] if "deepgemm" in times else None
        row["tn_vs_nt"] = times["compat"] / times["compat_tn"]
        row["tn_modes_vs_nt"] = {name: times["compat"] / times[name] for name in TN_MODES}
        row["blocks_vs_rows"] = times["deep_tile"] / times["compat"]
    return row


def print_rows(rows: list) -> None:
    names = sorted({name for r in rows for name in r["us"]}, key=lambda x: (x != "deep_tile", x))
    head = f"{'set':<6} {'M':>6} {'N':>6} {'K':>6} " + " ".join(f"{n + ' us':>17} {'TF':>5}" for n in names)
    print(head + f" {'vs best':>8} {'diff ok':>8}  config")
    for r in rows:
        cells = " ".join(f"{r['us'].get(n, float('nan')):>17.1f} {r['tflops'].get(n, float('nan')):>5.0f}"
                         for n in names)
        ok = all(v < 1e-3 for v in r["diff"].values())
        speed = f"{r['speedup']:.3f}" if r["speedup"] else "-"
        extra = f"  [{r['groups']}; {r['vs_dense']:.2f}x the dense 1D1D's TFLOPS]" if "groups" in r else ""
        if r.get("compat_speedup"):
            extra += f"  compat {r['compat_speedup']:.3f}x DeepGEMM"
        if r.get("tn_modes_vs_nt"):
            extra += ", TN " + " ".join(f"{name[len('compat_tn'):].lstrip('_') or 'kernel'} {v:.3f}x"
                                        for name, v in r["tn_modes_vs_nt"].items()) + " NT"
        elif r.get("tn_vs_nt"):
            extra += f", TN {r['tn_vs_nt']:.3f}x NT"
        if r.get("blocks_vs_rows"):
            extra += f", NT blocks {r['blocks_vs_rows']:.3f}x rows"
        print(f"{r['set']:<6} {r['m']:>6} {r['n']:>6} {r['k']:>6} {cells} {speed:>8} {str(ok):>8}  {r['config']}{extra}")
    like = [r for r in rows if "write_vs_cublas" in r]
    if like:
        write = [r["write_vs_cublas"] for r in like]
        acc = [r["in_place_vs_cublas_add"] for r in like]
        print(f"  dense, like for like: FP32 store vs cuBLAS's {geomean(write):.3f}x (min {min(write):.3f}); in place "
              f"vs cuBLAS + add {geomean(acc):.3f}x (min {min(acc):.3f}) over {len(like)} shapes")
    for kind in sorted({r["set"] for r in rows}):
        ratios = [r["speedup"] for r in rows if r["set"] == kind and r["speedup"]]
        if ratios and len({r["set"] for r in rows}) > 1:
            print(f"  {kind}: geomean {geomean(ratios):.3f}x (min {min(ratios):.3f}) over {len(ratios)} shapes")
    compat = [r["compat_speedup"] for r in rows if r.get("compat_speedup")]
    if compat:
        print(f"  compat NT: geomean {geomean(compat):.3f}x DeepGEMM (min {min(compat):.3f}) over {len(compat)} shapes")
    for name in TN_MODES:
        tn = [r["tn_modes_vs_nt"][name] for r in rows if name in r.get("tn_modes_vs_nt", {})]
        if tn:
            print(f"  compat TN ({TN_MODES[name]}) vs compat NT: geomean {geomean(tn):.3f}x (min {min(tn):.3f}) "
                  f"over {len(tn)} shapes")
    blocks = [r["blocks_vs_rows"] for r in rows if r.get("blocks_vs_rows")]
    if blocks:
        print(f"  compat NT (blocks layout) vs deep_tile rows layout: geomean {geomean(blocks):.3f}x "
              f"(min {min(blocks):.3f}) over {len(blocks)} shapes")
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    if speedups:
        print(f"geomean deep_tile vs the faster baseline: {geomean(speedups):.3f}x over {len(speedups)} shapes "
              f"(min {min(speedups):.3f}); every row correct: {all(all(v < 1e-3 for v in r['diff'].values()) for r in rows)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", choices=["dense", "wgrad", "kgrouped"],
                        help="which GEMMs (default: all)")
    parser.add_argument("--tokens", type=int, action="append",
                        help="rows of the dense set, the reduction of the wgrad set (default 4096)")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-deepgemm", action="store_true")
    parser.add_argument("--compat", action="store_true",
                        help="wgrad and kgrouped: also deep_tile through deep_tile.compat.deepgemm, called "
                             "as DeepGEMM is (kgrouped: its NT layout, and the TN form on the same values)")
    parser.add_argument("--groups", action="append",
                        help="kgrouped: only these group labels (e.g. '16x~2048'; default all)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sets = args.set or ["dense", "wgrad", "kgrouped"]
    rows = []
    if "dense" in sets:
        for m in args.tokens or [4096]:
            for n, k in DENSE_NK:
                rows.append(dense_row(m, n, k, args))
                print(json.dumps({key: rows[-1][key] for key in ("m", "n", "k", "us", "diff")}), flush=True)
    if "wgrad" in sets:
        for tokens in args.tokens or [4096]:
            for n, k in WGRAD_NK:
                rows.append(wgrad_row(n, k, tokens, args))
                print(json.dumps({key: rows[-1].get(key) for key in ("m", "n", "k", "us", "diff", "cublas_error",
                                                                      "deepgemm_error")}), flush=True)
    if "kgrouped" in sets:
        for m, n in KGROUPED_MN:
            for label, ks in kgrouped_sizes(args.seed):
                if args.groups and label not in args.groups:
                    continue
                rows.append(kgrouped_row(m, n, label, ks, args))
                print(json.dumps({key: rows[-1].get(key) for key in ("m", "n", "k", "groups", "us", "diff",
                                                                      "deepgemm_error")}), flush=True)
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
