"""Cases of the tensor-parallel GEMMs (deep_tile.tp), run by one process per rank.

    python -m deep_tile.testing.tp_cases --world 3 --rank 1 --init file:///tmp/x --device cpu

Each rank builds its data from seeds every rank knows, so it can compute the float64 expectation
of its own result without any communication. Per case it prints one JSON line: the overlapped
result against the sequential one (``bitwise``), against float64 (``max_rel``, ``nan``), or the
error it raised. ``--device cpu`` runs the gloo backend with the GEMM replaced by an FP32 stand-in
(:func:`stand_in_gemm`); ``--device cuda`` runs NCCL and deep_tile's kernels. ``--loopback``
runs the simulated world of :class:`deep_tile.tp.LoopbackRing` in one process instead (no process
group): rank ``--rank`` of ``--world``.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from deep_tile import tp
from deep_tile.reference import ref_fp8_gemm
from deep_tile.testing.data import make_fp8_problem
from deep_tile.testing.linear_check import compare


def _row_independent_product(a, a_scale, b, b_scale) -> torch.Tensor:
    """The float64 product with each output element summed over K on its own (a broadcast and a
    sum over the last dimension), so a row's value does not depend on how many rows are computed
    with it (a BLAS matmul's blocking may change the last bits), as deep_tile's does not."""
    a64 = a.double() * a_scale.double().repeat_interleave(128, dim=1)[:, :a.shape[1]]
    b_scales = b_scale.double().repeat_interleave(128, dim=0)[:b.shape[0]].repeat_interleave(128, dim=1)
    b64 = b.double() * b_scales[:, :b.shape[1]]
    return torch.cat([(rows.unsqueeze(1) * b64.unsqueeze(0)).sum(-1) for rows in a64.split(16)])


def stand_in_gemm(a, a_scale, b, b_scale, out=None, *, c=None, out_dtype=None):
    """deep_tile.fp8_gemm's semantics on a CPU: the FP32 sum (here the float64 product rounded to
    FP32, each row independent of the others), ``c`` added to it in FP32, one rounding to the
    output's type."""
    result = _row_independent_product(a, a_scale, b, b_scale).float()
    if c is not None:
        result = c.float() + result
    dtype = out.dtype if out is not None else (out_dtype or torch.bfloat16)
    if out is None:
        return result.to(dtype)
    out.copy_(result.to(dtype))
    return out


def column_data(rank: int, t: int, k: int, n: int, device, layout: str = "row"):
    """Rank ``rank``'s tokens ``(x, x_scale)`` [t, k] (seeded by the rank) and its weight shard ``(w, w_scale)`` [n, k]."""
    x, xs, _, _ = make_fp8_problem(t, 16, k, device, seed=1000 + rank, a_scale_layout=layout)
    _, _, w, ws = make_fp8_problem(16, n, k, device, seed=2000 + rank)
    return x, xs, w, ws


def row_data(rank: int, world: int, t: int, k: int, n: int, device):
    """Rank ``rank``'s activations over its feature slice ``(x, x_scale)`` [world * t, k] and the
    weight's columns of that slice ``(w, w_scale)`` [n, k]."""
    x, xs, w, ws = make_fp8_problem(world * t, n, k, device, seed=3000 + rank)
    return x, xs, w, ws


def _result(name: str, got: torch.Tensor, sequential: torch.Tensor, want: torch.Tensor) -> dict:
    metrics = compare(got, want)
    return {"case": name, "bitwise": bool(torch.equal(got, sequential)), "shape": list(got.shape),
            "dtype": str(got.dtype), **metrics}


def column_case(world: int, rank: int, t: int, k: int, n: int, device, ring=None, layout: str = "row") -> dict:
    x, xs, w, ws = column_data(rank, t, k, n, device, layout)
    got = tp.all_gather_fp8_gemm(x, xs, w, ws, ring=ring)
    sequential = tp.all_gather_then_gemm(x, xs, w, ws, ring=ring)
    every = [column_data(i, t, k, n, device, layout) for i in range(world)]
    want = ref_fp8_gemm(torch.cat([d[0] for d in every]), torch.cat([d[1] for d in every]), w, ws)
    return _result(f"all_gather_fp8_gemm t={t} k={k} n={n} {layout}", got, sequential, want)


def row_case(world: int, rank: int, t: int, k: int, n: int, device, out_dtype, partial_dtype, ring=None) -> dict:
    x, xs, w, ws = row_data(rank, world, t, k, n, device)
    got = tp.fp8_gemm_reduce_scatter(x, xs, w, ws, out_dtype=out_dtype, partial_dtype=partial_dtype, ring=ring)
    sequential = tp.gemm_then_reduce_scatter(x, xs, w, ws, out_dtype=out_dtype, partial_dtype=partial_dtype,
                                             ring=ring)
    rows = slice(rank * t, (rank + 1) * t)
    want = sum(ref_fp8_gemm(d[0][rows], d[1][rows], d[2], d[3])
               for d in (row_data(i, world, t, k, n, device) for i in range(world)))
    return _result(f"fp8_gemm_reduce_scatter t={t} k={k} n={n} out={out_dtype} partials={partial_dtype}",
                   got, sequential, want)


def loopback_rings(world: int, rank: int, t: int, k: int, n: int, device, partial_dtype):
    """The simulated worlds of rank ``rank``: the column case's peers (each rank's packed tokens)
    and the row case's (each rank's partial of this rank's rows, as it would send it)."""
    column_peers = [tp.pack_chunk(*column_data(i, t, k, n, device)[:2]) for i in range(world)]
    rows = slice(rank * t, (rank + 1) * t)
    row_peers = []
    for i in range(world):
        x, xs, w, ws = row_data(i, world, t, k, n, device)
        row_peers.append([tp.chunk_gemm(x[rows], xs[rows], w, ws, out_dtype=torch.float32).to(partial_dtype)])
    return tp.LoopbackRing(world, rank, column_peers), tp.LoopbackRing(world, rank, row_peers)


def mismatch_case(world: int, rank: int, device) -> dict:
    """Rank 1 passes one token more than the others: every rank must raise, naming the shapes."""
    t = 32 + (1 if rank == 1 else 0)
    x, xs, w, ws = column_data(rank, t, 256, 128, device)
    try:
        tp.all_gather_fp8_gemm(x, xs, w, ws)
    except ValueError as error:
        return {"case": "mismatch", "raised": str(error)}
    return {"case": "mismatch", "raised": None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--init", help="init_method of the process group (not with --loopback)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--loopback", action="store_true")
    p.add_argument("--shapes", nargs="+", default=["64,256,256", "48,384,144"], help="T,K,N per case")
    args = p.parse_args()
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cpu":
        tp.chunk_gemm = stand_in_gemm
    else:
        torch.cuda.set_device(0 if args.loopback else args.rank)
        device = torch.device("cuda", torch.cuda.current_device())
    if not args.loopback:
        import torch.distributed as dist

        dist.init_process_group("gloo" if args.device == "cpu" else "nccl", init_method=args.init,
                                world_size=args.world, rank=args.rank)
    results = []
    for text in args.shapes:
        t, k, n = (int(v) for v in text.split(","))
        for partial_dtype in (torch.float32, torch.bfloat16):
            column_ring = row_ring = None
            if args.loopback:
                column_ring, row_ring = loopback_rings(args.world, args.rank, t, k, n, device, partial_dtype)
            if partial_dtype == torch.float32:
                results.append(column_case(args.world, args.rank, t, k, n, device, column_ring))
                if not args.loopback:
                    results.append(column_case(args.world, args.rank, t, k, n, device, None, layout="tma"))
            for out_dtype in (torch.bfloat16, torch.float32):
                results.append(row_case(args.world, args.rank, t, k, n, device, out_dtype, partial_dtype, row_ring))
    if not args.loopback and args.world > 1:
        results.append(mismatch_case(args.world, args.rank, device))
    if args.device == "cuda":
        torch.cuda.synchronize()
    for r in results:
        print(json.dumps(r), flush=True)
    if not args.loopback:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
