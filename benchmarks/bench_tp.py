"""Tensor-parallel FP8 layers with the communication overlapped (deep_tile.tp) against the sequential forms.

    torchrun --nproc_per_node 8 benchmarks/bench_tp.py                   # every layer, 8k-32k tokens
    torchrun --nproc_per_node 2 benchmarks/bench_tp.py --tokens 8192 --json tp.json
    python benchmarks/bench_tp.py --loopback 8 --tokens 8192             # one GPU, a simulated world of 8

Per layer of DeepSeek-V3 (column-parallel: the MLP's gate-up, 7168 -> 2 x 18432, and the
attention's q_b, 1536 -> 24576; row-parallel: the MLP's down, 18432 -> 7168, and the attention
output, 16384 -> 7168), the weight split over the ranks, at each ``--tokens`` (the whole batch;
each rank holds ``tokens / world``), timed with CUDA events, a barrier before each call, each form's
calls in a row after two untimed ones, median of ``--iters``, slowest rank:

- column-parallel: ``all_gather_fp8_gemm`` (overlapped) against ``all_gather_then_gemm`` (NCCL's
  all-gather of the FP8 tokens and scales, then one GEMM), the all-gather alone, and BF16: NCCL's
  all-gather of the bf16 tokens then ``torch.matmul``, and PyTorch's async TP
  (``torch.distributed._symmetric_memory.fused_all_gather_matmul``) where it runs;
- row-parallel: ``fp8_gemm_reduce_scatter`` (FP32 and bf16 partials) against
  ``gemm_then_reduce_scatter`` (one GEMM, then the same fixed-order exchange), the GEMM then NCCL's
  ``reduce_scatter_tensor`` (FP32), and BF16 ``torch.matmul`` then NCCL's reduce-scatter.

``--gemm-sms S`` runs deep_tile's GEMMs on S SMs: the persistent GEMM otherwise fills every SM,
and NCCL's send/receive kernels need some to run beside it.

Columns: us per call; speedup of the overlapped form over the sequential one; the share of the
communication hidden, ``(sequential - overlapped) / communication alone``; bytes each rank sends;
whether the overlapped result is bitwise equal to the sequential one (deep_tile.tp's contract,
when the selector splits K for no chunk). Needs ``torch.distributed`` with NCCL and an sm_90 GPU
per rank; at a world of one it runs (no communication) as a smoke test.

``--loopback W`` needs no process group: rank 0 of a simulated world of ``W`` on one GPU
(:class:`deep_tile.tp.LoopbackRing`), each "transfer" a device-to-device copy on a side stream.
It checks that the rings overlap their transfers with the GEMMs at all (the copies run at HBM,
not NVLink, speed and compete with the GEMM for it), not what a real world gains; its
communication column is the ring's copies alone, and it has no BF16 rows.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deep_tile import tp  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.timing import synced_call_us  # noqa: E402

COLUMN_LAYERS = {"mlp.gate_up": (2 * 18432, 7168), "attn.q_b": (24576, 1536)}  # name: (N, K), N split
ROW_LAYERS = {"mlp.down": (7168, 18432), "attn.o": (7168, 16384)}  # name: (N, K), K split


def timed(fn, iters: int) -> tuple:
    """Median us of ``fn`` over ``iters`` calls (a barrier before each in a process group) on
    this rank, and its last result."""
    return synced_call_us(fn, iters, before=dist.barrier if dist.is_initialized() else None)


def slowest(us: float) -> float:
    """The largest of every rank's ``us`` (the layer waits for its slowest rank)."""
    if not dist.is_initialized():
        return us
    t = torch.tensor([us], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def async_tp_bf16(x, w, group_name):
    """PyTorch's fused all-gather + matmul in bf16, or None where it does not run here."""
    try:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group

        enable_symm_mem_for_group(group_name)
        return lambda: torch.ops.symm_mem.fused_all_gather_matmul(x, [w.t()], gather_dim=0, group_name=group_name)[1][0]
    except Exception as error:  # noqa: BLE001 -- reported, not raised: the baseline is optional
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}" if str(error) else type(error).__name__


def column_rows(world: int, rank: int, tokens: int, iters: int) -> list:
    rows = []
    t = tokens // world
    for name, (n, k) in COLUMN_LAYERS.items():
        n_r = n // world
        x, xs, w, ws = make_fp8_problem(t, n_r, k, "cuda", seed=rank)
        xb = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
        wb = torch.randn(n_r, k, device="cuda", dtype=torch.bfloat16)
        gathered = torch.empty(world * t, k, device="cuda", dtype=torch.bfloat16)
        xbytes = torch.empty(world * t, k, device="cuda", dtype=torch.uint8)
        fns = {
            "overlapped": lambda: tp.all_gather_fp8_gemm(x, xs, w, ws, check=False),
            "sequential": lambda: tp.all_gather_then_gemm(x, xs, w, ws),
            "all_gather_fp8": lambda: dist.all_gather_into_tensor(xbytes, x.view(torch.uint8)),
            "bf16_sequential": lambda: (dist.all_gather_into_tensor(gathered, xb), gathered @ wb.t())[1],
        }
        fused = async_tp_bf16(xb, wb, dist.group.WORLD.group_name) if world > 1 else "world of one"
        if callable(fused):
            fns["bf16_async_tp"] = fused
        us, results = _time_all(fns, iters)
        sent = (world - 1) * (t * k + 4 * t * ((k + 127) // 128))
        rows.append(_row("column", name, world, tokens, n_r, k, us, results, sent, "all_gather_fp8",
                         fused if not callable(fused) else None))
    return rows


def row_rows(world: int, rank: int, tokens: int, iters: int) -> list:
    rows = []
    for name, (n, k) in ROW_LAYERS.items():
        k_r = k // world
        x, xs, w, ws = make_fp8_problem(tokens, n, k_r, "cuda", seed=rank)
        xb = torch.randn(tokens, k_r, device="cuda", dtype=torch.bfloat16)
        wb = torch.randn(n, k_r, device="cuda", dtype=torch.bfloat16)
        t = tokens // world
        part32 = torch.empty(t, n, device="cuda", dtype=torch.float32)
        partb = torch.empty(t, n, device="cuda", dtype=torch.bfloat16)
        whole = torch.empty(tokens, n, device="cuda", dtype=torch.float32)
        fns = {
            "overlapped": lambda: tp.fp8_gemm_reduce_scatter(x, xs, w, ws, check=False),
            "overlapped_bf16_partials": lambda: tp.fp8_gemm_reduce_scatter(x, xs, w, ws, check=False,
                                                                           partial_dtype=torch.bfloat16),
            "sequential": lambda: tp.gemm_then_reduce_scatter(x, xs, w, ws),
            "gemm_nccl_rs": lambda: (tp.chunk_gemm(x, xs, w, ws, whole),
                                     dist.reduce_scatter_tensor(part32, whole), part32)[2],
            "reduce_scatter_fp32": lambda: dist.reduce_scatter_tensor(part32, whole),
            "bf16_sequential": lambda: (dist.reduce_scatter_tensor(partb, xb @ wb.t()), partb)[1],
        }
        us, results = _time_all(fns, iters)
        sent = (world - 1) * t * n * 4
        rows.append(_row("row", name, world, tokens, n, k_r, us, results, sent, "reduce_scatter_fp32", None))
    return rows


def _time_all(fns: dict, iters: int) -> tuple:
    """Each of ``fns`` timed (slowest rank): ``{key: us or the error}``, ``{key: last result}``."""
    us, results = {}, {}
    for key, fn in fns.items():
        try:
            mine, results[key] = timed(fn, iters)
            us[key] = slowest(mine)
        except Exception as error:  # noqa: BLE001 -- one failing baseline must not hide the others
            us[key] = f"{type(error).__name__}: {str(error)[:80]}"
    return us, results


def loopback_rows(world: int, tokens: int, iters: int) -> list:
    """Rank 0 of a simulated world of ``world`` on this GPU: both sides, overlapped against the
    sequential form over the same LoopbackRing, and the ring's copies alone."""
    rows, t = [], tokens // world
    for name, (n, k) in COLUMN_LAYERS.items():
        n_r = n // world
        x, xs, w, ws = make_fp8_problem(t, n_r, k, "cuda", seed=0)
        ring = tp.LoopbackRing(world, 0, [tp.pack_chunk(x, xs) for _ in range(world)])
        bufs = [torch.empty_like(b) for b in ring.peers[0]]
        fns = {"overlapped": lambda: tp.all_gather_fp8_gemm(x, xs, w, ws, check=False, ring=ring),
               "sequential": lambda: tp.all_gather_then_gemm(x, xs, w, ws, ring=ring),
               "ring_copies": lambda: [ring.shift(None, bufs, s).wait() for s in range(1, world)]}
        us, results = _time_all(fns, iters)
        sent = (world - 1) * (t * k + 4 * t * ((k + 127) // 128))
        rows.append(_row("column", name, world, tokens, n_r, k, us, results, sent, "ring_copies", "loopback"))
    for name, (n, k) in ROW_LAYERS.items():
        k_r = k // world
        x, xs, w, ws = make_fp8_problem(tokens, n, k_r, "cuda", seed=0)
        ring = tp.LoopbackRing(world, 0, [[torch.randn(t, n, device="cuda")] for _ in range(world)])
        buf = [torch.empty(t, n, device="cuda")]
        fns = {"overlapped": lambda: tp.fp8_gemm_reduce_scatter(x, xs, w, ws, check=False, ring=ring),
               "sequential": lambda: tp.gemm_then_reduce_scatter(x, xs, w, ws, ring=ring),
               "ring_copies": lambda: [ring.send_recv(None, 0, buf, s).wait() for s in range(1, world)]}
        us, results = _time_all(fns, iters)
        rows.append(_row("row", name, world, tokens, n, k_r, us, results, (world - 1) * t * n * 4, "ring_copies",
                         "loopback"))
    return rows


def _row(side, name, world, tokens, n, k, us, results, sent, comm_key, note) -> dict:
    row = {"side": side, "layer": name, "world": world, "tokens": tokens, "n": n, "k": k, "us": us,
           "bytes_sent_per_rank": sent, "note": note}
    row["comm_key"] = comm_key
    over, seq, comm = us.get("overlapped"), us.get("sequential"), us.get(comm_key)
    if all(isinstance(v, float) for v in (over, seq)):
        row["speedup"] = seq / over
        row["bitwise"] = bool(torch.equal(results["overlapped"], results["sequential"]))
        if isinstance(comm, float) and comm > 0:
            row["hidden"] = (seq - over) / comm
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384, 32768])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--loopback", type=int, metavar="W", help="a simulated world of W on one GPU (no process group)")
    p.add_argument("--gemm-sms", type=int, metavar="S",
                   help="run deep_tile's GEMMs on S SMs (deep_tile.set_num_sms), leaving the rest to NCCL's kernels")
    args = p.parse_args()
    if args.gemm_sms:
        from deep_tile.device import set_num_sms

        set_num_sms(args.gemm_sms)
    rows = []
    if args.loopback:
        rank, world = 0, args.loopback
        for tokens in args.tokens:
            rows += loopback_rows(world, tokens, args.iters)
    else:
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        for tokens in args.tokens:
            rows += column_rows(world, rank, tokens, args.iters) + row_rows(world, rank, tokens, args.iters)
    if rank == 0:
        print(f"{'side':>6} {'layer':>12} {'world':>5} {'tokens':>6} {'overlap us':>10} {'seq us':>8} "
              f"{'comm us':>8} {'speedup':>7} {'hidden':>6} {'MB sent':>7} {'bitwise':>7}")
        for r in rows:
            comm = r["us"].get(r["comm_key"])
            f = (lambda v: f"{v:.1f}" if isinstance(v, float) else "-")
            print(f"{r['side']:>6} {r['layer']:>12} {r['world']:>5} {r['tokens']:>6} {f(r['us'].get('overlapped')):>10} "
                  f"{f(r['us'].get('sequential')):>8} {f(comm):>8} {r.get('speedup', float('nan')):>7.3f} "
                  f"{r.get('hidden', float('nan')):>6.2f} {r['bytes_sent_per_rank'] / 1e6:>7.1f} "
                  f"{str(r.get('bitwise', '-')):>7}")
        if args.json:
            env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "world": world,
                   "loopback": bool(args.loopback), "gemm_sms": args.gemm_sms}
            Path(args.json).write_text(json.dumps({"environment": env, "rows": rows}, indent=1, default=str))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
