"""A kernel build define's effect on the selector's dense picks, beside DeepGEMM latest (needs a GPU).

    python benchmarks/probes/define_ab.py --define DT_L2_PREFETCH_KBLOCKS=0
    python benchmarks/probes/define_ab.py --define DT_L2_PREFETCH_KBLOCKS=0 --shapes 4096,7168,16384 64,2112,7168
    python benchmarks/probes/define_ab.py --define DT_C_LOAD_ROWS=2 --acc       # FP32 D accumulated in place
    python benchmarks/probes/define_ab.py --define DT_ONE_RING=1 --config 256x128:mcA:u6:g16 --shapes 8192,8192,8192
    python benchmarks/probes/define_ab.py --define DT_STATIC_RING=1 --config 128x64:b1:ef:u6:kb56 --beside-pick --shapes 512,2112,7168

For each dense shape (default: bench_fp8_gemm.py's M = 4096 set, 8192^3 and three small-M shapes)
the selector's pick runs as built by default (``pick``) and with ``--define NAME=VALUE`` added to
its build (``pick+NAME``; include/deep_tile/probes/overrides.cuh's measurement overrides); with
``--config TEXT`` (deep_tile.testing.configs' text form) both builds are that forced config instead
(labelled ``TEXT`` and ``TEXT+NAME``), and with ``--beside-pick`` also the selector's pick (``pick``,
checked and compared bitwise like them: the per-element k order does not depend on the tile),
and DeepGEMM latest's ``fp8_gemm_nt`` when importable (bf16 out; with ``--acc`` both deep_tile builds
accumulate into an FP32 D in place, the dense kind of the training GEMMs, and DeepGEMM is not run), round-robin with the L2 flushed
(testing.timing.bench_round_robin, median of ``--iters``). Both deep_tile builds are checked against
the float64 reference (NaN-poisoned outputs) and bitwise against each other. Each row ends with
time ratios: ``variant / pick`` (> 1: the variant is slower; data files from before 2026-11-27 06:00
label the same value ``pick / variant``), ``DG / pick`` and ``DG / variant`` (> 1: deep_tile faster). The grouped kinds'
counterpart is grouped_configs.py (``CONFIG+NAME=VALUE``).
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
from deep_tile.gemm.launch import run, run_acc  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402

DEFAULT_SHAPES = ("4096,2112,7168", "4096,24576,1536", "4096,32768,512", "4096,7168,16384", "4096,4096,7168",
                  "4096,7168,2048", "8192,8192,8192", "512,4096,7168", "64,2112,7168", "128,7168,2048")


def one_shape(m: int, n: int, k: int, defines: dict, iters: int, acc: bool = False, config_text: str = "",
              beside_pick: bool = False) -> dict:
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout="tma")
    cfg = parse_config(config_text, m, n, torch.cuda.get_device_properties(0).multi_processor_count) \
        if config_text else None
    ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
    base = config_text or "pick"  # the first build's name: the pick, or the forced config
    label = base + "+" + ",".join(defines)
    if acc:  # D = D + A.B^T in FP32 from a random start (checked against start + the product)
        start = torch.randn((m, n), dtype=torch.float32, device="cuda")
        ref = ref + start.double()
        outs = {name: start.clone() for name in (base, label)}
        fns = {base: lambda: run_acc(a, sa, b, sb, None, True, outs[base]),
               label: lambda: run_acc(a, sa, b, sb, None, True, outs[label], extra_defines=defines)}
    else:
        outs = {name: torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for name in (base, label)}
        fns = {base: lambda: run(a, sa, b, sb, outs[base], config=cfg),
               label: lambda: run(a, sa, b, sb, outs[label], config=cfg, extra_defines=defines)}
        if beside_pick and config_text:
            outs["pick"] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            fns["pick"] = lambda: run(a, sa, b, sb, outs["pick"])
    row = {"shape": f"{m}x{n}x{k}", "checks": {}}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        out = outs[name]
        row["checks"][name] = {"diff": calc_diff(out.double(), ref), "rel": max_rel_error(out, ref),
                               "nan": int(torch.isnan(out).sum())}
    row["bitwise_equal"] = all(torch.equal(outs[base].view(torch.int16), out.view(torch.int16)) for out in outs.values())
    row["ok"] = row["bitwise_equal"] and all(c["nan"] == 0 and c["diff"] < 1e-3 and c["rel"] < 1e-2
                                             for c in row["checks"].values())
    dg, version = bench.deepgemm_version()
    if dg is not None and version == "latest" and not acc:
        dg_out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, sa), (b, sb), dg_out, recipe=(1, 128, 128),
                                                 disable_ue8m0_cast=True)
    row["us"] = {name: round(t, 2) for name, t in bench_round_robin(fns, warmup=3, iters=iters,
                                                                    shuffle_seed=0).items()}
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--define", action="append", required=True, metavar="NAME=VALUE")
    p.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), metavar="M,N,K")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--acc", action="store_true", help="FP32 D accumulated in place instead of bf16 D")
    p.add_argument("--config", default="", metavar="TEXT",
                   help="a forced config for both builds (deep_tile.testing.configs), not the selector's pick")
    p.add_argument("--beside-pick", action="store_true", help="with --config: the selector's pick timed beside them")
    args = p.parse_args()
    if args.acc and args.config:
        p.error("--config applies to the bf16 builds only, not with --acc")
    if args.beside_pick and not args.config:
        p.error("--beside-pick needs --config")
    defines = dict((key, int(value)) for key, value in (item.split("=") for item in args.define))
    ok = True
    for text in args.shapes:
        m, n, k = (int(v) for v in text.split(","))
        row = one_shape(m, n, k, defines, args.iters, args.acc, args.config, args.beside_pick)
        ok &= row["ok"]
        us = row["us"]
        names = list(us)
        ratio = f"  variant / pick {us[names[1]] / us[names[0]]:.3f}"  # time ratios: > 1, the first is slower
        if args.beside_pick:
            ratio += f"  variant / selector's pick {us[names[1]] / us['pick']:.3f}"
        if "deepgemm" in us:
            ratio += f"  DG / pick {us['deepgemm'] / us[names[0]]:.3f}  DG / variant {us['deepgemm'] / us[names[1]]:.3f}"
        print(f"{row['shape']:>16} " + "  ".join(f"{name} {t:8.1f}" for name, t in us.items()) + ratio
              + ("" if row["ok"] else f"  FAIL {row['checks']} bitwise {row['bitwise_equal']}"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
