"""Check and time forced kernel configurations on shapes (tuning aid; the timing needs a GPU).

    python benchmarks/probes/sweep_configs.py --shapes 4096,7168,16384 --configs auto,128x128,256x128:mcA
    python benchmarks/probes/sweep_configs.py --set large --configs 128x128,256x128:mcA --top 6 --json sweep.json
    python benchmarks/probes/sweep_configs.py --set decode --top 8 --compile-only --jobs 16   # fill the cache

Configurations are in the text form of :mod:`deep_tile.testing.configs` (``auto`` is the
selector's choice; ``auto:ef`` / ``auto:noef`` the same with B evict-first in L2 on or off, to
measure the ``selector.streams_b`` rule; ``auto:b1`` / ``auto:b2`` the same with one or two
accumulator buffers, to measure ``selector.one_buffer_for_two_warpgroups`` and
``selector.overlaps_promotion``; ``auto:u3`` / ``auto:u6`` the same with the one-buffer k-loop
unrolled by 3 or 6, to measure ``selector.k_unroll_for`` and ``selector.swap_unroll_for``);
``--top N`` adds the selector model's N best candidates of each shape. Each run is checked first (NaN-poisoned output, calc_diff and max relative error against the float64
reference, bitwise-identical repeat), then timed (L2 flush, sleep pad, events, median). With
``--baselines`` cuBLAS (blockwise and per-tensor) and, if importable, DeepGEMM are timed on the
same inputs. ``--compile-only`` builds every kernel into the disk cache with ``--jobs`` processes
and needs no GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile

from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.select import rank_candidates, select_config  # noqa: E402
from deep_tile.select.selector import config_from_estimate  # noqa: E402
from deep_tile.testing.cache_fill import fill_cache  # noqa: E402
from deep_tile.testing.configs import format_config, parse_config  # noqa: E402
from deep_tile.testing.shapes import MODEL_NK, MODEL_SHAPES  # noqa: E402

SETS = {
    "large": [s for s in MODEL_SHAPES if s[0] == 4096] + [(8192, 8192, 8192)],
    "small": [s for s in MODEL_SHAPES if s[0] <= 128],
    "decode": [(m, n, k) for m in (1, 2, 4, 8, 16, 32, 64, 128) for (n, k) in MODEL_NK],
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=[], metavar="M,N,K")
    p.add_argument("--set", action="append", default=[], choices=sorted(SETS), help="named shape sets")
    p.add_argument("--configs", default="auto", help="comma-separated configs (text form), 'auto' = selector")
    p.add_argument("--top", type=int, default=0, help="also the model's N best candidates per shape")
    p.add_argument("--num-sms", type=int, default=132)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--baselines", action="store_true", help="time cuBLAS and DeepGEMM too")
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
    for name in args.set:
        shapes += SETS[name]
    args.shape_list = list(dict.fromkeys(shapes))
    return args


def configs_for(m: int, n: int, k: int, args) -> list:
    """(label, KernelConfig) pairs to run on one shape, without duplicates."""
    found = {}
    for text in args.configs.split(","):
        text = text.strip()
        if not text:
            continue
        try:
            if text in ("auto", "auto:ef", "auto:noef", "auto:b1", "auto:b2", "auto:u3", "auto:u6"):
                config = select_config(Problem(m, n, k), args.num_sms)
                if text in ("auto:b1", "auto:b2"):
                    config = dataclasses.replace(config, accum_buffers=int(text[-1]))
                elif text in ("auto:u3", "auto:u6"):
                    config = dataclasses.replace(config, k_unroll=int(text[-1]))
                elif text != "auto":
                    config = dataclasses.replace(config, evict_first_b=text == "auto:ef")
            else:
                config = parse_config(text, m, n, args.num_sms)
        except ValueError as error:
            print(f"skip {text} on {m}x{n}x{k}: {error}", file=sys.stderr)
            continue
        found.setdefault(format_config(config), (text, config))
    for e in rank_candidates(Problem(m, n, k), args.num_sms)[:args.top]:
        config = config_from_estimate(Problem(m, n, k), e, args.num_sms)
        found.setdefault(format_config(config), (f"top:{e.candidate.label}", config))
    return list(found.values())


def compile_all(args) -> int:
    todo = {}
    for m, n, k in args.shape_list:
        for _, config in configs_for(m, n, k, args):
            todo.setdefault(tuple(sorted(config.defines().items())), config.label)
    return 1 if fill_cache(todo, args.jobs) else 0


def baseline_fns(a, a_scale, b, b_scale, out):
    """name -> zero-argument callable for cuBLAS blockwise / per-tensor and DeepGEMM (if importable)."""
    import torch

    m, k = a.shape
    fns = {}
    if k % 128 == 0 and m % 4 == 0:
        sa, sb = a_scale.t().contiguous().t(), b_scale.contiguous().t()
        fns["cublas_bw"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    one = torch.ones((), dtype=torch.float32, device=a.device)
    fns["cublas_pt"] = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                use_fast_accum=True)
    try:
        import deep_gemm
    except ImportError:
        return fns
    dg_out = torch.empty_like(out)
    if hasattr(deep_gemm, "fp8_gemm_nt"):
        fns["deepgemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), dg_out, recipe=(1, 128, 128),
                                                        disable_ue8m0_cast=True)
    else:
        fns["deepgemm"] = lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((a, a_scale), (b, b_scale), dg_out)
    return fns


def sweep(args) -> list:
    import torch

    import deep_tile
    from deep_tile.gemm.launch import run
    from deep_tile.testing.data import make_fp8_problem
    from deep_tile.testing.numeric import calc_diff, max_rel_error
    from deep_tile.testing.timing import bench_gpu

    rows = []
    for m, n, k in args.shape_list:
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout="tma")
        ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        flops = 2 * m * n * k
        shape = f"{m}x{n}x{k}"
        for text, cfg in configs_for(m, n, k, args):
            row = {"shape": [m, n, k], "config": format_config(cfg), "label": cfg.label, "spec": text}
            try:
                out.fill_(float("nan"))
                run(a, sa, b, sb, out, config=cfg)
                torch.cuda.synchronize()
                first = out.clone()
                out.fill_(float("nan"))
                run(a, sa, b, sb, out, config=cfg)
                row.update(diff=calc_diff(out.double(), ref), rel=max_rel_error(out, ref),
                           nan=int(torch.isnan(out).sum()), repeat=bool(torch.equal(first.view(torch.int16),
                                                                                     out.view(torch.int16))))
                row["ok"] = row["nan"] == 0 and row["diff"] < 1e-3 and row["rel"] < 1e-2 and row["repeat"]
                t = bench_gpu(lambda: run(a, sa, b, sb, out, config=cfg), iters=args.iters)["median_us"]
                row.update(us=t, tflops=flops / t / 1e6)
            except Exception as exc:  # noqa: BLE001 -- keep sweeping
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            rows.append(row)
            print(f"{shape:>18} {text:>26} {cfg.label:>24} "
                  + (f"{row['us']:9.1f} us {row['tflops']:6.0f} TF diff {row['diff']:.1e} "
                     f"{'ok' if row['ok'] else 'FAIL'}" if "us" in row else row.get("error", "")), flush=True)
        if args.baselines:
            for name, fn in baseline_fns(a, sa, b, sb, out).items():
                row = {"shape": [m, n, k], "config": name, "label": name, "spec": name}
                try:
                    t = bench_gpu(fn, iters=args.iters)["median_us"]
                    row.update(us=t, tflops=flops / t / 1e6, ok=True)
                    print(f"{shape:>18} {name:>26} {'':>24} {t:9.1f} us {row['tflops']:6.0f} TF", flush=True)
                except Exception as exc:  # noqa: BLE001
                    row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
                    print(f"{shape:>18} {name:>26} error {row['error']}", flush=True)
                rows.append(row)
        del ref
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compile_only:
        return compile_all(args)
    rows = sweep(args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    failed = [r for r in rows if not r.get("ok")]
    print(f"{len(rows)} runs, {len(failed)} failed or refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
