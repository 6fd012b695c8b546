"""A tensor-parallel FP8 MLP (DeepSeek-V3's dense MLP, SwiGLU) with the communication hidden under the GEMMs.

Usage:
    torchrun --nproc_per_node 8 examples/tp_mlp.py                        # 8192 tokens, 7168 -> 2 x 18432 -> 7168
    torchrun --nproc_per_node 2 examples/tp_mlp.py --tokens 16384 --iters 20
    torchrun --nproc_per_node 1 examples/tp_mlp.py --tokens 1024          # a world of one: no communication
    torchrun --nproc_per_node 2 examples/tp_mlp.py --device cpu --tokens 64 --hidden 256 --intermediate 512

The layer, Megatron-style, over ``world`` ranks, each holding ``tokens / world`` tokens of the batch:

1. gate-up, column-parallel: rank ``r`` holds the gate and up rows of its ``intermediate / world``
   features (128x128-block FP8). :func:`deep_tile.tp.all_gather_fp8_gemm` gathers every rank's
   FP8 tokens with their 1x128 scales while it multiplies the chunks that have arrived, giving all
   tokens over this rank's features.
2. SwiGLU (``silu(gate) * up``, bf16) and the 1x128 FP8 cast, local: every 128-group lies in one rank.
3. down, row-parallel: rank ``r`` holds the weight's columns of its features.
   :func:`deep_tile.tp.fp8_gemm_reduce_scatter` computes each rank's rows of the partial product,
   sends them while it computes the next, and sums what arrives (FP32): this rank's tokens, [T / world, hidden].

Every rank builds the same full weights and batch from ``--seed`` and checks its result against
(a) the same MLP on one device, unsharded (deep_tile's GEMMs; the gate-up product and the FP8
intermediate are bitwise the same as the sharded ones, the down product's sum differs only in its
FP32 order), (b) the float64 reference of the same quantized math, and (c) the sequential forms
(gather then GEMM, GEMM then reduce-scatter), which must be bitwise equal, as must a second call
of the overlapped layer. It prints the largest errors over the ranks, then (``--iters`` > 0, GPU)
the layer's time overlapped and sequential.
``--device cpu`` runs gloo with an FP32 stand-in for the GEMM (deep_tile.testing.tp_cases): the
same code path, for machines without a GPU and for the tests.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deep_tile import tp  # noqa: E402
from deep_tile.casts.quant import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from deep_tile.reference import ref_fp8_gemm  # noqa: E402
from deep_tile.testing.linear_check import compare  # noqa: E402
from deep_tile.testing.timing import synced_call_us  # noqa: E402


def parse_args(argv=None):
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=8192, help="tokens in the whole batch (a multiple of the world)")
    p.add_argument("--hidden", type=int, default=7168, help="model width H")
    p.add_argument("--intermediate", type=int, default=18432, help="MLP width I (a multiple of 128 x world)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--iters", type=int, default=10, help="timed layer calls per form (GPU; 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-reference", action="store_true", help="skip the float64 reference (large shapes)")
    return p.parse_args(argv)


def full_problem(args, device):
    """The batch and the full weights, the same on every rank (seeded): bf16 x [T, H], w_gate_up
    [2 I, H] (gate rows, then up rows), w_down [H, I]."""
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(shape, generator=gen, device=device) * scale).to(torch.bfloat16)

    x = randn(args.tokens, args.hidden)
    w_gate_up = randn(2 * args.intermediate, args.hidden, scale=args.hidden ** -0.5)
    w_down = randn(args.hidden, args.intermediate, scale=args.intermediate ** -0.5)
    return x, w_gate_up, w_down


def shard(x, w_gate_up, w_down, world: int, rank: int, intermediate: int):
    """This rank's part: its tokens (FP8, 1x128 scales), its gate and up rows (FP8, 128x128
    scales), its columns of the down weight (FP8, 128x128 scales)."""
    t, i_r = x.shape[0] // world, intermediate // world
    mine = slice(rank * i_r, (rank + 1) * i_r)
    gate_up = torch.cat([w_gate_up[:intermediate][mine], w_gate_up[intermediate:][mine]])
    return (*per_token_cast_to_fp8(x[rank * t:(rank + 1) * t]), *per_block_cast_to_fp8(gate_up),
            *per_block_cast_to_fp8(w_down[:, mine].contiguous()))


def swiglu_fp8(h: torch.Tensor):
    """``silu(gate) * up`` of ``h = [gate | up]`` (bf16), cast to FP8 with 1x128 scales."""
    gate, up = h.chunk(2, dim=1)
    return per_token_cast_to_fp8((F.silu(gate.float()) * up.float()).to(torch.bfloat16))


def tp_mlp(x, xs, w_gu, ws_gu, w_dn, ws_dn, overlapped: bool = True) -> torch.Tensor:
    """This rank's tokens through the MLP: the overlapped rings, or (``overlapped=False``) the
    sequential forms."""
    if overlapped:
        h = tp.all_gather_fp8_gemm(x, xs, w_gu, ws_gu, check=False)
        return tp.fp8_gemm_reduce_scatter(*swiglu_fp8(h), w_dn, ws_dn, check=False)
    h = tp.all_gather_then_gemm(x, xs, w_gu, ws_gu)
    return tp.gemm_then_reduce_scatter(*swiglu_fp8(h), w_dn, ws_dn)


def single_device_mlp(x, w_gate_up, w_down):
    """The same MLP unsharded on one device (what the TP layer must reproduce)."""
    h = tp.chunk_gemm(*per_token_cast_to_fp8(x), *per_block_cast_to_fp8(w_gate_up))
    return tp.chunk_gemm(*swiglu_fp8(h), *per_block_cast_to_fp8(w_down))


def float64_mlp(x, w_gate_up, w_down):
    """The float64 reference of the same quantized math: float64 products of the FP8 operands,
    the intermediate rounded to bf16 and re-quantized as the layer does."""
    h = ref_fp8_gemm(*per_token_cast_to_fp8(x), *per_block_cast_to_fp8(w_gate_up)).to(torch.bfloat16)
    return ref_fp8_gemm(*swiglu_fp8(h), *per_block_cast_to_fp8(w_down))


def time_layer(fn, iters: int) -> float:
    """Median ms of ``fn`` (a barrier before each call) on this rank, the largest over the ranks."""
    mine = torch.tensor([synced_call_us(fn, iters, before=dist.barrier)[0] / 1e3], device="cuda")
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def worst(value: float, device) -> float:
    """The largest of every rank's ``value``."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        from deep_tile.testing.tp_cases import stand_in_gemm

        tp.chunk_gemm = stand_in_gemm  # gloo, and an FP32 GEMM with deep_tile.fp8_gemm's semantics
        device = torch.device("cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.tokens % world or args.intermediate % (128 * world):
        raise SystemExit(f"tp_mlp: --tokens ({args.tokens}) must be a multiple of the world ({world}) and "
                         f"--intermediate ({args.intermediate}) of 128 x the world ({128 * world}).")
    x, w_gate_up, w_down = full_problem(args, device)
    parts = shard(x, w_gate_up, w_down, world, rank, args.intermediate)
    t = args.tokens // world
    rows = slice(rank * t, (rank + 1) * t)

    y = tp_mlp(*parts)
    sequential = tp_mlp(*parts, overlapped=False)
    again = tp_mlp(*parts)  # a second call: the same bytes (no transfer raced, nothing left from the first)
    single = single_device_mlp(x, w_gate_up, w_down)[rows].double()
    errors = {"vs_single_device": compare(y, single)["max_rel"]}
    if not args.no_reference:
        errors["vs_float64"] = compare(y, float64_mlp(x, w_gate_up, w_down)[rows])["max_rel"]
    bitwise = worst(0.0 if torch.equal(y, sequential) else 1.0, device) == 0.0
    repeatable = worst(0.0 if torch.equal(y, again) else 1.0, device) == 0.0
    errors = {key: worst(value, device) for key, value in errors.items()}
    timings = {}
    if args.device == "cuda" and args.iters > 0:
        timings = {form: time_layer(lambda: tp_mlp(*parts, overlapped=form == "overlapped"), args.iters)
                   for form in ("overlapped", "sequential")}
    if rank == 0:
        print(f"TP MLP: world {world}, {args.tokens} tokens, {args.hidden} -> 2 x {args.intermediate} -> "
              f"{args.hidden}, {args.device}")
        print(f"  overlapped == sequential (bitwise, every rank): {bitwise}")
        print(f"  overlapped, called again: the same bytes (every rank): {repeatable}")
        for key, value in errors.items():
            print(f"  max |y - ref| / max |ref| {key}: {value:.2e}")
        if timings:
            print(f"  layer ms (slowest rank, median of {args.iters}): overlapped {timings['overlapped']:.3f}, "
                  f"sequential {timings['sequential']:.3f}, speedup {timings['sequential'] / timings['overlapped']:.3f}x")
    dist.destroy_process_group()
    # bf16 output: 1 rounding of the result plus the intermediate's FP8 re-quantization, which a
    # different FP32 order in the sum can move by one step: 2e-2 against either reference.
    ok = bitwise and repeatable and all(value < 2e-2 for value in errors.values())
    if rank == 0:
        print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
