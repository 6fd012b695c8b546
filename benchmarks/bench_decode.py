"""Decode at memory speed: a DeepSeek-V3 layer's FP8 GEMMs chained in one CUDA graph.

Usage:
    python benchmarks/bench_decode.py                          # M = 1, 16, 64, 128; about 2 min warm
    python benchmarks/bench_decode.py --m 64 --iters 30 --json r.json
    python benchmarks/bench_decode.py --variant pf0:DT_L2_PREFETCH_KBLOCKS=0   # a deep_tile build variant beside
    python benchmarks/bench_decode.py --warm 3/16              # compile the kernels of every 16th (M, GEMM) pair

At decode sizes each GEMM streams its weights once, and a serving engine replays a whole layer's
GEMMs back to back in a CUDA graph: what users get is the chain's time. Per M (tokens on this GPU):

- **dense chain**: the six dense GEMMs of a DeepSeek-V3 layer (:data:`DENSE_NK`: q_a/kv_a, q_b,
  kv_b, o_proj, shared expert gate-up and down);
- **layer chain**: the same followed by the routed experts' masked GEMMs (gate-up then down over
  :data:`LOCAL_EXPERTS` experts of this GPU; rows per expert from routing ``M * EP`` tokens, each to
  ``TOP_K`` of ``NUM_EXPERTS`` experts, uniformly at random and seeded, as DeepEP's low-latency
  dispatch delivers them to one of ``EP`` GPUs; ``expected_m = M * TOP_K * EP / NUM_EXPERTS``).

``--layers`` copies of the chain, each with its own weights (so nothing is served from L2 that a
real model would not), are captured in one graph per library and launch mode, and the graphs are
replayed ``--replays`` times back to back between two CUDA events, L2 flushed before
(testing.timing.bench_round_robin: every library in each round, shuffled; median of ``--iters``
rounds). Libraries, on the same FP8 inputs and scales: deep_tile with programmatic dependent
launch (PDL) on and off (:func:`deep_tile.set_pdl`), any ``--variant`` builds (PDL on), DeepGEMM
latest with ``set_pdl(True)`` and ``set_pdl(False)`` when importable, and cuBLAS
(``torch._scaled_mm`` with the blockwise scales; dense chain only). Effective bandwidth counts the
compulsory bytes (weights and their scales of every GEMM, of the experts with rows only; A, its
scales and the output of real rows) and is set against the HBM copy rate measured in the same run.

Beside it (``--no-profile`` skips both): each GEMM alone, the per-call device time of its kernels
from the profiler (kineto; the libraries interleaved in a shuffled order, L2 flushed before every
call, PDL off; launch cost excluded), as a share of
the copy rate; and a timeline of one replay of the dense chain (deep_tile with PDL on and off,
DeepGEMM with PDL): each kernel's start and end, and what it adds after its predecessor's end
against its bytes at the copy rate.

Correctness: before timing, every deep_tile output of a replayed chain (PDL on and off, NaN-poisoned
first) is compared with the float64 reference (calc_diff < 1e-3, max rel error < 1e-2, masked rows
past ``masked_m`` untouched); a failure marks the M FAIL and the exit status 1. DeepGEMM's outputs
are checked the same way, for information (it writes rows past ``masked_m``, which its contract
allows).
"""
import argparse
import dataclasses
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import deep_tile  # noqa: E402
from bench_fp8_gemm import deepgemm_version, environment, environment_text  # noqa: E402
from deep_tile.gemm import launch  # noqa: E402
from deep_tile.common import SCALE_GROUP, align_up, ceil_div  # noqa: E402
from deep_tile.gemm.problem import ProblemKind  # noqa: E402
from deep_tile.casts.quant import per_token_cast_to_fp8  # noqa: E402
from deep_tile.reference import ref_fp8_gemm, ref_m_grouped_fp8_gemm_masked  # noqa: E402
from deep_tile.testing.moe import make_expert_weights, tma_aligned_scale_buffer  # noqa: E402
from deep_tile.testing.numeric import DIFF_TOL, REL_TOL, calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.table import print_table  # noqa: E402
from deep_tile.testing.timing import L2Flush, bench_round_robin, capture_graph, copy_bandwidth  # noqa: E402

DENSE_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
"""(N, K) of a DeepSeek-V3 layer's dense GEMMs, in the order the chain runs them."""
EXPERT_NK = ((4096, 7168), (7168, 2048))
"""(N, K) of a routed expert's gate-up and down GEMMs (masked layout)."""
NUM_EXPERTS, TOP_K, EP = 256, 8, 8
"""Routed experts of the model, experts per token, GPUs the experts are spread over."""
LOCAL_EXPERTS = NUM_EXPERTS // EP
"""Experts held by this GPU (32)."""
DEFAULT_M = (1, 16, 64, 128)
DEVICE = "cuda"


@dataclass(frozen=True)
class Gemm:
    """One GEMM of the chain: dense, or masked over the local experts (``counts`` rows each)."""

    name: str
    n: int
    k: int
    counts: tuple = ()  # masked: rows per expert

    @property
    def masked(self) -> bool:
        return bool(self.counts)


def parse_args(argv=None):
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="tokens per GPU, comma-separated")
    p.add_argument("--layers", type=int, default=2, help="layers (each with its own weights) per graph")
    p.add_argument("--replays", type=int, default=4, help="graph replays back to back per timed sample")
    p.add_argument("--iters", type=int, default=15, help="timed rounds (median taken)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:DEF=V[,DEF=V]",
                   help="a deep_tile build with extra compile-time defines, timed beside (PDL on; repeatable); "
                        "the pseudo-define SMS=N plans its kernels for N SMs (deep_tile.set_num_sms), L2P=N forces "
                        "the selector's configs with an L2 promotion of N bytes")
    p.add_argument("--no-deepgemm", action="store_true", help="leave DeepGEMM out even if importable")
    p.add_argument("--no-cublas", action="store_true", help="leave cuBLAS out")
    p.add_argument("--no-profile", action="store_true", help="skip the per-GEMM profiler times")
    p.add_argument("--warm", metavar="I/N", help="only compile the kernels of every N-th (M, GEMM) pair from the I-th")
    p.add_argument("--flush", choices=("write", "read"), default="write",
                   help="L2 flush before each timed sample: the benchmarks' 256 MB write (leaves the L2 full of dirty "
                        "lines, whose write-back the first kernels pay) or a 256 MB read (a cold, clean L2)")
    p.add_argument("--seed", type=int, default=0, help="data and routing seed")
    p.add_argument("--json", metavar="PATH", help="write environment, rows and per-GEMM times as JSON")
    args = p.parse_args(argv)
    try:
        args.m_list = [int(v) for v in args.m.split(",")]
        args.variants = {}
        for text in args.variant:
            name, _, defs = text.partition(":")
            args.variants[name] = {d.split("=")[0]: int(d.split("=")[1]) for d in defs.split(",")}
    except (ValueError, IndexError):
        p.error(f"bad --m or --variant: {args.m!r} {args.variant!r}")
    if min(args.m_list) < 1 or args.layers < 1 or args.replays < 1 or args.iters < 1:
        p.error("need M >= 1, --layers >= 1, --replays >= 1, --iters >= 1")
    return args


# --------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------

def routed_counts(m: int, seed: int) -> tuple:
    """Rows each local expert receives when ``m * EP`` tokens each pick ``TOP_K`` distinct experts
    of ``NUM_EXPERTS`` uniformly (seeded)."""
    rng = random.Random(f"route-{seed}-{m}")
    counts = [0] * LOCAL_EXPERTS
    for _ in range(m * EP):
        for e in rng.sample(range(NUM_EXPERTS), TOP_K):
            if e < LOCAL_EXPERTS:
                counts[e] += 1
    return tuple(counts)


def expected_m(m: int) -> int:
    """The masked GEMM's hint: the mean rows per local expert (at least 1)."""
    return max(1, round(m * TOP_K * EP / NUM_EXPERTS))


def chain_gemms(m: int, seed: int, with_experts: bool) -> list:
    """The GEMMs of one layer at ``m`` tokens."""
    gemms = [Gemm(f"{n}x{k}", n, k) for n, k in DENSE_NK]
    if with_experts:
        counts = routed_counts(m, seed)
        gemms += [Gemm(f"experts {n}x{k}", n, k, counts) for n, k in EXPERT_NK]
    return gemms


def make_operands(gemm: Gemm, m: int, gen) -> dict:
    """Random FP8 operands of one GEMM (weights [N, K] or [E, N, K]); a_scale already in the
    TMA-aligned layout every library reads without a copy; a masked GEMM's hint ``expected_m``."""
    n, k = gemm.n, gemm.k
    kb = ceil_div(k, SCALE_GROUP)
    if not gemm.masked:
        b, b_scale = make_expert_weights(1, n, k, DEVICE, gen)
        a, s = per_token_cast_to_fp8(torch.randn((m, k), generator=gen, device=DEVICE).to(torch.bfloat16))
        a_scale = tma_aligned_scale_buffer((m, kb), DEVICE)
        a_scale.copy_(s)
        return {"a": a, "a_scale": a_scale, "b": b[0], "b_scale": b_scale[0], "rows": m}
    counts = gemm.counts
    max_m = align_up(m * EP, 64)  # an expert gets each token at most once
    b, b_scale = make_expert_weights(LOCAL_EXPERTS, n, k, DEVICE, gen)
    a = torch.zeros((LOCAL_EXPERTS, max_m, k), dtype=torch.uint8, device=DEVICE)
    a_scale = tma_aligned_scale_buffer((LOCAL_EXPERTS, max_m, kb), DEVICE)
    for e, c in enumerate(counts):
        if c:
            q, s = per_token_cast_to_fp8(torch.randn((c, k), generator=gen, device=DEVICE).to(torch.bfloat16))
            a[e, :c] = q.view(torch.uint8)
            a_scale[e, :c] = s
    return {"a": a.view(torch.float8_e4m3fn), "a_scale": a_scale, "b": b, "b_scale": b_scale, "max_m": max_m,
            "masked_m": torch.tensor(counts, dtype=torch.int32, device=DEVICE), "rows": sum(counts),
            "expected_m": expected_m(m)}


def compulsory_bytes(gemm: Gemm, ops: dict) -> int:
    """Bytes a GEMM must move: weights and scales (of experts with rows), real rows of A, their
    scales and the output."""
    n, k, kb = gemm.n, gemm.k, ceil_div(gemm.k, SCALE_GROUP)
    experts = sum(1 for c in gemm.counts if c) if gemm.masked else 1
    weights = experts * (n * k + ceil_div(n, SCALE_GROUP) * kb * 4)
    rows = ops["rows"]
    return weights + rows * (k + kb * 4 + n * 2)


def _nan(shape):
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device=DEVICE)


# --------------------------------------------------------------------------------------------------
# Libraries: one callable per GEMM, writing into its own output
# --------------------------------------------------------------------------------------------------

def deep_tile_call(gemm: Gemm, ops: dict, out, defines=None):
    """deep_tile's public call (``defines``: the launcher's forced path with extra defines, the
    selector's config unchanged; the pseudo-define ``SMS`` plans for that many SMs, ``L2P`` forces
    the selector's config with that L2 promotion of the FP8 maps)."""
    a, sa, b, sb = ops["a"], ops["a_scale"], ops["b"], ops["b_scale"]
    if defines and "SMS" in defines:
        sms = defines["SMS"]

        def planned_for_sms(fn):
            deep_tile.set_num_sms(sms)
            try:
                return fn()
            finally:
                deep_tile.set_num_sms(None)
        inner = planned_for_sms(lambda: deep_tile_call(gemm, ops, out, {k: v for k, v in defines.items() if k != "SMS"}
                                                       or None))
        return lambda: planned_for_sms(inner)
    if defines and "L2P" in defines:
        rest = {k: v for k, v in defines.items() if k != "L2P"} or None
        if gemm.masked:
            config = deep_tile.get_config(ops["max_m"], gemm.n, gemm.k, kind="masked", num_groups=len(gemm.counts),
                                          expected_m=ops["expected_m"])
            config = dataclasses.replace(config, l2_promotion=defines["L2P"])
            return lambda: launch.run_grouped(ProblemKind.GROUPED_MASKED, a, sa, b, sb, ops["masked_m"], out,
                                              expected_m=ops["expected_m"], config=config, extra_defines=rest)
        config = dataclasses.replace(deep_tile.get_config(ops["rows"], gemm.n, gemm.k), l2_promotion=defines["L2P"])
        return lambda: launch.run(a, sa, b, sb, out, config=config, extra_defines=rest)
    if gemm.masked:
        if defines:
            return lambda: launch.run_grouped(ProblemKind.GROUPED_MASKED, a, sa, b, sb, ops["masked_m"], out,
                                              expected_m=ops["expected_m"], extra_defines=defines)
        return lambda: deep_tile.m_grouped_fp8_gemm_masked(a, sa, b, sb, ops["masked_m"], ops["expected_m"], out=out)
    if defines:
        return lambda: launch.run(a, sa, b, sb, out, extra_defines=defines)
    return lambda: deep_tile.fp8_gemm(a, sa, b, sb, out=out)


def deepgemm_call(dg, gemm: Gemm, ops: dict, out):
    a, sa, b, sb = ops["a"], ops["a_scale"], ops["b"], ops["b_scale"]
    if gemm.masked:
        return lambda: dg.m_grouped_fp8_gemm_nt_masked((a, sa), (b, sb), out, ops["masked_m"], ops["expected_m"],
                                                       recipe=(1, 128, 128), disable_ue8m0_cast=True)
    return lambda: dg.fp8_gemm_nt((a, sa), (b, sb), out, recipe=(1, 128, 128), disable_ue8m0_cast=True)


def cublas_call(gemm: Gemm, ops: dict):
    a, b = ops["a"], ops["b"]
    if a.shape[0] % 4:
        raise ValueError("cuBLAS blockwise scaling needs M % 4 == 0")
    sa, sb = ops["a_scale"].t().contiguous().t(), ops["b_scale"].contiguous().t()
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def out_shape(gemm: Gemm, ops: dict) -> tuple:
    return (LOCAL_EXPERTS, ops["max_m"], gemm.n) if gemm.masked else (ops["rows"], gemm.n)


def check(gemm: Gemm, ops: dict, out) -> tuple:
    """(calc_diff, max rel error, numbers ok, rows past masked_m untouched) of one output against
    the float64 reference (computed once per operand set and kept in ``ops``)."""
    if "ref" not in ops:
        if gemm.masked:
            ops["ref"] = ref_m_grouped_fp8_gemm_masked(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"],
                                                       ops["masked_m"])
        else:
            ops["ref"] = ref_fp8_gemm(ops["a"], ops["a_scale"], ops["b"], ops["b_scale"])
    ref = ops["ref"]
    if gemm.masked:
        real = ~torch.isnan(ref)
        untouched = bool(torch.isnan(out[~real]).all())
        got, want = out[real].double(), ref[real]
    else:
        untouched, got, want = True, out.double(), ref
    if got.numel() == 0:
        return 0.0, 0.0, True, untouched
    diff, rel = calc_diff(got, want), max_rel_error(got, want)
    return diff, rel, bool(torch.isfinite(got).all() and diff < DIFF_TOL and rel < REL_TOL), untouched


# --------------------------------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------------------------------

def set_library_pdl(dg, enabled: bool) -> None:
    deep_tile.set_pdl(enabled)
    if dg is not None and hasattr(dg, "set_pdl"):
        dg.set_pdl(enabled)


def run_m(m: int, args, dg, copy_rate: float) -> dict:
    """Check and time the dense and layer chains at ``m`` tokens; the per-GEMM profile."""
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(args.seed * 1000 + m)
    layer_gemms = chain_gemms(m, args.seed, with_experts=True)
    layers = []
    for _ in range(args.layers):
        layer = []
        for gemm in layer_gemms:
            layer.append((gemm, make_operands(gemm, m, gen)))
        layers.append(layer)
    record = {"m": m, "counts": list(layer_gemms[-1].counts), "expected_m": expected_m(m), "status": "ok",
              "variants": list(args.variants),
              "chains": {}, "checks": {}, "gemms": {}}

    # Libraries: name -> (pdl setting, per-(layer, gemm) callable maker, dense only)
    libs = {"deep_tile": (True, lambda g, o, out: deep_tile_call(g, o, out), False),
            "deep_tile_nopdl": (False, lambda g, o, out: deep_tile_call(g, o, out), False)}
    for name, defines in args.variants.items():
        libs[f"deep_tile_{name}"] = (True, lambda g, o, out, d=defines: deep_tile_call(g, o, out, d), False)
    if dg is not None:
        libs["deepgemm_pdl"] = (True, lambda g, o, out: deepgemm_call(dg, g, o, out), False)
        libs["deepgemm"] = (False, lambda g, o, out: deepgemm_call(dg, g, o, out), False)
    if not args.no_cublas:
        libs["cublas"] = (False, lambda g, o, out: cublas_call(g, o), True)

    graphs = {}
    for chain in ("dense", "layer"):
        for name, (pdl, make, dense_only) in libs.items():
            if dense_only and chain == "layer":
                continue
            set_library_pdl(dg, pdl)
            calls, outs = [], []
            try:
                for layer in layers:
                    for gemm, ops in layer:
                        if chain == "dense" and gemm.masked:
                            continue
                        out = _nan(out_shape(gemm, ops))
                        calls.append(make(gemm, ops, out))
                        outs.append((gemm, ops, out))
                graph = capture_graph(lambda: [call() for call in calls])
            except Exception as exc:  # noqa: BLE001 -- a library that cannot run the chain is reported
                record["chains"].setdefault(chain, {})[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                continue
            if name != "cublas":  # check what the replay writes (outputs poisoned again first)
                for _, _, out in outs:
                    out.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                worst = {"calc_diff": 0.0, "max_rel": 0.0, "ok": True, "untouched": True}
                for gemm, ops, out in outs:
                    d, r, ok, untouched = check(gemm, ops, out)
                    worst = {"calc_diff": max(worst["calc_diff"], d), "max_rel": max(worst["max_rel"], r),
                             "ok": worst["ok"] and ok, "untouched": worst["untouched"] and untouched}
                record["checks"][f"{chain}/{name}"] = worst
                if name.startswith("deep_tile") and not (worst["ok"] and worst["untouched"]):
                    record["status"] = "FAIL"
            graphs[(chain, name)] = (graph, outs)
    set_library_pdl(dg, True)

    for chain in ("dense", "layer"):
        names = [n for (c, n) in graphs if c == chain]
        fns = {n: (lambda g=graphs[(chain, n)][0]: [g.replay() for _ in range(args.replays)]) for n in names}
        times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed,
                                  flush_kind=args.flush)
        nbytes = sum(compulsory_bytes(g, o) for layer in layers for g, o in layer if chain == "layer" or not g.masked)
        for n, us in times.items():
            per_layer = us / args.replays / args.layers
            tbps = nbytes / (us / args.replays) / 1e6
            record["chains"].setdefault(chain, {})[n] = {"us_per_layer": per_layer, "tbps": tbps,
                                                         "pct_copy": tbps * 1e12 / copy_rate * 100}
        record["chains"][chain]["bytes_per_layer"] = nbytes // args.layers
    if not args.no_profile:
        for name in ("deep_tile", "deep_tile_nopdl", "deepgemm_pdl"):
            if ("dense", name) in graphs:
                graph, outs = graphs[("dense", name)]
                record.setdefault("timeline", {})[name] = timeline(graph, outs, copy_rate, args.flush)
    del graphs
    for layer in layers:
        for _, ops in layer:
            ops.pop("ref", None)

    if not args.no_profile:
        # NOTES: without PDL, so a kernel's device time holds no wait for its predecessor (the
        # flush): launched early by a fast host path, a PDL kernel starts before the flush's
        # memory is visible and its wait counts (the native path's calls measured 0.1-0.7 us
        # longer than the Python path's of the same config on the H100: RESULTS.md, 2026-11-24
        # 'Where a decode chain's time goes, and 128-byte L2 promotion').
        set_library_pdl(dg, False)
        for gemm, ops in layers[0]:
            record["gemms"][gemm.name] = profile_gemm(gemm, ops, dg, args, copy_rate)
        set_library_pdl(dg, True)
    return record


def timeline(graph, outs: list, copy_rate: float, flush_kind: str = "write") -> list:
    """One replay of a chain's graph under the profiler (after one replay unprofiled): each kernel's
    start and end in us from the first kernel's start, and the bytes its GEMM must move over the
    copy rate (``ideal_us``). With PDL a kernel starts before its predecessor ends; ``after_prev``
    (end minus the predecessor's end) is what the chain pays for it."""
    from torch.profiler import ProfilerActivity, profile

    flush = L2Flush(flush_kind, "timeline")
    graph.replay()
    flush()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    if len(kernels) != len(outs):
        return [{"error": f"{len(kernels)} kernels for {len(outs)} GEMMs"}]
    t0, rows, prev_end = kernels[0].time_range.start, [], None
    for e, (gemm, ops, _) in zip(kernels, outs):
        start, end = e.time_range.start - t0, e.time_range.end - t0
        rows.append({"gemm": gemm.name, "start": start, "end": end,
                     "after_prev": end - (prev_end if prev_end is not None else start),
                     "ideal_us": compulsory_bytes(gemm, ops) / copy_rate * 1e6})
        prev_end = end
    return rows


def _library_kernels(prof) -> list:
    """The profiled GPU kernels in start order, less the flush's and torch's own."""
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "at::native::" not in e.name and "elementwise" not in e.name and "fill" not in e.name.lower()
               and "Memset" not in e.name]
    return sorted(kernels, key=lambda e: e.time_range.start)


def profile_gemm(gemm: Gemm, ops: dict, dg, args, copy_rate: float) -> dict:
    """Per-call device time of each library's kernels for one GEMM alone, from the profiler: the
    libraries' calls interleaved round-robin in a fresh seeded order per round (as the chains are
    timed), each after an L2 flush (``--flush``); median over the rounds of each call's kernels.
    The caller turns PDL off for it (run_m).
    NOTES: timed one library after another, the first one measured ran up to 7% slower than an
    identical second (H100: RESULTS.md, 2026-11-24 'Where a decode chain's time goes, and 128-byte
    L2 promotion')."""
    from torch.profiler import ProfilerActivity, profile

    flush = L2Flush(args.flush, "profile_gemm")
    out = _nan(out_shape(gemm, ops))
    calls = {"deep_tile": deep_tile_call(gemm, ops, out)}
    for name, defines in args.variants.items():
        calls[f"deep_tile_{name}"] = deep_tile_call(gemm, ops, out, defines)
    if dg is not None:
        calls["deepgemm"] = deepgemm_call(dg, gemm, ops, out)
    if not gemm.masked and not args.no_cublas and ops["rows"] % 4 == 0:
        calls["cublas"] = cublas_call(gemm, ops)
    nbytes = compulsory_bytes(gemm, ops)
    result = {"bytes": nbytes}
    launched, names = {}, {}
    for name, call in calls.items():  # warm, and the kernels one call launches
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = _library_kernels(prof)
        launched[name], names[name] = len(kernels), sorted({e.name[:60] for e in kernels})
    rng = random.Random(f"profile-{args.seed}-{gemm.name}")
    order = [name for _ in range(10) for name in rng.sample(list(calls), len(calls))]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for name in order:
            flush()
            calls[name]()
        torch.cuda.synchronize()
    kernels = _library_kernels(prof)
    if len(kernels) != sum(launched[name] for name in order):
        result["error"] = f"{len(kernels)} kernels for {sum(launched[n] for n in order)} expected: not attributed"
        return result
    samples, index = {name: [] for name in calls}, 0
    for name in order:
        samples[name].append(sum(e.time_range.elapsed_us() for e in kernels[index:index + launched[name]]))
        index += launched[name]
    for name, times in samples.items():
        us = statistics.median(times)
        result[name] = {"us": us, "pct_copy": nbytes / (us * 1e-6) / copy_rate * 100 if us else None,
                        "kernels": names[name]}
    return result


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def print_report(records: list, copy_rate: float) -> None:
    names = []
    for r in records:
        for chain in r["chains"].values():
            names += [n for n in chain if n != "bytes_per_layer" and n not in names]
    for chain in ("dense", "layer"):
        print(f"\n{chain} chain: us per layer, and % of the HBM copy rate ({copy_rate / 1e12:.2f} TB/s)")
        headers = ["M", "MB/layer"] + names + ["DG-pdl/dt"]
        rows = []
        for r in records:
            c = r["chains"].get(chain, {})
            line = [r["m"], f"{c.get('bytes_per_layer', 0) / 1e6:.0f}"]
            for n in names:
                v = c.get(n)
                line.append(f"{v['us_per_layer']:.1f} ({v['pct_copy']:.0f}%)" if v and "us_per_layer" in v else "-")
            dt, dgp = c.get("deep_tile", {}), c.get("deepgemm_pdl", {})
            line.append(f"{dgp['us_per_layer'] / dt['us_per_layer']:.3f}" if "us_per_layer" in dt and
                        "us_per_layer" in dgp else "-")
            rows.append(line)
        print_table(headers, rows)
    if any(r["gemms"] for r in records):
        print("\neach GEMM alone (profiler device time, L2 flushed): us (% of copy rate)")
        libs = ["deep_tile"] + [f"deep_tile_{v}" for v in records[0].get("variants", ())] + ["deepgemm", "cublas"]
        rows = []
        for r in records:
            for name, g in r["gemms"].items():
                line = [r["m"], name]
                for lib in libs:
                    v = g.get(lib)
                    line.append(f"{v['us']:.1f} ({v['pct_copy']:.0f}%)" if v and v.get("us") else "-")
                dt, dgv = g.get("deep_tile"), g.get("deepgemm")
                line.append(f"{dgv['us'] / dt['us']:.3f}" if dt and dgv and dt.get("us") and dgv.get("us") else "-")
                rows.append(line)
        print_table(["M", "GEMM"] + list(libs) + ["DG/dt"], rows, "><" + ">" * (len(libs) + 1))
        for r in records:
            for name, g in r["gemms"].items():
                if "error" in g:
                    print(f"  M={r['m']} {name}: {g['error']}")
    for r in records:
        for name, rows in r.get("timeline", {}).items():
            if rows and "error" in rows[0]:
                print(f"\ntimeline M={r['m']} {name}: {rows[0]['error']}")
                continue
            print(f"\ntimeline of one replay, M={r['m']}, {name} (us from the first kernel's start; the last layer)")
            half = rows[len(rows) // 2:] if len(rows) > 6 else rows
            print_table(["GEMM", "start", "end", "after prev end", "bytes at copy rate"],
                        [[x["gemm"], f"{x['start']:.1f}", f"{x['end']:.1f}", f"{x['after_prev']:.1f}",
                          f"{x['ideal_us']:.1f}"] for x in half], "<>>>>")
    print("\nchecks (float64 reference, worst over the chain):")
    for r in records:
        bad = sorted(k for k, v in r["checks"].items() if not v["ok"])
        written = sorted(k for k, v in r["checks"].items() if not v["untouched"])
        worst = max((v["calc_diff"] for v in r["checks"].values()), default=0.0)
        print(f"  M={r['m']}: {r['status']} (worst calc_diff {worst:.1e}; counts {r['counts']}, "
              f"expected_m {r['expected_m']})" + (f"; wrong numbers: {bad}" if bad else "") +
              (f"; rows past masked_m written: {written}" if written else ""))


def warm(args, dg) -> int:
    """Compile every library's kernels of a slice of the (M, GEMM) pairs (no timing)."""
    index, count = (int(v) for v in args.warm.split("/"))
    pairs = [(m, g) for m in args.m_list for g in chain_gemms(m, args.seed, with_experts=True)]
    gen = torch.Generator(device=DEVICE)
    for m, gemm in pairs[index::count]:
        gen.manual_seed(m)
        ops = make_operands(gemm, m, gen)
        out = _nan(out_shape(gemm, ops))
        calls = [deep_tile_call(gemm, ops, out)] + [deep_tile_call(gemm, ops, out, d) for d in args.variants.values()]
        if dg is not None:
            for pdl in (True, False):
                set_library_pdl(dg, pdl)
                deepgemm_call(dg, gemm, ops, out)()
        for call in calls:
            call()
        torch.cuda.synchronize()
        print(f"warm M={m} {gemm.name}", flush=True)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_decode: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    dg = None if args.no_deepgemm else deepgemm_version()[0]
    if dg is not None and deepgemm_version()[1] != "latest":
        dg = None  # the 2025 version has no masked GEMM of this signature nor set_pdl
    if args.warm:
        return warm(args, dg)
    env = environment()
    print(environment_text(env))
    copy_rate = copy_bandwidth()
    records = []
    for m in args.m_list:
        records.append(run_m(m, args, dg, copy_rate))
        torch.cuda.empty_cache()
    print_report(records, copy_rate)
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "copy_rate": copy_rate, "args": vars(args),
                                               "records": records}, indent=1, default=str))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
