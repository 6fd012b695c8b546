"""Forced tiles of the K-grouped 1D1D GEMM beside DeepGEMM's (needs a GPU).

    python benchmarks/probes/k_grouped_configs.py --shapes 4096,7168,16x2048 --configs auto,128x128:b2,256x128
    python benchmarks/probes/k_grouped_configs.py --configs auto,auto+DT_C_LOAD_ROWS=2     # a build define's effect
    python benchmarks/probes/k_grouped_configs.py --configs auto,128x160,128x128:b2:st      # :st, the staged epilogue
    ncu -k regex:"deep_tile_fp8|sm90_fp8_gemm_1d1d" -s 4 -c 3 python benchmarks/probes/k_grouped_configs.py \
        --shapes 4096,7168,16x2048 --configs auto --calls 3    # profile both kernels (after the 2 checking calls
                                                               # and 2 of the 3 timed ones: deep_tile once, DeepGEMM twice)

For each shape (``m,n,GxT``: G groups of about T tokens, benchmarks/bench_training.py's sizes for
that set, or an explicit ``m,n,t1/t2/...``) it times deep_tile's K-grouped kernel accumulating in
place into FP32 (``--no-c``: writing FP32 without C) with each tile (``auto``: the rule of
deep_tile/select/k_grouped.py; a text of deep_tile.testing.configs, made K-grouped by the host path;
``+NAME=VALUE`` adds a build define of include/deep_tile/probes/overrides.cuh's measurement
overrides) and, when importable, DeepGEMM latest's ``k_grouped_fp8_gemm_nt_contiguous`` (also in
place), round-robin with the L2 flushed (testing.timing.bench_round_robin). Each forced tile's
output of one call from the same start is checked bitwise against the rule's pick (the per-element k
order does not depend on the tile), or with ``--tolerance`` within that share of the pick's largest
value (a variant that adds C first).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dataclasses  # noqa: E402

import torch  # noqa: E402

import bench_training as bt  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile import arch  # noqa: E402
from deep_tile.gemm.launch import run_k_grouped  # noqa: E402
from deep_tile.gemm.problem import Problem, ProblemKind  # noqa: E402
from deep_tile.select.k_grouped import most_stages  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402


def sizes_of(spec: str, seed: int) -> tuple:
    """``(label, sizes)`` of a ``GxT`` label of bench_training's set or an explicit ``t1/t2/...``."""
    if "/" in spec:
        return spec, [int(v) for v in spec.split("/")]
    for label, sizes in bt.kgrouped_sizes(seed):
        if label.replace("~", "") == spec.replace("~", ""):
            return label, sizes
    raise SystemExit(f"k_grouped_configs: no set {spec!r} (e.g. 16x2048, or 1024/0/896)")


def forced(text: str, m: int, n: int, tokens: int, groups: int, sms: int, c_dtype="out"):
    """The K-grouped kernel of tile ``text`` as the rule would make it: persistent on every SM,
    the most stages that fit; a last option ``:st`` asks for the staged epilogue
    (``KernelConfig.staged_epilogue``), otherwise the direct store. ``c_dtype``: "out" (in place)
    or None (FP32 D written, no C)."""
    staged = text.endswith(":st")
    problem = Problem(m, n, tokens, kind=ProblemKind.K_GROUPED, num_groups=groups, b_scale_1d=True,
                      out_dtype="float32", c_dtype=c_dtype)
    config = parse_config(text.removesuffix(":st"), m, n, sms, problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True,
                          out_dtype="float32", c_dtype=c_dtype, staged_epilogue=staged,
                          num_stages=2).for_problem(problem)
    config = dataclasses.replace(config, grid_size=sms)
    return dataclasses.replace(config, num_stages=most_stages(config, arch.MAX_SMEM_PER_BLOCK))


def one_shape(m: int, n: int, spec: str, configs: list, args) -> dict:
    label, ks = sizes_of(spec, args.seed)
    tokens = sum(ks)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    a, a_scale = deep_tile.per_token_cast_to_fp8(torch.randn((m, tokens), generator=gen, device="cuda").bfloat16())
    b, b_scale = deep_tile.per_token_cast_to_fp8(torch.randn((n, tokens), generator=gen, device="cuda").bfloat16())
    a_scale, b_scale = deep_tile.get_tma_aligned_a_scale(a_scale), deep_tile.get_tma_aligned_a_scale(b_scale)
    sizes = torch.tensor(ks, dtype=torch.int32, device="cuda")
    start = torch.randn((len(ks), m, n), device="cuda", dtype=torch.float32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    in_place = not args.no_c
    want = start.clone()
    deep_tile.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, want, c=want if in_place else None)
    d = start.clone()
    fns, bad = {}, []
    for text in configs:
        tile, *extra = text.split("+")
        defines = dict((key, int(value)) for key, value in (item.split("=") for item in extra))
        config = None if tile == "auto" else forced(tile, m, n, tokens, len(ks), sms, "out" if in_place else None)
        fn = (lambda c=config, e=defines or None: run_k_grouped(a, a_scale, b, b_scale, sizes, d,
                                                                accumulate=in_place, config=c, extra_defines=e))
        d.copy_(start)
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - a config the kernel refuses, reported
            bad.append(f"{text}: {type(error).__name__}: {str(error).splitlines()[0][:100]}")
            continue
        if not torch.equal(d, want):
            worst = ((d - want).abs().max() / want.abs().max()).item()
            if not worst <= args.tolerance:
                bad.append(f"{text}: output differs from the rule's pick (max |diff| / max |pick| {worst:.2e})")
                continue
            print(f"  {text}: within {worst:.2e} of the pick (max |diff| / max |pick|)", flush=True)
        fns[text] = fn
    dg = None if args.no_deepgemm or not in_place else bt.deepgemm()  # DeepGEMM's K-grouped GEMM takes a C
    if dg is not None and hasattr(dg, "k_grouped_fp8_gemm_nt_contiguous"):
        dg_a, dg_b = bt._k_major_blocks(a, ks), bt._k_major_blocks(b, ks)
        fns["deepgemm"] = lambda: dg.k_grouped_fp8_gemm_nt_contiguous((dg_a, a_scale), (dg_b, b_scale), d, ks, sizes,
                                                                      d, recipe=(1, 1, 128))
    if args.calls:  # for a profiler: each callable args.calls times in turn, nothing timed
        for name, fn in fns.items():
            for _ in range(args.calls):
                fn()
            torch.cuda.synchronize()
        return {"m": m, "n": n, "groups": label, "sizes": ks, "refused": bad}
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)
    ref = times.get("deepgemm")
    print(f"{m}x{n} {label} ({tokens} tokens)", flush=True)
    for name, us in times.items():
        tflops = 2.0 * m * n * tokens / us / 1e6
        ratio = f"  DG / this {ref / us:.3f}" if ref else ""
        print(f"  {name:>22} {us:9.1f} us {tflops:7.1f} TFLOPS{ratio}", flush=True)
    for line in bad:
        print(f"  ! {line}", flush=True)
    return {"m": m, "n": n, "groups": label, "sizes": ks, "us": times, "refused": bad}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["4096,7168,16x2048", "4096,7168,32x1024", "7168,2048,16x2048",
                                                    "7168,2048,64x1024"], metavar="M,N,GxT")
    p.add_argument("--configs", default="auto,128x128:b2,128x256,256x128,128x192:w96,128x160,256x64")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-deepgemm", action="store_true")
    p.add_argument("--no-c", action="store_true",
                   help="FP32 D written without C instead of accumulated in place (DeepGEMM has no such call)")
    p.add_argument("--calls", type=int, default=0,
                   help="run each config (then DeepGEMM) this many times in turn without timing (under ncu)")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="accept an output this far from the pick's (max |diff| / max |pick|; default 0: "
                        "bitwise), for variants that add C in another order")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    for spec in args.shapes:
        m, n, groups = spec.split(",")
        rows.append(one_shape(int(m), int(n), groups, args.configs.split(","), args))
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
