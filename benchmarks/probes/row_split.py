"""A dense GEMM cut into two launches along M, against the one launch the selector picks (needs a GPU).

    python benchmarks/probes/row_split.py
    python benchmarks/probes/row_split.py --shapes 4096,2112,7168 --iters 20
    python benchmarks/probes/row_split.py --shapes 4096,2112,7168 --sustained 3   # and the SM clock of each

Why: a persistent launch of whole tiles leaves part of its last round of tiles idle (352 tiles of
128x192 at 4096x2112x7168 run 3 rounds on 118 CTAs: 11% of the SM-rounds empty). Cutting the
output's rows in two, the first ``M1`` rows (whole rounds of the pick's tiles on all SMs) and the
rest (few tiles, run by a configuration that spreads them over the SMs: split-K or narrower tiles),
lets the second launch fill the idle SMs. This probe measures that with public calls on row
slices (``a[:M1]``, ``a_scale[:M1]``, ``out[:M1]`` and the rest), no kernel change, so the gain and
the cost of the second launch are known before anything is built.

For each shape: the pick as one launch; for each cut (``M1`` rows giving the pick's tiles in ``R``
and ``R - 1`` whole rounds) and each configuration of the remaining rows (the selector's pick for
them, its model's top candidates and the pick's tile split along K by 2..4), the two launches.
Every variant is captured in a CUDA graph (so host time between the launches is not timed) and
timed round-robin with DeepGEMM latest's one launch where importable (L2 flushed, median of
``--iters``). Every variant's output is checked against the float64 reference (NaN-poisoned).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import bench_fp8_gemm as bench  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile.common import ceil_div  # noqa: E402
from deep_tile.gemm.launch import run  # noqa: E402
from deep_tile.gemm.layouts import get_tma_aligned_a_scale  # noqa: E402
from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.select import rank_candidates, select_config  # noqa: E402
from deep_tile.select.cost import grid_size  # noqa: E402
from deep_tile.select.selector import config_from_estimate  # noqa: E402
from deep_tile.testing.cache_fill import fill_cache  # noqa: E402
from deep_tile.testing.configs import format_config, parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, sustained  # noqa: E402

DEFAULT_SHAPES = ("4096,2112,7168", "4096,24576,1536", "4096,7168,16384", "4096,4096,7168", "4096,7168,2048",
                  "8192,8192,8192", "2048,7168,2048", "4096,10240,8192")


def cuts(m: int, n: int, pick, num_sms: int) -> list:
    """Row counts M1 (multiples of the pick's block_m, 0 < M1 < m) whose tiles fill whole rounds on num_sms."""
    n_blocks = ceil_div(n, pick.block_n)
    rounds = ceil_div(m, pick.block_m) * n_blocks // num_sms
    found = []
    for r in (rounds, rounds - 1):
        m1 = pick.block_m * (r * num_sms // n_blocks)
        if 0 < m1 < m and m1 not in found:
            found.append(m1)
    return found


def tail_configs(m2: int, n: int, k: int, pick, num_sms: int, top: int) -> dict:
    """label -> KernelConfig for the remaining m2 rows."""
    found = {}
    problem = Problem(m2, n, k)
    config = select_config(problem, num_sms)
    found.setdefault(format_config(config), config)
    for e in rank_candidates(problem, num_sms)[:top]:
        config = config_from_estimate(problem, e, num_sms)
        found.setdefault(format_config(config), config)
    for split in (2, 3, 4):
        try:
            config = parse_config(f"{pick.block_m}x{pick.block_n}:k{split}", m2, n, num_sms)
        except ValueError:
            continue
        found.setdefault(format_config(config), config)
    return found


def all_configs(m: int, n: int, k: int, args) -> list:
    """(Problem, KernelConfig) of every launch the probe makes on one shape."""
    pick = select_config(Problem(m, n, k), args.num_sms)
    found = [(Problem(m, n, k), pick)]
    for m1 in cuts(m, n, pick, args.num_sms):
        tiles1 = ceil_div(m1, pick.block_m) * ceil_div(n, pick.block_n)
        found.append((Problem(m1, n, k), dataclasses.replace(pick, grid_size=grid_size(tiles1, args.num_sms,
                                                                                       pick.num_multicast))))
        found += [(Problem(m - m1, n, k), c) for c in tail_configs(m - m1, n, k, pick, args.num_sms, args.top).values()]
    return found


def compile_all(args) -> int:
    """Build every kernel of the probe into the disk cache with --jobs processes (no GPU needed)."""
    todo = {}
    for text in args.shapes:
        m, n, k = (int(v) for v in text.split(","))
        for problem, config in all_configs(m, n, k, args):
            config = config.for_problem(problem)
            todo.setdefault(tuple(sorted(config.defines().items())), f"{problem.m}x{n}x{k} {format_config(config)}")
    return 1 if fill_cache(todo, args.jobs) else 0


def graph_of(fn):
    """fn captured in a CUDA graph (after one eager call that compiles its kernels): the replay callable."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def one_shape(m: int, n: int, k: int, args) -> dict:
    num_sms = args.num_sms
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout="tma")
    sa = get_tma_aligned_a_scale(sa)
    ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
    pick = select_config(Problem(m, n, k), num_sms)
    variants = {}  # label -> (out, fn)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    variants["pick " + format_config(pick)] = (out, lambda out=out: run(a, sa, b, sb, out, config=pick))
    for m1 in cuts(m, n, pick, num_sms):
        m2 = m - m1
        tiles1 = ceil_div(m1, pick.block_m) * ceil_div(n, pick.block_n)
        head = dataclasses.replace(pick, grid_size=grid_size(tiles1, num_sms, pick.num_multicast))
        for label, tail in tail_configs(m2, n, k, pick, num_sms, args.top).items():
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

            def fn(out=out, m1=m1, head=head, tail=tail):
                run(a[:m1], sa[:m1], b, sb, out[:m1], config=head)
                run(a[m1:], sa[m1:], b, sb, out[m1:], config=tail)

            variants[f"cut {m1} + {label}"] = (out, fn)
    row = {"shape": f"{m}x{n}x{k}", "pick": format_config(pick), "checks": {}, "us": {}}
    fns = {}
    for name, (out, fn) in variants.items():
        try:
            fns[name] = graph_of(fn)
        except Exception as error:  # a configuration the kernel refuses: reported, not timed
            row["checks"][name] = {"error": str(error)[:200]}
            continue
        row["checks"][name] = {"diff": calc_diff(out.double(), ref), "rel": max_rel_error(out, ref),
                               "nan": int(torch.isnan(out).sum())}
    dg, version = bench.deepgemm_version()
    if dg is not None and version == "latest":
        dg_out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, sa), (b, sb), dg_out, recipe=(1, 128, 128),
                                                 disable_ue8m0_cast=True)
    row["us"] = {name: round(t, 2) for name, t in bench_round_robin(fns, warmup=3, iters=args.iters,
                                                                    shuffle_seed=0).items()}
    if args.sustained:  # the pick and the fastest cut back to back, with the SM clock and power
        pick_name = next(name for name in row["us"] if name.startswith("pick"))
        cut_names = sorted((name for name in row["us"] if name.startswith("cut")), key=row["us"].get)[:1]
        row["sustained"] = {name: sustained(fns[name], args.sustained) for name in [pick_name] + cut_names}
    row["ok"] = all("error" in c or (c["nan"] == 0 and c["diff"] < 1e-3 and c["rel"] < 1e-2)
                    for c in row["checks"].values())
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), metavar="M,N,K")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--top", type=int, default=5, help="the model's N best candidates for the remaining rows")
    p.add_argument("--num-sms", type=int, default=132)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                   help="also run the pick and the fastest cut back to back for SECONDS each (SM clock, power)")
    p.add_argument("--compile-only", action="store_true", help="fill the kernel cache and stop (no GPU needed)")
    p.add_argument("--jobs", type=int, default=16)
    args = p.parse_args()
    if args.compile_only:
        return compile_all(args)
    rows, ok = [], True
    for text in args.shapes:
        m, n, k = (int(v) for v in text.split(","))
        row = one_shape(m, n, k, args)
        rows.append(row)
        ok &= row["ok"]
        us = row["us"]
        pick_name = next(name for name in us if name.startswith("pick"))
        print(f"{row['shape']}: {pick_name} {us[pick_name]:.1f} us"
              + (f", DeepGEMM {us['deepgemm']:.1f}" if "deepgemm" in us else "") + f", checks ok {row['ok']}",
              flush=True)
        for name, t in sorted(us.items(), key=lambda item: item[1]):
            if name.startswith("cut"):
                print(f"    {name:48s} {t:8.1f} us  pick / this {us[pick_name] / t:.3f}"
                      + (f"  DG / this {us['deepgemm'] / t:.3f}" if "deepgemm" in us else ""), flush=True)
        for name, s in row.get("sustained", {}).items():
            print(f"    sustained {name}: {s['us']:.1f} us at {s['mhz']:.0f} MHz, {s['watts']:.0f} W: "
                  f"{s['us'] * s['mhz'] / 1e3:.1f} k cycles ({s['samples']} samples)", flush=True)
        for name, check in row["checks"].items():
            if "error" in check:
                print(f"    {name}: not run: {check['error']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("every output correct:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
