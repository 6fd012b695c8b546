"""DRAM bytes each kernel of the dense decode chain moves (GPU, under Nsight Compute; a
measurement tool, not a test).

    ncu --cache-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        -k regex:"deep_tile_fp8|stream_read" --csv python tools/chain_dram.py --m 1

Runs, after an L2 flush (``--flush``), ``--layers`` layers of the dense chain with deep_tile, then
after another flush the same layers with benchmarks/probes/read_floor.cu's read of each weight, launched
plainly (ncu serializes kernels anyway) so that ncu, told not to touch the caches, sees the L2 as
the chain leaves it. Prints each GEMM's weight bytes in launch order, to set beside ncu's rows.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "probes"))

import bench_decode  # noqa: E402
import chain_floor  # noqa: E402
from deep_tile.testing.timing import FLUSH_KINDS, L2Flush  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--flush", choices=FLUSH_KINDS, default="write")
    args = p.parse_args(argv)
    read = chain_floor.load_probe(chain_floor.PROBE_SOURCE, chain_floor.READ)
    layers = chain_floor.build_layers(args.m, args.layers, 0)
    sink = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    dt, rd, names = [], [], []
    for _, pairs in layers:
        for gemm, ops in pairs:
            out = torch.empty((args.m, gemm.n), dtype=torch.bfloat16, device="cuda")
            dt.append(bench_decode.deep_tile_call(gemm, ops, out))
            rd.append(chain_floor.read_call(read, ops["b"].view(torch.uint8).view(-1), sink, pdl=False, wait=False))
            names.append(f"{gemm.n}x{gemm.k} weights {gemm.n * gemm.k / 1e6:.1f} MB")
    flush = L2Flush(args.flush)
    for calls in (dt, rd):  # warm (compiles) before the measured pass
        [c() for c in calls]
    torch.cuda.synchronize()
    for calls in (dt, rd):
        flush()
        [c() for c in calls]
        torch.cuda.synchronize()
    print("launch order (deep_tile, then read):", *names, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
