"""Compile DeepGEMM's kernels for a list of shapes into its JIT cache (baseline timing aid, GPU).

    python tools/deepgemm_warm.py --set decode --part 0/8    # the 1st of 8 interleaved slices

DeepGEMM compiles each new kernel on first use (seconds with NVCC); warming its cache in several
processes before a benchmark keeps that out of the timed process. DeepGEMM is a baseline only
(../shared/baselines/README.md); deep_tile never imports it.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "probes"))

import torch  # noqa: E402

from sweep_configs import SETS, baseline_fns  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--set", action="append", default=[], choices=sorted(SETS))
parser.add_argument("--shapes", nargs="*", default=[])
parser.add_argument("--part", default="0/1", help="i/n: every n-th shape from the i-th")
args = parser.parse_args()
shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] + [s for name in args.set for s in SETS[name]]
index, count = (int(v) for v in args.part.split("/"))
for m, n, k in list(dict.fromkeys(shapes))[index::count]:
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    fn = baseline_fns(a, sa, b, sb, out).get("deepgemm")
    if fn is None:
        sys.exit("deep_gemm is not importable")
    fn()
    torch.cuda.synchronize()
    print(f"warm {m}x{n}x{k}", flush=True)
