"""Time forced kernel configurations on one or more shapes (tuning aid, GPU only).

    python benchmarks/sweep_configs.py --shapes 4096,7168,16384 --configs 128x128,128x160A,256x64B
    python benchmarks/sweep_configs.py --shapes 4096,4096,7168 --configs 128x128 --define DT_WATCHDOG=0

A config is ``BMxBN`` plus an optional multicast suffix ``A`` or ``B``, ``sS`` for stages
(default: as many as fit) and ``gG`` for the swizzle group width (default 16). Each run is checked against the float64 reference before timing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import deep_tile  # noqa: E402
from deep_tile.gemm import _run  # noqa: E402
from deep_tile.select.candidates import max_stages  # noqa: E402
from deep_tile.select.config import KernelConfig  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402
from deep_tile.testing.timing import bench_gpu  # noqa: E402


def parse_config(text: str, num_sms: int) -> KernelConfig:
    """``BMxBN[A|B][sSTAGES][gGROUP]``, e.g. ``128x128``, ``128x160A``, ``128x128s4g8``."""
    text, _, group = text.partition("g")
    body, _, stages = text.partition("s")
    multicast = body[-1] if body[-1] in "AB" else ""
    bm, bn = (int(x) for x in body.rstrip("AB").split("x"))
    return KernelConfig(block_m=bm, block_n=bn, num_stages=int(stages) if stages else max_stages(bm, bn, 232448),
                        num_multicast=2 if multicast else 1, multicast_on_a=multicast == "A", num_sms=num_sms,
                        group_size=int(group) if group else 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", required=True)
    parser.add_argument("--configs", required=True, help="comma-separated, e.g. 128x128,128x160A")
    parser.add_argument("--define", action="append", default=[], help="extra NAME=VALUE define (repeatable)")
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    extra = {k: int(v) for k, v in (d.split("=") for d in args.define)}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'shape':>18} | {'config':>12} | {'defines':>16} | {'us':>8} | {'TFLOPS':>6} | diff")
    for shape in args.shapes:
        m, n, k = (int(x) for x in shape.split(","))
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
        ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        for text in ["auto"] + args.configs.split(","):
            for defines in ([{}] + ([extra] if extra else [])):
                try:
                    cfg = None if text == "auto" else parse_config(text, sms)
                    out.fill_(float("nan"))
                    _run(a, sa, b, sb, out, config=cfg, extra_defines=defines)
                    diff = calc_diff(out.double(), ref)
                    t = bench_gpu(lambda: _run(a, sa, b, sb, out, config=cfg, extra_defines=defines),
                                  iters=args.iters)["median_us"]
                    label = deep_tile.get_config(m, n, k).label if cfg is None else cfg.label
                    print(f"{shape:>18} | {label:>12} | {str(defines):>16} | {t:8.1f} | "
                          f"{2 * m * n * k / t / 1e6:6.0f} | {diff:.1e}", flush=True)
                except Exception as exc:  # keep sweeping
                    print(f"{shape:>18} | {text:>12} | {str(defines):>16} | error: {type(exc).__name__}: "
                          f"{str(exc)[:150]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
