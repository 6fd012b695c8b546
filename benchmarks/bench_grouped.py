"""Benchmark deep_tile's grouped (MoE) FP8 GEMMs against DeepGEMM and a loop of dense deep_tile.fp8_gemm calls.

Usage:
    python benchmarks/bench_grouped.py                                 # every kind, every shape (about 3 min warm)
    python benchmarks/bench_grouped.py --kind masked --iters 30
    python benchmarks/bench_grouped.py --kind contiguous --shapes 8,4096,4096,7168 --json r.json
    python benchmarks/bench_grouped.py --kind offsets --loop eager --no-deepgemm
    python benchmarks/bench_grouped.py --compat --kind masked              # deep_tile as engines call it

Kinds and libraries (one process; every library gets the same FP8 inputs and scales; the a_scale of
every layout is already in the zero-copy TMA-aligned column-major layout):

- ``contiguous``: ``deep_tile.m_grouped_fp8_gemm_contiguous`` vs DeepGEMM's
  ``m_grouped_fp8_gemm_nt_contiguous`` on the same padded rows (each expert's run padded to the
  contiguous alignment, 128; -1 in ``m_indices``), and the loop.
- ``masked``: ``deep_tile.m_grouped_fp8_gemm_masked`` vs DeepGEMM's ``m_grouped_fp8_gemm_nt_masked``
  on ``[G, max_m, K]`` slabs, ``masked_m`` random around ``expected_m``, and the loop.
- ``offsets``: ``deep_tile.m_grouped_fp8_gemm_offsets`` on the unpadded rows, against the padded
  contiguous layout holding the same real rows (same useful work) run by deep_tile and by DeepGEMM
  (DeepGEMM has no unpadded layout), and the loop.

Layout flags (DeepGEMM's engine-facing variants; docs/deepgemm-compat.md):

- ``--psum`` (contiguous): deep_tile runs ``m_grouped_fp8_gemm_psum`` and DeepGEMM
  ``m_grouped_fp8_gemm_nt_contiguous(..., use_psum_layout=True)``, both given each expert's row end
  (int32 [G]) on the same padded rows; deep_tile's ``m_indices`` contiguous GEMM runs beside them
  (column "alt us", speedups "vs alt").
- ``--signal`` (masked): deep_tile runs the masked GEMM as SGLang's single-batch overlap calls it
  (``deep_tile.compat.deepgemm.m_grouped_fp8_gemm_nt_masked(..., enable_overlap=True, signal=...)``:
  the signalling kernel, each block's counter raised in the kernel as its rows are written; the
  counters are not zeroed between calls, the kernel only adds) against DeepGEMM's plain masked GEMM,
  with deep_tile's plain masked GEMM beside them (column "alt us").

The loop is one ``deep_tile.fp8_gemm`` per non-empty expert on its real rows (it knows the counts
on the host), captured once in a CUDA graph and replayed (``--loop graph``, the default: GPU time
without Python launch cost; ``--loop eager`` times the Python loop itself, launch-bound for many
experts). Rows per expert are ``int(expected_m * uniform(0.7, 1.3))`` as in DeepGEMM's tests (seeded).

Per shape: a check of each deep_tile output (and DeepGEMM's and the loop's, for information) against
the float64 reference (deep_tile.reference.ref_fp8_gemm) on up to ``--check-rows`` real rows spread
over the experts (the first and last real row of each included); outputs are NaN-poisoned first,
and the rows a deep_tile GEMM must leave untouched (padding, past ``masked_m``) must still be NaN.
A failure (calc_diff >= 1e-3, max rel error >= 1e-2, or a written untouched row) marks the row FAIL
and the exit code 1. Then the libraries are timed round-robin (testing.timing.bench_round_robin: each
iteration times every library once in a fresh random order, L2 flushed and a sleep pad before every
call, CUDA events, median of ``--iters``). TFLOPS count useful FLOPs (real rows only); GB/s counts
compulsory traffic (real rows of A and their scales, the weights and scales of the experts with rows,
the real output rows) and is set against the HBM copy rate measured in the same run. Speedups are
``other us / deep_tile us`` (> 1: deep_tile faster); geomeans per kind at the end.
"""
import argparse
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import deep_tile  # noqa: E402
from bench_fp8_gemm import deepgemm_version, environment, environment_text, runnable  # noqa: E402
from deep_tile.common import SCALE_GROUP, align_up, ceil_div  # noqa: E402
from deep_tile.casts.quant import per_token_cast_to_fp8  # noqa: E402
from deep_tile.reference import ref_fp8_gemm  # noqa: E402
from deep_tile.testing.moe import make_expert_weights, tma_aligned_scale_buffer  # noqa: E402
from deep_tile.testing.numeric import DIFF_TOL, REL_TOL, calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, capture_graph, copy_bandwidth  # noqa: E402

KINDS = ("contiguous", "masked", "offsets")
DSV3_NK = ((4096, 7168), (7168, 2048))
"""DeepSeek-V3 expert GEMMs (N, K): gate-up (2 x 2048, 7168) and down (7168, 2048)."""
DG_NK = ((6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048))
"""DeepGEMM's grouped test (N, K) pairs (tests/generators.py)."""
DG_CONTIGUOUS_GROUPS = ((4, 8192), (8, 4096))
DG_MASKED_GROUPS = ((32, 192), (6, 1024), (32, 20), (6, 20))
MANY_EXPERTS_GROUPS = ((64, 96), (128, 32), (256, 16))
"""Many experts with few rows each: padding to 128 rows costs the contiguous layout most here."""
DEVICE = "cuda"


@dataclass(frozen=True)
class Shape:
    """One benchmark problem: ``num_groups`` experts, about ``expected_m`` rows each, weights [N, K]."""

    kind: str
    num_groups: int
    expected_m: int
    n: int
    k: int


def default_shapes(kinds) -> list:
    """The default shape list of each kind in ``kinds`` (module docstring)."""
    shapes = []
    if "contiguous" in kinds:
        shapes += [Shape("contiguous", g, m, n, k) for g, m in DG_CONTIGUOUS_GROUPS for n, k in DG_NK + DSV3_NK]
        shapes += [Shape("contiguous", g, m, n, k) for g, m in MANY_EXPERTS_GROUPS for n, k in DSV3_NK]
    if "masked" in kinds:
        shapes += [Shape("masked", g, m, n, k) for g, m in DG_MASKED_GROUPS for n, k in DG_NK + DSV3_NK]
    if "offsets" in kinds:
        shapes += [Shape("offsets", g, m, n, k) for g, m in MANY_EXPERTS_GROUPS for n, k in DSV3_NK]
    return shapes


def parse_args(argv=None):
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=KINDS, action="append",
                   help="kinds to run (repeatable; default: all three)")
    p.add_argument("--shapes", nargs="+", metavar="G,M,N,K",
                   help="experts, expected rows per expert, N, K (replaces the default list, for each --kind)")
    p.add_argument("--iters", type=int, default=15, help="timed rounds (median taken)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per library first")
    p.add_argument("--loop", choices=("graph", "eager", "off"), default="graph",
                   help="the per-expert fp8_gemm loop: replayed as a CUDA graph, run from Python, or left out")
    p.add_argument("--no-deepgemm", action="store_true", help="leave DeepGEMM out even if importable")
    p.add_argument("--check-rows", type=int, default=256, help="real rows checked against float64 per shape")
    p.add_argument("--seed", type=int, default=0, help="data seed")
    p.add_argument("--json", metavar="PATH", help="write environment + rows + summary as JSON")
    p.add_argument("--psum", action="store_true", help="contiguous: the psum layout (expert ends) in both libraries")
    p.add_argument("--signal", action="store_true",
                   help="masked: deep_tile with SGLang's completion signals (compat enable_overlap=True)")
    p.add_argument("--compat", action="store_true",
                   help="deep_tile through deep_tile.compat.deepgemm, called with DeepGEMM's own arguments "
                        "(contiguous, psum, masked; offsets has no DeepGEMM name and stays native)")
    args = p.parse_args(argv)
    args.kinds = tuple(dict.fromkeys(args.kind or KINDS))
    if args.shapes:
        try:
            custom = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
        except ValueError:
            p.error(f"--shapes: expected G,M,N,K integers; got {args.shapes}")
        if any(len(s) != 4 or min(s) < 1 for s in custom):
            p.error(f"--shapes: each shape needs 4 positive values G,M,N,K; got {args.shapes}")
        args.shape_list = [Shape(kind, *s) for kind in args.kinds for s in custom]
    else:
        args.shape_list = default_shapes(args.kinds)
    if args.iters < 1 or args.warmup < 0 or args.check_rows < 1:
        p.error("need --iters >= 1, --warmup >= 0 and --check-rows >= 1")
    return args


# --------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------

def dg_alignment(dg) -> int:
    """DeepGEMM's contiguous-layout row alignment (128 when it does not say)."""
    fn = getattr(dg, "get_m_alignment_for_contiguous_layout", None) or getattr(
        dg, "get_mk_alignment_for_contiguous_layout", None)
    return int(fn()) if fn else 128


def make_problem(shape: Shape, seed: int, alignment: int) -> dict:
    """Random FP8 data of one shape, in every layout its kind needs (all on the GPU).

    Keys: ``counts`` (host list of real rows per expert), ``b``, ``b_scale``, ``real`` (the real rows
    ``(q [R, K], s [R, kb])``), and per layout: ``padded`` (``a``, ``a_scale``, ``m_indices``,
    ``starts``), ``offsets`` (``a``, ``a_scale``, ``offsets``, ``starts``), ``masked`` (``a``,
    ``a_scale``, ``masked_m``, ``max_m``).
    """
    rng = random.Random(f"{seed}-{shape}")
    g, n, k = shape.num_groups, shape.n, shape.k
    counts = [max(0, int(shape.expected_m * rng.uniform(0.7, 1.3))) for _ in range(g)]
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    b, b_scale = make_expert_weights(g, n, k, DEVICE, gen)
    total = sum(counts)
    q, s = per_token_cast_to_fp8(torch.randn((total, k), generator=gen, device=DEVICE).to(torch.bfloat16))
    kb = ceil_div(k, SCALE_GROUP)
    problem = {"counts": counts, "b": b, "b_scale": b_scale, "real": (q, s)}
    real_starts = [sum(counts[:i]) for i in range(g)]
    if shape.kind in ("contiguous", "offsets"):
        padded = [align_up(c, alignment) for c in counts]
        starts = [sum(padded[:i]) for i in range(g)]
        m = sum(padded)
        a = torch.zeros((m, k), dtype=torch.uint8, device=DEVICE)
        a_scale = tma_aligned_scale_buffer((m, kb), DEVICE)
        m_indices = torch.full((m,), -1, dtype=torch.int32)
        for e in range(g):
            dst, src, c = starts[e], real_starts[e], counts[e]
            a[dst:dst + c] = q.view(torch.uint8)[src:src + c]
            a_scale[dst:dst + c] = s[src:src + c]
            m_indices[dst:dst + c] = e
        problem["padded"] = {"a": a.view(torch.float8_e4m3fn), "a_scale": a_scale,
                             "m_indices": m_indices.to(DEVICE), "starts": starts}
    if shape.kind == "offsets":
        offsets = torch.tensor(real_starts + [total], dtype=torch.int32, device=DEVICE)
        a_scale = tma_aligned_scale_buffer((total, kb), DEVICE)
        a_scale.copy_(s)
        problem["offsets"] = {"a": q, "a_scale": a_scale, "offsets": offsets, "starts": real_starts}
    if shape.kind == "masked":
        max_m = align_up(max(max(counts), 1), 64)
        a = torch.zeros((g, max_m, k), dtype=torch.uint8, device=DEVICE)
        a_scale = tma_aligned_scale_buffer((g, max_m, kb), DEVICE)
        for e in range(g):
            src, c = real_starts[e], counts[e]
            a[e, :c] = q.view(torch.uint8)[src:src + c]
            a_scale[e, :c] = s[src:src + c]
        problem["masked"] = {"a": a.view(torch.float8_e4m3fn), "a_scale": a_scale, "max_m": max_m,
                             "masked_m": torch.tensor(counts, dtype=torch.int32, device=DEVICE)}
    return problem


def _poisoned(shape_):
    return torch.full(shape_, float("nan"), dtype=torch.bfloat16, device=DEVICE)


# --------------------------------------------------------------------------------------------------
# Libraries
# --------------------------------------------------------------------------------------------------

def _dense_loop(a, a_scale, b, b_scale, out, row_ranges):
    """Zero-argument callable: one deep_tile.fp8_gemm per ``(expert, rows)`` with rows non-empty;
    ``a``/``a_scale``/``out`` are indexed by ``rows`` (slices of 2-D buffers, or ``(g, slice)``)."""
    calls = [(a[rows], a_scale[rows], b[e], b_scale[e], out[rows]) for e, rows in row_ranges]

    def loop():
        for args in calls:
            deep_tile.fp8_gemm(*args[:4], out=args[4])
    return loop


def _graphed(fn):
    """``fn`` captured in a CUDA graph (testing.timing.capture_graph): returns the replay."""
    return capture_graph(fn).replay


def library_fns(shape: Shape, problem: dict, args) -> tuple:
    """``(fns, outs, untouched)``: name -> zero-argument callable (or the reason it cannot run, a
    str); name -> its NaN-poisoned output; name -> bool mask of the rows it must leave untouched."""
    g, n = shape.num_groups, shape.n
    b, b_scale, counts = problem["b"], problem["b_scale"], problem["counts"]
    dg, version = deepgemm_version()
    use_dg = dg is not None and not args.no_deepgemm
    fns, outs, untouched = {}, {}, {}
    recipe = {"recipe": (1, 128, 128), "disable_ue8m0_cast": True}

    if shape.kind == "masked":
        lay = problem["masked"]
        a, sa, masked_m, expected_m = lay["a"], lay["a_scale"], lay["masked_m"], shape.expected_m
        out_shape = (g, lay["max_m"], n)
        for name in ("deep_tile", "deepgemm", "loop"):
            outs[name] = _poisoned(out_shape)
        rows = torch.arange(lay["max_m"], device=DEVICE)
        plain = "deep_tile_plain" if args.signal else "deep_tile"
        if args.signal:
            import deep_tile.compat.deepgemm as compat

            outs[plain] = _poisoned(out_shape)
            signal = torch.zeros(g * ceil_div(lay["max_m"], compat.SIGNAL_BLOCK_M), dtype=torch.int32, device=DEVICE)
            fns["deep_tile"] = lambda: compat.m_grouped_fp8_gemm_nt_masked(
                (a, sa), (b, b_scale), outs["deep_tile"], masked_m, expected_m, enable_overlap=True, signal=signal)
            untouched["deep_tile"] = rows.unsqueeze(0) >= masked_m.unsqueeze(1)
        fns[plain] = lambda: deep_tile.m_grouped_fp8_gemm_masked(a, sa, b, b_scale, masked_m, expected_m,
                                                                 out=outs[plain])
        untouched[plain] = rows.unsqueeze(0) >= masked_m.unsqueeze(1)
        if use_dg and version == "latest":
            fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_masked((a, sa), (b, b_scale), outs["deepgemm"],
                                                                      masked_m, expected_m, **recipe)
        elif use_dg:
            fns["deepgemm"] = lambda: dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sa), (b, b_scale), outs["deepgemm"],
                                                                               masked_m, expected_m)
        ranges = [(e, (e, slice(0, c))) for e, c in enumerate(counts) if c]
        loop = _dense_loop(a, sa, b, b_scale, outs["loop"], ranges)
    else:
        pad = problem["padded"]
        a, sa, m_indices = pad["a"], pad["a_scale"], pad["m_indices"]
        names = ("deep_tile", "deepgemm", "loop") if shape.kind == "contiguous" else \
            ("deep_tile", "deep_tile_padded", "deepgemm", "loop")
        for name in names:
            rows = problem["offsets"]["a"].shape[0] if name == "deep_tile" and shape.kind == "offsets" else a.shape[0]
            outs[name] = _poisoned((rows, n))
        psum = args.psum and shape.kind == "contiguous"
        padded_name = "deep_tile" if shape.kind == "contiguous" and not psum else "deep_tile_padded"
        if psum:
            outs[padded_name] = _poisoned((a.shape[0], n))
            ends = torch.tensor([st + c for st, c in zip(pad["starts"], counts)], dtype=torch.int32, device=DEVICE)
            fns["deep_tile"] = lambda: deep_tile.m_grouped_fp8_gemm_psum(a, sa, b, b_scale, ends,
                                                                         out=outs["deep_tile"])
            untouched["deep_tile"] = m_indices < 0
        fns[padded_name] = lambda: deep_tile.m_grouped_fp8_gemm_contiguous(a, sa, b, b_scale, m_indices,
                                                                           out=outs[padded_name])
        untouched[padded_name] = m_indices < 0
        if shape.kind == "offsets":
            off = problem["offsets"]
            fns["deep_tile"] = lambda: deep_tile.m_grouped_fp8_gemm_offsets(off["a"], off["a_scale"], b, b_scale,
                                                                            off["offsets"], out=outs["deep_tile"])
        if use_dg and version == "latest" and psum:
            fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), outs["deepgemm"],
                                                                          ends, use_psum_layout=True, **recipe)
        elif use_dg and version == "latest":
            fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), outs["deepgemm"],
                                                                          m_indices, **recipe)
        elif use_dg:
            fns["deepgemm"] = lambda: dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sa), (b, b_scale),
                                                                                   outs["deepgemm"], m_indices)
        ranges = [(e, slice(st, st + c)) for e, (st, c) in enumerate(zip(pad["starts"], counts)) if c]
        loop = _dense_loop(a, sa, b, b_scale, outs["loop"], ranges)
    if getattr(args, "compat", False) and not args.signal and shape.kind != "offsets":
        import deep_tile.compat.deepgemm as compat

        out = outs["deep_tile"]
        if shape.kind == "masked":
            fns["deep_tile"] = lambda: compat.m_grouped_fp8_gemm_nt_masked((a, sa), (b, b_scale), out, masked_m,
                                                                           expected_m, **recipe)
        elif psum:
            fns["deep_tile"] = lambda: compat.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), out, ends,
                                                                               use_psum_layout=True, **recipe)
        else:
            fns["deep_tile"] = lambda: compat.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), out,
                                                                               m_indices, **recipe)
    if not use_dg:
        fns["deepgemm"] = "not importable" if dg is None else "disabled"
    if args.loop == "off":
        fns["loop"] = "off (--loop off)"
    elif args.loop == "eager":
        fns["loop"] = loop
    else:
        try:
            fns["loop"] = _graphed(loop)
        except Exception as e:  # noqa: BLE001 -- fall back to the eager loop, recorded
            torch.cuda.synchronize()
            fns["loop"] = loop
            fns["loop_graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    return fns, outs, untouched


# --------------------------------------------------------------------------------------------------
# Check, cost, one shape
# --------------------------------------------------------------------------------------------------

def checked_rows(counts, budget: int, seed: int) -> list:
    """Per expert, the real-row indices (within the expert) to check: the first and last and random
    others, about ``budget`` in all (at least the first and last of every non-empty expert)."""
    rng = random.Random(seed)
    per_expert = max(2, budget // max(1, sum(1 for c in counts if c)))
    picks = []
    for c in counts:
        if c <= per_expert:
            picks.append(list(range(c)))
        else:
            picks.append(sorted({0, c - 1} | set(rng.sample(range(1, c - 1), per_expert - 2))))
    return picks


def check_outputs(shape: Shape, problem: dict, outs: dict, untouched: dict, ran: dict, budget: int, seed: int):
    """``{name: {"calc_diff", "max_rel", "untouched_ok"}}`` for each library that ran, on the checked
    real rows against the float64 reference."""
    q, s = problem["real"]
    b, b_scale, counts = problem["b"], problem["b_scale"], problem["counts"]
    real_starts = [sum(counts[:i]) for i in range(len(counts))]
    picks = checked_rows(counts, budget, seed)
    refs, got = [], {name: [] for name in ran}
    for e, rows in enumerate(picks):
        if not rows:
            continue
        idx = torch.tensor(rows, device=DEVICE)
        src = real_starts[e] + idx
        refs.append(ref_fp8_gemm(q.view(torch.uint8)[src].view(torch.float8_e4m3fn), s[src], b[e], b_scale[e]))
        for name in ran:
            out = outs[name]
            if shape.kind == "masked":
                got[name].append(out[e, idx])
            elif shape.kind == "offsets" and name == "deep_tile":  # psum: the padded rows, as contiguous
                got[name].append(out[problem["offsets"]["starts"][e] + idx])
            else:
                got[name].append(out[problem["padded"]["starts"][e] + idx])
    ref = torch.cat(refs)
    result = {}
    for name in ran:
        out = torch.cat(got[name]).double()
        r = {"calc_diff": calc_diff(out, ref) if bool(torch.isfinite(out).all()) else float("nan"),
             "max_rel": max_rel_error(out, ref)}
        if name in untouched:
            r["untouched_ok"] = bool(torch.isnan(outs[name][untouched[name]]).all())
        result[name] = r
    return result


def useful_cost(shape: Shape, counts) -> tuple:
    """``(flops, bytes)``: FLOPs of the real rows, and compulsory traffic (real A rows and scales, the
    weights and scales of the experts with rows, the real output rows, the per-expert int32 counts)."""
    rows = sum(counts)
    kb = ceil_div(shape.k, SCALE_GROUP)
    active = sum(1 for c in counts if c)
    flops = 2.0 * rows * shape.n * shape.k
    weight_bytes = shape.n * shape.k + 4 * ceil_div(shape.n, SCALE_GROUP) * kb
    nbytes = rows * (shape.k + 4 * kb + 2 * shape.n) + active * weight_bytes
    return flops, nbytes + 4 * shape.num_groups


def run_shape(shape: Shape, args, alignment: int) -> dict:
    """Build, check and time one shape; returns its row record (errors are recorded, not raised)."""
    problem = make_problem(shape, args.seed, alignment)
    counts = problem["counts"]
    row = {**asdict(shape), "rows": sum(counts), "status": "ok"}
    if shape.kind != "masked":
        row["padded_rows"] = problem["padded"]["a"].shape[0]
    else:
        row["max_m"] = problem["masked"]["max_m"]
    fns, outs, untouched = library_fns(shape, problem, args)
    if "loop_graph_error" in fns:
        row["loop_graph_error"] = fns.pop("loop_graph_error")
    ran = runnable(fns)
    for name, fn in fns.items():
        if not callable(fn):
            row[f"{name}_error"] = fn
    checks = check_outputs(shape, problem, outs, untouched, ran, args.check_rows, args.seed)
    row["check"] = checks
    reasons = []
    for name in ("deep_tile", "deep_tile_padded", "deep_tile_plain"):
        if name in fns and name not in ran:
            row["status"] = "ERROR"
        c = checks.get(name)
        if c and not (c["calc_diff"] < DIFF_TOL and c["max_rel"] < REL_TOL):
            reasons.append(f"{name}: calc_diff {c['calc_diff']:.1e}, max_rel {c['max_rel']:.1e}")
        if c and not c.get("untouched_ok", True):
            reasons.append(f"{name}: wrote rows it must leave untouched")
    if reasons:
        row["status"], row["fail"] = "FAIL", "; ".join(reasons)
    flops, nbytes = useful_cost(shape, counts)
    row["flops"], row["bytes"] = flops, nbytes
    if ran:
        times = bench_round_robin(ran, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
        for name, us in times.items():
            row[name] = {"us": us, "tflops": flops / us / 1e6, "gbps": nbytes / us / 1e3}
    return row


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def _us(r, name):
    v = r.get(name)
    return v["us"] if isinstance(v, dict) else None


def speedup(r, other, mine="deep_tile"):
    """``other us / mine us`` (> 1: ``mine`` faster), or None."""
    a, b = _us(r, mine), _us(r, other)
    return b / a if a and b else None


def _fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _check_cell(r):
    c = r.get("check", {}).get("deep_tile")
    if "error" in r:
        return r["error"][:60]
    text = f"{r['status']} {c['calc_diff']:.1e}/{c['max_rel']:.1e}" if c else r["status"]
    return text + (f" ({r['fail']})" if "fail" in r else "")


def print_kind(kind, rows, copy_rate):
    """One table for the rows of ``kind``."""
    rows = [r for r in rows if r["kind"] == kind]
    if not rows:
        return
    print(f"\n{kind}:")
    headers = ["G", "m/grp", "N", "K", "max_m" if kind == "masked" else "padded", "rows", "deep_tile us", "TFLOPS"]
    if kind == "masked":
        headers += ["GB/s", "%HBM"]
    if kind == "offsets":
        headers += ["padded us", "DG(padded) us", "loop us", "vs padded", "vs DG", "vs loop", "check"]
    else:
        alt = any(_us(r, "deep_tile_padded") or _us(r, "deep_tile_plain") for r in rows)
        headers += ["DG us"] + (["alt us", "vs alt"] if alt else []) + ["loop us", "vs DG", "vs loop", "check"]
    cells = []
    for r in rows:
        dt = r.get("deep_tile") if isinstance(r.get("deep_tile"), dict) else {}
        extent = r.get("max_m") if kind == "masked" else r.get("padded_rows")
        line = [r["num_groups"], r["expected_m"], r["n"], r["k"], extent or "-", r.get("rows", "-"),
                _fmt(dt.get("us"), ".1f"), _fmt(dt.get("tflops"), ".0f")]
        if kind == "masked":
            gbps = dt.get("gbps")
            line += [_fmt(gbps, ".0f"), _fmt(gbps * 1e9 / copy_rate * 100 if gbps and copy_rate else None, ".0f")]
        if kind == "offsets":
            line += [_fmt(_us(r, "deep_tile_padded"), ".1f"), _fmt(_us(r, "deepgemm"), ".1f"),
                     _fmt(_us(r, "loop"), ".1f"), _fmt(speedup(r, "deep_tile_padded"), ".3f")]
        else:
            line += [_fmt(_us(r, "deepgemm"), ".1f")]
            if alt:
                other = "deep_tile_padded" if _us(r, "deep_tile_padded") else "deep_tile_plain"
                line += [_fmt(_us(r, other), ".1f"), _fmt(speedup(r, other), ".3f")]
            line += [_fmt(_us(r, "loop"), ".1f")]
        line += [_fmt(speedup(r, "deepgemm"), ".3f"), _fmt(speedup(r, "loop"), ".3f"), _check_cell(r)]
        cells.append(line)
    print_table(headers, cells, ">" * (len(headers) - 1) + "<")


def summary_lines(rows, env) -> list:
    """Geomean speedups per kind (deep_tile over each other library)."""
    lines = []
    others = (("deepgemm", f"DeepGEMM {env.get('deepgemm')}"), ("loop", "fp8_gemm loop"),
              ("deep_tile_padded", "deep_tile padded contiguous (m_indices)"),
              ("deep_tile_plain", "deep_tile masked without signals"))
    for kind in KINDS:
        for other, label in others:
            values = [speedup(r, other) for r in rows if r["kind"] == kind and speedup(r, other)]
            if values:
                lines.append(f"{kind}: deep_tile vs {label}: geomean {geomean(values):.3f}x over {len(values)} shapes "
                             f"(min {min(values):.3f}, max {max(values):.3f})")
        errors = [r["check"]["deep_tile"]["calc_diff"] for r in rows
                  if r["kind"] == kind and r.get("check", {}).get("deep_tile")]
        if errors:
            lines.append(f"{kind}: max calc_diff of deep_tile vs float64 over {len(errors)} shapes: {max(errors):.2e}")
    return lines


def main(argv=None) -> int:
    """Run the benchmark; exit code 1 when a deep_tile check failed or a deep_tile call errored."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_grouped: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    env = environment()
    dg, _ = deepgemm_version()
    alignment = deep_tile.get_m_alignment_for_contiguous_layout()
    if dg is not None and not args.no_deepgemm:
        alignment = math.lcm(alignment, dg_alignment(dg))
    env.update({"alignment": alignment, "iters": args.iters, "loop": args.loop, "check_rows": args.check_rows,
                "psum": args.psum, "signal": args.signal})
    print(environment_text(env))
    copy_rate = copy_bandwidth()
    env["copy_bytes_per_s"] = copy_rate
    print(f"HBM copy rate (read + write of 1 GiB): {copy_rate / 1e12:.2f} TB/s; contiguous alignment {alignment}; "
          f"loop: {args.loop}")
    print(f"timing: round-robin (shuffled), L2 flush + sleep pad, CUDA events, median of {args.iters}; "
          f"{len(args.shape_list)} shapes")
    rows = []
    start = time.perf_counter()
    for shape in args.shape_list:
        try:
            rows.append(run_shape(shape, args, alignment))
        except Exception as e:  # noqa: BLE001 -- one bad shape must not kill the table
            rows.append({**asdict(shape), "status": "ERROR", "error": f"{type(e).__name__}: {e}".replace("\n", " ")})
        r = rows[-1]
        mine = _us(r, "deep_tile")
        ratios = " ".join(f"{name} {speedup(r, name):.3f}x" for name in ("deepgemm", "deep_tile_padded",
                                                                          "deep_tile_plain", "loop")
                          if speedup(r, name) is not None)
        print(f"  [{time.perf_counter() - start:6.1f} s] {shape.kind} {shape.num_groups}x{shape.expected_m} "
              f"{shape.n}x{shape.k}: {r['status']} deep_tile {_fmt(mine, '.1f')} us {ratios}", flush=True)
        if args.json:  # saved as it goes: a run cut short keeps its shapes
            with open(args.json, "w") as f:
                json.dump({"env": env, "rows": rows, "partial": True}, f, indent=1)
        torch.cuda.empty_cache()
    for kind in args.kinds:
        print_kind(kind, rows, copy_rate)
    print("speedups: other us / deep_tile us (> 1: deep_tile faster); check: status calc_diff/max_rel vs float64")
    summary = summary_lines(rows, env)
    print("\n".join(summary))
    for r in rows:
        notes = {k: v for k, v in r.items() if k.endswith("_error")}
        if notes:
            print(f"  {r['kind']} {r['num_groups']}x{r['expected_m']} {r['n']}x{r['k']}: {notes}")
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "rows": rows, "summary": summary}, indent=1))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} shape(s) FAILED or errored: "
              f"{[(r['kind'], r['num_groups'], r['expected_m'], r['n'], r['k']) for r in failed]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
