"""Where the time of a copy through torch's symmetric memory goes, between the GPUs of one host.

    torchrun --nproc_per_node 2 benchmarks/probes/symm_copy.py

For each size (MB) every rank times, with CUDA events (median of ``--iters``, each after a
process-group barrier and a device synchronisation), on its current stream:

- ``barrier``: the symmetric buffer's barrier alone;
- ``local``: a copy into its own symmetric buffer;
- ``pull``: a copy from the next rank's buffer into local memory (the copy engine reads over NVLink);
- ``push``: a copy from local memory into the next rank's buffer (the copy engine writes over NVLink);
- ``gather``: ``deep_tile.tp``'s pull-gather of one chunk of that size (own copy, barrier, pulls, barrier);
- ``host``: the host time of ``gather``'s call up to the synchronisation after it.

Prints one line per size (the slowest rank's values) and GB/s of the pull and the push. No
multicast: run with ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deep_tile import tp  # noqa: E402


def timed(fn, iters: int, device) -> tuple:
    events, walls = [], []
    for _ in range(iters + 2):
        dist.barrier(device_ids=[device.index])
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        walls.append((time.perf_counter() - began) * 1e6)
        events.append(start.elapsed_time(end) * 1e3)
    return statistics.median(events[2:]), statistics.median(walls[2:])


def steps(ring, space, src, iters, device, rank, mb) -> None:
    """The pull-gather's steps one by one: device time (events) from the start to the end of each,
    and the host time each step's Python call took; rank 0's medians printed."""
    names = ["local copy", "barrier 0", "pull (side)", "wait", "barrier 1"]
    dev, host = [[] for _ in names], [[] for _ in names]
    for i in range(iters + 2):
        dist.barrier(device_ids=[device.index])
        torch.cuda.synchronize(device)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(names) + 1)]
        cur = torch.cuda.current_stream()
        side = tp._side_stream(src)
        h = []
        t0 = time.perf_counter()
        ev[0].record(cur)
        space.view(space.rank, 0, (src.numel(),), torch.uint8).copy_(src)
        ev[1].record(cur); h.append(time.perf_counter())
        space.barrier(0)
        ev[2].record(cur); h.append(time.perf_counter())
        side.wait_stream(cur)
        dst = torch.empty_like(src)
        with torch.cuda.stream(side):
            dst.copy_(space.view((space.rank + 1) % space.world, 0, (src.numel(),), torch.uint8))
            ev[3].record(side)
        h.append(time.perf_counter())
        cur.wait_stream(side)
        ev[4].record(cur); h.append(time.perf_counter())
        space.barrier(1)
        ev[5].record(cur); h.append(time.perf_counter())
        torch.cuda.synchronize(device)
        if i >= 2:
            prev = t0
            for j in range(len(names)):
                dev[j].append(ev[j].elapsed_time(ev[j + 1]) * 1e3)
                host[j].append((h[j] - prev) * 1e6)
                prev = h[j]
    if rank == 0:
        print(f"  steps at {mb} MB (device us / host us): " + ", ".join(
            f"{n} {statistics.median(d):.1f}/{statistics.median(x):.1f}" for n, d, x in zip(names, dev, host)), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[1, 6.5, 30, 120])
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    ring = tp.DistRing()
    space = ring._symm()
    if space is None:
        print(f"no symmetric memory: {ring.symm_failed}")
        return 1
    peer = (rank + 1) % world
    if rank == 0:
        print(f"{'MB':>7} {'barrier':>8} {'local':>8} {'pull':>8} {'push':>8} {'gather':>8} {'host':>8} "
              f"{'pull GB/s':>9} {'push GB/s':>9}")
    for mb in args.sizes:
        nbytes = int(mb * 1e6) // 256 * 256
        space.begin(nbytes)  # grown to fit (the probe uses the first half directly)
        src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        mine, theirs = space.view(rank, 0, (nbytes,), torch.uint8), space.view(peer, 0, (nbytes,), torch.uint8)

        def gather():
            pending, _ = ring.gather_chunks([src])
            pending.wait()
            pending.done()

        if mb == args.sizes[0] or mb == args.sizes[-1]:
            steps(ring, space, src, args.iters, device, rank, mb)
        row = [timed(lambda: space.barrier(0), args.iters, device)[0],
               timed(lambda: mine.copy_(src), args.iters, device)[0],
               timed(lambda: dst.copy_(theirs), args.iters, device)[0],
               timed(lambda: theirs.copy_(src), args.iters, device)[0]]
        row += list(timed(gather, args.iters, device))
        t = torch.tensor(row, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        row = t.tolist()
        if rank == 0:
            print(f"{mb:7.1f} " + " ".join(f"{v:8.1f}" for v in row)
                  + f" {nbytes / row[2] / 1e3:9.0f} {nbytes / row[3] / 1e3:9.0f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
