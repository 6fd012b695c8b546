"""Host overhead of fp8_gemm: CPU microseconds per call, and the latency of a process's first call.

Run on a Hopper GPU from the repository root::

    PYTHONPATH=. python3 benchmarks/bench_host.py [--shape 64,2112,7168] [--calls 2000] [--json out.json]

Per-call cost, at a shape whose kernel takes ~15 us so the GPU is not what is measured:

- ``host us/call``: the calls are timed in batches of ``--batch`` (synchronising between batches,
  outside the timed region), so the launch queue never fills and only the host's time is counted;
- ``loop us/call``: wall time of ``--calls`` back-to-back calls with ``torch.cuda.synchronize``
  only at the ends (GPU-bound when the host is faster than the kernel).

Rows: deep_tile on the native path (``torch.ops.deep_tile`` -> C++) and on the Python path
(``DEEP_TILE_NATIVE=off``, through the op; and ``deep_tile.gemm.launch.run`` directly), each with the
TMA-aligned a_scale and with a row-major one; cuBLAS blockwise FP8 (``torch._scaled_mm``); DeepGEMM
when ``import deep_gemm`` works. The ratio column is against ``torch._scaled_mm`` in this process.

First call: child processes that initialise CUDA, make the operands, then time ``import deep_tile``
plus the first ``fp8_gemm`` (synchronised): with a cold cache (an empty ``DEEP_TILE_CACHE_DIR``:
the kernel is compiled; native off), with the warm cache (native path, and Python path), and
``--procs`` warm processes started at once. The warm rows also list the phases of
``DEEP_TILE_DEBUG``. Exit status: 0, or 1 when a deep_tile measurement failed (missing cuBLAS
support or DeepGEMM are reported, not failures).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
m, n, k, gate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import torch
torch.cuda.init()
torch.cuda.current_stream().synchronize()
sys.path.insert(0, os.environ["BENCH_ROOT"])
from deep_tile.testing.data import make_fp8_problem
a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
torch.cuda.synchronize()
if gate != "-":
    open(gate + f".ready{os.getpid()}", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.001)
start = time.perf_counter()
import deep_tile
imported = time.perf_counter()
out = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
torch.cuda.synchronize()
done = time.perf_counter()
from deep_tile import native, phases
report = phases.last_report()
print("CHILD " + json.dumps({"import_ms": (imported - start) * 1e3, "first_call_ms": (done - start) * 1e3,
                             "call_ms": (done - imported) * 1e3, "native": native.status()["state"],
                             "phases_ms": {p: s * 1e3 for p, s in report.get("seconds", {}).items()},
                             "report": report.get("what", "")}))
"""


def _child_env(**extra) -> dict:
    env = dict(os.environ, BENCH_ROOT=str(ROOT))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def first_calls(shape, procs: int, **env_extra) -> list[dict]:
    """Start ``procs`` child processes together; return each one's timings."""
    with tempfile.TemporaryDirectory(prefix="bench-host-") as tmp:
        gate = os.path.join(tmp, "gate") if procs > 1 else "-"
        children = [subprocess.Popen([sys.executable, "-c", CHILD, *map(str, shape), gate], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=_child_env(**env_extra))
                    for _ in range(procs)]
        if procs > 1:
            deadline = time.monotonic() + 300
            while len([p for p in os.listdir(tmp) if ".ready" in p]) < procs and time.monotonic() < deadline:
                if any(c.poll() is not None for c in children):
                    break
                time.sleep(0.01)
            Path(gate).touch()
        results = []
        for child in children:
            out, err = child.communicate(timeout=900)
            lines = [line for line in out.splitlines() if line.startswith("CHILD ")]
            if child.returncode != 0 or not lines:
                raise RuntimeError(f"first-call child failed ({child.returncode}): {err[-2000:]}")
            results.append(json.loads(lines[-1][len("CHILD "):]))
        return results


def per_call(fn, calls: int, batch: int) -> dict:
    """Host microseconds per call (timed batches) and loop microseconds per call (GPU included)."""
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    host = 0.0
    done = 0
    while done < calls:
        todo = min(batch, calls - done)
        start = time.perf_counter()
        for _ in range(todo):
            fn()
        host += time.perf_counter() - start
        torch.cuda.synchronize()
        done += todo
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    loop = time.perf_counter() - start
    return {"host_us": host / calls * 1e6, "loop_us": loop / calls * 1e6}


def measure_per_call(shape, calls: int, batch: int) -> tuple[list[dict], list[str]]:
    """Every row of the per-call table, and the failures."""
    import torch

    import deep_tile
    from deep_tile import native
    from deep_tile.gemm.launch import run
    from deep_tile.native import loader
    from deep_tile.testing.data import make_fp8_problem

    m, n, k = shape
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
    a_scale_row = a_scale.contiguous()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    rows, failures = [], []

    def add(name, fn, note=""):
        try:
            rows.append({"name": name, **per_call(fn, calls, batch), "note": note})
        except Exception as exc:  # noqa: BLE001 - reported in the table
            rows.append({"name": name, "host_us": None, "loop_us": None, "note": f"{type(exc).__name__}: {exc}"[:160]})
            return False
        return True

    if native.build(wait=True):
        reference = run(a, a_scale, b, b_scale, torch.empty_like(out))
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
        torch.cuda.synchronize()
        if not torch.equal(out.view(torch.int16), reference.view(torch.int16)):
            failures.append("native and Python paths differ")
        before = native.module().stats()
        for name, scale in (("deep_tile native, aligned a_scale", a_scale),
                            ("deep_tile native, row-major a_scale", a_scale_row)):
            if not add(name, lambda s=scale: deep_tile.fp8_gemm(a, s, b, b_scale, out)):
                failures.append(name)
        add("deep_tile native, aligned, out=None", lambda: deep_tile.fp8_gemm(a, a_scale, b, b_scale))
        after = native.module().stats()
        if after["python_calls"] != before["python_calls"]:
            failures.append("native rows handed calls to the Python path")
    else:
        failures.append(f"native extension unavailable: {native.status()}")
        rows.append({"name": "deep_tile native", "host_us": None, "loop_us": None, "note": str(native.status())})
    loader.reset()
    os.environ["DEEP_TILE_NATIVE"] = "off"  # this process: the Python kernels of the ops
    try:
        for name, scale in (("deep_tile Python path (op), aligned", a_scale),
                            ("deep_tile Python path (op), row-major", a_scale_row)):
            if not add(name, lambda s=scale: deep_tile.fp8_gemm(a, s, b, b_scale, out)):
                failures.append(name)
        add("deep_tile launch.run, aligned", lambda: run(a, a_scale, b, b_scale, out))
    finally:
        os.environ.pop("DEEP_TILE_NATIVE")
        loader.reset()
        native.build(wait=True)
    scale_a, scale_b = a_scale.t().contiguous().t(), b_scale.t()
    add("cuBLAS blockwise (torch._scaled_mm)",
        lambda: torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16))
    try:
        import deep_gemm
    except Exception as exc:  # noqa: BLE001
        rows.append({"name": "DeepGEMM fp8_gemm_nt", "host_us": None, "loop_us": None,
                     "note": f"not measured: import deep_gemm failed ({type(exc).__name__})"})
    else:
        add("DeepGEMM fp8_gemm_nt", lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out,
                                                                  recipe=(1, 128, 128), disable_ue8m0_cast=True))
    cublas = next((r["host_us"] for r in rows if r["name"].startswith("cuBLAS")), None)
    for row in rows:
        row["vs_cublas"] = row["host_us"] / cublas if row["host_us"] and cublas else None
    return rows, failures


def measure_first_calls(shape, procs: int) -> list[dict]:
    """The first-call rows: cold cache, warm native, warm Python path, ``procs`` at once."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-host-cold-") as cold:
        for r in first_calls(shape, 1, DEEP_TILE_CACHE_DIR=cold, DEEP_TILE_NATIVE="off"):
            rows.append({"name": "cold cache (kernel compiled; Python path)", **r})
    for r in first_calls(shape, 1):
        rows.append({"name": "warm cache, native path", **r})
    for r in first_calls(shape, 1, DEEP_TILE_NATIVE="off"):
        rows.append({"name": "warm cache, Python path", **r})
    together = first_calls(shape, procs)
    times = sorted(r["first_call_ms"] for r in together)
    rows.append({"name": f"warm cache, {procs} processes at once (median; max {times[-1]:.1f} ms)",
                 **together[len(together) // 2], "first_call_ms": statistics.median(times), "all_ms": times})
    return rows


def _fmt(value, spec=".1f") -> str:
    return "-" if value is None else format(value, spec)


def print_tables(shape, rows, first, info) -> None:
    """The two tables, as text."""
    print(f"# deep_tile host overhead at {shape[0]}x{shape[1]}x{shape[2]} on {info['device']} "
          f"(torch {info['torch']}, {info['calls']} calls)")
    print(f"{'':44s} {'host us/call':>13s} {'loop us/call':>13s} {'x cuBLAS':>9s}  note")
    for r in rows:
        print(f"{r['name']:44s} {_fmt(r['host_us']):>13s} {_fmt(r['loop_us']):>13s} "
              f"{_fmt(r.get('vs_cublas'), '.2f'):>9s}  {r['note']}")
    print()
    print(f"{'first call (fresh process, CUDA initialised)':58s} {'total ms':>9s} {'import ms':>10s} {'path':>12s}  phases (ms)")
    for r in first:
        phases = ", ".join(f"{p} {ms:.1f}" for p, ms in r.get("phases_ms", {}).items())
        print(f"{r['name']:58s} {r['first_call_ms']:9.1f} {r['import_ms']:10.1f} {r['native']:>12s}  {phases}")


def main(argv=None) -> int:
    """Measure, print the tables, optionally write JSON; 1 when a deep_tile measurement failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="64,2112,7168", help="M,N,K (default 64,2112,7168)")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per row (default 2000)")
    parser.add_argument("--batch", type=int, default=200, help="calls per host-timed batch (default 200)")
    parser.add_argument("--procs", type=int, default=8, help="processes started at once (default 8)")
    parser.add_argument("--skip-first-call", action="store_true", help="only the per-call table")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    import torch

    shape = tuple(int(v) for v in args.shape.split(","))
    if not torch.cuda.is_available():
        print("bench_host: needs a CUDA GPU", file=sys.stderr)
        return 1
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "calls": args.calls}
    rows, failures = measure_per_call(shape, args.calls, args.batch)
    first = []
    if not args.skip_first_call:
        try:
            first = measure_first_calls(shape, args.procs)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"first-call measurement: {exc}")
    print_tables(shape, rows, first, info)
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": shape, "info": info, "per_call": rows, "first_call": first,
                                               "failures": failures}, indent=1))
    for failure in failures:
        print(f"bench_host: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
