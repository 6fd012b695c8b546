"""DeepSeek-V3.2's paged (decode) indexer logits: deep_tile.fp8_paged_mqa_logits against DeepGEMM's
``fp8_paged_mqa_logits`` (when ``import deep_gemm`` finds DeepGEMM itself, not deep_tile's alias),
on the same inputs, L2 flushed before every call, median of interleaved runs
(deep_tile.testing.timing.bench_round_robin). Each library gets the schedule of its own
``get_paged_mqa_logits_metadata``, made once before timing (as engines do per step); the logits
call alone is timed, without ``clean_logits`` (DeepGEMM refuses it with 2-D lengths).

Shapes (``--shapes``, ``B:next_n:H:avg_kv``): DeepGEMM's SM90 test grid, batch 256 / 4096, next_n
1 / 2, H 32 / 64, average context 8192 / 65536 with batch x context at most 32M rows; lengths as
its test draws them (the last token's 0.7x-1.3x the average, the others at most it), blocks from
a random permutation of the cache. Columns: microseconds; GB/s of the bytes the call must move
(q and weights, 132 bytes per in-range kv row of each sequence's longest token, the in-range
float32 logits) and that as a share of the measured HBM copy rate (decode is memory bound);
DeepGEMM's time and the ratio DeepGEMM us / deep_tile us; the largest difference from a float64
formula on the first sequences (over the largest value there) and, with DeepGEMM, from its logits
inside the lengths. ``--designs`` times the logits kernel's other designs (default: all of
them, the earlier ones kept to compare) in the same rounds, a table each. ``--json PATH`` writes
the rows. Needs an sm_90 GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import deep_tile  # noqa: E402
from deep_tile.kernels import paged_mqa_logits as contract  # noqa: E402
from deep_tile.testing.baselines import load_deepgemm  # noqa: E402
from deep_tile.testing.table import geomean, print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin, copy_bandwidth  # noqa: E402
from gpu_mqa_paged_cases import expected_logits, make_inputs  # noqa: E402

SHAPES = tuple(f"{b}:{n}:{h}:{kv}" for b, kv in ((256, 8192), (256, 65536), (4096, 8192))
               for n in (1, 2) for h in (32, 64))
"""Default ``B:next_n:H:avg_kv`` cases: DeepGEMM's SM90 test grid (see the module doc)."""
REF_SEQUENCES = 4
"""Sequences whose rows are checked against the float64 formula before timing."""


def inside_mask(context_lens: torch.Tensor, width: int) -> torch.Tensor:
    """[B * next_n, width]: the entries inside their row's length."""
    return torch.arange(width, device=context_lens.device)[None, :] < context_lens.reshape(-1, 1).long()


def rel_diff(got: torch.Tensor, want: torch.Tensor, inside: torch.Tensor) -> float:
    """Largest |got - want| inside over the largest |want| there."""
    if not inside.any():
        return 0.0
    diff = (got.double() - want.double()).abs()[inside]
    return float(diff.max() / want.double().abs()[inside].max().clamp(min=1e-30))


def reference_diff(inputs: dict, got: torch.Tensor) -> float:
    """The float64 formula on the first REF_SEQUENCES sequences against ``got``'s rows of them."""
    n = min(REF_SEQUENCES, inputs["q"].shape[0])
    next_n = inputs["q"].shape[1]
    part = dict(q=inputs["q"][:n], weights=inputs["weights"][:n * next_n], context_lens=inputs["context_lens"][:n],
                block_table=inputs["block_table"][:n], kv_cache=inputs["kv_cache"],
                max_context_len=inputs["max_context_len"])
    values, _, inside = expected_logits(part)
    return rel_diff(got[:n * next_n], values, inside)


def run_shape(spec: str, iters: int, copy_rate: float, dg, others=()) -> dict:
    """One row: shape ``spec`` timed for deep_tile's default design, its designs ``others`` (and DeepGEMM)."""
    batch, next_n, heads, avg_kv = map(int, spec.split(":"))
    inputs = make_inputs(batch, next_n, heads, avg_kv, "random", seed=batch + next_n + heads, device="cuda")
    q, kv, w, lens, table, width = (inputs[k] for k in ("q", "kv_cache", "weights", "context_lens", "block_table",
                                                         "max_context_len"))
    slots = deep_tile.get_num_sms()
    schedule = deep_tile.get_paged_mqa_logits_metadata(lens, 64, slots)
    fns = {"deep_tile": lambda: deep_tile.fp8_paged_mqa_logits(q, kv, w, lens, table, schedule, width)}
    got = fns["deep_tile"]()
    inside = inside_mask(lens, width)
    other_diff = {}
    for design in others:  # the kernel's other designs, timed in the same rounds
        fns[design] = lambda design=design: deep_tile.fp8_paged_mqa_logits(q, kv, w, lens, table, schedule, width,
                                                                           design=design)
        other_diff[design] = rel_diff(got, fns[design](), inside)
    dg_diff = None
    if dg is not None:
        dg_schedule = dg.get_paged_mqa_logits_metadata(lens, 64, dg.get_num_sms())
        fns["deepgemm"] = lambda: dg.fp8_paged_mqa_logits(q, kv, w, lens, table, dg_schedule, width, False)
        dg_diff = rel_diff(got, fns["deepgemm"](), inside)
    ref_diff = reference_diff(inputs, got)
    del got
    times = bench_round_robin(fns, iters=iters)
    rows_kv = int(lens.long().amax(dim=1).clamp(min=0).sum())
    nbytes = q.numel() + 4 * w.numel() + 132 * rows_kv + 4 * int(lens.long().clamp(min=0).sum())
    us = times["deep_tile"]
    return {"shape": spec, "batch": batch, "next_n": next_n, "heads": heads, "avg_kv": avg_kv, "us": us,
            "gbs": nbytes / us / 1e3, "share": nbytes / us / 1e3 * 1e9 / copy_rate, "mbytes": nbytes / 1e6,
            "deepgemm_us": times.get("deepgemm"), "deepgemm_gbs": nbytes / times["deepgemm"] / 1e3
            if "deepgemm" in times else None,
            "speedup": times["deepgemm"] / us if "deepgemm" in times else None,
            "ref_rel_diff": ref_diff, "deepgemm_rel_diff": dg_diff,
            "designs": {d: {"us": times[d], "rel_diff_to_default": other_diff[d]} for d in others}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="B:next_n:H:avg_kv")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--designs", nargs="*", default=list(contract.DESIGNS[1:]),
                        help="the logits kernel's other designs to time beside the default (none: just it)")
    args = parser.parse_args(argv)
    dg = load_deepgemm("fp8_paged_mqa_logits")
    copy_rate = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | CUDA {torch.version.cuda} | "
          f"HBM copy {copy_rate / 1e9:.0f} GB/s | median of {args.iters} interleaved runs, L2 flushed")
    rows = []
    for spec in args.shapes:
        rows.append(run_shape(spec, args.iters, copy_rate, dg, args.designs))
        r = rows[-1]  # a line per shape as it is measured: a run cut short still reports what it timed
        print(f"row {spec} default {r['us']:.1f} us" + "".join(f" | {d} {r['designs'][d]['us']:.1f}" for d in args.designs)
              + ("" if r["deepgemm_us"] is None else f" | DeepGEMM {r['deepgemm_us']:.1f} | DG/default {r['speedup']:.3f}"),
              flush=True)
        torch.cuda.empty_cache()
    print_table(["shape B:n:H:kv", "MB", "us", "GB/s", "% copy", "DeepGEMM us", "DeepGEMM GB/s", "DG us / dt us",
                 "ref diff", "DG diff"],
                [(r["shape"], f"{r['mbytes']:.0f}", f"{r['us']:.1f}", f"{r['gbs']:.0f}", f"{100 * r['share']:.1f}",
                  "" if r["deepgemm_us"] is None else f"{r['deepgemm_us']:.1f}",
                  "" if r["deepgemm_gbs"] is None else f"{r['deepgemm_gbs']:.0f}",
                  "" if r["speedup"] is None else f"{r['speedup']:.3f}", f"{r['ref_rel_diff']:.1e}",
                  "" if r["deepgemm_rel_diff"] is None else f"{r['deepgemm_rel_diff']:.1e}") for r in rows],
                aligns=["<"] + [">"] * 9)
    for design in args.designs:
        print(f"# design {design} (default: pick_design's, {contract.DESIGNS[0]}, or tma_loader_wg at N 128 and long calls)")
        print_table(["shape B:n:H:kv", "us", "default us", "DeepGEMM us", "DG us / its us", "its us / default us",
                     "diff to default"],
                    [(r["shape"], f"{r['designs'][design]['us']:.1f}", f"{r['us']:.1f}",
                      "" if r["deepgemm_us"] is None else f"{r['deepgemm_us']:.1f}",
                      "" if r["deepgemm_us"] is None else f"{r['deepgemm_us'] / r['designs'][design]['us']:.3f}",
                      f"{r['designs'][design]['us'] / r['us']:.3f}",
                      f"{r['designs'][design]['rel_diff_to_default']:.1e}") for r in rows],
                    aligns=["<"] + [">"] * 6)
        if rows and rows[0]["deepgemm_us"] is not None:
            print(f"design {design}: speedup over DeepGEMM geomean "
                  f"{geomean([r['deepgemm_us'] / r['designs'][design]['us'] for r in rows]):.3f}")
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    if speedups:
        print(f"speedup over DeepGEMM (DeepGEMM us / deep_tile us) geomean {geomean(speedups):.3f}, "
              f"min {min(speedups):.3f}, max {max(speedups):.3f}")
    print(f"deep_tile share of the HBM copy rate geomean {geomean([r['share'] for r in rows]):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bytes_per_s": copy_rate,
                                         "rows": rows}, indent=1))
    bad = [r for r in rows if r["ref_rel_diff"] > 1e-2 or (r["deepgemm_rel_diff"] or 0.0) > 1e-2
           or any(d["rel_diff_to_default"] > 1e-2 for d in r["designs"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
