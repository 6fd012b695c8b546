"""One dense pick timed through each host path and launch mode, beside DeepGEMM latest and cuBLAS,
round-robin and alone (needs a GPU and DeepGEMM latest importable; run with
``DEEP_TILE_NATIVE=wait`` so the public op takes the native path from its first call).

    DEEP_TILE_NATIVE=wait python benchmarks/probes/host_paths.py --shapes 4096,1280,8192 --configs 128x160:gM:u6

Per shape (seed-0 FP8 inputs, TMA-aligned a_scale) and in one process: ``public``
(``deep_tile.fp8_gemm``), ``python`` (deep_tile.gemm.launch.run, the selector's pick), any forced
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import bench_fp8_gemm as bench  # noqa: E402
from deep_tile.gemm.launch import run  # noqa: E402
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
    results = {}
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split(","))
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        libraries = bench.library_fns(a, sa, b, sb, out, use_deepgemm=True)  # deep_tile's public op, the baselines
        if not all(callable(libraries[name]) for name in ("deepgemm", "cublas_bw")):
            raise SystemExit(f"DeepGEMM and cuBLAS blockwise are needed: {libraries}")
        fns = {"public": libraries["deep_tile"], "python": lambda: run(a, sa, b, sb, out),
               "deepgemm": libraries["deepgemm"]}
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
        cublas = {"public": fns["public"], "deepgemm": fns["deepgemm"], "cublas_bw": libraries["cublas_bw"],
                  "cublas_pt": libraries["cublas_pt"]}
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
