"""Per-CTA timeline of a decode chain (GPU; a measurement tool, not a test).

    python tools/trace_chain.py --m 64                 # the dense chain of benchmarks/bench_decode.py
    python tools/trace_chain.py --m 64 --pdl off --defines DT_L2_PREFETCH_KBLOCKS=0
    python tools/trace_chain.py --m 1 --replays 5     # also: is each GEMM's CTA tail the same CTAs each time?

Builds every GEMM of the dense chain (two layers, each with its own weights) with ``DT_TRACE`` set
(include/deep_tile/debug/trace.cuh: each CTA stores the global timer at its entry, after the
grid-dependency wait, when its first stage's data has landed, when its producer has issued its
last load, when its consumers' k-loop is done, in split-K kernels when the cluster barrier after
the partials' write has passed, and at its end, into its module's buffer), captures
the chain in a CUDA graph, replays it after an L2 flush and prints, for each GEMM of the second
layer, those points in microseconds (min / median / max over its CTAs) after the end of its
predecessor's last CTA; the first GEMM's are after its own first wait returned. Below, for each
split-K GEMM, its CTAs' epilogue in two parts: from the k-loop's end to the cluster barrier's
pass (the wait for the slowest peer, and the barrier's own cost) and from there to the end (the
reduction and the second barrier), the median and that of the CTA that ends last. Each GEMM gets its
own DT_TRACE value, so its own module and buffer; the second layer's launch writes last. Without
DT_TRACE the kernels are instruction for instruction the product's (tools/sass_diff.py); with it
the decode chain's 64-row tiles compile without spills, while 256-row or 256-wide tiles spill, so
their timelines would not be the product's.

With ``--replays N`` (N >= 2) the graph is replayed N times more and, for each GEMM, the spread of
its CTAs' k-loop ends (max - min, microseconds after the GEMM's first wait returned, mean over the
replays) is printed beside the mean correlation of the CTAs' k-loop ends between replays
(:func:`tail_consistency`): near 1, the same CTAs end last every time (their work differs, e.g.
one tile more); near 0, the tail is the luck of the replay (how DRAM served each SM), which only
work handed out at run time could even out.
"""
import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import deep_tile  # noqa: E402
from bench_decode import DENSE_NK, Gemm, make_operands  # noqa: E402
from deep_tile.gemm import launch, planner  # noqa: E402
from deep_tile.gemm.checks import check_fp8_gemm_args  # noqa: E402
from deep_tile.device import get_num_sms  # noqa: E402
from deep_tile.testing.timing import L2Flush, capture_graph  # noqa: E402

POINTS = ("entry", "waited", "first_data", "last_issue", "loop_done", "end", "published")
"""The points of a CTA's row in the trace buffer, in slot order (include/deep_tile/debug/trace.cuh);
``published`` only in split-K kernels."""
SHOWN = ("entry", "waited", "first_data", "last_issue", "loop_done", "published", "end")
"""The same in the order of a CTA's life, as the table prints them."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--pdl", choices=("on", "off"), default="on")
    p.add_argument("--flush", choices=("write", "read"), default="write")
    p.add_argument("--defines", default="", help="extra defines, NAME=V[,NAME=V]")
    p.add_argument("--replays", type=int, default=1,
                   help="N >= 2: N more replays, and each GEMM's tail spread and run-to-run correlation")
    args = p.parse_args(argv)
    if args.replays < 1:
        p.error(f"--replays must be >= 1; got {args.replays}")
    args.extra = {}
    for item in filter(None, args.defines.split(",")):
        name, value = item.split("=")
        args.extra[name] = int(value)
    return args


def replay(graph, flush: L2Flush) -> None:
    flush()
    graph.replay()
    torch.cuda.synchronize()


def read_trace(kernel) -> list:
    """The CTAs' points of the last launch of ``kernel`` (a deep_tile.jit.runtime.Kernel)."""
    from cuda.bindings import driver as cu

    err, dptr, size = cu.cuLibraryGetGlobal(kernel.library, b"dt_trace_buf")
    if int(err) != 0:
        raise RuntimeError(f"cuLibraryGetGlobal(dt_trace_buf): {err}")
    host = np.zeros(size // 8, dtype=np.uint64)
    (err,) = cu.cuMemcpyDtoH(host.ctypes.data, dptr, size)
    if int(err) != 0:
        raise RuntimeError(f"cuMemcpyDtoH: {err}")
    rows = host.reshape(-1, 8)
    return [{"cta": i, "sm": int(r[7]), **{p: int(v) for p, v in zip(POINTS, r)}} for i, r in enumerate(rows)
            if r[POINTS.index("end")]]


def report(kernels: list) -> None:
    """Print the table of the module docstring for ``kernels`` (chain order)."""
    print(f"{'GEMM':<11} {'CTAs':>4} " + " ".join(f"{p:>20}" for p in SHOWN))
    prev_end = min(c["waited"] for c in kernels[0]["ctas"])
    for kern in kernels:
        cells = []
        for point in SHOWN:
            values = [(c[point] - prev_end) / 1e3 for c in kern["ctas"] if c[point]]
            cells.append(f"{min(values):6.1f}/{statistics.median(values):6.1f}/{max(values):6.1f}" if values else "-")
        print(f"{kern['n']:>5}x{kern['k']:<5} {len(kern['ctas']):>4} " + " ".join(f"{c:>20}" for c in cells))
        prev_end = max(c["end"] for c in kern["ctas"])
    split = [kern for kern in kernels if any(c["published"] for c in kern["ctas"])]
    if split:
        print("\nsplit-K epilogues, us per CTA (median / the CTA that ends last): k-loop done -> partials "
              "published (the cluster barrier: the wait for the slowest peer), published -> end")
        for kern in split:
            gaps = epilogue_gaps(kern["ctas"])
            print(f"{kern['n']:>5}x{kern['k']:<5} " + "   ".join(f"{name} {med:4.2f} / {last:4.2f}"
                                                       for name, (med, last) in gaps.items()))


def epilogue_gaps(ctas: list) -> dict:
    """Per split-K CTA, the microseconds from its k-loop's end to the cluster barrier's pass and from
    there to its end: ``{name: (median over the CTAs, that of the CTA that ends last)}``."""
    ctas = [c for c in ctas if c["published"]]
    last = max(ctas, key=lambda c: c["end"])
    pairs = {"barrier": ("loop_done", "published"), "reduce": ("published", "end")}
    return {name: (statistics.median((c[b] - c[a]) / 1e3 for c in ctas), (last[b] - last[a]) / 1e3)
            for name, (a, b) in pairs.items()}


def tail_consistency(runs: list) -> tuple:
    """(spread, correlation) of one GEMM's CTAs over replays: ``runs`` holds, per replay, the
    CTAs' points (read_trace). Spread: max - min of the CTAs' ``loop_done`` after the replay's
    first ``waited``, in microseconds, mean over the replays; correlation: mean Pearson
    correlation of the CTAs' ``loop_done`` (by CTA index) between every two replays (nan when the
    ends do not vary)."""
    ends = []
    for ctas in runs:
        first = min(c["waited"] for c in ctas)
        by_cta = {c["cta"]: (c["loop_done"] - first) / 1e3 for c in ctas}
        ends.append([by_cta[i] for i in sorted(by_cta)])
    ends = np.array(ends, dtype=np.float64)
    spread = float(np.mean(ends.max(axis=1) - ends.min(axis=1)))
    if len(ends) < 2 or np.any(ends.std(axis=1) == 0):
        return spread, float("nan")
    corr = np.corrcoef(ends)
    return spread, float(np.mean(corr[np.triu_indices(len(ends), 1)]))


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("trace_chain: needs a CUDA GPU", file=sys.stderr)
        return 2
    deep_tile.set_pdl(args.pdl == "on")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.m)
    calls, kernels = [], []
    for layer in range(2):
        for index, (n, k) in enumerate(DENSE_NK):
            ops = make_operands(Gemm(f"{n}x{k}", n, k), args.m, gen)
            out = torch.empty((args.m, n), dtype=torch.bfloat16, device="cuda")
            defines = {**args.extra, "DT_TRACE": index + 1}
            calls.append(lambda o=ops, out=out, d=defines: launch.run(o["a"], o["a_scale"], o["b"], o["b_scale"],
                                                                     out, extra_defines=d))
            if layer == 0:
                problem = check_fp8_gemm_args(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"], out)
                plan = planner.plan_for_config(planner.select(problem, get_num_sms()), problem, defines)
                kernels.append({"n": n, "k": k, "kernel": plan.kernel, "config": plan.config.label})
    graph = capture_graph(lambda: [call() for call in calls])
    flush = L2Flush(args.flush)
    replay(graph, flush)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):  # clocks up (an idle GPU starts at a low SM clock)
        x @ x
    replay(graph, flush)
    for kern in kernels:
        kern["ctas"] = read_trace(kern["kernel"])
    print(f"M={args.m}, PDL {args.pdl}, flush {args.flush}, defines {args.extra}; "
          + ", ".join(f"{k['n']}x{k['k']} {k['config']}" for k in kernels))
    report(kernels)
    if args.replays >= 2:
        runs = []
        for _ in range(args.replays):
            replay(graph, flush)
            runs.append([read_trace(kern["kernel"]) for kern in kernels])
        print(f"\nk-loop ends over {args.replays} replays: spread (max - min, us) and run-to-run correlation of the CTAs'")
        for index, kern in enumerate(kernels):
            spread, corr = tail_consistency([run[index] for run in runs])
            print(f"{kern['n']:>5}x{kern['k']:<5} spread {spread:5.2f} us  correlation {corr:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
