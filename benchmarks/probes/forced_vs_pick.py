"""A forced config, built as is and with measurement defines, beside the selector's pick and
DeepGEMM latest in one process (needs a GPU).

    python benchmarks/probes/forced_vs_pick.py --define DT_STATIC_RING=1 \\
        --cases 512,2112,7168=128x64:b1:ef:u6:kb56 4096,1280,8192=128x160:b1:s4:g16:gM:kb64

Each case ``M,N,K=CONFIG`` (deep_tile.testing.configs' text form) runs the selector's pick
(``pick``), CONFIG (``forced``) and CONFIG with every ``--define`` added to its build
(``forced+defines``; include/deep_tile/kernels/ measurement overrides), and DeepGEMM latest's
``fp8_gemm_nt`` when importable, round-robin with the L2 flushed (testing.timing.bench_round_robin,
median of ``--iters``). Every deep_tile output is checked against the float64 reference on a
NaN-poisoned output, and the three are compared bitwise (the same per-element k order). Where
define_ab.py compares two builds of one config, this puts a forced config beside the pick.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import bench_fp8_gemm as bench  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile.launch import run  # noqa: E402
from deep_tile.testing.configs import format_config, parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402


def one_case(m: int, n: int, k: int, text: str, defines: dict, iters: int) -> tuple:
    """(line, ok) for one case."""
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout="tma")
    ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
    cfg = parse_config(text, m, n, torch.cuda.get_device_properties(0).multi_processor_count)
    names = ("pick", "forced", "forced+defines")
    outs = {name: torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for name in names}
    fns = {"pick": lambda: run(a, sa, b, sb, outs["pick"]),
           "forced": lambda: run(a, sa, b, sb, outs["forced"], config=cfg),
           "forced+defines": lambda: run(a, sa, b, sb, outs["forced+defines"], config=cfg, extra_defines=defines)}
    ok = True
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        ok &= not bool(torch.isnan(outs[name]).any()) and calc_diff(outs[name].double(), ref) < 1e-3
    bits = [outs[name].view(torch.int16) for name in names]
    ok &= torch.equal(bits[0], bits[1]) and torch.equal(bits[0], bits[2])
    dg, version = bench.deepgemm_version()
    if dg is not None and version == "latest":
        dg_out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, sa), (b, sb), dg_out, recipe=(1, 128, 128),
                                                 disable_ue8m0_cast=True)
    us = bench_round_robin(fns, warmup=3, iters=iters, shuffle_seed=0)
    line = f"{m}x{n}x{k:<6} " + "  ".join(f"{name} {t:7.1f}" for name, t in us.items())
    line += f"  forced+defines / pick {us['forced+defines'] / us['pick']:.3f}"
    if "deepgemm" in us:
        line += f"  DG / pick {us['deepgemm'] / us['pick']:.3f}  DG / forced+defines {us['deepgemm'] / us['forced+defines']:.3f}"
    line += f"  [pick {format_config(deep_tile.get_config(m, n, k))}; forced {text}]" + ("" if ok else "  FAIL")
    return line, ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", required=True, metavar="M,N,K=CONFIG")
    p.add_argument("--define", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--iters", type=int, default=40)
    args = p.parse_args()
    defines = dict((key, int(value)) for key, value in (item.split("=") for item in args.define))
    ok = True
    for case in args.cases:
        shape, text = case.split("=", 1)
        m, n, k = (int(v) for v in shape.split(","))
        line, case_ok = one_case(m, n, k, text, defines, args.iters)
        ok &= case_ok
        print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
