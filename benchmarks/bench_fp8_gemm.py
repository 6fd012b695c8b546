"""Benchmark deep_tile.fp8_gemm against cuBLAS (torch._scaled_mm) and DeepGEMM, in one process.

Usage:
    python benchmarks/bench_fp8_gemm.py                       # BENCH_SHAPES (18 model shapes + 8192^3)
    python benchmarks/bench_fp8_gemm.py --decode              # M in 1..128 x the 6 DeepSeek (N, K) pairs
    python benchmarks/bench_fp8_gemm.py --sustained --shapes 4096,7168,16384
    python benchmarks/bench_fp8_gemm.py --shapes 64,2112,7168 4096,7168,2048 --json r.json

Per shape: random FP8 inputs (TMA-aligned a_scale), a check of deep_tile against the float64
reference (NaN-poisoned output, calc_diff < 1e-3, max rel error < 1e-2; a failure marks the row
FAIL and makes the exit code 1), then all libraries timed round-robin on the same inputs
(testing.timing.bench_round_robin: each iteration times every library once, in a fresh random
order seeded by ``--seed`` (``--order fixed``: the same order every iteration), L2 flushed and a
sleep pad before each call, CUDA events, median). NOTES: in a fixed order some small shapes
moved by up to 10% with the library that ran before (H200, 2026-11-22: 8x32768x512 deep_tile
12.7 / DeepGEMM 11.5 us in two fixed-order runs, 12.5 / 12.2 and 12.2 / 12.0 shuffled), so the
default shuffles. Libraries: deep_tile; DeepGEMM when
``import deep_gemm`` works (either version; a baseline only, see ../shared/baselines/README.md);
cuBLAS blockwise (``torch._scaled_mm`` with 1x128 / 128x128 scales; needs M % 4 == 0 and
K % 128 == 0) and per-tensor with fast accumulation. GB/s counts the compulsory traffic (each
operand read once, the output written once); ``--decode`` also measures the HBM copy rate in the
same run and prints the percentage of it. ``--sustained`` runs each library back to back for
``--seconds`` per shape while nvidia-smi samples the SM clock and power, and prints TFLOPS,
MHz, W and TFLOPS per GHz (clocks move with power: this is work per clock).
"""
import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.reference import ref_fp8_gemm  # noqa: E402
from deep_tile.select.cost import min_bytes  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.shapes import BENCH_SHAPES, MODEL_NK  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth, sustained  # noqa: E402
from deep_tile.gemm.problem import Problem  # noqa: E402

DECODE_M = (1, 2, 4, 8, 16, 32, 64, 128)
DECODE_SHAPES = [(m, n, k) for m in DECODE_M for (n, k) in MODEL_NK]
"""The --decode set: every M of DECODE_M with every DeepSeek (N, K) pair."""
LIBRARIES = ("deep_tile", "deepgemm", "cublas_bw", "cublas_pt")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", metavar="M,N,K", help="shapes to run (default: BENCH_SHAPES)")
    p.add_argument("--decode", action="store_true", help="the decode set (M 1..128 x 6 (N, K))")
    p.add_argument("--sustained", action="store_true", help="back-to-back runs with clock/power sampling")
    p.add_argument("--seconds", type=float, default=3.0, help="--sustained: seconds per library and shape")
    p.add_argument("--iters", type=int, default=40, help="timed rounds (median taken)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per library first")
    p.add_argument("--no-deepgemm", action="store_true", help="leave DeepGEMM out even if importable")
    p.add_argument("--compat", action="store_true",
                   help="time deep_tile through deep_tile.compat.deepgemm.fp8_gemm_nt, with DeepGEMM's arguments")
    p.add_argument("--seed", type=int, default=0, help="data seed")
    p.add_argument("--order", choices=("fixed", "shuffled"), default="shuffled",
                   help="libraries in a fresh random order each round (default), or the same order every round")
    p.add_argument("--json", metavar="PATH", help="write environment + rows as JSON")
    args = p.parse_args(argv)
    if args.shapes:
        try:
            args.shape_list = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
        except ValueError:
            p.error(f"--shapes: expected M,N,K integers; got {args.shapes}")
        if any(len(s) != 3 for s in args.shape_list):
            p.error(f"--shapes: each shape needs exactly 3 values M,N,K; got {args.shapes}")
    else:
        args.shape_list = DECODE_SHAPES if args.decode else BENCH_SHAPES
    return args


def deepgemm_version():
    """``(module, "latest" | "2025")`` when DeepGEMM is importable, else ``(None, None)``."""
    try:
        import deep_gemm
    except ImportError:
        return None, None
    return deep_gemm, ("latest" if hasattr(deep_gemm, "fp8_gemm_nt") else "2025")


def environment() -> dict:
    """GPU, clocks, driver, torch/CUDA versions, the deep_tile compiler and DeepGEMM's version."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "gpu": props.name,
            "num_sms": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "clocks_sm_mhz": "?", "clocks_max_sm_mhz": "?", "driver": "?", "compiler": "?",
            "deepgemm": deepgemm_version()[1] or "not importable"}
    try:
        q = subprocess.run(["nvidia-smi", f"--id={torch.cuda.current_device()}",
                            "--query-gpu=clocks.sm,clocks.max.sm,driver_version", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        info["clocks_sm_mhz"], info["clocks_max_sm_mhz"], info["driver"] = \
            [v.strip() for v in q.stdout.strip().splitlines()[0].split(",")]
    except Exception:  # noqa: BLE001 -- nvidia-smi is optional
        pass
    from deep_tile.jit.compiler import compiler_version, default_compiler

    name = default_compiler()
    info["compiler"] = f"{name} {compiler_version(name)}"
    return info


def library_fns(a, a_scale, b, b_scale, out, use_deepgemm: bool, compat: bool = False) -> dict:
    """name -> zero-argument callable, or the reason the library cannot run the shape (a str);
    ``compat``: deep_tile through deep_tile.compat.deepgemm with DeepGEMM's own arguments."""
    m, k = a.shape
    fns = {"deep_tile": lambda: deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out)}
    if compat:
        import deep_tile.compat.deepgemm as dt_compat

        fns["deep_tile"] = lambda: dt_compat.fp8_gemm_nt((a, a_scale), (b, b_scale), out, recipe=(1, 128, 128),
                                                         disable_ue8m0_cast=True)
    dg, version = deepgemm_version()
    if use_deepgemm and dg is not None:
        dg_out = torch.empty_like(out)
        if version == "latest":
            fns["deepgemm"] = lambda: dg.fp8_gemm_nt((a, a_scale), (b, b_scale), dg_out, recipe=(1, 128, 128),
                                                     disable_ue8m0_cast=True)
        else:
            fns["deepgemm"] = lambda: dg.gemm_fp8_fp8_bf16_nt((a, a_scale), (b, b_scale), dg_out)
    else:
        fns["deepgemm"] = "not importable" if dg is None else "disabled"
    if k % 128 == 0 and m % 4 == 0:
        sa, sb = a_scale.t().contiguous().t(), b_scale.contiguous().t()
        fns["cublas_bw"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    else:
        fns["cublas_bw"] = "needs K % 128 == 0 and M % 4 == 0"
    one = torch.ones((), dtype=torch.float32, device=a.device)
    fns["cublas_pt"] = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                use_fast_accum=True)
    return fns


def runnable(fns: dict) -> dict:
    """The callables of ``fns`` that run once without raising (compiles, checks each runs); the
    others are replaced in ``fns`` by their error text (bench_grouped.py uses it too)."""
    ok = {}
    for name, fn in list(fns.items()):
        if not callable(fn):
            continue
        try:
            fn()
            torch.cuda.synchronize()
            ok[name] = fn
        except Exception as e:  # noqa: BLE001 -- e.g. CUBLAS_STATUS_NOT_SUPPORTED
            fns[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    return ok


def run_shape(m, n, k, args) -> dict:
    """Check and time one shape; returns the row record (errors are recorded, not raised)."""
    config = deep_tile.get_config(m, n, k)
    row = {"m": m, "n": n, "k": k, "config": config.label, "status": "ok"}
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=args.seed, a_scale_layout="tma")
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    ref = ref_fp8_gemm(a, a_scale, b, b_scale)
    deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out)
    row["calc_diff"], row["max_rel"] = calc_diff(out, ref), max_rel_error(out, ref)
    if not (bool(torch.isfinite(out).all()) and row["calc_diff"] < 1e-3 and row["max_rel"] < 1e-2):
        row["status"] = "FAIL"
    del ref
    fns = library_fns(a, a_scale, b, b_scale, out, not args.no_deepgemm, args.compat)
    ran = runnable(fns)
    for name, fn in fns.items():
        if not callable(fn):
            row[f"{name}_error"] = fn
    flops, nbytes = 2.0 * m * n * k, min_bytes(Problem(m, n, k))
    if args.sustained:
        for name, fn in ran.items():
            s = sustained(fn, args.seconds)
            tflops = flops / s["us"] / 1e6
            row[name] = {"us": s["us"], "tflops": tflops, "mhz": s["mhz"], "watts": s["watts"],
                         "tflops_per_ghz": tflops / (s["mhz"] / 1e3)}
        return row
    times = bench_round_robin(ran, warmup=args.warmup, iters=args.iters,
                              shuffle_seed=args.seed if args.order == "shuffled" else None)
    for name, us in times.items():
        row[name] = {"us": us, "tflops": flops / us / 1e6, "gbps": nbytes / us / 1e3}
    return row


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _get(r, name, key):
    return r.get(name, {}).get(key) if isinstance(r.get(name), dict) else None


def _ratio(r, other):
    mine, theirs = _get(r, "deep_tile", "us"), _get(r, other, "us")
    return theirs / mine if mine and theirs else None


def print_rows(rows, args, copy_rate):
    if args.sustained:
        headers = ["M", "N", "K", "config"] + [f"{lib} {col}" for lib in LIBRARIES for col in ("TFLOPS", "MHz", "W", "TF/GHz")]
        cells = []
        for r in rows:
            line = [r["m"], r["n"], r["k"], r["config"]]
            for lib in LIBRARIES:
                line += [_fmt(_get(r, lib, "tflops"), ".0f"), _fmt(_get(r, lib, "mhz"), ".0f"),
                         _fmt(_get(r, lib, "watts"), ".0f"), _fmt(_get(r, lib, "tflops_per_ghz"), ".0f")]
            cells.append(line)
        print_table(headers, cells, ">>><" + ">" * (len(headers) - 4))
        return
    headers = ["M", "N", "K", "config", "us", "TFLOPS", "GB/s"] + (["%HBM"] if copy_rate else []) + \
              ["DeepGEMM us", "cuBLAS-bw us", "cuBLAS-pt us", "vs DG", "vs bw", "check"]
    cells = []
    for r in rows:
        if "error" in r:
            cells.append([r["m"], r["n"], r["k"], r.get("config", "")] + ["-"] * (len(headers) - 5) + [r["error"][:60]])
            continue
        line = [r["m"], r["n"], r["k"], r["config"], _fmt(_get(r, "deep_tile", "us"), ".1f"),
                _fmt(_get(r, "deep_tile", "tflops"), ".0f"), _fmt(_get(r, "deep_tile", "gbps"), ".0f")]
        if copy_rate:
            gbps = _get(r, "deep_tile", "gbps")
            line.append(_fmt(gbps * 1e9 / copy_rate * 100 if gbps else None, ".0f"))
        line += [_fmt(_get(r, "deepgemm", "us"), ".1f"), _fmt(_get(r, "cublas_bw", "us"), ".1f"),
                 _fmt(_get(r, "cublas_pt", "us"), ".1f"), _fmt(_ratio(r, "deepgemm"), ".3f"),
                 _fmt(_ratio(r, "cublas_bw"), ".3f"), f"{r['status']} {r['calc_diff']:.1e}"]
        cells.append(line)
    print_table(headers, cells, ">>><" + ">" * (len(headers) - 5) + "<")


def summary_lines(rows, env) -> list:
    lines = []
    for other, name in (("deepgemm", f"DeepGEMM {env['deepgemm']}"), ("cublas_bw", "cuBLAS blockwise"),
                        ("cublas_pt", "cuBLAS per-tensor fast-accum")):
        ratios = [(r["m"], _ratio(r, other)) for r in rows if _ratio(r, other)]
        if not ratios:
            continue
        values = [v for _, v in ratios]
        lines.append(f"deep_tile vs {name}: geomean {geomean(values):.3f}x over {len(values)} shapes "
                     f"(min {min(values):.3f}, max {max(values):.3f})")
        for m in sorted({m for m, _ in ratios}):
            group = [v for mm, v in ratios if mm == m]
            lines.append(f"  M={m}: {geomean(group):.3f}x ({len(group)} shapes, min {min(group):.3f})")
    return lines


def environment_text(env: dict) -> str:
    """The two header lines of a benchmark's output: GPU, clocks, driver; versions and date."""
    return (f"GPU: {env['gpu']} ({env['num_sms']} SMs), SM clock {env['clocks_sm_mhz']} / max "
            f"{env['clocks_max_sm_mhz']} MHz, driver {env['driver']}\n"
            f"torch {env['torch']}, CUDA {env['cuda']}, deep_tile compiler {env['compiler']}, "
            f"DeepGEMM {env['deepgemm']}, date {env['date']}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_fp8_gemm: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    env = environment()
    print(environment_text(env))
    copy_rate = copy_bandwidth() if args.decode else None
    if copy_rate:
        env["copy_bytes_per_s"] = copy_rate
        print(f"HBM copy rate (read + write of 1 GiB): {copy_rate / 1e12:.2f} TB/s")
    mode = (f"sustained {args.seconds:.0f} s per library" if args.sustained else
            f"round-robin ({args.order} order), L2 flush + sleep pad, CUDA events, median of {args.iters}")
    env["order"] = args.order
    print(f"timing: {mode}; a_scale TMA-aligned; same FP8 inputs for every library")
    rows = []
    for m, n, k in args.shape_list:
        try:
            rows.append(run_shape(m, n, k, args))
        except Exception as e:  # noqa: BLE001 -- one bad shape must not kill the table
            rows.append({"m": m, "n": n, "k": k, "status": "ERROR", "error": f"{type(e).__name__}: {e}".replace("\n", " ")})
        torch.cuda.empty_cache()
    print()
    print_rows(rows, args, copy_rate)
    summary = summary_lines(rows, env) if not args.sustained else []
    print("\n".join(summary))
    refused = {(r["m"], r["n"], r["k"]): {k: v for k, v in r.items() if k.endswith("_error")} for r in rows}
    for shape, errors in refused.items():
        if errors:
            print(f"  {shape}: not run: {errors}")
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "rows": rows, "summary": summary}, indent=1))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} shape(s) FAILED or errored: {[(r['m'], r['n'], r['k']) for r in failed]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
