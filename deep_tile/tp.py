"""Tensor-parallel FP8 GEMMs with the communication overlapped ("async TP" for blockwise FP8).

A column-parallel linear waits for an all-gather of its input, a row-parallel one for a
reduce-scatter of its output. Here the transfers run beside the GEMMs (on the backend's or a side
stream), each hidden under a GEMM that does not need it:

- :func:`all_gather_fp8_gemm` (column-parallel): every rank holds ``T`` tokens' FP8 activations
  ``x [T, K]`` with their 1x128 scales and its rows of the weight ``w [N_r, K]`` (128x128 blocks);
  the result is the product of every rank's tokens, ``[world * T, N_r]`` with rank ``i``'s tokens
  at rows ``[i * T, (i + 1) * T)``. The activations travel as FP8 with their scales (``K + 4 *
  ceil(K / 128)`` bytes per token against bf16's ``2 K``). One all-gather of every rank's chunk runs
  under the GEMM of this rank's own ``T`` rows; then the other chunks' GEMMs, ``T`` rows each.
- :func:`fp8_gemm_reduce_scatter` (row-parallel): every rank holds all ``world * T`` tokens over its
  slice of the features, ``x [world * T, K_r]``, and the matching weight columns ``w [N, K_r]``;
  rank ``r`` gets rows ``[r * T, (r + 1) * T)`` of the sum over ranks of ``x_i @ w_i^T``. Each
  rank computes the partial of one destination's rows at a time (FP32, or bf16 to halve the
  bytes), sends it to its owner point to point while it computes the next, and adds what it receives in a fixed
  order, in FP32, rounded once: the partials of ranks ``rank - 1, ..., rank - (world - 2)``, then
  its own (computed while the last transfer runs, added in its GEMM's epilogue as ``c``), then
  rank ``rank - (world - 1)``'s.

:func:`all_gather_then_gemm` and :func:`gemm_then_reduce_scatter` are the same products done one
after the other (the whole transfer, then the GEMM; the GEMM, then the transfer): the baselines
of ``benchmarks/bench_tp.py`` and the references of the tests. The overlapped results are
bitwise equal to them whenever the selector splits K for neither a chunk's GEMM nor the whole one
(deep_tile's per-element summation order does not depend on the tile, only on a K split; where a
split happens the results agree to FP32 rounding). :func:`k_splits` tells, for a shape, whether
the selector splits K for a chunk or for the whole GEMM; at the shapes of the tests and of
``benchmarks/bench_tp.py`` it splits K for neither (on 132 or 120 SMs). Over a process group the
sequential column form gathers with one all-gather per tensor (the same bytes), and the sequential row
form exchanges the partials point to point and adds them in the overlapped form's fixed order: it
never uses NCCL's reduce-scatter, whose summation order is NCCL's own.

Ranks must pass tensors of equal shapes (checked with one small all-gather unless
``check=False``); at world size 1 both functions are the plain GEMM. The transport is
``torch.distributed`` (NCCL on GPUs; gloo works for CPU tests with a stand-in GEMM); every tensor
travels as its bytes (a uint8 view), a type every backend carries;
:class:`LoopbackRing` runs the same code path on one device with a simulated world, each chunk
"arriving" by a copy on the side stream (tests, and a one-GPU check of the overlap).
"""
from __future__ import annotations

import contextlib
import weakref

import torch

from deep_tile.common import SCALE_GROUP, align_up, ceil_div

__all__ = ["all_gather_fp8_gemm", "fp8_gemm_reduce_scatter", "all_gather_then_gemm", "gemm_then_reduce_scatter",
           "DistRing", "LoopbackRing", "chunk_gemm", "pack_chunk", "k_splits"]


def chunk_gemm(a, a_scale, b, b_scale, out=None, *, c=None, out_dtype=None):
    """The GEMM every chunk runs: :func:`deep_tile.fp8_gemm` (a module attribute, looked up at each
    call, so a test without a GPU can put a stand-in in its place)."""
    from deep_tile.gemm import fp8_gemm

    return fp8_gemm(a, a_scale, b, b_scale, out, c=c, out_dtype=out_dtype)


# ---- transports --------------------------------------------------------------------------------


class DistRing:
    """The ring over a ``torch.distributed`` process group: :meth:`shift` sends to the next rank
    and receives from the previous one; :meth:`send_recv` sends to one rank and receives from
    another. Each returns a handle whose :meth:`wait` orders the current stream after the transfer
    (NCCL: without blocking the host; gloo: blocking), so it must be called with the stream that
    reads the received buffers (and next writes the sent ones) current: here always the stream the
    GEMMs run on.

    Every tensor travels as a uint8 view of its bytes (:func:`_wire`), made and checked before a
    batch of transfers opens: NCCL refuses some types (int16), gloo others (float8, bfloat16), and
    an error raised inside ``batch_isend_irecv`` leaves the NCCL group torch opened for the batch
    open (torch does not close it on an error), after which later operations of the process group
    may be deferred and never run while their waits return."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.backend = dist.get_backend(group)

    @property
    def comm_sms(self) -> int:
        """SMs the overlapped gather needs beside a GEMM: 2 for symmetric memory's barrier kernel (the
        copies take none), 32 for NCCL's kernels."""
        return 2 if self._symm() is not None else 32

    def _symm(self):
        """The group's :class:`_SymmSpace`, or None where the transport is NCCL (the backend is not
        NCCL, ``DEEP_TILE_TP_TRANSPORT=nccl``, or symmetric memory failed to set up here)."""
        from deep_tile import env

        if self.backend != "nccl" or env.tp_transport() != "symm":
            return None
        pg = self._process_group()
        space = _SPACES.get(pg)
        if space is None:
            try:
                space = _SymmSpace(pg.group_name, self.world, self.rank)
            except Exception as error:  # noqa: BLE001 -- no symmetric memory here: NCCL carries everything
                space = f"{type(error).__name__}: {error}"
            _SPACES[pg] = space
        return space if isinstance(space, _SymmSpace) else None

    def _process_group(self):
        """The group object itself (the default group for None): the key of its symmetric buffer."""
        return self.group if self.group is not None else self.dist.distributed_c10d._get_default_group()

    @property
    def symm_failed(self):
        """Why symmetric memory could not be set up for this group (None: it was, or was not tried)."""
        space = _SPACES.get(self._process_group())
        return space if isinstance(space, str) else None

    def _peer(self, rank: int) -> int:
        """The global rank of ``rank`` in the group (P2P ops take global ranks)."""
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def send_recv(self, send: list, dst: int, recv: list, src: int):
        """Send the tensors ``send`` to rank ``dst`` and receive ``recv`` (same shapes as the
        sender's) from rank ``src`` (ranks of the group), as one batch; returns the handle."""
        wires = [(self.dist.isend, _wire(t), dst) for t in send] + [(self.dist.irecv, _wire(t), src) for t in recv]
        ops = [self.dist.P2POp(op, t, self._peer(peer), self.group) for op, t, peer in wires]
        return _Works(self.dist.batch_isend_irecv(ops))

    def shift(self, send: list, recv: list, step: int):
        """Send to the next rank, receive from the previous one (``step``: the ring's step, 1-based;
        what arrives is rank ``rank - step``'s chunk)."""
        return self.send_recv(send, (self.rank + 1) % self.world, recv, (self.rank - 1) % self.world)

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's ``t`` (contiguous, at least 2-D, the same shape everywhere) stacked along
        dim 0, in rank order, gathered as bytes: NCCL's all_gather_into_tensor (other backends:
        all_gather into views of the result)."""
        if t.dim() < 2:
            raise ValueError(f"DistRing.gather_rows: t must be at least 2-D; got shape {tuple(t.shape)}.")
        wire = _wire(t)
        out = torch.empty((self.world * wire.shape[0],) + tuple(wire.shape[1:]), dtype=torch.uint8, device=t.device)
        if self.backend == "nccl":
            self.dist.all_gather_into_tensor(out, wire, group=self.group)
        else:
            self.dist.all_gather(list(out.chunk(self.world)), wire, group=self.group)
        return out.view(t.dtype)

    def gather_chunks(self, tensors: list):
        """Every rank's ``tensors`` (contiguous, the same shapes everywhere): returns ``(handle,
        chunks)``, ``chunks[i]`` rank ``i``'s tensors (this rank's: ``tensors`` themselves), to be
        read once ``handle.wait(i)`` returned; ``handle.done()`` after the last read. Over
        symmetric memory every rank's chunk is pulled by the copy engines on a side stream, one
        rank after another from ``rank + 1``; otherwise one NCCL all-gather of their bytes (one
        collective, not a ring: each NCCL operation has a fixed cost, docs/tp.md)."""
        space = self._symm()
        if space is not None:
            return space.gather_chunks(tensors)
        wires = [_wire(t) for t in tensors]
        packed = torch.cat([w.reshape(-1) for w in wires]) if len(wires) > 1 else wires[0].reshape(-1)
        out = torch.empty(self.world * packed.numel(), dtype=torch.uint8, device=packed.device)
        if self.backend == "nccl":
            work = self.dist.all_gather_into_tensor(out, packed, group=self.group, async_op=True)
        else:
            work = self.dist.all_gather(list(out.chunk(self.world)), packed, group=self.group, async_op=True)
        chunks = []
        for row in out.view(self.world, -1):
            parts, offset = [], 0
            for t, w in zip(tensors, wires):
                parts.append(row[offset:offset + w.numel()].view(t.dtype).view(t.shape))
                offset += w.numel()
            chunks.append(parts)
        return _Works([work], keep=packed), chunks

    def mailbox(self, shape: tuple, dtype: torch.dtype, steps: int):
        """A :class:`_Mailbox` of ``steps`` slots of ``shape`` and ``dtype`` on every rank, over
        symmetric memory; None where the transport is NCCL."""
        space = self._symm()
        return None if space is None else space.mailbox(shape, dtype, steps)

    def all_shapes(self, shape: tuple) -> list:
        """Every rank's ``shape`` (a tuple of ints), by one small all-gather."""
        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        mine = torch.tensor([shape], dtype=torch.int64, device=device)
        return [tuple(int(v) for v in row) for row in self.gather_rows(mine).tolist()]


# per process group (held weakly: a destroyed group's entry goes with it): its _SymmSpace, set up
# once (a collective), or why it could not be
_SPACES = weakref.WeakKeyDictionary()


def _wire(t: torch.Tensor) -> torch.Tensor:
    """``t`` as every backend carries it: a uint8 view of its bytes (the receiver's buffer, viewed
    the same way, gets the sender's bytes whatever the type). ``t`` must be contiguous: a view of
    a strided tensor's bytes would not be its elements."""
    if not t.is_contiguous() or t.dim() == 0:
        raise ValueError(f"deep_tile.tp: a transferred tensor must be contiguous and at least 1-D; got "
                         f"{t.dtype} {tuple(t.shape)} with strides {t.stride()}.")
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


class _Works:
    """The handle of one batch of transfers: :meth:`wait` waits for each of its works (NCCL: the
    current stream waits; gloo: the host waits)."""

    def __init__(self, works, keep=None):
        self.works = works
        self.keep = keep  # a send buffer made for the transfer, alive until the transfer is waited for

    def wait(self, src=None):
        """Order the current stream after every transfer of the batch (``src``: any rank's chunk, the same)."""
        for work in self.works:
            work.wait()
        self.keep = None

    def done(self):
        """Nothing to release: NCCL's buffers are this call's own."""


_ALIGN = 256  # bytes: every part of a symmetric buffer starts on this boundary


class _SymmSpace:
    """One buffer of torch's symmetric memory per rank of a group (``torch.distributed.
    _symmetric_memory``, CUDA IPC; never NVLink multicast), every rank's buffer addressable from
    every rank: a copy between this rank's memory and a peer's is a ``cudaMemcpyAsync`` that the
    copy engines carry over NVLink, with no SMs taken from the GEMMs. Ranks order themselves by
    the buffer's barriers (a one-block kernel: the only SM work of a transfer).

    The buffer has two halves, used by alternate calls: a call writes its half only after a
    barrier of the call before, which every rank passes only once its reads of that call before
    were done, so no call needs a barrier of its own at its end. (Every call has a barrier, and
    its side stream first waits for the current one.) The buffer grows (a collective
    rendezvous, outside graph capture) when a call needs more; every rank asks the same sizes,
    since every rank passes the same shapes."""

    def __init__(self, group_name: str, world: int, rank: int):
        import torch.distributed._symmetric_memory as symm_mem

        self.symm_mem, self.world, self.rank = symm_mem, world, rank
        self.group = group_name  # the name, not the group: the group's lifetime is its owner's
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.tensor = self.handle = None
        self.half = 0  # bytes in each half
        self.calls = 0  # calls so far: the parity picks the half
        self._views = {}
        self._grow(1 << 20)  # set up now: a failure here means NCCL carries everything

    def _grow(self, nbytes: int) -> None:
        if self.tensor is not None:
            # every rank's copies into and out of the old buffer end before it is freed
            torch.cuda.synchronize(self.device)
            self.handle.barrier(channel=0)
            torch.cuda.synchronize(self.device)
        half = align_up(nbytes, 1 << 21)
        self.tensor = self.symm_mem.empty(2 * half, dtype=torch.uint8, device=self.device)
        self.handle = self.symm_mem.rendezvous(self.tensor, self.group)
        self.half, self._views = half, {}

    def begin(self, nbytes: int) -> int:
        """Start a call that uses ``nbytes`` of every rank's buffer: the byte offset of its half."""
        if nbytes > self.half:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"deep_tile.tp: the symmetric buffer must grow to {nbytes} bytes, which "
                                   f"cannot happen during graph capture; call once with these shapes first.")
            self._grow(nbytes)
        self.calls += 1
        return (self.calls % 2) * self.half

    def view(self, rank: int, offset: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """``shape`` of ``dtype`` at byte ``offset`` of rank ``rank``'s buffer (a tensor of this device)."""
        key = (rank, offset, tuple(shape), dtype)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = self.handle.get_buffer(rank, tuple(shape), dtype, offset // dtype.itemsize)
        return view

    def barrier(self, channel: int) -> None:
        """The current stream waits until every rank's current stream reached the same barrier."""
        self.handle.barrier(channel=channel)

    def gather_chunks(self, tensors: list):
        """:meth:`DistRing.gather_chunks` by pulls, all on a side stream: this rank's chunk into
        its own buffer, a barrier, then every peer's chunk copied from that peer's buffer."""
        wires = [_wire(t).reshape(-1) for t in tensors]
        offsets, total = [], 0
        for w in wires:
            offsets.append(total)
            total = align_up(total + w.numel(), _ALIGN)
        base = self.begin(total)
        chunks = [list(tensors) if i == self.rank else [torch.empty_like(t) for t in tensors] for i in range(self.world)]
        stream = _side_stream(tensors[0])
        events = {}
        with torch.cuda.stream(stream):
            for w, offset in zip(wires, offsets):
                self.view(self.rank, base + offset, (w.numel(),), torch.uint8).copy_(w)
            self.barrier(0)  # every rank's chunk is in its buffer
            for step in range(1, self.world):
                src = (self.rank + step) % self.world
                for dst, w, offset in zip(chunks[src], wires, offsets):
                    _wire(dst).reshape(-1).copy_(self.view(src, base + offset, (w.numel(),), torch.uint8))
                events[src] = torch.cuda.Event()
                events[src].record(stream)
        return _Pulled(stream, events), chunks

    def mailbox(self, shape: tuple, dtype: torch.dtype, steps: int):
        """:class:`_Mailbox` with ``steps`` slots of ``shape``/``dtype`` in every rank's buffer."""
        slot = align_up(int(torch.Size(shape).numel()) * dtype.itemsize, _ALIGN)
        return _Mailbox(self, self.begin(steps * slot), shape, dtype, slot)


class _Pulled:
    """The handle of a pull-gather: :meth:`wait` orders the current stream after one rank's
    chunk (every chunk: ``src`` None); :meth:`done` after every pull."""

    def __init__(self, stream, events):
        self.stream, self.events = stream, events

    def wait(self, src=None):
        current = torch.cuda.current_stream()
        for rank, event in self.events.items():
            if src is None or rank == src:
                current.wait_event(event)

    def done(self):
        torch.cuda.current_stream().wait_stream(self.stream)


class _Mailbox:
    """Slots ``1 .. steps`` in every rank's symmetric buffer (this call's half): at step ``s``
    rank ``r`` posts into rank ``r + s``'s slot ``s``, so this rank's slot ``s`` holds rank
    ``rank - s``'s post.

    :meth:`post` copies by the copy engines on a side stream, after the current stream's work;
    :meth:`landed` orders the current stream after every rank's posts of steps ``1 .. step``;
    :meth:`inbox` is a slot of this rank. No barrier closes a call (see :class:`_SymmSpace`)."""

    def __init__(self, space, base, shape, dtype, slot_bytes):
        self.space, self.base, self.shape, self.dtype, self.slot_bytes = space, base, tuple(shape), dtype, slot_bytes
        self.posted = {}  # step: the event after its copy

    def _slot(self, rank: int, step: int) -> torch.Tensor:
        return self.space.view(rank, self.base + (step - 1) * self.slot_bytes, self.shape, self.dtype)

    def post(self, step: int, t: torch.Tensor) -> None:
        space = self.space
        stream = _side_stream(t)
        with torch.cuda.stream(stream):
            self._slot((space.rank + step) % space.world, step).copy_(t)
            self.posted[step] = torch.cuda.Event()
            self.posted[step].record(stream)

    def landed(self, step: int, channel: int) -> None:
        torch.cuda.current_stream().wait_event(self.posted[step])  # the posts are in step order on one stream
        self.space.barrier(channel)

    def inbox(self, step: int) -> torch.Tensor:
        return self._slot(self.space.rank, step)


class _LoopbackMailbox:
    """A simulated world's :class:`_Mailbox`: the peers' posts are given, so posting and the
    barriers do nothing."""

    def __init__(self, ring):
        self.ring = ring

    def post(self, step: int, t: torch.Tensor) -> None:
        pass

    def landed(self, step: int, channel: int) -> None:
        pass

    def inbox(self, step: int) -> torch.Tensor:
        return self.ring.peers[(self.ring.rank - step) % self.ring.world][0]


class LoopbackRing:
    """A simulated world on one device, seen from rank ``rank``: the other ranks' tensors are
    given (``peers``: for each rank, the list of tensors it would send, in the order the
    functions send them), and a transfer is a copy from them on a side stream (CUDA) or at once
    (CPU), so the overlapped code path runs unchanged without a process group.

    ``peers[i]`` for :func:`all_gather_fp8_gemm`: rank ``i``'s ``[x bytes, x_scale buffer]`` (as
    :func:`pack_chunk` makes them); for :func:`fp8_gemm_reduce_scatter`: rank ``i``'s partial for this
    rank's rows (what rank ``i`` would send here).
    """

    comm_sms = 0  # the copies need no SMs

    def __init__(self, world: int, rank: int, peers: list):
        self.world, self.rank, self.peers = world, rank, peers

    def _copy(self, recv: list, tensors: list):
        stream = _side_stream(recv[0])
        with _on(stream, recv[0]):
            for dst, src in zip(recv, tensors):
                dst.copy_(src, non_blocking=True)
        return _StreamDone(stream)

    def shift(self, send: list, recv: list, step: int):
        """Receive rank ``rank - step``'s tensors into ``recv`` (``send`` is ignored: the peers'
        tensors are given); returns the handle."""
        return self._copy(recv, self.peers[(self.rank - step) % self.world])

    def send_recv(self, send: list, dst: int, recv: list, src: int):
        """Receive rank ``src``'s tensors into ``recv`` (``send`` and ``dst`` are ignored);
        returns the handle."""
        return self._copy(recv, self.peers[src])

    def gather_chunks(self, tensors: list):
        """Every rank's tensors (this rank's ``tensors``, the peers' as given), each peer's copied
        into a fresh buffer on the side stream: ``(handle, chunks)`` as :meth:`DistRing.gather_chunks`."""
        chunks = [list(tensors) if i == self.rank else [torch.empty_like(t) for t in tensors] for i in range(self.world)]
        stream = _side_stream(tensors[0])
        with _on(stream, tensors[0]):
            for i in range(self.world):
                if i != self.rank:
                    for dst, src in zip(chunks[i], self.peers[i]):
                        dst.copy_(src, non_blocking=True)
        return _StreamDone(stream), chunks

    def mailbox(self, shape: tuple, dtype: torch.dtype, steps: int):
        """The simulated world's mailbox (:class:`_LoopbackMailbox`): ``peers[i][0]`` is what rank
        ``i`` posts to this rank."""
        return _LoopbackMailbox(self)

    def all_shapes(self, shape: tuple) -> list:
        """Every rank's shape: the simulated ranks pass the same shapes as this one."""
        return [shape] * self.world


class _StreamDone:
    """A loopback transfer's handle: the current stream waits for the side stream's copy."""

    def __init__(self, stream):
        self.event = None
        if stream is not None:
            self.event = torch.cuda.Event()
            self.event.record(stream)

    def wait(self, src=None):
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)

    def done(self):
        """Nothing to release: the copies' buffers are this call's own."""


_SIDE_STREAMS: dict = {}


def _side_stream(t: torch.Tensor, after=None):
    """The copy stream for ``t``'s device (None on the CPU); it first waits for the current
    stream (so a buffer it writes is no longer read by earlier work), or for the event ``after``."""
    if not t.is_cuda:
        return None
    stream = _SIDE_STREAMS.get(t.device)
    if stream is None:
        stream = _SIDE_STREAMS[t.device] = torch.cuda.Stream(t.device)
    if after is None:
        stream.wait_stream(torch.cuda.current_stream(t.device))
    else:
        stream.wait_event(after)
    return stream


def _on(stream, t):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


# ---- checks and buffers ------------------------------------------------------------------------


def _ring(group, ring):
    """The transport of a call (``ring``, else the group's), or None for a world of one."""
    if ring is not None:
        return ring if ring.world > 1 else None  # a simulated world of one: the plain GEMM, as a group's
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None  # no process group: a world of one
    return DistRing(group) if dist.get_world_size(group) > 1 else None


def _check_fp8(fn: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn or t.dim() != 2:
        raise ValueError(f"{fn}: {name} must be a 2-D float8_e4m3fn tensor; got "
                         f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}.")


def _check_same_everywhere(fn: str, ring, shape: tuple, what: str) -> None:
    shapes = ring.all_shapes(shape)
    if any(s != shapes[0] for s in shapes):
        listing = ", ".join(f"rank {i}: {s}" for i, s in enumerate(shapes))
        raise ValueError(f"{fn}: every rank must pass the same {what}; got {listing}.")


def pack_chunk(x: torch.Tensor, x_scale: torch.Tensor) -> list:
    """The tensors one rank's chunk travels as: its FP8 bytes ``[T, K]`` (uint8, contiguous) and
    its scales in the GEMM's zero-copy layout, the contiguous ``[ceil(K/128), align4(T)]`` buffer
    under the column-major view (:func:`_scales_view`)."""
    t, k_blocks = x_scale.shape
    buf = torch.zeros(k_blocks, align_up(max(t, 1), 4), dtype=torch.float32, device=x_scale.device)
    _scales_view(buf, t).copy_(x_scale)
    return [x.contiguous().view(torch.uint8), buf]


def _scales_view(buf: torch.Tensor, t: int) -> torch.Tensor:
    """``[t, k_blocks]`` float32 with strides ``(1, align4(t))`` over ``buf``: the a_scale layout the
    GEMM reads without a copy (deep_tile.gemm.layouts.get_tma_aligned_a_scale)."""
    return buf.t()[:t]


def k_splits(side: str, world: int, t: int, n: int, k: int, *, partial_dtype: torch.dtype = torch.float32,
             num_sms=None) -> dict:
    """The split-K factor the selector picks (:func:`deep_tile.get_config`, on this device or
    ``num_sms`` SMs) for each GEMM of one call, by role: ``{"chunk": s, "whole": s}`` for the
    column side (``x [T, K]`` per rank, ``w [N_r, K]``: ``n`` is ``N_r``); for the row side (``x
    [world * T, K_r]``, ``w [N, K_r]``: ``k`` is ``K_r``) also ``"own"`` (this rank's partial,
    accumulated into the FP32 sum when ``world > 2``). The overlapped result is bitwise equal to
    the sequential one when every value is 1; otherwise they may differ by the FP32 rounding of
    the K split."""
    from deep_tile.select.api import get_config

    if side not in ("column", "row"):
        raise ValueError(f"k_splits: side must be 'column' or 'row'; got {side!r}.")
    if side == "column":
        return {"chunk": get_config(t, n, k, num_sms).split_k, "whole": get_config(world * t, n, k, num_sms).split_k}
    chunk_out = "float32" if partial_dtype == torch.float32 else "bfloat16"
    own_c = "out" if world > 2 else None
    return {"chunk": get_config(t, n, k, num_sms, out_dtype=chunk_out).split_k,
            "own": get_config(t, n, k, num_sms, out_dtype="float32", c_dtype=own_c).split_k,
            "whole": get_config(world * t, n, k, num_sms, out_dtype="float32").split_k}


# ---- column-parallel: all-gather x GEMM --------------------------------------------------------


def all_gather_fp8_gemm(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                        group=None, *, check: bool = True, ring=None, comm_sms=None) -> torch.Tensor:
    """``all_gather(x) @ w^T`` (bf16) with the gather of the FP8 activations hidden under the GEMM.

    Args:
        x: [T, K] float8_e4m3fn, this rank's tokens (every rank the same T and K; T >= 1).
        x_scale: [T, ceil(K/128)] float32, their 1x128 scales (any layout).
        w: [N_r, K] float8_e4m3fn, this rank's rows of the weight; w_scale: its 128x128 scales,
            as :func:`deep_tile.fp8_gemm` takes them.
        group: the ``torch.distributed`` process group (default: the world); without an
            initialised process group, or at world size 1, the plain GEMM.
        check: compare every rank's shapes first (one small all-gather) and raise a
            ``ValueError`` naming them when they differ, instead of a hang or a wrong transfer.
        ring: a transport in place of the group's (:class:`LoopbackRing`: a simulated world).
        comm_sms: SMs left to the gather while this rank's own chunk is multiplied (the GEMM's
            persistent grid otherwise takes every SM, and a kernel of the transfer waits for it); None:
            what the transport needs (2 over symmetric memory, for its barrier; 32 for NCCL). The
            other chunks' GEMMs use every SM (:func:`deep_tile.set_num_sms`).

    Returns:
        [world * T, N_r] bfloat16; rows ``[i * T, (i + 1) * T)`` are rank ``i``'s tokens times ``w``.
    """
    fn = "all_gather_fp8_gemm"
    if comm_sms is not None and (not isinstance(comm_sms, int) or isinstance(comm_sms, bool) or comm_sms < 0):
        raise ValueError(f"{fn}: comm_sms must be None or an int >= 0; got {comm_sms!r}.")
    _check_fp8(fn, "x", x)
    _check_fp8(fn, "w", w)
    ring = _ring(group, ring)
    if ring is None:
        return chunk_gemm(x, x_scale, w, w_scale)
    t, k = x.shape
    if check:
        _check_same_everywhere(fn, ring, (t, k, tuple(x_scale.shape)[1], w.shape[1]), "x [T, K] (and w's K)")
    world, rank = ring.world, ring.rank
    sms = ring.comm_sms if comm_sms is None else comm_sms
    space = ring._symm() if isinstance(ring, DistRing) else None
    if space is not None:
        return _all_gather_pulled(x, x_scale, w, w_scale, space, sms)
    out = torch.empty(world * t, w.shape[0], dtype=torch.bfloat16, device=x.device)
    mine = pack_chunk(x, x_scale)  # x's bytes are the caller's: sent, never received into
    # Every chunk gathered while this rank's own chunk is multiplied, then the others in rank
    # order after this one's, each as soon as it has arrived (docs/tp.md, 'How the overlap works').
    pending, chunks = ring.gather_chunks(mine)
    with _sms_left(sms if x.is_cuda else 0):
        chunk_gemm(x, _scales_view(mine[1], t), w, w_scale, out[rank * t:(rank + 1) * t])
    for step in range(1, world):
        src = (rank + step) % world
        pending.wait(src)
        chunk_gemm(chunks[src][0].view(torch.float8_e4m3fn), _scales_view(chunks[src][1], t), w, w_scale,
                   out[src * t:(src + 1) * t])
    pending.done()
    return out


def _all_gather_pulled(x, x_scale, w, w_scale, space, sms: int) -> torch.Tensor:
    """:func:`all_gather_fp8_gemm` over symmetric memory: this rank's GEMM starts at once (its
    host launch is the first thing the call does), and beside it a side stream writes this rank's
    chunk (FP8 bytes, then the scales in the GEMM's layout) into its buffer, passes a barrier and
    pulls each peer's chunk by the copy engines, one copy a peer; each peer's GEMM waits for its
    copy only."""
    t, k = x.shape
    world, rank, k_blocks, t4 = space.world, space.rank, x_scale.shape[1], align_up(t, 4)
    scales_at = align_up(t * k, _ALIGN)
    nbytes = scales_at + k_blocks * t4 * 4
    base = space.begin(nbytes)
    inputs_ready = torch.cuda.Event()
    inputs_ready.record()
    out = torch.empty(world * t, w.shape[0], dtype=torch.bfloat16, device=x.device)
    with _sms_left(sms):
        chunk_gemm(x, x_scale, w, w_scale, out[rank * t:(rank + 1) * t])
    received = torch.empty(world - 1, nbytes, dtype=torch.uint8, device=x.device)
    stream = _side_stream(x, after=inputs_ready)
    arrived = []
    with torch.cuda.stream(stream):
        space.view(rank, base, (t, k), torch.uint8).copy_(x.contiguous().view(torch.uint8))
        my_scales = space.view(rank, base + scales_at, (k_blocks, t4), torch.float32)
        if t4 != t:
            my_scales[:, t:].zero_()  # the layout's padding: never read, but not left undefined
        _scales_view(my_scales, t).copy_(x_scale)
        space.barrier(0)  # every rank's chunk is in its buffer
        for step in range(1, world):
            received[step - 1].copy_(space.view((rank + step) % world, base, (nbytes,), torch.uint8))
            arrived.append(torch.cuda.Event())
            arrived[-1].record(stream)
    current = torch.cuda.current_stream()
    for step in range(1, world):
        src, chunk = (rank + step) % world, received[step - 1]
        current.wait_event(arrived[step - 1])
        scales = chunk[scales_at:].view(torch.float32).view(k_blocks, t4)
        chunk_gemm(chunk[:t * k].view(torch.float8_e4m3fn).view(t, k), _scales_view(scales, t), w, w_scale,
                   out[src * t:(src + 1) * t])
    return out


@contextlib.contextmanager
def _sms_left(count: int):
    """Later GEMMs on ``count`` fewer SMs than they may use now, until the block ends."""
    from deep_tile import device

    if count <= 0:
        yield
        return
    limit = device.sms_limit()
    device.set_num_sms(max(1, device.get_num_sms() - count))
    try:
        yield
    finally:
        device.set_num_sms(limit)


def all_gather_then_gemm(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                         group=None, *, ring=None) -> torch.Tensor:
    """The sequential form of :func:`all_gather_fp8_gemm`: every rank's FP8 tokens and scales
    gathered first (``torch.distributed.all_gather_into_tensor`` over a process group; the ring's
    transfers one after another over a :class:`LoopbackRing`), then one GEMM of ``world * T`` rows.
    The baseline and the reference (same arguments and result)."""
    ring = _ring(group, ring)
    if ring is None:
        return chunk_gemm(x, x_scale, w, w_scale)
    t, k = x.shape
    world, rank = ring.world, ring.rank
    if isinstance(ring, DistRing):
        xs = ring.gather_rows(x.contiguous().view(torch.uint8))
        scales = ring.gather_rows(x_scale.contiguous())
        return chunk_gemm(xs.view(torch.float8_e4m3fn), scales, w, w_scale)
    mine = pack_chunk(x, x_scale)
    xs = torch.empty(world * t, k, dtype=torch.uint8, device=x.device)
    scales = torch.empty(world * t, x_scale.shape[1], dtype=torch.float32, device=x.device)
    cur = mine
    for step in range(world):
        src = (rank - step) % world
        xs[src * t:(src + 1) * t].copy_(cur[0])
        scales[src * t:(src + 1) * t].copy_(_scales_view(cur[1], t))
        if step + 1 < world:
            nxt = [torch.empty_like(b) for b in mine]
            ring.shift(cur, nxt, step + 1).wait()
            cur = nxt
    return chunk_gemm(xs.view(torch.float8_e4m3fn), scales, w, w_scale)


# ---- row-parallel: GEMM x reduce-scatter -------------------------------------------------------


def _row_parallel_args(fn, x, x_scale, w, group, ring, partial_dtype, out_dtype):
    """The row-parallel calls' checks, before any transfer: ``(ring, T)`` (ring None at a world
    of one)."""
    _check_partial_dtype(fn, partial_dtype, out_dtype)
    _check_fp8(fn, "x", x)
    _check_fp8(fn, "w", w)
    ring = _ring(group, ring)
    world = 1 if ring is None else ring.world
    rows = x.shape[0]
    if rows % world or rows == 0:
        raise ValueError(f"{fn}: x's rows ({rows}) must be a positive multiple of the world size ({world}).")
    if x_scale.shape[0] != rows:
        raise ValueError(f"{fn}: x_scale must have x's {rows} rows; got {tuple(x_scale.shape)}.")
    return ring, rows // world


def _check_partial_dtype(fn, partial_dtype, out_dtype):
    if partial_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"{fn}: partial_dtype must be torch.float32 or torch.bfloat16; got {partial_dtype}.")
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"{fn}: out_dtype must be torch.float32 or torch.bfloat16; got {out_dtype}.")


def fp8_gemm_reduce_scatter(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                            group=None, *, out_dtype: torch.dtype = torch.bfloat16,
                            partial_dtype: torch.dtype = torch.float32, check: bool = True,
                            ring=None) -> torch.Tensor:
    """This rank's rows of ``sum over ranks of x_i @ w_i^T``, the reduce-scatter hidden under the GEMMs.

    Args:
        x: [world * T, K_r] float8_e4m3fn: every token over this rank's slice of the features.
        x_scale: [world * T, ceil(K_r/128)] float32, their 1x128 scales.
        w: [N, K_r] float8_e4m3fn, the weight's columns of this rank's features; w_scale: its
            128x128 scales.
        group, check, ring: as :func:`all_gather_fp8_gemm`.
        out_dtype: the result's type (bf16 or float32); the sum is FP32, rounded once.
        partial_dtype: the type the partials travel in: float32 (exact) or bf16 (half the bytes,
            each partial rounded once before the FP32 sum).

    Returns:
        [T, N] of ``out_dtype``: rows ``[rank * T, (rank + 1) * T)`` of the sum. At world size 1
        the plain GEMM.
    """
    fn = "fp8_gemm_reduce_scatter"
    ring, t = _row_parallel_args(fn, x, x_scale, w, group, ring, partial_dtype, out_dtype)
    if ring is None:
        return chunk_gemm(x, x_scale, w, w_scale, out_dtype=out_dtype)
    if check:
        _check_same_everywhere(fn, ring, (*x.shape, *w.shape), "x [world * T, K_r] and w [N, K_r]")
    world, rank, n = ring.world, ring.rank, w.shape[0]

    def rows(i):
        return slice(i * t, (i + 1) * t)

    box = ring.mailbox((t, n), partial_dtype, world - 1)
    if box is not None:
        return _reduce_scatter_posted(x, x_scale, w, w_scale, box, world, rank, t, out_dtype, partial_dtype)
    acc = torch.empty(t, n, dtype=torch.float32, device=x.device)
    sends = [torch.empty(t, n, dtype=partial_dtype, device=x.device) for _ in range(2)]
    recvs = [torch.empty(t, n, dtype=partial_dtype, device=x.device) for _ in range(2)]
    pending = [None, None]
    for step in range(1, world):
        dst, src = (rank + step) % world, (rank - step) % world
        slot = step % 2
        if pending[slot] is not None:  # step - 2's buffers are free once its transfer is done
            pending[slot].wait()
            _accumulate(acc, recvs[slot], first=step - 2 == 1)
        chunk_gemm(x[rows(dst)], x_scale[rows(dst)], w, w_scale, sends[slot])
        pending[slot] = ring.send_recv([sends[slot]], dst, [recvs[slot]], src)
    if world > 2:  # step world - 2's partial (unless the loop took it)
        slot = world % 2
        pending[slot].wait()
        _accumulate(acc, recvs[slot], first=world - 2 == 1)
    # This rank's own partial (fused into the GEMM's epilogue as c when partials came before),
    # while the last transfer is in flight; then the last received partial.
    if world > 2:
        chunk_gemm(x[rows(rank)], x_scale[rows(rank)], w, w_scale, acc, c=acc)
    else:
        chunk_gemm(x[rows(rank)], x_scale[rows(rank)], w, w_scale, acc)
    last = (world - 1) % 2
    pending[last].wait()
    _accumulate(acc, recvs[last], first=False)
    return acc if out_dtype == torch.float32 else acc.to(out_dtype)


def _reduce_scatter_posted(x, x_scale, w, w_scale, box, world, rank, t, out_dtype, partial_dtype):
    """:func:`fp8_gemm_reduce_scatter` over a mailbox: each partial is posted into its owner's
    buffer by the copy engines while the next is computed, and summed in the fixed order."""
    n = w.shape[0]

    def rows(i):
        return slice(i * t, (i + 1) * t)

    sends = []
    for step in range(1, world):
        dst = (rank + step) % world
        sends.append(torch.empty(t, n, dtype=partial_dtype, device=x.device))
        chunk_gemm(x[rows(dst)], x_scale[rows(dst)], w, w_scale, sends[-1])
        box.post(step, sends[-1])
    acc = torch.empty(t, n, dtype=torch.float32, device=x.device)
    if world > 2:
        # the posts of steps 1 .. world - 2 landed under the GEMM of step world - 1; their sum is
        # this rank's own GEMM's c, while the last post is in flight
        box.landed(world - 2, 0)
        for step in range(1, world - 1):
            _accumulate(acc, box.inbox(step), first=step == 1)
        chunk_gemm(x[rows(rank)], x_scale[rows(rank)], w, w_scale, acc, c=acc)
    else:
        chunk_gemm(x[rows(rank)], x_scale[rows(rank)], w, w_scale, acc)
    box.landed(world - 1, 1)
    _accumulate(acc, box.inbox(world - 1), first=False)
    return acc if out_dtype == torch.float32 else acc.to(out_dtype)


def _accumulate(acc: torch.Tensor, partial: torch.Tensor, first: bool) -> None:
    """``acc = partial`` (the first received) or ``acc += partial``, in FP32."""
    if first:
        acc.copy_(partial)
    else:
        acc.add_(partial.float() if partial.dtype != torch.float32 else partial)


def gemm_then_reduce_scatter(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                             group=None, *, out_dtype: torch.dtype = torch.bfloat16,
                             partial_dtype: torch.dtype = torch.float32, ring=None) -> torch.Tensor:
    """The sequential form of :func:`fp8_gemm_reduce_scatter`: the whole partial ``x_r @ w_r^T``
    first (one GEMM of ``world * T`` rows), then every destination's rows sent to it, then the
    same fixed-order FP32 sum. The baseline and the reference (same arguments and result)."""
    fn = "gemm_then_reduce_scatter"
    ring, t = _row_parallel_args(fn, x, x_scale, w, group, ring, partial_dtype, out_dtype)
    if ring is None:
        return chunk_gemm(x, x_scale, w, w_scale, out_dtype=out_dtype)
    world, rank = ring.world, ring.rank
    whole = chunk_gemm(x, x_scale, w, w_scale, out_dtype=torch.float32)
    received = []
    for step in range(1, world):
        dst, src = (rank + step) % world, (rank - step) % world
        send = whole[dst * t:(dst + 1) * t].to(partial_dtype).contiguous()
        recv = torch.empty_like(send)
        ring.send_recv([send], dst, [recv], src).wait()
        received.append(recv)
    # The order of fp8_gemm_reduce_scatter: steps 1 .. world - 2, this rank's own, step world - 1.
    acc = torch.empty(t, w.shape[0], dtype=torch.float32, device=x.device)
    for i, partial in enumerate(received[:-1]):
        _accumulate(acc, partial, first=i == 0)
    own = whole[rank * t:(rank + 1) * t]
    if world > 2:
        acc.add_(own)
    else:
        acc.copy_(own)
    _accumulate(acc, received[-1], first=False)
    return acc if out_dtype == torch.float32 else acc.to(out_dtype)
