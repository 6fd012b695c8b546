"""What a chain of separate kernels that only read the weights reaches (GPU): the ceiling of the
decode chain's measure (benchmarks/bench_decode.py) for any design of one kernel per GEMM.

    python benchmarks/probes/chain_floor.py                      # M = 1 and 64, under a minute warm
    python benchmarks/probes/chain_floor.py --m 1,16,64 --forced "64:2112,7168=64x64:k3:ef:p128"
    python benchmarks/probes/chain_floor.py --m 16 --forced "w@16:7168,16384=64x128:k2:ef:p128:sw16" "n@16:32768,512=64x128:gM"
    python benchmarks/probes/chain_floor.py --alone 7168,16384 --m 64 --configs 64x128:k2:ef:p128

The dense chain of bench_decode (a DeepSeek-V3 layer's six dense GEMMs, ``--layers`` copies with
their own weights, captured in one CUDA graph, replayed ``--replays`` times between two CUDA
events after an L2 flush; median of ``--iters`` shuffled rounds) beside chains of read kernels
(benchmarks/probes/read_floor.cu: grid-stride 16-byte loads, 4 CTAs of 512 threads per SM, nothing
written) over the same weight buffers, timed in the same rounds:

- ``read``: one read of each GEMM's weights, launched with programmatic dependent launch (PDL),
  each waiting for its predecessor (griddepcontrol.wait) before it reads, as deep_tile's kernels
  do: what the chain's six boundaries cost a kernel that does nothing else;
- ``read nopdl``: the same launched plainly;
- ``read nowait``: PDL without the wait (legal only for a kernel that reads nothing a predecessor
  writes; a GEMM must wait for its activations): the launch mechanism's own floor;
- ``read layer``: one read of the layer's six weights at once (they share one buffer): no
  boundaries at all;
- ``deep_tile forced`` (with ``--forced M:N,K=config ...``): deep_tile with those configurations
  (testing.configs texts) for those GEMMs and the selector's elsewhere; entries spelled
  ``NAME@M:N,K=config`` make one chain ``forced NAME`` per NAME instead, so several sets are timed
  in the same rounds (``--warm I/N`` compiles their kernels in N processes first);
- ``ldg`` (with ``--ldg``, M <= 16): the probe GEMM of benchmarks/probes/ldg_gemm.cu, which streams the
  weights with plain 16-byte loads as the read kernel does (PDL, waiting before it reads); its
  outputs are checked like deep_tile's.

Bandwidth counts the weights for the reads and deep_tile's compulsory bytes (as bench_decode)
over the HBM copy rate measured in the same run; below the table, each kernel's time after its
predecessor's end in one profiled replay (bench_decode.timeline). deep_tile's outputs are checked
against the float64 reference (bench_decode.check). ``--alone N,K``: instead of the chains, the
profiler device time of each call alone after a read (or ``--alone-flush write``) flush (deep_tile, the ``--configs``, the
read kernel at the default grid and ``--read-grids``), ``--passes`` times in turn, median.
``--sustained SECONDS``: each chain also replayed back to back for that long while nvidia-smi samples
the SM clock and the power (deep_tile/testing/timing.py ``sustained``): a chain that reaches the
power cap runs below the top clock.
"""
import argparse
import functools
import json
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the user benchmarks
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/probes/

import bench_decode  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile.gemm import launch  # noqa: E402
from deep_tile.jit import compiler, runtime  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.table import print_table  # noqa: E402
from deep_tile.testing.timing import (FLUSH_KINDS, bench_round_robin, capture_graph, copy_bandwidth,  # noqa: E402
                                     kernel_device_us, sustained)
import ldg_probe  # noqa: E402
from read_floor import PROBE_SOURCE, PROBE_SYMBOLS, READ_CTAS_PER_SM, READ_THREADS, read_args  # noqa: E402

READ = PROBE_SYMBOLS[1]
TIMELINE_CHAINS = ("deep_tile", "read", "deep_tile forced", "ldg")
"""Chains whose per-kernel times are printed (when run), beside every named ``forced NAME`` chain."""


def parse_forced(items) -> dict:
    """``["[NAME@]M:N,K=config", ...]`` -> ``{chain name: {(M, N, K): config text}}``: the unnamed
    entries make the chain ``deep_tile forced``, each NAME a chain ``forced NAME`` (so one run can
    time several sets of configurations side by side); ValueError on a malformed item."""
    forced = {}
    for item in items:
        try:
            name, _, entry = item.rpartition("@")
            key, text = entry.split("=")
            m, nk = key.split(":")
            n, k = nk.split(",")
            chain = f"forced {name}" if name else "deep_tile forced"
            forced.setdefault(chain, {})[(int(m), int(n), int(k))] = text
        except ValueError:
            raise ValueError(f"--forced: expected [NAME@]M:N,K=config; got {item!r}") from None
    return forced


def read_call(kernel, buf: torch.Tensor, sink: torch.Tensor, *, pdl: bool, wait: bool, grid: int = 0):
    """A zero-argument call that reads ``buf`` once on the current stream with ``grid`` CTAs (0:
    READ_CTAS_PER_SM per SM), launched with PDL or not, waiting for its predecessor or not."""
    grid = grid or torch.cuda.get_device_properties(buf.device).multi_processor_count * READ_CTAS_PER_SM
    args = read_args(buf, sink, wait)
    return lambda: kernel.launch(grid=grid, block=READ_THREADS, smem_bytes=0,
                                 stream=torch.cuda.current_stream().cuda_stream, args=args,
                                 device=buf.device.index, pdl=pdl)


STRIP = "deep_tile_strip_read"


@functools.lru_cache(maxsize=None)
def load_probe(source: Path, symbol: str, defines: tuple = ()):
    """The loaded probe kernel ``symbol`` of ``source`` built with ``defines`` (``(name, value)``
    pairs), compiled once per process (deep_tile's default compiler)."""
    return runtime.load_kernel(compiler.compile_cubin(source, dict(defines), symbol).cubin, symbol)


def strip_call(b: torch.Tensor, rows: int, depth: int):
    """A plain launch of read_floor.cu's strip read over ``b`` (N x K bytes): ``rows`` rows per CTA
    (a divisor of 64), ``depth`` steps of 8 KB in flight per CTA."""
    n, k = b.shape
    if 64 % rows or k % (8192 // rows):
        raise ValueError(f"strip_call: rows {rows} must divide 64 and its step {8192 // rows} bytes divide K {k}")
    kernel = load_probe(PROBE_SOURCE, STRIP, (("STRIP_DEPTH", depth),))
    args = runtime.KernelArgs([("ptr", b.data_ptr()), ("i32", n), ("i32", k), ("i32", rows), ("i32", 0)])
    return lambda: kernel.launch(grid=-(-n // rows), block=512, smem_bytes=depth * 8192,
                                 stream=torch.cuda.current_stream().cuda_stream, args=args, device=b.device.index)


TMA_STRIP_SOURCE = Path(__file__).resolve().parent / "tma_strip.cu"
TMA_STRIP = "deep_tile_tma_strip"


def tma_strip_call(b: torch.Tensor, rows: int, depth: int, small_boxes: int = 0):
    """A plain launch of tma_strip.cu over ``b`` (N x K bytes): one thread per CTA streams ``rows``
    rows through K in 128 x ``rows`` TMA boxes (as deep_tile's B map), ``depth`` boxes in flight,
    each with ``small_boxes`` one-row boxes beside it (as deep_tile's A and a_scale boxes at M = 1)."""
    from deep_tile.gemm import tma

    n, k = b.shape
    kernel = load_probe(TMA_STRIP_SOURCE, TMA_STRIP, (("TMA_DEPTH", depth), ("BOX_ROWS", rows),
                                                      ("SMALL_BOXES", small_boxes)))
    desc = tma.encode_2d(b.data_ptr(), "uint8", k, n, k, 128, rows, 128, 256)
    small = tma.encode_2d(b.data_ptr(), "uint8", k, n, k, 128, 1, 0, 256)
    args = runtime.KernelArgs([("tensormap", desc), ("i32", k // 128), ("tensormap", small)])
    return lambda: kernel.launch(grid=-(-n // rows), block=32, smem_bytes=depth * 128 * rows,
                                 stream=torch.cuda.current_stream().cuda_stream, args=args, device=b.device.index)


def forced_call(text: str, m: int, gemm, ops: dict, out):
    """deep_tile with the configuration ``text`` on this GEMM."""
    config = parse_config(text, m, gemm.n, torch.cuda.get_device_properties(0).multi_processor_count)
    return lambda: launch.run(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"], out, config=config)


def build_layers(m: int, layers: int, seed: int) -> list:
    """``layers`` copies of the dense GEMMs' operands (bench_decode.make_operands); each layer's
    weights are views of one buffer: ``[(buffer, [(gemm, ops), ...]), ...]``."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed * 1000 + m)
    gemms = bench_decode.chain_gemms(m, seed, with_experts=False)
    out = []
    for _ in range(layers):
        buffer = torch.empty(sum(g.n * g.k for g in gemms), dtype=torch.uint8, device="cuda")
        pairs, offset = [], 0
        for gemm in gemms:
            ops = bench_decode.make_operands(gemm, m, gen)
            view = buffer[offset:offset + gemm.n * gemm.k].view(gemm.n, gemm.k)
            view.copy_(ops["b"].view(torch.uint8))
            ops["b"] = view.view(torch.float8_e4m3fn)
            pairs.append((gemm, ops))
            offset += gemm.n * gemm.k
        out.append((buffer, pairs))
    return out


def run_m(m: int, args, read, forced: dict, copy_rate: float) -> dict:
    """Check and time every chain at ``m`` tokens (``forced``: parse_forced's sets); one profiled
    replay of TIMELINE_CHAINS and of every forced chain."""
    layers = build_layers(m, args.layers, args.seed)
    sink = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    chains = {"deep_tile": [], "read": [], "read nopdl": [], "read nowait": [], "read layer": []}
    for name in forced:
        chains[name] = []
    if args.ldg:
        chains["ldg"] = []
    outs, ldg_outs = [], []
    for buffer, pairs in layers:
        chains["read layer"].append(read_call(read, buffer, sink, pdl=True, wait=True))
        for gemm, ops in pairs:
            out = torch.full((m, gemm.n), float("nan"), dtype=torch.bfloat16, device="cuda")
            outs.append((gemm, ops, out))
            chains["deep_tile"].append(bench_decode.deep_tile_call(gemm, ops, out))
            for name, texts in forced.items():
                text = texts.get((m, gemm.n, gemm.k))
                chains[name].append(bench_decode.deep_tile_call(gemm, ops, out) if text is None
                                    else forced_call(text, m, gemm, ops, out))
            if args.ldg:
                ldg_out = torch.full((m, gemm.n), float("nan"), dtype=torch.bfloat16, device="cuda")
                ldg_outs.append((gemm, ops, ldg_out))
                chains["ldg"].append(ldg_probe.ldg_call(ops, ldg_out))
            b = ops["b"].view(torch.uint8).view(-1)
            chains["read"].append(read_call(read, b, sink, pdl=True, wait=True))
            chains["read nopdl"].append(read_call(read, b, sink, pdl=False, wait=True))
            chains["read nowait"].append(read_call(read, b, sink, pdl=True, wait=False))
    deep_tile.set_pdl(True)
    graphs = {name: capture_graph(lambda calls=calls: [c() for c in calls]) for name, calls in chains.items()}
    checks = []
    for name, written in [("deep_tile", outs)] + [(name, outs) for name in forced] + [("ldg", ldg_outs)]:
        if name in graphs:  # what one replay writes, the outputs poisoned first
            for _, _, out in written:
                out.fill_(float("nan"))
            graphs[name].replay()
            torch.cuda.synchronize()
            checks += [bench_decode.check(g, o, out) for g, o, out in written]
    fns = {name: (lambda g=g: [g.replay() for _ in range(args.replays)]) for name, g in graphs.items()}
    times = bench_round_robin(fns, warmup=2, iters=args.iters, shuffle_seed=args.seed, flush_kind=args.flush)
    weight_bytes = sum(g.n * g.k for g, _ in layers[0][1])
    gemm_bytes = sum(bench_decode.compulsory_bytes(g, o) for g, o in layers[0][1])
    rows = {}
    for name, us in times.items():
        per_layer = us / args.replays / args.layers
        nbytes = weight_bytes if name.startswith("read") else gemm_bytes
        rows[name] = {"us_per_layer": per_layer, "pct_copy": nbytes / (per_layer * 1e-6) / copy_rate * 100}
    if args.sustained:  # the clock and power each chain runs at
        for name in rows:
            run = sustained(fns[name], seconds=args.sustained)
            rows[name]["sustained"] = {"us_per_layer": run["us"] / args.replays / args.layers, "mhz": run["mhz"],
                                       "watts": run["watts"]}
    kernels = [(g, o, None) for _, pairs in layers for g, o in pairs]
    timelines = {name: bench_decode.timeline(graphs[name], kernels, copy_rate, args.flush)
                 for name in graphs if name in TIMELINE_CHAINS or name in forced}
    return {"m": m, "ok": all(c[2] and c[3] for c in checks), "max_calc_diff": max(c[0] for c in checks),
            "weight_bytes": weight_bytes, "gemm_bytes": gemm_bytes, "chains": rows, "timelines": timelines}


def warm_forced(args) -> int:
    """Compile (and run once) the forced kernels of a slice of the (chain, M, GEMM) entries; no timing."""
    index, count = (int(v) for v in args.warm.split("/"))
    entries = sorted((name, m, n, k, text) for name, texts in args.forced_map.items()
                     for (m, n, k), text in texts.items())
    gen = torch.Generator(device="cuda")
    for name, m, n, k, text in entries[index::count]:
        gen.manual_seed(m)
        gemm = bench_decode.Gemm(f"{n}x{k}", n, k)
        ops = bench_decode.make_operands(gemm, m, gen)
        forced_call(text, m, gemm, ops, torch.empty((m, n), dtype=torch.bfloat16, device="cuda"))()
        torch.cuda.synchronize()
        print(f"warm {name} M={m} {gemm.name} {text}", flush=True)
    return 0


def run_alone(args, read, copy_rate: float) -> list:
    """Each call alone over one ``--alone`` N x K weight at the first ``--m``: profiler device time
    after an ``--alone-flush`` flush (default read), ``--passes`` passes over the calls in turn (so drift shows as spread)."""
    n, k = (int(v) for v in args.alone.split(","))
    m = int(args.m.split(",")[0])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    gemm = bench_decode.Gemm(f"{n}x{k}", n, k)
    ops = bench_decode.make_operands(gemm, m, gen)
    sink = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    outs = {"deep_tile": torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")}
    calls = {"deep_tile": (bench_decode.deep_tile_call(gemm, ops, outs["deep_tile"]), "deep_tile_fp8")}
    for text in args.configs:
        outs[text] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        calls[f"deep_tile {text}"] = (forced_call(text, m, gemm, ops, outs[text]), "deep_tile_fp8")
    if args.ldg:
        outs["ldg"] = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        calls["ldg"] = (ldg_probe.ldg_call(ops, outs["ldg"], pdl=False), ldg_probe.SYMBOL)
    for spec in args.strips:  # the GEMM's access pattern without its math (read_floor.cu)
        rows, depth = (int(v) for v in spec.split(":"))
        calls[f"strip rows={rows} depth={depth}"] = (strip_call(ops["b"], rows, depth), STRIP)
    for spec in args.tma_strips:  # the same through TMA, one thread per CTA (tma_strip.cu)
        rows, depth, *small = (int(v) for v in spec.split(":"))
        name = f"tma strip rows={rows} depth={depth}" + (f" small={small[0]}" if small else "")
        calls[name] = (tma_strip_call(ops["b"].view(torch.uint8), rows, depth, *small), TMA_STRIP)
    for grid in [0] + [int(g) for g in args.read_grids.split(",") if g]:
        calls[f"read grid={grid or 'default'}"] = (
            read_call(read, ops["b"].view(torch.uint8).view(-1), sink, pdl=False, wait=True, grid=grid), READ)
    times = {name: [] for name in calls}
    for _ in range(args.passes):
        for name, (fn, kernel) in calls.items():
            times[name].append(kernel_device_us(fn, reps=args.iters, flush_kind=args.alone_flush, name=kernel))
    rows = []
    for name, values in times.items():
        us = statistics.median(values)
        rows.append({"name": name, "us": us, "passes": values, "pct_copy": n * k / (us * 1e-6) / copy_rate * 100})
        print(f"{m}x{n}x{k} {name}: {us:.1f} us ({rows[-1]['pct_copy']:.0f}% of the copy rate over B; passes "
              f"{' '.join(f'{v:.1f}' for v in values)})", flush=True)
    for text, out in outs.items():  # what each configuration's last call wrote
        d, _, ok, _ = bench_decode.check(gemm, ops, out)
        rows.append({"name": f"check {text}", "calc_diff": d, "ok": ok})
        print(f"{text} output: calc_diff {d:.2e} {'ok' if ok else 'FAIL'}")
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default="1,64", help="comma-separated token counts (--alone: the first)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--replays", type=int, default=4)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--flush", choices=FLUSH_KINDS, default="write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forced", nargs="*", default=[],
                   help="[NAME@]M:N,K=config entries: a 'deep_tile forced' chain (a 'forced NAME' chain per NAME) "
                        "with these configs for those GEMMs")
    p.add_argument("--warm", metavar="I/N", help="only compile the forced kernels of every N-th (chain, M, GEMM) "
                   "entry from the I-th (run N such processes at once before timing)")
    p.add_argument("--ldg", action="store_true", help="add the ldg probe GEMM (M <= 16; benchmarks/probes/ldg_gemm.cu)")
    p.add_argument("--alone", help="N,K: time each call alone over this weight instead of the chains")
    p.add_argument("--configs", nargs="*", default=[], help="with --alone: deep_tile configs (testing.configs texts)")
    p.add_argument("--strips", nargs="*", default=[],
                   help="with --alone: read_floor.cu's strip read (the GEMM's B pattern) as ROWS:DEPTH entries")
    p.add_argument("--tma-strips", nargs="*", default=[],
                   help="with --alone: tma_strip.cu's TMA stream of B (one thread per CTA) as ROWS:DEPTH[:SMALL] "
                        "entries (SMALL one-row boxes beside each box)")
    p.add_argument("--read-grids", default="", help="with --alone: the read kernel at these grids too")
    p.add_argument("--alone-flush", choices=FLUSH_KINDS, default="read",
                   help="with --alone: the L2 flush before each call (write: dirty lines, as the chains start)")
    p.add_argument("--passes", type=int, default=3, help="with --alone: passes over the calls (median)")
    p.add_argument("--sustained", type=float, default=0.0, metavar="SECONDS",
                   help="also replay each chain back to back (no flush) for SECONDS while nvidia-smi samples the "
                        "SM clock and the power (a chain at the power cap runs below the top clock)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    try:
        args.forced_map = parse_forced(args.forced)
    except ValueError as exc:
        p.error(str(exc))
    if args.warm is not None and not re.fullmatch(r"\d+/[1-9]\d*", args.warm):
        p.error(f"--warm: expected I/N; got {args.warm!r}")
    if args.sustained < 0:
        p.error(f"--sustained: expected seconds >= 0; got {args.sustained}")
    if min(args.layers, args.replays, args.iters, args.passes) < 1:
        p.error("need --layers, --replays, --iters and --passes >= 1")
    return args


def _sustained_text(run: dict) -> str:
    return f"{run['us_per_layer']:.1f} {run['mhz']:.0f} MHz {run['watts']:.0f} W"


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("chain_floor: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.warm:
        return warm_forced(args)
    env = bench_decode.environment()
    print(bench_decode.environment_text(env))
    copy_rate = copy_bandwidth()
    print(f"HBM copy rate (read + write of 1 GiB): {copy_rate / 1e12:.2f} TB/s")
    read = load_probe(PROBE_SOURCE, READ)
    if args.alone:
        rows = run_alone(args, read, copy_rate)
        result = {"alone": rows}
        ok = all(r.get("ok", True) for r in rows)
    else:
        records = [run_m(int(v), args, read, args.forced_map, copy_rate) for v in args.m.split(",")]
        result = {"records": records}
        ok = all(r["ok"] for r in records)
        names = list(records[0]["chains"])
        table = [[str(r["m"])] + [f"{r['chains'][n]['us_per_layer']:.1f} ({r['chains'][n]['pct_copy']:.0f}%)"
                                  for n in names] + ["ok" if r["ok"] else "FAIL"] for r in records]
        print("\nus per layer (% of the copy rate: deep_tile over its compulsory bytes, the reads over the weights)")
        print_table(["M"] + names + ["check"], table)
        if args.sustained:
            print(f"\nsustained ({args.sustained:g} s back to back, no flush): us per layer, median SM clock (MHz) and power (W)")
            print_table(["M"] + names, [[str(r["m"])] + [_sustained_text(r["chains"][n]["sustained"]) for n in names]
                                        for r in records])
        for r in records:
            print(f"\nM={r['m']}: each kernel's us after its predecessor's end (last layer of one profiled replay)")
            count = len(bench_decode.DENSE_NK)
            gemms = [row["gemm"] for row in r["timelines"]["deep_tile"][-count:]]
            table = [[name] + ([f"{row['after_prev']:.1f}" for row in tl[-count:]] if "error" not in tl[0]
                               else [tl[0]["error"]] * count) for name, tl in r["timelines"].items()]
            table.append(["bytes at copy rate"] + [f"{row['ideal_us']:.1f}" for row in r["timelines"]["deep_tile"][-count:]])
            print_table(["chain"] + gemms, table)
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "copy_rate": copy_rate,
                                               "args": {k: v for k, v in vars(args).items() if k != "forced_map"},
                                               **result}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
