"""Forced tiles of the dense 1D1D weight gradient accumulated in place, beside DeepGEMM and cuBLAS.

    python benchmarks/probes/wgrad_configs.py --compile-only --jobs 16     # fill the cache (no GPU)
    python benchmarks/probes/wgrad_configs.py --configs auto,128x128,256x128:mcA --top 4
    python benchmarks/probes/wgrad_configs.py --configs auto,auto+DT_B_SCALE_RING=0 --bitwise   # a define's A/B

For each weight gradient ``dW[N, K] += dY^T X`` of benchmarks/bench_training.py's wgrad set (M = N,
N = K, K = the tokens; ``--shapes m,n`` for others) it times deep_tile's kernel for every tile of
``--configs`` (``auto``: the selector's pick; a text of deep_tile.testing.configs; ``+NAME=VALUE``
adds a define to the build) and the selector
model's ``--top`` candidates, each as the launcher builds it for this output variant (FP32 D in
place: the stages that fit beside its FP32 staging, KernelConfig.for_problem), round-robin with
DeepGEMM latest's in-place 1D1D GEMM and cuBLAS blockwise (writes only), L2 flushed
(testing.timing.bench_round_robin). Every tile's output from the same start is checked against
the float64 reference (calc_diff < 1e-6) before it is timed. Why: the selector ranks the bf16
tiles and the in-place variant then gives up stages to its staging, so the pick may not be the
variant's best tile.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.select import rank_candidates  # noqa: E402
from deep_tile.select.api import get_problem_config  # noqa: E402
from deep_tile.select.selector import config_from_estimate  # noqa: E402
from deep_tile.testing.cache_fill import fill_cache  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402

WGRAD_CONFIGS = ("auto,128x144:gM:u6,128x144:mcB:u6,128x128:b1:u6,128x128:b1:mcB:u6,128x160:gM:u6,128x160:mcB:u6,"
                 "128x112:b1:gM:u6,256x128:u6,256x128:mcA:u6,128x256:w128:gM:u6,128x192:gM:u6")


def wgrad_problem(m: int, n: int, tokens: int) -> Problem:
    return Problem(m, n, tokens, out_dtype="float32", c_dtype="out", b_scale_1d=True)


def configs_for(m: int, n: int, tokens: int, args) -> list:
    """``(text, KernelConfig, extra defines, label)`` tuples, as launched, without duplicates; a
    text ``CONFIG+NAME=VALUE`` adds a define to that tile's build (grouped_configs.split_defines)."""
    from grouped_configs import split_defines

    problem = wgrad_problem(m, n, tokens)
    found = {}
    for text in args.configs.split(","):
        head, extra = split_defines(text)
        try:
            config = get_problem_config(problem, args.num_sms) if head == "auto" else parse_config(
                head, m, n, args.num_sms)
            config = config.for_problem(problem)
        except ValueError as error:
            print(f"skip {text} on {m}x{n}x{tokens}: {error}", file=sys.stderr)
            continue
        label = config.label + "".join(f"+{key}={value}" for key, value in extra.items())
        found.setdefault(label, (text, config, extra, label))
    for estimate in rank_candidates(problem, args.num_sms)[:args.top]:
        config = config_from_estimate(problem, estimate, args.num_sms).for_problem(problem)
        found.setdefault(config.label, (f"top:{estimate.candidate.label}", config, {}, config.label))
    return list(found.values())


def compile_all(shapes: list, args) -> int:
    todo = {}
    for m, n in shapes:
        for _, config, extra, label in configs_for(m, n, args.tokens, args):
            todo.setdefault(tuple(sorted({**config.defines(), **extra}.items())), label)
    return 1 if fill_cache(todo, args.jobs) else 0


def one_shape(m: int, n: int, args) -> dict:
    import torch

    import bench_training as bt
    from grouped_configs import first_call
    from deep_tile.gemm.launch import run_acc
    from deep_tile.reference import ref_fp8_gemm_1d1d
    from deep_tile.testing.numeric import calc_diff
    from deep_tile.testing.timing import bench_round_robin

    tokens = args.tokens
    a, a_scale, b, b_scale, a_tma, b_tma = bt.wgrad_operands(m, n, tokens, args.seed)
    start = torch.randn((m, n), device="cuda", dtype=torch.float32)
    want = start.double() + ref_fp8_gemm_1d1d(a, a_scale, b, b_scale)
    d = start.clone()
    fns, bad = {}, []
    first = None  # the first tile's output: every other one must equal it bitwise
    for text, config, extra, label in configs_for(m, n, tokens, args):
        def fn(c=config, x=extra):
            run_acc(a, a_tma, b, b_tma, None, True, d, config=c, b_scale_1d=True, extra_defines=x or None)
        d.copy_(start)
        if not first_call(fn, label, bad):
            continue
        diff = calc_diff(d.double(), want)
        if not diff < 1e-6:
            bad.append(f"{label}: calc_diff {diff:.3g} against float64")
            continue
        if args.bitwise:
            if first is None:
                first = d.clone()
            elif not torch.equal(d, first):
                bad.append(f"{label}: differs bitwise from the first tile's output")
                continue
        fns[label + (" (pick)" if text.startswith("auto") and not extra else "")] = fn
    cublas = bt._cublas_1d1d(a, a_scale, b, b_scale)
    if callable(cublas):
        fns["cublas"] = cublas
    dg = None if args.no_deepgemm else bt.deepgemm()
    if dg is not None:
        fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, a_tma), (b, b_tma), d, c=d, recipe=(1, 1, 128))
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
    best = min((times[k] for k in ("cublas", "deepgemm") if k in times), default=None)
    print(f"wgrad {m}x{n}, {tokens} tokens", flush=True)
    for name, us in sorted(times.items(), key=lambda kv: kv[1]):
        ratio = f"  faster baseline / this {best / us:.3f}" if best else ""
        print(f"  {name:>34} {us:9.1f} us {2.0 * m * n * tokens / us / 1e6:7.1f} TFLOPS{ratio}", flush=True)
    for line in bad:
        print(f"  ! {line}", flush=True)
    return {"m": m, "n": n, "tokens": tokens, "us": times, "refused": bad}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="*", default=None, metavar="M,N", help="default: bench_training's wgrad set")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--configs", default=WGRAD_CONFIGS)
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--num-sms", type=int, default=132)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-deepgemm", action="store_true")
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--json", type=Path)
    p.add_argument("--bitwise", action="store_true",
                   help="also require every tile's output to equal the first's bitwise (define A/Bs of one tile)")
    args = p.parse_args(argv)
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
    else:
        from bench_training import WGRAD_NK
        shapes = list(WGRAD_NK)
    if args.compile_only:
        return compile_all(shapes, args)
    rows = [one_shape(m, n, args) for m, n in shapes]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
