"""Does the weights' row pitch set a decode GEMM's streaming rate? (GPU; a measurement, not a test)

    python benchmarks/probes/pitch_probe.py                    # 7168x16384 and 4096x7168 at M = 1 and 64
    python benchmarks/probes/pitch_probe.py --shapes 64,7168,16384 --pads 0,128,1024

deep_tile reads B [N, K] with any row stride that is a multiple of 16 elements. Here B is the
first K columns of a [N, K + pad] buffer: the same GEMM (same config, same bytes) over rows
``K + pad`` bytes apart. Each pitch is timed alone with the profiler (device time of the GEMM's
kernel, median of ``--reps`` calls, each after an L2 flush by a 256 MB read, so no dirty lines
are written back during the call), and checked against the float64 reference.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile

import deep_tile  # noqa: E402
from deep_tile.reference import ref_fp8_gemm  # noqa: E402
from deep_tile.testing.numeric import DIFF_TOL, calc_diff  # noqa: E402
from deep_tile.testing.timing import copy_bandwidth, kernel_device_us  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="1,7168,16384 64,7168,16384 64,4096,7168")
    p.add_argument("--pads", default="0,128,256,512,1024,2048")
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("pitch_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    copy_rate = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; HBM copy rate {copy_rate / 1e12:.2f} TB/s")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    status = 0
    for text in args.shapes.split():
        m, n, k = (int(v) for v in text.split(","))
        a, a_scale = deep_tile.per_token_cast_to_fp8(torch.randn((m, k), generator=gen, device="cuda").bfloat16())
        a_scale = deep_tile.get_tma_aligned_a_scale(a_scale)
        w = torch.randn((n, k), generator=gen, device="cuda").bfloat16()
        b_dense, b_scale = deep_tile.per_block_cast_to_fp8(w)
        ref = ref_fp8_gemm(a, a_scale, b_dense, b_scale)
        print(f"{m}x{n}x{k} ({deep_tile.get_config(m, n, k).label}); B {n * k / 1e6:.1f} MB")
        for pad in (int(v) for v in args.pads.split(",")):
            store = torch.empty((n, k + pad), dtype=torch.uint8, device="cuda")
            store.random_(0, 256)
            store[:, :k].copy_(b_dense.view(torch.uint8))
            b = store.view(torch.float8_e4m3fn)[:, :k]
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            us = kernel_device_us(lambda b=b, out=out: deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out),
                                  reps=args.reps)
            diff = calc_diff(out.double(), ref)
            ok = bool(torch.isfinite(out).all()) and diff < DIFF_TOL
            status |= 0 if ok else 1
            rate = n * k / (us * 1e-6)
            print(f"  pitch {k + pad:6d} B: {us:6.1f} us  {rate / 1e12:5.2f} TB/s of B  "
                  f"{rate / copy_rate * 100:5.1f}% of copy  {'ok' if ok else 'FAIL'} (calc_diff {diff:.1e})")
    return status


if __name__ == "__main__":
    sys.exit(main())
