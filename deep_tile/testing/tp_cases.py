"""Cases of the tensor-parallel GEMMs (deep_tile.tp), run by one process per rank.

    python -m deep_tile.testing.tp_cases --world 3 --rank 1 --init file:///tmp/x --device cpu
    python -m deep_tile.testing.tp_cases --world 4 --rank 2 --init file:///tmp/y --device cuda --repeat 3

Each rank builds its data from seeds every rank knows, so it can compute the float64 expectation
of its own result without any communication. Per case it prints one JSON line as soon as the case
is done: the overlapped result against the sequential one (``bitwise``), against the sequential
form over a simulated world of the other ranks' regenerated tensors (``local_bitwise``: no
transfer involved, so a transfer that did not happen cannot pass), against float64 (``max_rel``,
``nan``), a digest of its bytes, and on a GPU the split-K factors the selector picks for its GEMMs
(``k_split``, :func:`deep_tile.tp.k_splits`). ``--repeat R`` runs every case R times; the last
line (``"case": "summary"``) says whether each case's digest was the same in every repeat. A case
that raises prints ``{"case": ..., "error": ...}`` and ends the process with status 1 (the process
group's state is unknown after a failed transfer). On a GPU the caching allocator's free memory is
filled with NaN bytes before each case, so a buffer read before its transfer lands shows as NaN.

``--device cpu`` runs the gloo backend with the GEMM replaced by an FP32 stand-in
(:func:`stand_in_gemm`); ``--device cuda`` runs NCCL and deep_tile's kernels (rank ``r`` on GPU
``r`` modulo the GPUs). ``--loopback`` runs the simulated world of :class:`deep_tile.tp.LoopbackRing`
in one process instead (no process group): rank ``--rank`` of ``--world``.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
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


def _result(name: str, got: torch.Tensor, sequential: torch.Tensor, want: torch.Tensor, local=None) -> dict:
    metrics = compare(got, want)
    result = {"case": name, "bitwise": bool(torch.equal(got, sequential)), "shape": list(got.shape),
              "dtype": str(got.dtype), "digest": digest(got), **metrics}
    if local is not None:
        result["local_bitwise"] = bool(torch.equal(got, local))
    return result


def digest(t: torch.Tensor) -> str:
    """A short hash of ``t``'s bytes (equal tensors of one type and shape hash alike)."""
    data = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:16]


def column_case(world: int, rank: int, t: int, k: int, n: int, device, ring=None, layout: str = "row",
                local_ring=None) -> dict:
    """The all-gather ring of rank ``rank`` (``ring`` None: the process group's) against its
    sequential form, float64 and (``local_ring``) the sequential form over a simulated world."""
    x, xs, w, ws = column_data(rank, t, k, n, device, layout)
    got = tp.all_gather_fp8_gemm(x, xs, w, ws, ring=ring)
    sequential = tp.all_gather_then_gemm(x, xs, w, ws, ring=ring)
    local = None if local_ring is None else tp.all_gather_then_gemm(x, xs, w, ws, ring=local_ring)
    every = [column_data(i, t, k, n, device, layout) for i in range(world)]
    want = ref_fp8_gemm(torch.cat([d[0] for d in every]), torch.cat([d[1] for d in every]), w, ws)
    result = _result(f"all_gather_fp8_gemm t={t} k={k} n={n} {layout}", got, sequential, want, local)
    if device.type == "cuda":
        result["k_split"] = tp.k_splits("column", world, t, n, k)
    return result


def row_case(world: int, rank: int, t: int, k: int, n: int, device, out_dtype, partial_dtype, ring=None,
             local_ring=None) -> dict:
    """The reduce-scatter ring of rank ``rank`` against its sequential form, float64 and
    (``local_ring``) the sequential form over a simulated world."""
    x, xs, w, ws = row_data(rank, world, t, k, n, device)
    got = tp.fp8_gemm_reduce_scatter(x, xs, w, ws, out_dtype=out_dtype, partial_dtype=partial_dtype, ring=ring)
    sequential = tp.gemm_then_reduce_scatter(x, xs, w, ws, out_dtype=out_dtype, partial_dtype=partial_dtype,
                                             ring=ring)
    local = None if local_ring is None else tp.gemm_then_reduce_scatter(
        x, xs, w, ws, out_dtype=out_dtype, partial_dtype=partial_dtype, ring=local_ring)
    rows = slice(rank * t, (rank + 1) * t)
    want = sum(ref_fp8_gemm(d[0][rows], d[1][rows], d[2], d[3])
               for d in (row_data(i, world, t, k, n, device) for i in range(world)))
    result = _result(f"fp8_gemm_reduce_scatter t={t} k={k} n={n} out={out_dtype} partials={partial_dtype}",
                     got, sequential, want, local)
    if device.type == "cuda":
        result["k_split"] = tp.k_splits("row", world, t, n, k, partial_dtype=partial_dtype)
    return result


def column_ring(world: int, rank: int, t: int, k: int, n: int, device) -> tp.LoopbackRing:
    """Rank ``rank``'s simulated world for the column case: every rank's packed tokens."""
    return tp.LoopbackRing(world, rank, [tp.pack_chunk(*column_data(i, t, k, n, device)[:2]) for i in range(world)])


def row_ring(world: int, rank: int, t: int, k: int, n: int, device, partial_dtype) -> tp.LoopbackRing:
    """Rank ``rank``'s simulated world for the row case: every rank's partial of this rank's rows,
    as that rank would send it."""
    rows = slice(rank * t, (rank + 1) * t)
    peers = []
    for i in range(world):
        x, xs, w, ws = row_data(i, world, t, k, n, device)
        peers.append([tp.chunk_gemm(x[rows], xs[rows], w, ws, out_dtype=torch.float32).to(partial_dtype)])
    return tp.LoopbackRing(world, rank, peers)


def loopback_rings(world: int, rank: int, t: int, k: int, n: int, device, partial_dtype):
    """Both simulated worlds of rank ``rank``: ``(column_ring, row_ring)``."""
    return column_ring(world, rank, t, k, n, device), row_ring(world, rank, t, k, n, device, partial_dtype)


def mismatch_case(world: int, rank: int, device) -> dict:
    """Rank 1 passes one token more than the others: every rank must raise, naming the shapes."""
    t = 32 + (1 if rank == 1 else 0)
    x, xs, w, ws = column_data(rank, t, 256, 128, device)
    try:
        tp.all_gather_fp8_gemm(x, xs, w, ws)
    except ValueError as error:
        return {"case": "mismatch", "raised": str(error)}
    return {"case": "mismatch", "raised": None}


SCRIBBLE_BYTES = 1 << 30
"""Bytes of NaN (0xFF) written into the caching allocator's free memory before each GPU case."""


def scribble(device) -> None:
    """Fill free cached GPU memory with 0xFF bytes (NaN in float32, bf16 and FP8): the next
    buffers are carved from it, so one read before its transfer has landed holds NaN instead of
    the previous case's (possibly equal) values. No-op on the CPU."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.full((SCRIBBLE_BYTES,), 0xFF, dtype=torch.uint8, device=device)  # freed at once, kept cached


def cases(args, device) -> list:
    """``(name, run)`` for every case of the command line, in order (``run()`` returns the result).
    The simulated worlds are the rings of ``--loopback``; over a process group they are the local
    references (the sequential form without a transfer)."""
    world, rank, out = args.world, args.rank, []

    def rings(ring) -> dict:  # the ring the case runs over and its local reference
        return {"ring": ring, "local_ring": None} if args.loopback else {"ring": None, "local_ring": ring}

    def column(t, k, n, layout):
        return column_case(world, rank, t, k, n, device, layout=layout,
                           **rings(column_ring(world, rank, t, k, n, device)))

    def row(t, k, n, out_dtype, partial_dtype):
        return row_case(world, rank, t, k, n, device, out_dtype, partial_dtype,
                        **rings(row_ring(world, rank, t, k, n, device, partial_dtype)))

    for text in args.shapes:
        t, k, n = (int(v) for v in text.split(","))
        for layout in (("row",) if args.loopback else ("row", "tma")):
            out.append((f"column {text} {layout}", functools.partial(column, t, k, n, layout)))
        for partial_dtype in (torch.float32, torch.bfloat16):
            for out_dtype in (torch.bfloat16, torch.float32):
                out.append((f"row {text} {out_dtype} {partial_dtype}",
                            functools.partial(row, t, k, n, out_dtype, partial_dtype)))
    if not args.loopback and world > 1:
        out.append(("mismatch", functools.partial(mismatch_case, world, rank, device)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--init", help="init_method of the process group (not with --loopback)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--loopback", action="store_true")
    p.add_argument("--shapes", nargs="+", default=["64,256,256", "48,384,144"], help="T,K,N per case")
    p.add_argument("--repeat", type=int, default=1, help="run every case this many times (digests must agree)")
    args = p.parse_args()
    device = torch.device("cpu")
    if args.device == "cpu":
        tp.chunk_gemm = stand_in_gemm
    else:
        torch.cuda.set_device(0 if args.loopback else args.rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    if not args.loopback:
        import torch.distributed as dist

        dist.init_process_group("gloo" if args.device == "cpu" else "nccl", init_method=args.init,
                                world_size=args.world, rank=args.rank)
    digests: dict = {}
    status = 0
    for repeat in range(args.repeat):
        for name, run in cases(args, device):
            scribble(device)
            try:
                result = run()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            except Exception as error:  # noqa: BLE001 -- reported as a case's line, then the process stops
                print(json.dumps({"case": name, "repeat": repeat, "error": f"{type(error).__name__}: {error}"}),
                      flush=True)
                status = 1
                break
            result["repeat"] = repeat
            if "digest" in result:
                digests.setdefault(result["case"], []).append(result["digest"])
            print(json.dumps(result), flush=True)
        if status:
            break
    if not status:
        differing = sorted(case for case, seen in digests.items() if len(set(seen)) > 1)
        transport, symm_failed = "loopback", None
        if not args.loopback:
            ring = tp.DistRing()
            transport = "symm" if ring._symm() is not None else ring.backend
            symm_failed = ring.symm_failed
        print(json.dumps({"case": "summary", "repeats": args.repeat, "cases": len(digests),
                          "repeats_identical": not differing, "differing": differing,
                          "transport": transport, "symm_failed": symm_failed}), flush=True)
    if not args.loopback and not status:
        import torch.distributed as dist

        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
