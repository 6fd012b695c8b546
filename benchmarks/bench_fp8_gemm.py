"""Benchmark deep_tile.fp8_gemm against cuBLAS (torch._scaled_mm) and bf16 torch.mm.

Usage:
    python benchmarks/bench_fp8_gemm.py                       # BENCH_SHAPES (18 model shapes + 8192^3)
    python benchmarks/bench_fp8_gemm.py --quick               # a 4-shape subset
    python benchmarks/bench_fp8_gemm.py --shapes 64,2112,7168 4096,7168,2048
    python benchmarks/bench_fp8_gemm.py --json r.json --csv r.csv --plot r.png --iters 100

Per shape: random FP8 inputs (make_fp8_problem, TMA-aligned a_scale by default), a check of
deep_tile against the float64 reference (calc_diff < 1e-3 and max rel error < 1e-2; a failure
marks the row FAIL and makes the exit code 1), then timings (testing.timing.bench_gpu: L2 flush,
sleep pad, CUDA events, median) of deep_tile, cuBLAS blockwise, cuBLAS per-tensor (fast
accumulation) and bf16 torch.mm. '-' means a baseline refused the shape; a '*' after the cuBLAS
blockwise TFLOPS means its own output failed the same check (its scale layout was misread).
"""
import argparse
import csv
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
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.shapes import BENCH_SHAPES  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_gpu  # noqa: E402

QUICK_SHAPES = [(64, 2112, 7168), (128, 24576, 1536), (4096, 7168, 2048), (4096, 4096, 7168)]
HEADERS = ["M", "N", "K", "config", "us", "TFLOPS", "GB/s", "cuBLAS-bw", "cuBLAS-pt", "bf16",
           "vs bw", "check"]
ALIGNS = ">>><>>>>>>><"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", metavar="M,N,K", help="shapes to run (default: BENCH_SHAPES)")
    p.add_argument("--quick", action="store_true", help=f"run only {QUICK_SHAPES}")
    p.add_argument("--iters", type=int, default=60, help="timed calls per measurement (median taken)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    p.add_argument("--no-check", action="store_true", help="skip the float64 correctness check")
    p.add_argument("--a-scale-layout", choices=("tma", "row"), default="tma", help="a_scale given to deep_tile")
    p.add_argument("--seed", type=int, default=0, help="data seed")
    p.add_argument("--json", metavar="PATH", help="write header + rows as JSON")
    p.add_argument("--csv", metavar="PATH", help="write rows as CSV")
    p.add_argument("--plot", metavar="PATH", help="PNG of TFLOPS per shape (needs matplotlib)")
    args = p.parse_args(argv)
    if args.shapes:
        try:
            args.shape_list = [tuple(int(v) for v in s.split(",")) for s in args.shapes]
        except ValueError:
            p.error(f"--shapes: expected M,N,K integers; got {args.shapes}")
        if any(len(s) != 3 for s in args.shape_list):
            p.error(f"--shapes: each shape needs exactly 3 values M,N,K; got {args.shapes}")
    else:
        args.shape_list = QUICK_SHAPES if args.quick else BENCH_SHAPES
    return args


def environment() -> dict:
    """GPU, clocks, driver, torch/CUDA versions and the deep_tile compiler, best effort."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "gpu": props.name,
            "num_sms": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "clocks_sm_mhz": "unknown", "clocks_max_sm_mhz": "unknown", "driver": "unknown", "compiler": "unknown"}
    try:
        q = subprocess.run(["nvidia-smi", f"--id={torch.cuda.current_device()}",
                            "--query-gpu=clocks.sm,clocks.max.sm,driver_version", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        sm, max_sm, driver = [v.strip() for v in q.stdout.strip().splitlines()[0].split(",")]
        info.update(clocks_sm_mhz=sm, clocks_max_sm_mhz=max_sm, driver=driver)
    except Exception:  # noqa: BLE001 -- nvidia-smi is optional
        pass
    try:
        from deep_tile.jit.compiler import default_compiler

        info["compiler"] = str(default_compiler())
    except Exception:  # noqa: BLE001 -- module may not exist yet
        pass
    return info


def config_str(m: int, n: int, k: int) -> str:
    """Short form of deep_tile.get_config(m, n, k): '128x160 s6 A2' (multicast on A, 2 CTAs)."""
    try:
        c = deep_tile.get_config(m, n, k)
    except Exception as e:  # noqa: BLE001
        return f"? ({type(e).__name__})"
    text = f"{c.block_m}x{c.block_n} s{c.num_stages}"
    if getattr(c, "num_multicast", 1) > 1:
        text += f" {'A' if getattr(c, 'multicast_on_a', False) else 'B'}{c.num_multicast}"
    return text


def baselines(a, a_scale, b, b_scale):
    """Callables for the baselines: name -> fn, or the reason it cannot run (a str)."""
    m, k = a.shape
    n = b.shape[0]
    fns = {}
    # cuBLAS blockwise refuses M % 4 != 0 (ANCHORS.md) and needs whole 128-wide K groups; a ragged
    # last N block is fine (scale_b has ceil(N/128) rows). Its output is checked like ours.
    if k % 128 == 0 and m % 4 == 0:
        sa = a_scale.t().contiguous().t()        # (M, K/128), stride (1, M): column-major
        sb = b_scale.contiguous().t()            # (K/128, ceil(N/128)): transpose of row-major b_scale
        fns["cublas_bw"] = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    else:
        fns["cublas_bw"] = "needs K % 128 == 0 and M % 4 == 0"
    one = torch.ones((), dtype=torch.float32, device=a.device)
    fns["cublas_pt"] = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                use_fast_accum=True)
    a16, b16t = a.to(torch.bfloat16), b.to(torch.bfloat16).t()
    fns["bf16"] = lambda: torch.mm(a16, b16t)
    return fns


def run_shape(m, n, k, args) -> dict:
    """Check and time one shape; returns the row record (errors are recorded, not raised)."""
    row = {"m": m, "n": n, "k": k, "config": config_str(m, n, k), "status": "ok"}
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=args.seed, a_scale_layout=args.a_scale_layout)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    fns = baselines(a, a_scale, b, b_scale)
    if not args.no_check:
        ref = ref_fp8_gemm(a, a_scale, b, b_scale)
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out)
        row["calc_diff"], row["max_rel"] = calc_diff(out, ref), max_rel_error(out, ref)
        finite = bool(torch.isfinite(out).all())
        if not (finite and row["calc_diff"] < 1e-3 and row["max_rel"] < 1e-2):
            row["status"] = "FAIL"
        if callable(fns["cublas_bw"]):
            try:
                row["cublas_bw_diff"] = calc_diff(fns["cublas_bw"](), ref)
            except Exception:  # noqa: BLE001 -- reported when timed
                pass
        del ref
    flops, nbytes = 2.0 * m * n * k, m * k + n * k + 2 * m * n + 4 * (a_scale.numel() + b_scale.numel())
    t = bench_gpu(lambda: deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out), warmup=args.warmup, iters=args.iters)
    row.update(us=t["median_us"], tflops=flops / t["median_us"] / 1e6, gbps=nbytes / t["median_us"] / 1e3)
    for name, fn in fns.items():
        if not callable(fn):
            row[f"{name}_error"] = fn
            continue
        try:
            tb = bench_gpu(fn, warmup=args.warmup, iters=args.iters)
            row[f"{name}_us"], row[f"{name}_tflops"] = tb["median_us"], flops / tb["median_us"] / 1e6
        except Exception as e:  # noqa: BLE001 -- e.g. CUBLAS_STATUS_NOT_SUPPORTED
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if row.get("cublas_bw_us"):
        row["speedup_vs_cublas_bw"] = row["cublas_bw_us"] / row["us"]
    return row


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table_cells(r: dict) -> list:
    if "error" in r:
        return [r["m"], r["n"], r["k"], r.get("config", "")] + ["-"] * 7 + ["ERROR " + r["error"][:100]]
    bw = _fmt(r.get("cublas_bw_tflops"), ".0f")
    if r.get("cublas_bw_diff", 0.0) >= 1e-3 and bw != "-":
        bw += "*"
    check = "skipped" if "calc_diff" not in r else f"{r['status']} {r['calc_diff']:.1e}"
    return [r["m"], r["n"], r["k"], r["config"], f"{r['us']:.1f}", f"{r['tflops']:.0f}", f"{r['gbps']:.0f}", bw,
            _fmt(r.get("cublas_pt_tflops"), ".0f"), _fmt(r.get("bf16_tflops"), ".0f"),
            _fmt(r.get("speedup_vs_cublas_bw"), ".3f"), check]


def summary_lines(rows) -> list:
    ok = [r for r in rows if r.get("speedup_vs_cublas_bw")]
    if not ok:
        return ["geomean speedup over cuBLAS blockwise: n/a (no shape has both timings)"]
    lines = [f"geomean speedup over cuBLAS blockwise: {geomean(r['speedup_vs_cublas_bw'] for r in ok):.3f}x "
             f"({len(ok)} shapes)"]
    for m in sorted({r["m"] for r in ok}):
        group = [r["speedup_vs_cublas_bw"] for r in ok if r["m"] == m]
        lines.append(f"  M={m}: {geomean(group):.3f}x ({len(group)} shapes)")
    return lines


def write_outputs(args, env, rows, summary):
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "rows": rows, "summary": summary}, indent=1))
    if args.csv:
        keys = sorted({key for r in rows for key in r})
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"--plot: matplotlib is not installed; {args.plot} not written")
            return
        done = [r for r in rows if "tflops" in r]
        xs = range(len(done))
        fig, ax = plt.subplots(figsize=(max(8, len(done) * 0.6), 5))
        ax.bar([x - 0.2 for x in xs], [r["tflops"] for r in done], 0.4, label="deep_tile")
        ax.bar([x + 0.2 for x in xs], [r.get("cublas_bw_tflops") or 0 for r in done], 0.4, label="cuBLAS blockwise")
        ax.set_xticks(list(xs), [f"{r['m']}x{r['n']}x{r['k']}" for r in done], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("TFLOPS")
        ax.set_title(f"FP8 GEMM, {env['gpu']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_fp8_gemm: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    env = environment()
    print(f"GPU: {env['gpu']} ({env['num_sms']} SMs), SM clock {env['clocks_sm_mhz']} / max "
          f"{env['clocks_max_sm_mhz']} MHz, driver {env['driver']}")
    print(f"torch {env['torch']}, CUDA {env['cuda']}, deep_tile compiler: {env['compiler']}, date {env['date']}")
    print(f"timing: L2 flush + sleep pad, CUDA events, median of {args.iters} after {args.warmup} warm-ups; "
          f"a_scale layout {args.a_scale_layout}; TFLOPS columns are deep_tile / cuBLAS / bf16")
    rows = []
    for m, n, k in args.shape_list:
        try:
            rows.append(run_shape(m, n, k, args))
        except Exception as e:  # noqa: BLE001 -- one bad shape must not kill the table
            rows.append({"m": m, "n": n, "k": k, "config": config_str(m, n, k), "status": "ERROR",
                         "error": f"{type(e).__name__}: {e}".replace("\n", " ")})
        torch.cuda.empty_cache()
    print()
    print_table(HEADERS, [table_cells(r) for r in rows], ALIGNS)
    summary = summary_lines(rows)
    print("\n".join(summary))
    for r in rows:
        errors = {key: v for key, v in r.items() if key.endswith("_error")}
        if errors:
            print(f"  {r['m']}x{r['n']}x{r['k']} baselines refused: {errors}")
    write_outputs(args, env, rows, summary)
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} shape(s) FAILED or errored: {[(r['m'], r['n'], r['k']) for r in failed]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
