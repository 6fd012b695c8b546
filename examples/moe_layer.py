"""A DeepSeek-V3-like routed-experts MoE layer on deep_tile's grouped FP8 GEMMs (CUDA required).

Usage:
    python examples/moe_layer.py                                  # 256 tokens, H 7168, I 2048, 64 experts, top-8
    python examples/moe_layer.py --tokens 64 --experts 32 --iters 50
    python examples/moe_layer.py --hidden 2048 --intermediate 1024 --no-reference

Builds random FP8 expert weights (128x128 block scales), routes random tokens DeepSeek-V3 style
(sigmoid scores, group-limited top-k, renormalised weights times --scaling), runs the layer through
the three grouped-GEMM layouts (contiguous padded to 128 rows per expert, offsets without padding,
masked slabs as DeepEP low-latency delivers them), prints each one's error against the float64
reference MoE (deep_tile.testing.moe.ref_moe_forward: "mirror" repeats every rounding of the path,
"ideal" keeps the intermediate in float64), then times, interleaved (L2 flushed and a sleep pad
before every call, CUDA events, median of --iters after --warmup): the whole layer (routing,
planning, permutation, both GEMMs, SiLU, FP8 cast, combine) and each GEMM alone. TFLOPS count
useful work only (the real rows: tokens x top-k).
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deep_tile  # noqa: E402
from deep_tile.casts.quant import per_token_cast_to_fp8  # noqa: E402
from deep_tile.testing import moe  # noqa: E402
from deep_tile.testing.numeric import calc_diff, max_rel_error  # noqa: E402
from deep_tile.testing.table import print_table  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402


def parse_args(argv=None):
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=256, help="tokens in the batch (T)")
    p.add_argument("--hidden", type=int, default=7168, help="hidden size H (multiple of 128)")
    p.add_argument("--intermediate", type=int, default=2048, help="expert intermediate size I (multiple of 128)")
    p.add_argument("--experts", type=int, default=64, help="routed experts E")
    p.add_argument("--top-k", type=int, default=8, help="experts per token")
    p.add_argument("--groups", type=int, default=8, help="expert groups for group-limited routing (1: off)")
    p.add_argument("--topk-groups", type=int, default=4, help="groups kept per token")
    p.add_argument("--scoring", choices=moe.SCORINGS, default="sigmoid", help="router score function")
    p.add_argument("--scaling", type=float, default=2.5, help="routed scaling factor (DeepSeek-V3: 2.5)")
    p.add_argument("--exact-rows", action="store_true",
                   help="contiguous: size the buffer exactly (one host sync) instead of by the upper bound")
    p.add_argument("--iters", type=int, default=20, help="timed rounds (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls per variant first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-reference", action="store_true", help="skip the float64 reference check")
    return p.parse_args(argv)


def _worst_row(out, ref):
    return ((out.double() - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-300)).max().item()


def gemm_only_fns(x, ids, weights, layout, exact_rows):
    """Zero-argument callables running the gate-up and the down GEMM alone on prepared inputs."""
    gemms = moe.deep_tile_gemms()
    options = {"exact_rows": exact_rows} if layout == "contiguous" else {}
    perm = moe.plan(ids, weights.num_experts, layout, **options)
    xq, xs = per_token_cast_to_fp8(x)
    a, a_scale = moe.permute_fp8(xq, xs, perm)
    h1 = torch.empty(perm.buffer_shape(2 * weights.intermediate), dtype=torch.bfloat16, device=x.device)
    a2, s2 = per_token_cast_to_fp8(torch.randn(perm.num_rows, weights.intermediate, device=x.device))
    a2, s2 = a2.view(perm.buffer_shape(weights.intermediate)), s2.view(perm.buffer_shape(s2.shape[1]))
    h2 = torch.empty(perm.buffer_shape(weights.hidden), dtype=torch.bfloat16, device=x.device)
    arg = {"contiguous": (perm.m_indices,), "offsets": (perm.offsets,),
           "masked": (perm.masked_m, perm.expected_m)}[layout]
    fn = getattr(gemms, layout)
    return (lambda: fn(a, a_scale, weights.w13, weights.w13_scale, *arg, h1),
            lambda: fn(a2, s2, weights.w2, weights.w2_scale, *arg, h2), perm)


def main(argv=None) -> int:
    """Build, check and time the layer; returns the exit code (2 without a GPU)."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("moe_layer: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"GPU {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, CUDA {torch.version.cuda}")
    t, h, i, e, k = args.tokens, args.hidden, args.intermediate, args.experts, args.top_k
    print(f"layer: T={t} H={h} I={i} E={e} top-{k}, {args.scoring} routing, groups {args.groups}/{args.topk_groups}, "
          f"scaling {args.scaling}")

    start = time.perf_counter()
    weights = moe.make_moe_weights(e, h, i, "cuda", seed=args.seed + 1)
    torch.cuda.synchronize()
    print(f"weights: {(weights.w13.numel() + weights.w2.numel()) / 2**30:.2f} GiB FP8, built in "
          f"{time.perf_counter() - start:.1f} s")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    x = torch.randn((t, h), generator=gen, device="cuda").to(torch.bfloat16)
    logits = torch.randn((t, e), generator=gen, device="cuda")

    def route():
        return moe.route(logits, k, args.scoring, num_groups=args.groups, topk_groups=args.topk_groups,
                         scaling_factor=args.scaling)

    ids, topk_weights = route()
    counts = moe.expert_counts(ids, e).cpu()
    align = deep_tile.get_m_alignment_for_contiguous_layout()
    padded = int(((counts + align - 1) // align * align).sum())
    print(f"rows per expert: min {int(counts.min())}, mean {counts.float().mean():.1f}, max {int(counts.max())}; "
          f"{t * k} real rows; contiguous: {padded} padded rows (buffer "
          f"{padded if args.exact_rows else moe.contiguous_rows_bound(t * k, e, align)}), "
          f"masked slabs {e} x {t}")
    plan_options = {"contiguous": {"exact_rows": args.exact_rows}, "offsets": {}, "masked": {}}

    outputs = {}
    for layout in moe.LAYOUTS:
        outputs[layout] = moe.moe_forward(x, ids, topk_weights, weights, layout, **plan_options[layout])
    torch.cuda.synchronize()

    if not args.no_reference:
        start = time.perf_counter()
        mirror = moe.ref_moe_forward(x, ids, topk_weights, weights)
        ideal = moe.ref_moe_forward(x, ids, topk_weights, weights, mirror_roundings=False)
        torch.cuda.synchronize()
        print(f"\nfloat64 references in {time.perf_counter() - start:.1f} s; errors of the bf16 output "
              "(calc_diff, max|err|/max|ref|, worst token's relative error, max |err|):")
        rows = []
        for layout, out in outputs.items():
            line = [layout, int((~torch.isfinite(out)).sum())]
            for ref in (mirror, ideal):
                line += [f"{calc_diff(out, ref):.2e}", f"{max_rel_error(out, ref):.2e}", f"{_worst_row(out, ref):.2e}",
                         f"{(out.double() - ref).abs().max().item():.2e}"]
            rows.append(line)
        print_table(["layout", "non-finite", "mirror diff", "rel", "worst row", "max err",
                     "ideal diff", "rel", "worst row", "max err"], rows, "<" + ">" * 9)
        agree = [f"{a} vs {b}: {calc_diff(outputs[a], outputs[b]):.1e}"
                 for a, b in (("contiguous", "offsets"), ("contiguous", "masked"))]
        print("layouts against each other (calc_diff): " + ", ".join(agree))

    fns, gemm_perms = {}, {}
    for layout in moe.LAYOUTS:
        def layer(layout=layout):
            ids_, w_ = route()
            return moe.moe_forward(x, ids_, w_, weights, layout, **plan_options[layout])
        fns[f"{layout} layer"] = layer
        gate_up, down, gemm_perms[layout] = gemm_only_fns(x, ids, weights, layout, args.exact_rows)
        fns[f"{layout} gate-up"] = gate_up
        fns[f"{layout} down"] = down
    times = bench_round_robin(fns, warmup=args.warmup, iters=args.iters, shuffle_seed=args.seed)

    useful = moe.moe_flops(t, k, h, i)
    gate_up_flops, down_flops = 2.0 * t * k * 2 * i * h, 2.0 * t * k * h * i
    print(f"\ntimes (us, median of {args.iters}, L2 flushed, interleaved); TFLOPS on {t * k} real rows:")
    rows = []
    for layout in moe.LAYOUTS:
        layer_us, up_us, down_us = (times[f"{layout} {part}"] for part in ("layer", "gate-up", "down"))
        rows.append([layout, f"{layer_us:.1f}", f"{useful / layer_us / 1e6:.0f}", f"{up_us:.1f}",
                     f"{gate_up_flops / up_us / 1e6:.0f}", f"{down_us:.1f}", f"{down_flops / down_us / 1e6:.0f}",
                     f"{layer_us - up_us - down_us:.1f}"])
    print_table(["layout", "layer us", "TFLOPS", "gate-up us", "TFLOPS", "down us", "TFLOPS", "rest us"], rows,
                "<" + ">" * 7)
    print("rest = layer - both GEMMs: routing, planning, permutation, SiLU*up, FP8 cast, combine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
