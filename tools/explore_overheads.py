"""Measurements behind the tuning log (GPU): fixed launch overhead, the L2 flush's effect on
small problems, the resident-cluster cap and multicast at forced grid sizes.

    python tools/explore_overheads.py

Prints one line per measurement; benchmarks/RESULTS.md records what they showed.
"""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from deep_tile.gemm import planner  # noqa: E402
from deep_tile.gemm.launch import run  # noqa: E402
from deep_tile.gemm.planner import plan_for_config  # noqa: E402
from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import bench_gpu  # noqa: E402

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def time_after_read_flush(fn, flush, iters=30):
    """Median microseconds of fn() after reading (not writing) 256 MB, so L2 holds no dirty lines."""
    import statistics
    fn()
    samples = []
    for _ in range(iters):
        flush.sum()
        torch.cuda._sleep(500_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def problem(m, n, k):
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
    return a, sa, b, sb, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")


def cluster_capacity():
    """Clusters of each size 1..8 that can be resident at once, for a 1-CTA-per-SM kernel."""
    for text in ("64x64:b2:k2", "256x128"):
        cfg = parse_config(text, 4096, 4096, SMS)
        kernel = plan_for_config(cfg, Problem(4096, 4096, 4096)).kernel
        counts = [kernel.max_active_clusters(torch.cuda.current_device(), cfg.num_threads, cfg.smem_bytes, size)
                  for size in range(1, 9)]
        print(f"resident clusters of size 1..8 ({cfg.label}, {cfg.smem_bytes} B smem): {counts}")


def main():
    cluster_capacity()
    if "--clusters-only" in sys.argv:
        return
    # 1. What an almost empty launch costs under the benchmark's timing (flush + pad + events).
    x = torch.zeros(1, device="cuda")
    print(f"empty torch kernel: {bench_gpu(lambda: x.add_(1))['median_us']:.2f} us")
    for m, n, k, text in [(64, 128, 128, "64x128:b2"), (64, 16, 128, "64x16:b2"), (64, 128, 1024, "64x128:b2"),
                          (64, 128, 7168, "64x128:b2"), (64, 64, 7168, "64x64:b2:k2")]:
        a, sa, b, sb, out = problem(m, n, k)
        cfg = parse_config(text, m, n, SMS)
        t = bench_gpu(lambda: run(a, sa, b, sb, out, config=cfg))["median_us"]
        print(f"one CTA {m}x{n}x{k} {cfg.label}: {t:.2f} us")

    # 2. Small problems with the write flush (the benchmarks'), a read flush and no flush.
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for m, n, k, text in [(64, 2112, 7168, "64x64:b2:k2"), (64, 2112, 7168, "64x16:b2"), (1, 7168, 2048, "64x64:b2"),
                          (64, 7168, 16384, "64x64:b2")]:
        a, sa, b, sb, out = problem(m, n, k)
        cfg = parse_config(text, m, n, SMS)
        fn = lambda: run(a, sa, b, sb, out, config=cfg)  # noqa: E731
        write = bench_gpu(fn)["median_us"]
        read = time_after_read_flush(fn, flush)
        warm = bench_gpu(fn, flush_l2=False)["median_us"]
        print(f"{m}x{n}x{k} {cfg.label}: write-flush {write:.2f} us, no flush {warm:.2f} us, "
              f"read flush {read:.2f} us")

    # 3. Resident 2-CTA clusters, and multicast with the grid forced past the cap.
    a, sa, b, sb, out = problem(4096, 7168, 16384)
    base = parse_config("256x128", 4096, 7168, SMS)
    t = bench_gpu(lambda: run(a, sa, b, sb, out, config=base), iters=20)["median_us"]
    print(f"4096x7168x16384 {base.label} grid {base.grid_size}: {t:.1f} us")
    for text in ("256x128:mcA", "256x128:mcB", "128x128:b2:mcA"):
        cfg = parse_config(text, 4096, 7168, SMS)
        plan = plan_for_config(cfg, Problem(4096, 7168, 16384))
        print(f"{text}: resident-cluster cap gives grid {plan.grid}")
        saved = planner.fit_clusters
        planner.fit_clusters = lambda config, kernel: config  # measure past the cap
        try:
            for grid in (plan.grid, 128, 132):
                forced = parse_config(text, 4096, 7168, SMS)
                forced = dataclasses.replace(forced, grid_size=grid)
                t = bench_gpu(lambda: run(a, sa, b, sb, out, config=forced), iters=20)["median_us"]
                print(f"  {forced.label} grid {grid}: {t:.1f} us")
        finally:
            planner.fit_clusters = saved


if __name__ == "__main__":
    main()
