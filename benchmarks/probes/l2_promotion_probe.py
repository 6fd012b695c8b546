"""The L2 promotion of the FP8 operands' tensor maps, measured (GPU; a measurement, not a test).

    python benchmarks/probes/l2_promotion_probe.py                 # the dense decode chain at M = 1, 64

An L2 miss of a TMA box row (128 bytes of one weight row per k-block) fetches the FP8 tensor
maps' L2 promotion: 256 bytes (the next k-block's too) unless the selector picks another
(``KernelConfig.l2_promotion``, :func:`deep_tile.select.selector.l2_promotion_for`). This times
the selector's configs (Python host path) with each promotion forced on every GEMM
(bench_decode.py's ``L2P`` pseudo-define): each GEMM alone (profiler device time after a 256 MB read flush, median) and the
dense chain of benchmarks/bench_decode.py (two layers in a CUDA graph, replayed 4 times, write
flush, round-robin, median), and checks every output against the float64 reference.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the user benchmarks
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/probes/

from bench_decode import DENSE_NK, Gemm, compulsory_bytes, deep_tile_call, make_operands  # noqa: E402
from deep_tile.reference import ref_fp8_gemm  # noqa: E402
from deep_tile.testing.numeric import DIFF_TOL, calc_diff  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, capture_graph, copy_bandwidth, kernel_device_us  # noqa: E402

PROMOTIONS = {"none": 0, "64": 64, "128": 128, "256": 256}
"""``--promotions`` names -> bytes (``KernelConfig.l2_promotion``)."""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default="1,64")
    p.add_argument("--promotions", default="256,128,none", help=f"comma-separated, of {', '.join(PROMOTIONS)}")
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--shapes", default="", help="also time these M,N,K GEMMs alone (space-separated)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("l2_promotion_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    promotions = args.promotions.split(",")
    copy_rate = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; HBM copy rate {copy_rate / 1e12:.2f} TB/s")
    status = 0
    for text in args.shapes.split():
        m, n, k = (int(v) for v in text.split(","))
        gen = torch.Generator(device="cuda")
        gen.manual_seed(m + n + k)
        ops = make_operands(Gemm(text, n, k), m, gen)
        ref = ref_fp8_gemm(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"])
        cells = []
        for promo in promotions:
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            us = kernel_device_us(deep_tile_call(Gemm(text, n, k), ops, out, {"L2P": PROMOTIONS[promo]}))
            ok = bool(torch.isfinite(out).all()) and calc_diff(out.double(), ref) < DIFF_TOL
            status |= 0 if ok else 1
            cells.append(f"{promo} {us:7.1f} us {2 * m * n * k / us / 1e6:6.0f} TF{'' if ok else ' FAIL'}")
        print(f"{m}x{n}x{k}: " + "  ".join(cells))
        del ops, ref
    for m in (int(v) for v in filter(None, args.m.split(","))):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(m)
        layers = [[(Gemm(f"{n}x{k}", n, k), make_operands(Gemm(f"{n}x{k}", n, k), m, gen)) for n, k in DENSE_NK]
                  for _ in range(2)]
        alone, graphs = {}, {}
        for promo in promotions:
            calls = []
            for layer in layers:
                for gemm, ops in layer:
                    out = torch.full((m, gemm.n), float("nan"), dtype=torch.bfloat16, device="cuda")
                    ops.setdefault("outs", {})[promo] = out
                    calls.append(deep_tile_call(gemm, ops, out, {"L2P": PROMOTIONS[promo]}))
            for index, (gemm, _) in enumerate(layers[0]):
                alone[(promo, gemm.name)] = kernel_device_us(calls[index])
            graphs[promo] = capture_graph(lambda c=calls: [call() for call in c])
            for layer in layers:
                for gemm, ops in layer:
                    ops["outs"][promo].fill_(float("nan"))
            graphs[promo].replay()
            torch.cuda.synchronize()
            for layer in layers:
                for gemm, ops in layer:
                    ref = ops.get("ref")
                    if ref is None:
                        ref = ops["ref"] = ref_fp8_gemm(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"])
                    got = ops["outs"][promo]
                    if not (bool(torch.isfinite(got).all()) and calc_diff(got.double(), ref) < DIFF_TOL):
                        print(f"FAIL M={m} {gemm.name} promotion {promo}")
                        status = 1
        fns = {promo: (lambda g=graphs[promo]: [g.replay() for _ in range(4)]) for promo in promotions}
        times = bench_round_robin(fns, warmup=2, iters=args.iters, shuffle_seed=0)
        nbytes = sum(compulsory_bytes(g, o) for layer in layers for g, o in layer)
        print(f"M={m}: dense chain us per layer (% of copy rate), and each GEMM alone (us, read flush)")
        for promo in promotions:
            us = times[promo] / 4 / 2
            pct = nbytes / 2 / (us * 1e-6) / copy_rate * 100
            cells = "  ".join(f"{g.name} {alone[(promo, g.name)]:5.1f}" for g, _ in layers[0])
            print(f"  promotion {promo:>4}: chain {us:5.1f} ({pct:4.1f}%)   {cells}")
    return status


if __name__ == "__main__":
    sys.exit(main())
