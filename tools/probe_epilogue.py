"""Measure the direct-store epilogue's knobs on in-place FP32 accumulation (GPU): the rows of C
loaded before their stores (DT_C_LOAD_ROWS) and the stage count (the selector's bf16 count, or the
most without staging). Prints one line per variant. (An L2 prefetch of C's rows, DT_PREFETCH_C,
was measured with it and removed: include/deep_tile/kernels/fp8_gemm_config.cuh, kCLoadRows.)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dataclasses  # noqa: E402

import torch  # noqa: E402

from deep_tile.gemm.launch import run_acc  # noqa: E402
from deep_tile.gemm.planner import select  # noqa: E402
from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402

SHAPES = [(4096, 7168, 7168), (4096, 7168, 16384), (7168, 2048, 4096)]
VARIANTS = [("most", 1), ("most", 2), ("bf16", 1), ("bf16", 2)]


def variants(m, n, k) -> list:
    """(name, config, extra defines) of each variant at one shape."""
    problem = Problem(m, n, k).with_output("float32", "out")
    base = select(problem, 132)
    found = []
    for stages_from, rows in VARIANTS:
        cfg = base.with_output("float32", "out")
        if stages_from == "bf16":
            cfg = dataclasses.replace(cfg, num_stages=base.num_stages)
        found.append((f"{cfg.label} rows{rows}", cfg, {"DT_C_LOAD_ROWS": rows}))
    return found


def build(job):
    from deep_tile.jit.cache import get_cubin
    from deep_tile.jit.loader import build_defines
    from deep_tile.kernels import fp8_gemm as family

    _, cfg, extra = job
    get_cubin(family.ENTRY, build_defines({**cfg.defines(), **family.probe_defines(extra)}), family.SYMBOL)
    return 0


def main():
    from concurrent.futures import ProcessPoolExecutor

    jobs = [job for shape in SHAPES for job in variants(*shape)]
    with ProcessPoolExecutor(14) as pool:
        list(pool.map(build, jobs))
    for m, n, k in SHAPES:
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=1, a_scale_layout="tma")
        d = torch.randn((m, n), device="cuda")
        fns = {}
        for name, cfg, extra in variants(m, n, k):
            fns[name] = (lambda cfg=cfg, extra=extra: run_acc(a, sa, b, sb, None, True, d, config=cfg,
                                                              extra_defines=extra))
        plain = torch.empty((m, n), device="cuda")
        fns["write (no C)"] = lambda: run_acc(a, sa, b, sb, None, False, plain)
        times = bench_round_robin(fns, warmup=2, iters=15, shuffle_seed=0)
        for name, us in times.items():
            print(f"{m}x{n}x{k} {name:<40} {us:8.1f} us {2 * m * n * k / us / 1e6:6.0f} TFLOPS", flush=True)


if __name__ == "__main__":
    main()
