"""GPU timing in the ANCHORS.md style: CUDA events around one call, L2 flushed, sleep pad, median.

Per timed call, on the current stream: write a 256 MB buffer (evicts L2, 50-60 MB on H100/H200),
then ``torch.cuda._sleep`` for about ``pad_us`` so the GPU is still busy while the CPU enqueues
the start event, the call and the end event (host launch latency cannot leak into the time),
then ``start.record(); fn(); end.record()``. One synchronisation at the end; median over iters.
"""
import functools
import random
import statistics

import torch

FLUSH_BYTES = 256 * 1024 * 1024
"""Bytes written before every timed call to evict the L2 cache."""
FLUSH_KINDS = ("write", "read")
"""How :class:`L2Flush` evicts L2: ``"write"`` (the benchmarks' flush: the buffer written, which
leaves the L2 full of dirty lines) or ``"read"`` (the buffer read: a cold, clean L2)."""


def check_flush_kind(kind: str, who: str) -> None:
    """Raise ValueError naming ``who`` unless ``kind`` is one of :data:`FLUSH_KINDS`."""
    if kind not in FLUSH_KINDS:
        raise ValueError(f"{who}: flush_kind must be 'write' or 'read'; got {kind!r}")


class L2Flush:
    """A :data:`FLUSH_BYTES` buffer that evicts the L2 cache when called, on the current stream,
    the way ``kind`` (one of :data:`FLUSH_KINDS`) says. ``who`` names the caller in the
    ValueError raised for another kind, which is checked before anything is allocated."""

    def __init__(self, kind: str = "write", who: str = "L2Flush"):
        check_flush_kind(kind, who)
        self.kind = kind
        self.buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def __call__(self) -> None:
        if self.kind == "write":
            self.buffer.zero_()
        else:
            self.buffer.max()


@functools.lru_cache(maxsize=None)
def _sleep_cycles_per_us(device_index: int) -> float:
    """Measured ``torch.cuda._sleep`` cycles per microsecond on one device (about the SM clock in MHz)."""
    with torch.cuda.device(device_index):
        cycles = 2_000_000
        torch.cuda._sleep(cycles // 10)  # warm up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        elapsed_us = start.elapsed_time(end) * 1e3
    return cycles / max(elapsed_us, 1.0)


def bench_gpu(fn, *, warmup: int = 5, iters: int = 60, flush_l2: bool = True, pad_us: float = 500.0, before=None):
    """Time ``fn()`` (no arguments) on the current CUDA device; return a dict of microseconds.

    Args:
        fn: callable that enqueues GPU work on the current stream.
        warmup: untimed calls first (compilation, caches, clocks).
        iters: timed calls, each bracketed by its own pair of CUDA events.
        flush_l2: write a 256 MB buffer before each timed call (cold L2, as in ANCHORS.md).
        pad_us: GPU sleep after the flush, in microseconds (0 disables it).
        before: optional callable enqueued, untimed, ahead of each timed call's flush (another
            kernel to run before it, benchmarks/probes/prev_kernel.py).

    Returns:
        ``{"median_us", "min_us", "max_us", "mean_us", "stdev_us", "iters", "samples_us"}``.

    Raises:
        RuntimeError: CUDA is not available.
        ValueError: iters < 1 or warmup < 0.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("bench_gpu: needs a CUDA device; torch.cuda.is_available() is False.")
    if iters < 1 or warmup < 0:
        raise ValueError(f"bench_gpu: need iters >= 1 and warmup >= 0; got iters={iters}, warmup={warmup}.")
    device_index = torch.cuda.current_device()
    flush = L2Flush("write") if flush_l2 else None
    sleep_cycles = int(pad_us * _sleep_cycles_per_us(device_index)) if pad_us > 0 else 0

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        if before is not None:
            before()
        if flush is not None:
            flush()
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()

    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return {
        "median_us": statistics.median(samples),
        "min_us": min(samples),
        "max_us": max(samples),
        "mean_us": statistics.fmean(samples),
        "stdev_us": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "iters": iters,
        "samples_us": samples,
    }


def synced_call_us(fn, iters: int, *, before=None, warmup: int = 2) -> tuple:
    """Time ``fn()`` with the device drained before each call, host launch cost included (what a
    caller that waits for each call sees; the tensor-parallel benchmark, example and probe).

    Per call: ``before()`` if given (e.g. a process-group barrier), a synchronisation, then CUDA
    events around ``fn()``, and a synchronisation. ``warmup`` untimed calls first.

    Returns:
        ``(median microseconds of the iters timed calls, fn's last result)``.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"synced_call_us: need iters >= 1 and warmup >= 0; got iters={iters}, warmup={warmup}.")
    times, result = [], None
    for i in range(warmup + iters):
        if before is not None:
            before()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times), result


def bench_round_robin(fns: dict, *, warmup: int = 5, iters: int = 40, flush_l2: bool = True,
                      pad_us: float = 500.0, shuffle_seed: "int | None" = None, flush_kind: str = "write") -> dict:
    """Time several zero-argument callables interleaved: each iteration runs every one in turn.

    Every call is bracketed by its own CUDA events after an L2 flush and a sleep pad (as
    :func:`bench_gpu`), so clock and thermal drift over the run affects all of them alike. With
    ``shuffle_seed`` each iteration runs them in a fresh random order (seeded), so no callable
    always follows the same one. ``flush_kind``: ``"write"`` (the benchmarks' flush: 256 MB
    written, which leaves the L2 full of dirty lines) or ``"read"`` (256 MB read: a cold, clean
    L2). Returns ``name -> median microseconds``. Raises what a callable raises, and ValueError
    for another ``flush_kind``.
    """
    check_flush_kind(flush_kind, "bench_round_robin")
    device_index = torch.cuda.current_device()
    flush = L2Flush(flush_kind) if flush_l2 else None
    sleep_cycles = int(pad_us * _sleep_cycles_per_us(device_index)) if pad_us > 0 else 0
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    events = {name: [] for name in fns}
    rng = random.Random(shuffle_seed)
    for _ in range(iters):
        order = list(fns.items())
        if shuffle_seed is not None:
            rng.shuffle(order)
        for name, fn in order:
            if flush is not None:
                flush()
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs) for name, pairs in events.items()}


def kernel_device_us(fn, *, reps: int = 15, flush_kind: str = "read", name: str = "deep_tile") -> float:
    """Median device time, in microseconds, of the kernels whose name contains ``name`` that
    ``fn`` (no arguments) launches, over ``reps`` calls each after an L2 flush (``flush_kind`` as
    :func:`bench_round_robin`'s), from the profiler (kineto): no launch cost. One untimed call first.
    Raises ValueError for another ``flush_kind`` and RuntimeError when no such kernel ran."""
    from torch.profiler import ProfilerActivity, profile

    flush = L2Flush(flush_kind, "kernel_device_us")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            fn()
        torch.cuda.synchronize()
    times = [e.time_range.elapsed_us() for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and name in e.name]
    if not times:
        raise RuntimeError(f"kernel_device_us: no kernel named like {name!r} ran")
    return statistics.median(times)


def capture_graph(fn) -> "torch.cuda.CUDAGraph":
    """``fn`` (no arguments, enqueueing GPU work) captured in a CUDA graph, after one eager run on a
    side stream (compiles, loads and allocates outside the capture)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def copy_bandwidth(nbytes: int = 1 << 30, iters: int = 10) -> float:
    """Device-to-device copy rate in bytes per second, counting bytes read plus bytes written
    (the HBM ceiling a memory-bound kernel is held against); median of ``iters`` copies."""
    src = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * nbytes / statistics.median(times)


def sustained(fn, seconds: float = 3.0) -> dict:
    """Run ``fn`` back to back for about ``seconds`` (no flush) while ``nvidia-smi`` samples the
    SM clock and power every 100 ms; returns ``{"us", "mhz", "watts", "samples"}`` (per-call
    microseconds over the whole run, and the medians of the samples taken while it ran)."""
    import subprocess

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, int(seconds / max(start.elapsed_time(end) * 1e-3, 1e-6)))
    sampler = subprocess.Popen(["nvidia-smi", f"--id={torch.cuda.current_device()}",
                                "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
    finally:
        sampler.terminate()
        text, _ = sampler.communicate(timeout=10)
    samples = []
    for line in text.splitlines():
        try:
            mhz, watts = (float(v) for v in line.split(","))
            samples.append((mhz, watts))
        except ValueError:
            continue
    samples = samples[2:] or samples  # the first samples may predate the load
    return {"us": start.elapsed_time(end) * 1e3 / calls,
            "mhz": statistics.median(s[0] for s in samples) if samples else float("nan"),
            "watts": statistics.median(s[1] for s in samples) if samples else float("nan"),
            "samples": len(samples)}
