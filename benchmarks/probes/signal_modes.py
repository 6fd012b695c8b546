"""The signalling masked GEMM's modes beside the plain masked GEMM and DeepGEMM's (needs a GPU).

    python benchmarks/probes/signal_modes.py --shapes 32,64,7168,2048 6,1024,4096,7168 --iters 15

For each shape (G experts of about M rows, N, K; benchmarks/bench_grouped.py's random problem) it
runs deep_tile's plain masked GEMM, the signalling kernel in each ``DT_SIGNAL`` mode
(deep_tile.kernels.fp8_gemm.SIGNAL_MODES: 1 raised by the storing thread right after the store,
2 raised by a producer warp once the slab is handed over at the next store) and, when importable, DeepGEMM latest's masked GEMM, round-robin with the L2
flushed (testing.timing.bench_round_robin), and checks each signalling run first: NaN-poisoned
output against the plain kernel's (bitwise: the same per-element k order), every real block's
counter equal to the threshold and every other counter 0. Prints one row per shape and, with
``--json``, writes them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import bench_grouped as bg  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile.gemm import launch, planner  # noqa: E402
from deep_tile.gemm.checks import check_grouped_args  # noqa: E402
from deep_tile.common import ceil_div  # noqa: E402
from deep_tile.device import get_num_sms  # noqa: E402
from deep_tile.kernels import fp8_gemm as family  # noqa: E402
from deep_tile.gemm.problem import ProblemKind  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402


def signal_fn(a, sa, b, b_scale, masked_m, expected_m, out, signal, mode, max_block_n, extra_defines=None):
    """A zero-argument launch of the signalling kernel in ``mode`` (built with ``extra_defines``
    added, measurement overrides), its (block_m, threshold) and label."""
    problem = check_grouped_args(ProblemKind.GROUPED_MASKED, a, sa, b, b_scale, masked_m, out, expected_m)
    problem, operands = launch.grouped_operands(problem, a, sa, b, b_scale, masked_m, out)
    plan = planner.plan_signal(problem, get_num_sms(), max_block_n, mode)
    if extra_defines:
        from deep_tile.jit.loader import get_kernel

        kernel = get_kernel(family.ENTRY, {**plan.config.defines(), family.SIGNAL_DEFINE: mode, **family.probe_defines(extra_defines)},
                            family.SIGNAL_SYMBOL)
        plan = planner.Plan(plan.problem, plan.config, kernel, plan.args, plan.grid, plan.cluster)
    return ((lambda: launch.launch(plan, operands + (signal,), a.device)),
            family.signal_rows(plan.config), family.signal_threshold(plan.config, problem.n), plan.config.label)


def one_shape(shape, args) -> dict:
    problem = bg.make_problem(shape, args.seed, 128)
    lay = problem["masked"]
    a, sa, masked_m, max_m = lay["a"], lay["a_scale"], lay["masked_m"], lay["max_m"]
    b, b_scale, counts = problem["b"], problem["b_scale"], problem["counts"]
    g, n = shape.num_groups, shape.n
    outs = {"plain": torch.full((g, max_m, n), float("nan"), dtype=torch.bfloat16, device="cuda")}
    fns = {"plain": lambda: deep_tile.m_grouped_fp8_gemm_masked(a, sa, b, b_scale, masked_m, shape.expected_m,
                                                                out=outs["plain"])}
    fns["plain"]()
    torch.cuda.synchronize()
    row = {"shape": f"{g}x{shape.expected_m} {n}x{shape.k}", "max_m": max_m, "checks": {}, "labels": {}}
    variants = [(mode, {}) for mode in args.modes] + [
        (2, dict(item.split("=") for item in text.split("+"))) for text in args.defines]
    for mode, extra in variants:
        name = f"mode{mode}" + "".join(f"+{k}={v}" for k, v in extra.items())
        outs[name] = torch.full_like(outs["plain"], float("nan"))
        signal = torch.zeros(g * ceil_div(max_m, 64) + 3, dtype=torch.int32, device="cuda")
        fn, block_m, threshold, label = signal_fn(a, sa, b, b_scale, masked_m, shape.expected_m, outs[name], signal,
                                                  mode, args.max_block_n, {k: int(v) for k, v in extra.items()})
        fn()
        torch.cuda.synchronize()
        want = torch.zeros_like(signal)
        per = ceil_div(max_m, block_m)
        for e, c in enumerate(counts):
            want[e * per:e * per + ceil_div(c, block_m)] = threshold
        real = torch.arange(max_m, device="cuda").unsqueeze(0) < masked_m.unsqueeze(1)
        same = bool(torch.equal(outs[name][real], outs["plain"][real]))
        untouched = bool(torch.isnan(outs[name][~real].float()).all())
        flags_ok = bool(torch.equal(signal, want))
        row["checks"][name] = {"bitwise_equal_plain": same, "padding_untouched": untouched, "signals_exact": flags_ok}
        row["labels"][name] = label
        fns[name] = fn
    dg, version = bg.deepgemm_version()
    if dg is not None and version == "latest":
        outs["deepgemm"] = torch.empty_like(outs["plain"])
        fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_masked((a, sa), (b, b_scale), outs["deepgemm"], masked_m,
                                                                  shape.expected_m, recipe=(1, 128, 128),
                                                                  disable_ue8m0_cast=True)
    times = bench_round_robin(fns, warmup=3, iters=args.iters, shuffle_seed=args.seed)
    row["us"] = {name: round(t, 1) for name, t in times.items()}
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["32,64,7168,2048", "32,192,7168,2048", "6,1024,4096,7168",
                                                   "8,16,4096,7168"], metavar="G,M,N,K")
    p.add_argument("--modes", type=int, nargs="+", default=list(family.SIGNAL_MODES))
    p.add_argument("--max-block-n", type=int, default=256)
    p.add_argument("--defines", nargs="*", default=[], metavar="NAME=V[+NAME=V]",
                   help="more mode-2 variants, each built with these defines added (measurement overrides)")
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    rows, ok = [], True
    for text in args.shapes:
        g, m, n, k = (int(v) for v in text.split(","))
        row = one_shape(bg.Shape("masked", g, m, n, k), args)
        rows.append(row)
        ok &= all(all(c.values()) for c in row["checks"].values())
        plain = row["us"]["plain"]
        cells = "  ".join(f"{name} {us:.1f} ({plain / us:.3f})" for name, us in row["us"].items())
        print(f"{row['shape']:>20}  {cells}  labels {row['labels']}  checks {'ok' if ok else row['checks']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
