"""One dense pick timed through each host path and launch mode, beside DeepGEMM latest and cuBLAS,
round-robin and alone (needs a GPU and DeepGEMM latest importable; run with
``DEEP_TILE_NATIVE=wait`` so the public op takes the native path from its first call).

    DEEP_TILE_NATIVE=wait python benchmarks/probes/host_paths.py --shapes 4096,1280,8192 --configs 128x160:gM:u6

Per shape (seed-0 FP8 inputs, TMA-aligned a_scale) and in one process: ``public``
(``deep_tile.fp8_gemm``), ``python`` (deep_tile.launch.run, the selector's pick), any forced
``--configs`` and DeepGEMM's ``fp8_gemm_nt``, timed (CUDA events, 256 MB L2 write-flush and
500 us sleep pad before each call, median of ``--iters``) round-robin together (``rr``), each
alone (``seq``), round-robin with PDL off (``rr_nopdl``), round-robin with cuBLAS blockwise and
per-tensor beside (``rr_cublas``, as bench_fp8_gemm.py runs) and as a pair with DeepGEMM
(``rr_pair``). Whether a gap between bench_fp8_gemm.py and sweep_configs.py comes from the host
path, PDL, the libraries beside it or the kernel that ran before.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import deep_tile  # noqa: E402
from deep_tile.launch import run  # noqa: E402
from deep_tile.pdl import set_pdl  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import bench_gpu, bench_round_robin  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", required=True, metavar="M,N,K")
    p.add_argument("--configs", default="", help="comma-separated forced configs (deep_tile.testing.configs text)")
    p.add_argument("--iters", type=int, default=25)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    import deep_gemm  # a baseline only (../shared/baselines)

    results = {}
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split(","))
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        dg_out = torch.empty_like(out)
        fns = {"public": lambda: deep_tile.fp8_gemm(a, sa, b, sb, out=out),
               "python": lambda: run(a, sa, b, sb, out),
               "deepgemm": lambda: deep_gemm.fp8_gemm_nt((a, sa), (b, sb), dg_out, recipe=(1, 128, 128),
                                                         disable_ue8m0_cast=True)}
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for text in filter(None, args.configs.split(",")):
            fns[text] = lambda cfg=parse_config(text, m, n, sms): run(a, sa, b, sb, out, config=cfg)
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        row = {"rr": bench_round_robin(fns, iters=args.iters, shuffle_seed=0),
               "seq": {name: bench_gpu(fn, iters=args.iters)["median_us"] for name, fn in fns.items()}}
        set_pdl(False)
        try:
            row["rr_nopdl"] = bench_round_robin({name: fns[name] for name in ("public", "python", "deepgemm")},
                                                iters=args.iters, shuffle_seed=0)
        finally:
            set_pdl(True)
        sa_cublas, sb_cublas = sa.t().contiguous().t(), sb.contiguous().t()
        one = torch.ones((), dtype=torch.float32, device="cuda")
        cublas = {"public": fns["public"], "deepgemm": fns["deepgemm"],
                  "cublas_bw": lambda: torch._scaled_mm(a, b.t(), scale_a=sa_cublas, scale_b=sb_cublas,
                                                        out_dtype=torch.bfloat16),
                  "cublas_pt": lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                        use_fast_accum=True)}
        row["rr_cublas"] = bench_round_robin(cublas, iters=args.iters, shuffle_seed=0)
        row["rr_pair"] = bench_round_robin({"public": fns["public"], "deepgemm": fns["deepgemm"]}, iters=args.iters,
                                           shuffle_seed=0)
        results[shape] = row
        print(shape, " | ".join(f"{key} " + json.dumps({name: round(us, 1) for name, us in times.items()})
                                for key, times in row.items()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
