"""Whether the kernel that ran before a GEMM changes its time, across the L2 flush and sleep pad
that every timed call gets (needs a GPU and DeepGEMM latest importable).

    python benchmarks/probes/prev_kernel.py --specs 4096,1280,8192=128x160:gM:u6,128x160:gM:u3 --json r.json

For each ``M,N,K=CONFIG[,CONFIG...]`` (deep_tile.testing.configs text) the forced deep_tile
configs and DeepGEMM latest's ``fp8_gemm_nt`` run on the same FP8 inputs, each timed (CUDA
events around one call after a 256 MB L2 write-flush and a 500 us sleep pad, median of
``--iters``) four ways: ``seq`` (itself ran before: testing.timing.bench_gpu), ``after_dg``
(DeepGEMM ran before the flush), ``after_other_dt`` (the first config, or for the first the
second, ran before) and ``rr_dg`` (round-robin beside DeepGEMM, shuffled: testing.timing.
bench_round_robin). The flush evicts L2, not the SMs' instruction caches: a kernel whose code
outgrows them runs slower after another kernel than after itself.
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

import bench_fp8_gemm as bench  # noqa: E402
from deep_tile.gemm.launch import run  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import bench_gpu, bench_round_robin  # noqa: E402


def timed_after(fn, before, iters: int) -> float:
    """Median microseconds of ``fn`` (already warm) when ``before`` ran ahead of the flush and
    sleep pad."""
    return bench_gpu(fn, warmup=0, iters=iters, before=before)["median_us"]


def deepgemm_fn(a, a_scale, b, b_scale, out):
    """DeepGEMM latest's GEMM on these operands, as bench_fp8_gemm.py times it; raises when
    DeepGEMM is not importable (the probes need it)."""
    dg = bench.library_fns(a, a_scale, b, b_scale, out, use_deepgemm=True)["deepgemm"]
    if not callable(dg):
        raise SystemExit(f"DeepGEMM is needed ({dg}); see ../shared/baselines/README.md")
    return dg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--specs", nargs="+", required=True, metavar="M,N,K=CONFIG[,CONFIG...]")
    p.add_argument("--iters", type=int, default=25)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    results = {}
    for spec in args.specs:
        shape, texts = spec.split("=")
        m, n, k = (int(v) for v in shape.split(","))
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        dg = deepgemm_fn(a, sa, b, sb, out)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        fns = {t: (lambda cfg=parse_config(t, m, n, sms): run(a, sa, b, sb, out, config=cfg)) for t in texts.split(",")}
        for fn in [*fns.values(), dg]:
            fn()
        torch.cuda.synchronize()
        names = list(fns)
        row = {"dg_seq": bench_gpu(dg, iters=args.iters)["median_us"],
               "dg_after_dt": timed_after(dg, fns[names[0]], args.iters)}
        for name, fn in fns.items():
            other = fns[names[1] if name == names[0] and len(names) > 1 else names[0]]
            row[name] = {"seq": bench_gpu(fn, iters=args.iters)["median_us"], "after_dg": timed_after(fn, dg, args.iters),
                         "after_other_dt": timed_after(fn, other, args.iters),
                         "rr_dg": bench_round_robin({"dt": fn, "dg": dg}, iters=args.iters, shuffle_seed=0)}
        results[shape] = row
        print(shape, json.dumps(row, default=lambda v: round(v, 1)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
