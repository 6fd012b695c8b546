"""Fill deep_tile's kernel cache with the output-variant kernels (FP32 out, C added) and the
K-grouped ones that tests/test_training.py, tests/test_k_grouped.py, tools/sanitize_training.py and
benchmarks/bench_training.py run, compiled
in parallel processes (``--jobs``), so the GPU runs that follow spend no time compiling. Needs the
compiler only (no GPU); prints one line per kernel and a count.
"""
import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools"), str(ROOT / "benchmarks")]


def configs(num_sms: int) -> list:
    """(label, defines, symbol) of every kernel to build."""
    from deep_tile.jit.loader import build_defines
    from deep_tile.kernels import fp8_gemm as family
    from deep_tile.gemm.problem import Problem
    from deep_tile.select import KernelConfig, select_config
    from test_training import configs as test_configs
    from sanitize_training import CASES, P
    from bench_training import DENSE_NK, WGRAD_NK

    found = []
    for fields, out, c, one_d in test_configs():
        config = KernelConfig(**{"raster_width": 8, "grid_size": num_sms, **fields})
        found.append((config.with_b_scale_1d() if one_d else config).with_output(out, c))
    for fields, out, mode, *_ in CASES:
        c = None if mode == "none" else ("out" if mode == "inplace" else mode)
        found.append(KernelConfig(**{**P, **fields}).with_output(out, c))  # b_scale_1d in the fields
    shapes = [(7168, 2048, 4096), (2112, 7168, 4096), (576, 7168, 4096), (1, 4096, 512), (64, 1160, 1536),
              (1000, 2112, 1536), (520, 1160, 400), (4096, 512, 2048)] + [(4096, n, k) for n, k in DENSE_NK]
    variants = [("float32", "out"), ("float32", "float32"), ("float32", None), ("bfloat16", "bfloat16")]
    for (m, n, k) in shapes:
        for out, c in variants:
            problem = Problem(m, n, k).with_output(out, c)
            found.append(select_config(problem, num_sms).for_problem(problem))
    wgrad = [(7168, 2048, 4096), (2112, 7168, 4096), (4096, 7168, 4096), (7168, 16384, 4096), (1536, 7168, 4096),
             (512, 32768, 4096), (1, 4096, 512), (2048, 1160, 400), (520, 4104, 1040), (1000, 2112, 1536),
             (520, 1160, 400)]
    for tokens in (4096, 16384):  # benchmarks/bench_training.py's wgrad set
        wgrad += [(n, k, tokens) for n, k in WGRAD_NK]
    for (m, n, k) in wgrad:
        for out, c in (("float32", "out"), ("bfloat16", None), ("float32", "float32")):
            problem = Problem(m, n, k).with_output(out, c).with_b_scale_1d()
            found.append(select_config(problem, num_sms).for_problem(problem))
    found += k_grouped_configs(num_sms)
    unique = {}
    for config in found:
        unique[tuple(sorted(config.defines().items()))] = config
    return [(c.label, build_defines(c.defines()), family.symbol(c.problem_kind)) for c in unique.values()]


def k_grouped_configs(num_sms: int) -> list:
    """The K-grouped kernels: tests/test_k_grouped.py's forced ones and the rule's picks for its
    public cases, tools/sanitize_training.py's, and the rule's picks for bench_training.py's set."""
    from deep_tile.gemm.problem import Problem, ProblemKind
    from deep_tile.select import KernelConfig
    from deep_tile.select.k_grouped import select_k_grouped_config
    from bench_training import KGROUPED_MN, kgrouped_sizes
    from sanitize_training import K_GROUPED_CASES, P
    from test_k_grouped import EDGE_SIZES, MANY_SIZES, configs as test_configs

    found = list(test_configs())
    for fields, out, mode, *_ in K_GROUPED_CASES:
        c = None if mode == "none" else ("out" if mode == "inplace" else mode)
        found.append(KernelConfig(**{**P, **fields}, problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True,
                                  out_dtype=out, c_dtype=c))
    problems = [(4096, 7168, 10880, 8, "float32", "out"), (7168, 2048, sum(MANY_SIZES), 32, "float32", "out"),
                (1000, 2112, sum(EDGE_SIZES) + 10, len(EDGE_SIZES), "float32", "out"),
                (520, 1160, 16, 3, "bfloat16", None), (256, 512, 4096, 1, "float32", "float32"),
                (1000, 2112, 4336, 8, "float32", "out"), (4096, 512, 2048, 4, "float32", "out")]
    for seed in (0,):
        problems += [(m, n, sum(ks), len(ks), "float32", "out") for m, n in KGROUPED_MN for _, ks in kgrouped_sizes(seed)]
    for m, n, k, groups, out, c in problems:
        problem = Problem(m, n, -(-k // 16) * 16, kind=ProblemKind.K_GROUPED, num_groups=groups, b_scale_1d=True,
                          out_dtype=out, c_dtype=c)
        found.append(select_k_grouped_config(problem, num_sms).for_problem(problem))
    return found


def build(job) -> str:
    from deep_tile.jit.cache import get_cubin
    from deep_tile.kernels import fp8_gemm as family

    label, defines, symbol = job
    get_cubin(family.ENTRY, defines, symbol)
    return label


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--num-sms", type=int, default=132)
    args = parser.parse_args()
    jobs = configs(args.num_sms)
    with ProcessPoolExecutor(args.jobs) as pool:
        for label in pool.map(build, jobs):
            print("built", label, flush=True)
    print(f"{len(jobs)} kernels in the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
