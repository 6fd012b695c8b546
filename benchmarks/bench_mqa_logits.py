"""DeepSeek-V3.2's lightning-indexer logits: deep_tile.fp8_mqa_logits against DeepGEMM's
``fp8_mqa_logits`` (when ``import deep_gemm`` finds DeepGEMM itself, not deep_tile's alias), on the
same inputs, L2 flushed before every call, median of interleaved runs
(deep_tile.testing.timing.bench_round_robin).

Shapes (``--shapes``, ``S:S_kv:ranges``): prefill (S 2048 / 4096 query rows over 4096-8192 kv rows,
causal ranges as DeepGEMM's test draws them: row i sees kv rows up to S_kv - S + i) and decode-like
(64-128 query rows over a long kv, every row the whole kv), H = 64 heads (``--heads``). Columns:
microseconds of each kernel design (``--design``, default both:
deep_tile/kernels/mqa_logits.py DESIGNS); GB/s of the bytes the call must move (q, kv, scales, weights, ranges read; the
[S, S_kv] float32 logits written) and that as a share of the measured HBM copy rate; TFLOP/s of the
in-range dot products; DeepGEMM's time and the speedup (DeepGEMM us / deep_tile us). Before timing,
each design's result is compared with DeepGEMM's (without DeepGEMM: the first design's) inside the
ranges (largest difference over the largest value);
``--max-rows R ...`` times each design once per R with MAX_ROWS_PER_CTA (query rows per CTA) forced to
R (rows labelled ``design@R``). ``--json PATH`` writes the rows. Needs an sm_90 GPU.

``--alt`` times the default design beside its alternatives (:data:`ALTERNATIVES`: other designs
and kv split counts, set through contract.DESIGN and contract.PERSISTENT_SPLITS) and DeepGEMM in
the same rounds, one line per shape, each alternative's logits checked bit for bit against the
default's (column ``bits``: the alternatives whose bits differ, ``=`` when none; without cleaning
only inside the ranges).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.device import get_num_sms  # noqa: E402
from deep_tile.kernels import mqa_logits as contract  # noqa: E402
from deep_tile.testing.baselines import load_deepgemm  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth  # noqa: E402

SHAPES = ("2048:4096:causal", "2048:8192:causal", "4096:8192:causal", "4096:4096:causal",
          "64:32768:full", "128:65536:full", "128:16384:full")
"""Default ``S:S_kv:ranges`` cases (see the module doc)."""


ALTERNATIVES = {"regs": ("persistent_regs", 1, True), "lean_s2": ("persistent_lean", 2, True),
                "noclean": ("persistent_lean", 1, False)}
"""``--alt`` label -> (design, multiple of persistent_splits' kv split count, clean_logits) timed
beside the default; ``noclean`` (no -inf outside the ranges) only measures what the -inf stores cost,
its bits checked inside the ranges."""


def make(seq_len: int, seq_len_kv: int, heads: int, ranges: str, seed: int = 0) -> tuple:
    """(q, (kv, kv_scale), weights, ks, ke) on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(seq_len, heads, 128, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    kv = torch.randn(seq_len_kv, 128, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    kv_scale = torch.rand(seq_len_kv, device="cuda", generator=gen) + 0.05
    weights = torch.randn(seq_len, heads, device="cuda", generator=gen)
    if ranges == "causal":
        ks = torch.zeros(seq_len, dtype=torch.int32, device="cuda")
        ke = (torch.arange(seq_len, device="cuda") + seq_len_kv - seq_len + 1).clamp(0, seq_len_kv).to(torch.int32)
    elif ranges == "full":
        ks = torch.zeros(seq_len, dtype=torch.int32, device="cuda")
        ke = torch.full((seq_len,), seq_len_kv, dtype=torch.int32, device="cuda")
    else:
        raise ValueError(f"ranges must be causal or full, got {ranges!r}")
    return q, (kv, kv_scale), weights, ks, ke


def compare(got: torch.Tensor, want: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor) -> float:
    """Largest |got - want| inside the ranges over the largest |want| there."""
    cols = torch.arange(got.shape[1], device=got.device)
    inside = (cols[None, :] >= ks[:, None].long()) & (cols[None, :] < ke[:, None].long())
    diff = (got - want).abs()[inside]
    scale = want.abs()[inside].max() if inside.any() else torch.tensor(1.0)
    return float(diff.max() / scale) if diff.numel() else 0.0


def variant_name(design: str, max_rows) -> str:
    """A timed variant's label: the design, and ``@R`` when its MAX_ROWS_PER_CTA is forced to R."""
    return design if max_rows is None else f"{design}@{max_rows}"


def with_design(design: str, fn, max_rows=None):
    """``fn`` run with the kernels' design set to ``design`` (contract.DESIGN) and, when given,
    contract.MAX_ROWS_PER_CTA set to ``max_rows`` (both restored after)."""
    def run():
        saved = contract.DESIGN, contract.MAX_ROWS_PER_CTA
        contract.DESIGN = design
        if max_rows is not None:
            contract.MAX_ROWS_PER_CTA = max_rows
        try:
            return fn()
        finally:
            contract.DESIGN, contract.MAX_ROWS_PER_CTA = saved
    return run


def run_shape(spec: str, heads: int, iters: int, copy_rate: float, dg, designs: list, max_rows=(None,)) -> list:
    """One row per design (and forced MAX_ROWS_PER_CTA of ``max_rows``) of shape ``spec``."""
    s, s_kv, ranges = spec.split(":")
    seq_len, seq_len_kv = int(s), int(s_kv)
    q, kv, w, ks, ke = make(seq_len, seq_len_kv, heads, ranges)
    call = lambda: deep_tile.fp8_mqa_logits(q, kv, w, ks, ke)  # noqa: E731
    fns = {variant_name(design, rows): with_design(design, call, rows) for design in designs for rows in max_rows}
    designs = list(fns)
    want = None
    if dg is not None:
        fns["deepgemm"] = lambda: dg.fp8_mqa_logits(q, kv, w, ks, ke)
        want = fns["deepgemm"]()
    elif len(designs) > 1:  # without DeepGEMM the designs are held against the first one
        want = fns[designs[0]]()
    diffs = {design: None if want is None else compare(fns[design](), want, ks, ke) for design in designs}
    times = bench_round_robin(fns, iters=iters)
    pairs = int((ke.long() - ks.long()).clamp(min=0).sum())
    nbytes = q.numel() + kv[0].numel() + 4 * (kv[1].numel() + w.numel() + 2 * seq_len + seq_len * seq_len_kv)
    rows = []
    for design in designs:
        us = times[design]
        rows.append({"shape": spec, "design": design, "seq_len": seq_len, "seq_len_kv": seq_len_kv, "heads": heads,
                     "ranges": ranges, "us": us, "gbs": nbytes / us / 1e3, "share": nbytes / us / 1e3 * 1e9 / copy_rate,
                     "tflops": 2 * pairs * heads * 128 / us / 1e6, "mbytes": nbytes / 1e6,
                     "deepgemm_us": times.get("deepgemm"),
                     "speedup": times["deepgemm"] / us if "deepgemm" in times else None,
                     "max_rel_diff": diffs[design]})
    return rows


def with_alternative(design: str, splits, fn):
    """``fn`` run with contract.DESIGN set to ``design`` and contract.PERSISTENT_SPLITS to ``splits``
    (both restored after)."""
    def run():
        saved = contract.DESIGN, contract.PERSISTENT_SPLITS
        contract.DESIGN, contract.PERSISTENT_SPLITS = design, splits
        try:
            return fn()
        finally:
            contract.DESIGN, contract.PERSISTENT_SPLITS = saved
    return run


def run_alternatives(shapes: list, heads: int, iters: int, dg, skip=()) -> int:
    """The default design, :data:`ALTERNATIVES` and DeepGEMM per shape in the same rounds (L2
    flushed, median); one line per shape and a geomean line; 1 when an alternative's bits differ.
    ``skip``: labels of ALTERNATIVES left out."""
    default = contract.DESIGN
    alternatives = {label: alt for label, alt in ALTERNATIVES.items() if label not in skip}
    labels = ["default"] + list(alternatives)
    lines, speedups, bad = [], {label: [] for label in labels}, False
    for spec in shapes:
        s, s_kv, ranges = spec.split(":")
        seq_len, seq_len_kv = int(s), int(s_kv)
        q, kv, w, ks, ke = make(seq_len, seq_len_kv, heads, ranges)
        call = lambda clean=True: deep_tile.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=clean)  # noqa: E731
        base = contract.persistent_splits(seq_len, seq_len_kv, get_num_sms(), heads)  # as the launch chooses
        fns = {"default": with_alternative(default, None, call)}
        for label, (design, times, clean) in alternatives.items():
            fns[label] = with_alternative(design, base * times if times != 1 else None,
                                          call if clean else lambda: call(False))
        want = fns["default"]().view(torch.int32).clone()
        cols = torch.arange(seq_len_kv, device=want.device)[None, :]
        inside = (cols >= ks[:, None].long()) & (cols < ke[:, None].long())
        differ = [label for label, (_, _, clean) in alternatives.items()
                  if not torch.equal(*((fns[label]().view(torch.int32), want) if clean
                                       else (fns[label]().view(torch.int32)[inside], want[inside])))]
        bad = bad or bool(differ)
        if dg is not None:
            fns["deepgemm"] = lambda: dg.fp8_mqa_logits(q, kv, w, ks, ke)
            rel = compare(deep_tile.fp8_mqa_logits(q, kv, w, ks, ke), fns["deepgemm"](), ks, ke)
            bad = bad or rel > 1e-3
        times = bench_round_robin(fns, iters=iters)
        dg_us = times.get("deepgemm")
        cells = [spec, f"{base}", "" if dg_us is None else f"{dg_us:.1f}"]
        for label in labels:
            cells.append(f"{times[label]:.1f}" + ("" if dg_us is None else f" {dg_us / times[label]:.3f}"))
            if dg_us is not None:
                speedups[label].append(dg_us / times[label])
        cells.append(",".join(differ) or "=")
        lines.append(cells)
    headers = ["shape", "splits", "DG us"] + [f"{label} us x" for label in labels] + ["bits"]
    print_table(headers, lines, aligns=["<"] + [">"] * (len(headers) - 2) + ["<"])
    names = {"default": default, **{label: f"{d} splits x{t}{'' if c else ' no -inf'}"
                                    for label, (d, t, c) in alternatives.items()}}
    for label in labels:
        if speedups[label]:
            print(f"{label} ({names[label]}): geomean {geomean(speedups[label]):.3f}, min {min(speedups[label]):.3f}")
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="S:S_kv:ranges (causal or full)")
    parser.add_argument("--heads", type=int, default=64, choices=(32, 64))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--design", nargs="+", choices=contract.DESIGNS, default=list(contract.DESIGNS))
    parser.add_argument("--max-rows", nargs="+", type=int, metavar="R",
                        help="time each design once per R with MAX_ROWS_PER_CTA forced to R (labels design@R)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--alt", action="store_true",
                        help="the default design beside ALTERNATIVES and DeepGEMM, one line per shape, bits checked")
    parser.add_argument("--alt-skip", nargs="+", default=[], choices=list(ALTERNATIVES), metavar="LABEL",
                        help="alternatives left out of --alt")
    args = parser.parse_args(argv)
    max_rows = tuple(args.max_rows) if args.max_rows else (None,)
    dg = load_deepgemm("fp8_mqa_logits")
    copy_rate = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"HBM copy {copy_rate / 1e9:.0f} GB/s | median of {args.iters} interleaved runs, L2 flushed | H={args.heads}")
    if args.alt:
        return run_alternatives(args.shapes, args.heads, args.iters, dg, args.alt_skip)
    rows = [row for spec in args.shapes for row in run_shape(spec, args.heads, args.iters, copy_rate, dg, args.design, max_rows)]
    print_table(["shape", "design", "MB", "us", "GB/s", "% copy", "TFLOP/s", "DeepGEMM us", "speedup", "max rel diff"],
                [(r["shape"], r["design"], f"{r['mbytes']:.0f}", f"{r['us']:.1f}", f"{r['gbs']:.0f}",
                  f"{100 * r['share']:.1f}",
                  f"{r['tflops']:.1f}", "" if r["deepgemm_us"] is None else f"{r['deepgemm_us']:.1f}",
                  "" if r["speedup"] is None else f"{r['speedup']:.3f}",
                  "" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.1e}") for r in rows],
                aligns=["<", "<"] + [">"] * 8)
    for design in dict.fromkeys(r["design"] for r in rows):
        speedups = [r["speedup"] for r in rows if r["speedup"] and r["design"] == design]
        if speedups:
            print(f"{design}: speedup over DeepGEMM geomean {geomean(speedups):.3f}, min {min(speedups):.3f}, "
                  f"max {max(speedups):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bytes_per_s": copy_rate,
                                         "rows": rows}, indent=1))
    bad = [r for r in rows if (r["max_rel_diff"] or 0.0) > 1e-3]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
