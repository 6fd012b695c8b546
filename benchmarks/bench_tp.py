"""Tensor-parallel FP8 layers with the communication overlapped (deep_tile.tp) against the sequential forms.

    torchrun --nproc_per_node 8 benchmarks/bench_tp.py                   # every layer, 8k-32k tokens
    torchrun --nproc_per_node 2 benchmarks/bench_tp.py --tokens 8192 --json tp.json
    python benchmarks/bench_tp.py --loopback 8 --tokens 8192             # one GPU, a simulated world of 8
    python benchmarks/bench_tp.py --loopback 4 --iters 0                 # compile the kernels of a world of 4
    torchrun --nproc_per_node 2 benchmarks/bench_tp.py --device cpu      # gloo, stand-in GEMM: checks the script

Per layer of DeepSeek-V3 (column-parallel: the MLP's gate-up, 7168 -> 2 x 18432, and the
attention's q_b, 1536 -> 24576; row-parallel: the MLP's down, 18432 -> 7168, and the attention
output, 16384 -> 7168), the weight split over the ranks, at each ``--tokens`` (the whole batch;
each rank holds ``tokens / world``). Every rank's data comes from seeds every rank knows.

Columns (us per call, slowest rank, median of ``--iters`` after two untimed calls):

- ``gemm``: the sequential form's GEMM alone (column: one GEMM of every rank's tokens; row: the
  whole FP32 partial);
- ``comm``: the sequential form's transfers alone, on the same buffers (column: the all-gathers
  of the FP8 bytes and the scales; row: the ``world - 1`` point-to-point exchanges of the
  partials), and ``GB/s``, the bytes each rank receives over that time;
- ``seq``: ``all_gather_then_gemm`` / ``gemm_then_reduce_scatter``; ``overlap``:
  ``all_gather_fp8_gemm`` / ``fp8_gemm_reduce_scatter``; ``speedup`` = seq / overlap;
- ``ocomm``: the overlapped form's own transfers alone (below), where they differ from ``comm``'s;
- ``hidden`` = (seq - overlap) / comm: the share of the communication the overlap hid;
- ``bitwise``: the overlapped result equal to the sequential one, bit for bit; ``local``: equal
  to the sequential form computed with no transfer at all (over a :class:`deep_tile.tp.LoopbackRing`
  of the other ranks' regenerated tensors), so a transfer that did not run cannot pass.

Row-parallel layers have a second line with bf16 partials (``/bf16p``). The JSON also holds the
overlapped form's own transfers alone (``overlap_comm``: its gather, or its posts of the partials,
over the transport ``DEEP_TILE_TP_TRANSPORT`` picks; the JSON's ``transport``), BF16 baselines (NCCL's all-gather then
``torch.matmul``; ``torch.matmul`` then NCCL's reduce-scatter), the GEMM then NCCL's FP32
``reduce_scatter_tensor`` (timed only: NCCL sums in its own order, so it is no bitwise
reference), and with ``--async-tp`` PyTorch's bf16 ``fused_all_gather_matmul``.

Timing: before each call a barrier and a device synchronisation; the host clock runs from just
before the call to the device synchronisation after it (CUDA events around the call are kept in the
JSON as ``event_us``, and the host time up to the call's return as ``enqueue_us``). A transfer that
did not run therefore cannot look fast; a ``comm`` above 600 GB/s per rank (H200 NVLink: 450 GB/s
each way) is flagged as implausible.

Any error of deep_tile or of a transfer ends the run: after a failed transfer the process group's
state is unknown, and the later numbers would not be measurements. ``--gemm-sms S`` runs
deep_tile's GEMMs on S SMs (the persistent GEMM otherwise fills every SM; NCCL's kernels need
some).

``--loopback W`` needs no process group: rank 0 of a simulated world of ``W`` on one GPU, each
"transfer" a device-to-device copy on a side stream; it checks that the rings overlap at all
(the copies run at HBM, not NVLink, speed and compete with the GEMM for it), not what a real world
gains. ``--iters 0`` calls each form once, untimed: it fills the kernel cache for a later run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deep_tile import tp  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402

COLUMN_LAYERS = {"mlp.gate_up": (2 * 18432, 7168), "attn.q_b": (24576, 1536)}  # name: (N, K), N split
ROW_LAYERS = {"mlp.down": (7168, 18432), "attn.o": (7168, 16384)}  # name: (N, K), K split
CPU_COLUMN_LAYERS = {"mlp.gate_up": (2 * 512, 256), "attn.q_b": (512, 128)}  # --device cpu: small, same roles
CPU_ROW_LAYERS = {"mlp.down": (256, 512), "attn.o": (256, 256)}
PLAUSIBLE_GBPS = 600.0
"""Receive rate per rank above which a ``comm`` time cannot be a transfer over NVLink (H200: 450 GB/s each way)."""
WARMUP = 2


class Bench:
    """The run's setting: device, ring (a :class:`deep_tile.tp.DistRing`, or None for the
    simulated worlds), world, rank, timed calls per form."""

    def __init__(self, device: torch.device, world: int, rank: int, iters: int, loopback: bool):
        self.device, self.world, self.rank, self.iters, self.loopback = device, world, rank, iters, loopback
        self.ring = None if loopback else tp.DistRing()
        self.nccl = not loopback and dist.get_backend() == "nccl"
        self.enqueue = {}  # callable: median host time of a call up to its return (us)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.loopback:
            return
        if self.nccl:
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def time(self, fn) -> tuple:
        """``(wall us, event us, fn's last result)``: medians over the timed calls, each after a
        barrier and a synchronisation, the wall time up to the synchronisation after the call;
        with ``iters`` 0 one untimed call (NaN times). The median host time of the call itself
        (up to its return, before the synchronisation) goes to ``self.enqueue[fn]``."""
        walls, events, enqueues, result = [], [], [], None
        cuda = self.device.type == "cuda"
        calls = WARMUP + self.iters if self.iters else 1
        for i in range(calls):
            self.barrier()
            self.sync()
            start = end = None
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began = time.perf_counter()
            if cuda:
                start.record()
            result = fn()
            returned = time.perf_counter()
            if cuda:
                end.record()
            self.sync()
            wall = (time.perf_counter() - began) * 1e6
            if self.iters and i >= WARMUP:
                walls.append(wall)
                enqueues.append((returned - began) * 1e6)
                events.append(start.elapsed_time(end) * 1e3 if cuda else wall)
        if not self.iters:
            return float("nan"), float("nan"), result
        self.enqueue[fn] = statistics.median(enqueues)
        return statistics.median(walls), statistics.median(events), result

    def slowest(self, values: list) -> list:
        """Each of ``values`` (floats) as the largest over the ranks (the layer waits for its slowest rank)."""
        if self.loopback:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def every_rank_true(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank."""
        return self.slowest([0.0 if flag else 1.0])[0] == 0.0

    def run_forms(self, forms: dict) -> tuple:
        """Each form timed: ``({key: (wall us, event us)}, {key: last result})``, the times the slowest rank's."""
        times, results = {}, {}
        for key, fn in forms.items():
            wall, event, results[key] = self.time(fn)
            times[key] = (wall, event, self.enqueue.pop(fn, float("nan")))
        keys = list(times)
        walls = self.slowest([times[key][0] for key in keys])
        events = self.slowest([times[key][1] for key in keys])
        enqueues = self.slowest([times[key][2] for key in keys])
        return {key: (w, e, q) for key, w, e, q in zip(keys, walls, events, enqueues)}, results


def column_layer(b: Bench, name: str, n: int, k: int, tokens: int, async_tp: bool, comm_sms: int) -> list:
    """One column-parallel layer at ``tokens``: its table line."""
    world, rank, device = b.world, b.rank, b.device
    t, n_r = tokens // world, n // world
    x, xs, w, ws = make_fp8_problem(t, n_r, k, device, seed=rank)
    # every rank's tokens, regenerated here: the simulated world of --loopback, and the local
    # reference (the sequential form without a transfer) otherwise
    chunks = [(x, xs) if i == rank else make_fp8_problem(t, n_r, k, device, seed=i)[:2] for i in range(world)]
    peers = [tp.pack_chunk(*chunk) for chunk in chunks]
    local_ring = tp.LoopbackRing(world, rank, peers)
    ring = local_ring if b.loopback else b.ring
    local = tp.all_gather_then_gemm(x, xs, w, ws, ring=local_ring)
    bufs = [[torch.empty_like(v) for v in peers[rank]] for _ in range(2)]

    def ring_comm():  # the overlapped form's transfers alone (the simulated world: the ring's copies)
        cur = peers[rank]
        for step in range(1, world):
            ring.shift(cur, bufs[step % 2], step).wait()
            cur = bufs[step % 2]

    def overlap_comm():  # the overlapped form's gather alone (its transport: symmetric memory or NCCL)
        pending, _ = ring.gather_chunks(peers[rank])
        pending.wait()
        pending.done()

    forms, notes = {}, {}
    if b.loopback:  # the sequential form's GEMM inputs, and its transfers: the ring's copies
        xg, sg = torch.cat([c[0].view(torch.uint8) for c in chunks]), torch.cat([c[1] for c in chunks])
        forms["comm"] = ring_comm
    else:
        xb, xsc = x.contiguous().view(torch.uint8), xs.contiguous()
        xg, sg = ring.gather_rows(xb), ring.gather_rows(xsc)
        forms["comm"] = lambda: (ring.gather_rows(xb), ring.gather_rows(xsc))
        forms["overlap_comm"] = overlap_comm
    del chunks
    forms["gemm"] = lambda: tp.chunk_gemm(xg.view(torch.float8_e4m3fn), sg, w, ws)
    forms["sequential"] = lambda: tp.all_gather_then_gemm(x, xs, w, ws, ring=ring)
    forms["overlapped"] = lambda: tp.all_gather_fp8_gemm(x, xs, w, ws, check=False, ring=ring, comm_sms=comm_sms)
    if not b.loopback:
        xb16 = torch.randn(t, k, device=device, dtype=torch.bfloat16)
        wb16 = torch.randn(n_r, k, device=device, dtype=torch.bfloat16)
        forms["bf16_sequential"] = lambda: ring.gather_rows(xb16) @ wb16.t()
        if async_tp and b.nccl:
            try:
                forms["bf16_async_tp"] = fused_all_gather_matmul(xb16, wb16)
            except Exception as error:  # noqa: BLE001 -- an optional baseline's setup: noted, not raised
                notes["bf16_async_tp"] = f"{type(error).__name__}: {str(error)[:120]}"
    times, results = b.run_forms(forms)
    received = (world - 1) * t * (k + 4 * ((k + 127) // 128))
    row = table_row(b, "column", name, tokens, n_r, k, times, received, results["overlapped"],
                    results["sequential"], local)
    row.update(notes=notes)
    return [row]


def fused_all_gather_matmul(x, w):
    """PyTorch's bf16 all-gather + matmul over symmetric memory (opt-in; where it fails, the
    returned callable raises)."""
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    group_name = dist.group.WORLD.group_name
    enable_symm_mem_for_group(group_name)
    return lambda: torch.ops.symm_mem.fused_all_gather_matmul(x, [w.t()], gather_dim=0, group_name=group_name)[1][0]


def row_layer(b: Bench, name: str, n: int, k: int, tokens: int) -> list:
    """One row-parallel layer at ``tokens``: its table lines (FP32 and bf16 partials)."""
    world, rank, device = b.world, b.rank, b.device
    t, k_r = tokens // world, k // world
    x, xs, w, ws = make_fp8_problem(tokens, n, k_r, device, seed=rank)
    mine = slice(rank * t, (rank + 1) * t)
    # every rank's FP32 partial of this rank's rows, regenerated here (simulated world / local reference)
    partials = []
    for i in range(world):
        xi, xsi, wi, wsi = (x, xs, w, ws) if i == rank else make_fp8_problem(tokens, n, k_r, device, seed=i)
        partials.append(tp.chunk_gemm(xi[mine], xsi[mine], wi, wsi, out_dtype=torch.float32))
        del xi, xsi, wi, wsi
    whole = tp.chunk_gemm(x, xs, w, ws, out_dtype=torch.float32)
    lines = []
    for partial_dtype, suffix in ((torch.float32, ""), (torch.bfloat16, "/bf16p")):
        local_ring = tp.LoopbackRing(world, rank, [[p.to(partial_dtype)] for p in partials])
        ring = local_ring if b.loopback else b.ring
        local = tp.gemm_then_reduce_scatter(x, xs, w, ws, partial_dtype=partial_dtype, ring=local_ring)
        sends = [whole[i * t:(i + 1) * t].to(partial_dtype) for i in range(world)]
        recvs = [torch.empty(t, n, dtype=partial_dtype, device=device) for _ in range(world)]

        def exchange(ring=ring, sends=sends, recvs=recvs):  # the sequential form's transfers alone
            for step in range(1, world):
                dst, src = (rank + step) % world, (rank - step) % world
                ring.send_recv([sends[dst]], dst, [recvs[step]], src).wait()

        def overlap_comm(ring=ring, sends=sends):  # the overlapped form's posts alone, where it posts
            box = ring.mailbox((t, n), sends[0].dtype, world - 1)
            for step in range(1, world):
                box.post(step, sends[(rank + step) % world])
            box.landed(world - 1, 1)

        forms = {
            "comm": exchange,
            "gemm": lambda: tp.chunk_gemm(x, xs, w, ws, out_dtype=torch.float32),
            "sequential": lambda ring=ring, p=partial_dtype: tp.gemm_then_reduce_scatter(
                x, xs, w, ws, partial_dtype=p, ring=ring),
            "overlapped": lambda ring=ring, p=partial_dtype: tp.fp8_gemm_reduce_scatter(
                x, xs, w, ws, partial_dtype=p, check=False, ring=ring),
        }
        if not b.loopback and ring.mailbox((t, n), partial_dtype, world - 1) is not None:
            forms["overlap_comm"] = overlap_comm
        if b.nccl and partial_dtype == torch.float32:
            whole32 = torch.empty_like(whole)  # not whole: the sends above are views of it
            part32 = torch.empty(t, n, device=device, dtype=torch.float32)
            partb = torch.empty(t, n, device=device, dtype=torch.bfloat16)
            xb16 = torch.randn(tokens, k_r, device=device, dtype=torch.bfloat16)
            wb16 = torch.randn(n, k_r, device=device, dtype=torch.bfloat16)
            forms["gemm_nccl_reduce_scatter"] = lambda: (
                tp.chunk_gemm(x, xs, w, ws, whole32), dist.reduce_scatter_tensor(part32, whole32), part32)[2]
            forms["nccl_reduce_scatter_alone"] = lambda: dist.reduce_scatter_tensor(part32, whole32)
            forms["bf16_sequential"] = lambda: (dist.reduce_scatter_tensor(partb, xb16 @ wb16.t()), partb)[1]
        times, results = b.run_forms(forms)
        sent = (world - 1) * t * n * (4 if partial_dtype == torch.float32 else 2)
        lines.append(table_row(b, "row", name + suffix, tokens, n, k_r, times, sent, results["overlapped"],
                               results["sequential"], local, partial_dtype))
    return lines


def table_row(b: Bench, side, name, tokens, n, k, times, moved, overlapped, sequential, local,
              partial_dtype=torch.float32) -> dict:
    """The JSON row of one layer: every form's times, the bytes each rank receives (column) or
    sends (row), the derived columns, and the bitwise checks (on every rank)."""
    us = {key: value[0] for key, value in times.items()}
    row = {"side": side, "layer": name, "world": b.world, "tokens": tokens, "n": n, "k": k,
           "us": us, "event_us": {key: value[1] for key, value in times.items()},
           "enqueue_us": {key: value[2] for key, value in times.items()}, "bytes_per_rank": moved,
           "bitwise": b.every_rank_true(torch.equal(overlapped, sequential)),
           "local": b.every_rank_true(torch.equal(overlapped, local))}
    if b.device.type == "cuda":
        row["k_split"] = tp.k_splits(side, b.world, tokens // b.world, n, k, partial_dtype=partial_dtype)
    if b.iters:
        seq, over, comm = us["sequential"], us["overlapped"], us["comm"]
        row["speedup"] = seq / over
        row["hidden"] = (seq - over) / comm
        row["comm_gbps"] = moved / comm / 1e3
        row["comm_plausible"] = b.device.type != "cuda" or b.loopback or row["comm_gbps"] <= PLAUSIBLE_GBPS
    return row


def print_table(rows: list) -> None:
    """The table of ``rows`` (rank 0)."""
    print(f"{'side':>6} {'layer':>16} {'world':>5} {'tokens':>6} {'gemm':>8} {'comm':>8} {'ocomm':>8} {'seq':>8} {'overlap':>8} "
          f"{'speedup':>7} {'hidden':>6} {'GB/s':>6} {'bitwise':>7} {'local':>5}")
    for r in rows:
        us = r["us"]
        print(f"{r['side']:>6} {r['layer']:>16} {r['world']:>5} {r['tokens']:>6} {us['gemm']:8.1f} {us['comm']:8.1f} "
              f"{us.get('overlap_comm', float('nan')):8.1f} "
              f"{us['sequential']:8.1f} {us['overlapped']:8.1f} {r.get('speedup', float('nan')):7.3f} "
              f"{r.get('hidden', float('nan')):6.2f} {r.get('comm_gbps', float('nan')):6.0f} {str(r['bitwise']):>7} "
              f"{str(r['local']):>5}" + ("" if r.get("comm_plausible", True) else "  IMPLAUSIBLE comm time"))
    print(f"bitwise (overlapped == sequential) in {sum(r['bitwise'] for r in rows)}/{len(rows)} rows; "
          f"equal to the no-transfer reference in {sum(r['local'] for r in rows)}/{len(rows)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[8192, 16384, 32768])
    p.add_argument("--iters", type=int, default=10, help="timed calls per form (0: one untimed call, to compile)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--loopback", type=int, metavar="W", help="a simulated world of W on one device (no process group)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: gloo and an FP32 stand-in GEMM at small layer shapes (checks the script, measures nothing)")
    p.add_argument("--comm-sms", type=int, metavar="C",
                   help="all_gather_fp8_gemm's comm_sms: SMs left to the gather under the own chunk's GEMM "
                        "(default: what the transport needs)")
    p.add_argument("--gemm-sms", type=int, metavar="S",
                   help="run deep_tile's GEMMs on S SMs (deep_tile.set_num_sms), leaving the rest to NCCL's kernels")
    p.add_argument("--async-tp", action="store_true", help="also time PyTorch's bf16 fused_all_gather_matmul")
    p.add_argument("--table", metavar="JSON", help="print the table of a --json file written before, and exit")
    args = p.parse_args()
    if args.table:
        print_table(json.loads(Path(args.table).read_text())["rows"])
        return 0
    column_layers, row_layers = COLUMN_LAYERS, ROW_LAYERS
    if args.device == "cpu":
        from deep_tile.testing.tp_cases import stand_in_gemm

        tp.chunk_gemm = stand_in_gemm
        column_layers, row_layers = CPU_COLUMN_LAYERS, CPU_ROW_LAYERS
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    if args.gemm_sms:
        from deep_tile.device import set_num_sms

        set_num_sms(args.gemm_sms)
    if args.loopback:
        world, rank = args.loopback, 0
    else:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
    b = Bench(device, world, rank, args.iters, bool(args.loopback))
    rows = []
    for tokens in args.tokens:
        if tokens % world:
            raise SystemExit(f"bench_tp: --tokens {tokens} is not a multiple of the world ({world})")
        for name, (n, k) in column_layers.items():
            rows += column_layer(b, name, n, k, tokens, args.async_tp, args.comm_sms)
        for name, (n, k) in row_layers.items():
            rows += row_layer(b, name, n, k, tokens)
        if rank == 0 and args.iters:
            print(f"tokens {tokens} done", file=sys.stderr, flush=True)
    if rank == 0:
        if args.iters:
            print_table(rows)
        else:
            print(f"{len(rows)} layer lines run once (kernels compiled); "
                  f"bitwise everywhere: {all(r['bitwise'] and r['local'] for r in rows)}")
        if args.json:
            env = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   "torch": torch.__version__, "world": world, "loopback": bool(args.loopback),
                   "gemm_sms": args.gemm_sms, "comm_sms": args.comm_sms, "iters": args.iters,
                   "transport": "symm" if b.ring is not None and b.ring._symm() is not None else "nccl",
                   "symm_failed": None if b.ring is None else b.ring.symm_failed,
                   "nccl": str(torch.cuda.nccl.version()) if b.nccl else None,
                   "timing": "host clock, barrier and device sync before, device sync after; slowest rank; median"}
            Path(args.json).write_text(json.dumps({"environment": env, "rows": rows}, indent=1, default=str))
    ok = all(r["bitwise"] and r["local"] and r.get("comm_plausible", True) for r in rows)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
