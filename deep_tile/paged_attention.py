"""The lightning indexer's paged (decode) logits (DeepSeek-V3.2): DeepGEMM's ``get_paged_mqa_logits_metadata``
and ``fp8_paged_mqa_logits`` on deep_tile.

``fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
max_context_len)`` returns float32 ``logits [B * next_n, max_context_len]``,
``logits[b * next_n + t, p] = scale[p] * sum_h weights[b * next_n + t, h] * relu(q[b, t, h] . kv[p])``
for ``p < context_lens[b, t]``, where kv row ``p`` of sequence ``b`` is row ``p % 64`` of cache
block ``block_table[b, p // 64]``; DeepGEMM's conventions:

* ``q`` float8_e4m3fn ``[B, next_n, H, 128]`` contiguous, ``next_n`` 1 or 2, ``H`` 32 or 64;
  ``weights`` float32 ``[B * next_n, H]`` contiguous; ``context_lens`` int32 ``[B, next_n]``
  contiguous (DeepGEMM's form), or ``[B]`` (its older form, still passed by engines: the tokens
  are the sequence's last ``next_n`` positions, :func:`per_token_lengths`); ``block_table`` int32
  ``[B, max_blocks]`` with unit column stride.
* ``kv_cache`` uint8 ``[num_blocks, 64, 1, 132]``: each block is 64 rows of 128 e4m3 bytes, then
  the rows' 64 float32 scales (``kv_cache.view(num_blocks, -1)[:, :8192]`` and ``[:, 8192:]``);
  rows contiguous in a block, blocks ``kv_cache.stride(0)`` bytes apart (a multiple of 16 here).
* ``schedule_meta`` from :func:`get_paged_mqa_logits_metadata` on the same ``context_lens``:
  int32 ``[num_sms + 1, 2]``, opaque to callers (deep_tile's format, not DeepGEMM's).
* The result is a view of DeepGEMM's padded buffer: row stride ``align(max_context_len, 256)``.
  Columns at or past ``context_lens[b, t]`` hold ``-inf`` with ``clean_logits`` and are
  unspecified without it (the CUDA kernel leaves them unwritten; DeepGEMM refuses
  ``clean_logits`` with 2-D ``context_lens``, deep_tile provides it).

Block-table entries outside ``[0, num_blocks)`` read as zero rows; lengths past
``max_context_len`` or past the table's ``64 * max_blocks`` rows are cut there. On CUDA: the
kernels of ``csrc/entry/paged_mqa_logits.cu`` (contract: :mod:`deep_tile.kernels.paged_mqa_logits`)
on the current stream, graph-capturable; on the CPU the same sums in float32 torch (unspecified
entries there are ``-inf``). Arguments are checked before anything is allocated or launched; the
values of ``context_lens`` and ``block_table`` are not (that would need a device sync).
"""
from __future__ import annotations

import torch

from deep_tile.common import align_up
from deep_tile.device import get_num_sms
from deep_tile.gemm.tma import encode_2d
from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernels import paged_mqa_logits as contract
from deep_tile.pdl import get_pdl

__all__ = ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits", "paged_mqa_logits_reference",
           "paged_schedule_reference", "paged_logits_stride", "per_token_lengths", "KV_ROW_BYTES"]

KV_ROW_BYTES = contract.HEAD_DIM + 4
"""Bytes per kv row of the fused cache: 128 e4m3 values and a float32 scale."""
_STRIDE_ALIGN = 256  # DeepGEMM's logits stride: a multiple of its 256-row split and of 1024 bytes


def paged_logits_stride(max_context_len: int) -> int:
    """The logits' row stride in floats for ``max_context_len`` columns (DeepGEMM's allocation)."""
    return align_up(max_context_len, _STRIDE_ALIGN)


def _fail(fn: str, message: str, error=ValueError):
    raise error(f"{fn}: {message}")


def _tensor(fn: str, name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(fn, f"{name} must be a torch.Tensor, got {type(t).__name__}.", TypeError)
    return t


def _int(fn: str, name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(fn, f"{name} must be an int, got {type(value).__name__}.", TypeError)
    if value < low:
        _fail(fn, f"{name} must be at least {low}, got {value}.")
    return value


def _check_context_lens(fn: str, context_lens) -> torch.Tensor:
    context_lens = _tensor(fn, "context_lens", context_lens)
    if context_lens.dtype != torch.int32 or context_lens.dim() not in (1, 2) or not context_lens.is_contiguous():
        _fail(fn, f"context_lens must be a contiguous int32 [batch, next_n] tensor (or [batch], DeepGEMM's older "
                  f"form); got {context_lens.dtype} {tuple(context_lens.shape)}"
                  f"{'' if context_lens.is_contiguous() else ' (not contiguous)'}.")
    if context_lens.dim() == 2 and context_lens.shape[1] < 1:
        _fail(fn, f"context_lens needs next_n >= 1 columns; got {tuple(context_lens.shape)}.")
    return context_lens


def per_token_lengths(context_lens: torch.Tensor, next_n: int) -> torch.Tensor:
    """``context_lens`` as int32 ``[batch, next_n]``: the 2-D form as given; the older 1-D form
    (each sequence's length, its tokens the last ``next_n`` positions) as token ``t`` of sequence
    ``b`` seeing ``context_lens[b] - next_n + t + 1`` rows."""
    if context_lens.dim() == 2:
        return context_lens
    steps = torch.arange(1 - next_n, 1, dtype=torch.int32, device=context_lens.device)
    return (context_lens[:, None] + steps[None, :]).contiguous()


def paged_schedule_reference(context_lens: torch.Tensor, num_sms: int) -> torch.Tensor:
    """The schedule kernel's result computed in torch on the CPU (int32 ``[num_sms + 1, 2]``):
    slot ``i`` starts at unit ``floor(i * total / num_sms)`` of the (sequence, 256-row split)
    units in order, the last row is ``(batch, 0)``."""
    lens = context_lens.cpu().long().clamp(min=0).amax(dim=1) if context_lens.numel() else \
        torch.zeros(context_lens.shape[0], dtype=torch.long)
    counts = (lens + contract.SPLIT_KV - 1) // contract.SPLIT_KV
    batch = counts.numel()
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1]) if batch else 0
    schedule = torch.empty(num_sms + 1, 2, dtype=torch.int32)
    schedule[num_sms] = torch.tensor([batch, 0], dtype=torch.int32)
    for i in range(num_sms):
        unit = i * total // num_sms
        if total == 0:
            schedule[i] = torch.tensor([batch, 0], dtype=torch.int32)
            continue
        b = int(torch.searchsorted(ends, unit, right=True))  # the first sequence whose units end past `unit`
        start = int(ends[b] - counts[b])
        schedule[i] = torch.tensor([b, unit - start], dtype=torch.int32)
    return schedule


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int) -> torch.Tensor:
    """The work schedule of :func:`fp8_paged_mqa_logits` for ``context_lens`` (int32 ``[B, next_n]``)
    over ``num_sms`` SM slots: int32 ``[num_sms + 1, 2]`` on ``context_lens``' device, made by one
    small kernel on the current stream (graph-capturable; torch on the CPU). ``block_kv`` must be 64.

    Raises:
        TypeError: a non-tensor ``context_lens`` or a non-int ``block_kv`` / ``num_sms``.
        ValueError: a dtype, shape or layout the kernels do not take, ``block_kv != 64``, ``num_sms < 1``.
    """
    fn = "get_paged_mqa_logits_metadata"
    context_lens = _check_context_lens(fn, context_lens)
    _int(fn, "block_kv", block_kv, 1)
    if block_kv != contract.BLOCK_KV:
        _fail(fn, f"block_kv must be {contract.BLOCK_KV} (DeepGEMM's SM90 kernel takes only it); got {block_kv}.")
    _int(fn, "num_sms", num_sms, 1)
    if context_lens.dim() == 1:  # a sequence's last token has its whole length: the same units
        context_lens = context_lens[:, None]
    batch, next_n = context_lens.shape
    if not context_lens.is_cuda:
        return paged_schedule_reference(context_lens, num_sms)
    schedule = torch.empty(num_sms + 1, 2, dtype=torch.int32, device=context_lens.device)
    kernel = get_kernel(contract.ENTRY, {}, contract.SCHEDULE_SYMBOL)
    values = (context_lens.data_ptr(), batch, next_n, num_sms, schedule.data_ptr())
    with torch.cuda.device(context_lens.device):
        kernel.launch(grid=(1, 1, 1), block=contract.SCHEDULE_THREADS, smem_bytes=0,
                      stream=torch.cuda.current_stream(context_lens.device).cuda_stream,
                      args=KernelArgs(list(zip(contract.SCHEDULE_ARGUMENT_KINDS, values))),
                      device=context_lens.device.index, pdl=get_pdl())
    return schedule


def _check(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
           design=None) -> tuple:
    """Every argument checked; returns (q, kv_cache, weights, context_lens, block_table, schedule_meta)."""
    fn = "fp8_paged_mqa_logits"
    q, kv_cache, weights = (_tensor(fn, n, t) for n, t in (("q", q), ("kv_cache", kv_cache), ("weights", weights)))
    block_table, schedule_meta = _tensor(fn, "block_table", block_table), _tensor(fn, "schedule_meta", schedule_meta)
    context_lens = _check_context_lens(fn, context_lens)
    _int(fn, "max_context_len", max_context_len, 0)
    if not isinstance(clean_logits, bool):
        _fail(fn, f"clean_logits must be a bool, got {type(clean_logits).__name__}.", TypeError)
    if design is not None and design not in contract.DESIGNS:
        _fail(fn, f"design must be one of {contract.DESIGNS}; got {design!r}.")
    if q.dtype != torch.float8_e4m3fn or q.dim() != 4 or q.shape[1] not in contract.NEXT_N \
            or q.shape[2] not in contract.HEADS or q.shape[3] != contract.HEAD_DIM or not q.is_contiguous():
        _fail(fn, f"q must be a contiguous float8_e4m3fn [batch, next_n, H, {contract.HEAD_DIM}] tensor with next_n "
                  f"in {contract.NEXT_N} and H in {contract.HEADS}; got {q.dtype} {tuple(q.shape)}"
                  f"{'' if q.is_contiguous() else ' (not contiguous)'}.")
    batch, next_n, heads, _ = q.shape
    if kv_cache.dtype != torch.uint8 or kv_cache.dim() != 4 or tuple(kv_cache.shape[1:]) != (
            contract.BLOCK_KV, 1, KV_ROW_BYTES) or kv_cache.stride(1) != KV_ROW_BYTES or kv_cache.stride(3) != 1:
        _fail(fn, f"kv_cache must be a uint8 [num_blocks, {contract.BLOCK_KV}, 1, {KV_ROW_BYTES}] tensor with rows "
                  f"contiguous in a block (strides (*, {KV_ROW_BYTES}, *, 1)); got {kv_cache.dtype} "
                  f"{tuple(kv_cache.shape)} strides {kv_cache.stride()}.")
    if kv_cache.shape[0] > 1 and (kv_cache.stride(0) % 16 or kv_cache.stride(0) < contract.BLOCK_KV * KV_ROW_BYTES):
        _fail(fn, f"kv_cache's blocks must lie a multiple of 16 bytes apart, at least "
                  f"{contract.BLOCK_KV * KV_ROW_BYTES} (the kernel copies 16-byte vectors); got a stride of "
                  f"{kv_cache.stride(0)} bytes.")
    if weights.dtype != torch.float32 or tuple(weights.shape) != (batch * next_n, heads) or not weights.is_contiguous():
        _fail(fn, f"weights must be a contiguous float32 [{batch * next_n}, {heads}] tensor; "
                  f"got {weights.dtype} {tuple(weights.shape)}.")
    if tuple(context_lens.shape) not in ((batch, next_n), (batch,)):
        _fail(fn, f"context_lens must be [{batch}, {next_n}] or [{batch}] (q's batch and next_n); "
                  f"got {tuple(context_lens.shape)}.")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != batch \
            or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
        _fail(fn, f"block_table must be an int32 [{batch}, max_blocks] tensor with unit column stride; "
                  f"got {block_table.dtype} {tuple(block_table.shape)} strides {block_table.stride()}.")
    if schedule_meta.dtype != torch.int32 or schedule_meta.dim() != 2 or schedule_meta.shape[0] < 2 \
            or schedule_meta.shape[1] != 2 or not schedule_meta.is_contiguous():
        _fail(fn, f"schedule_meta must be the contiguous int32 [num_sms + 1, 2] tensor of "
                  f"get_paged_mqa_logits_metadata; got {schedule_meta.dtype} {tuple(schedule_meta.shape)}.")
    tensors = (q, kv_cache, weights, context_lens, block_table, schedule_meta)
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        _fail(fn, f"all tensors must be on one device; got {sorted(map(str, devices))}.")
    if q.is_cuda:
        for name, t in (("q", q), ("kv_cache", kv_cache), ("weights", weights)):
            if t.data_ptr() % 16:
                _fail(fn, f"{name} must start on a 16-byte boundary (the kernel copies 16-byte vectors).")
        limit = 2 ** 31
        if kv_cache.stride(0) >= limit or block_table.stride(0) >= limit or block_table.shape[1] * 64 >= limit \
                or paged_logits_stride(max_context_len) >= limit:
            _fail(fn, "a stride does not fit the kernel's 32-bit arguments.")
    return tensors


def _cache_parts(kv_cache: torch.Tensor) -> tuple:
    """(values float8 [num_blocks, 64, 128], scales float32 [num_blocks, 64]) of the fused cache."""
    num_blocks = kv_cache.shape[0]
    block_bytes = contract.BLOCK_KV * KV_ROW_BYTES
    flat = torch.as_strided(kv_cache, (num_blocks, block_bytes), (kv_cache.stride(0) if num_blocks > 1 else
                                                                  block_bytes, 1))
    values_bytes = contract.BLOCK_KV * contract.HEAD_DIM
    values = flat[:, :values_bytes].contiguous().view(torch.float8_e4m3fn).view(num_blocks, contract.BLOCK_KV, -1)
    scales = flat[:, values_bytes:].contiguous().view(torch.float32)
    return values, scales


def paged_mqa_logits_reference(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                               context_lens: torch.Tensor, block_table: torch.Tensor, max_context_len: int,
                               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The logits in torch on ``q``'s device, summed in ``dtype`` (float32: the CPU path; float64:
    the tests' reference), in the layout of :func:`fp8_paged_mqa_logits`; entries at or past each
    row's length are ``-inf``."""
    batch, next_n, heads, dim = q.shape
    stride = paged_logits_stride(max_context_len)
    buffer = torch.full((batch * next_n, max(stride, 1)), float("-inf"), dtype=torch.float32, device=q.device)
    logits = buffer[:, :max_context_len]
    if not batch or not max_context_len:
        return logits
    values, scales = _cache_parts(kv_cache)
    num_blocks = values.shape[0]
    max_blocks = block_table.shape[1]
    lens = context_lens.to(torch.int64).clamp(min=0, max=min(max_context_len, contract.BLOCK_KV * max_blocks))
    for b in range(batch):
        extent = int(lens[b].max())
        if extent == 0:
            continue
        nblocks = -(-extent // contract.BLOCK_KV)
        entries = block_table[b, :nblocks].to(torch.int64)
        valid = (entries >= 0) & (entries < num_blocks)  # other entries read as zero rows, as in the kernel
        rows = torch.zeros(nblocks, contract.BLOCK_KV, dim, dtype=dtype, device=q.device)
        row_scales = torch.zeros(nblocks, contract.BLOCK_KV, dtype=dtype, device=q.device)
        rows[valid] = values[entries[valid]].to(dtype)
        row_scales[valid] = scales[entries[valid]].to(dtype)
        kv = rows.reshape(-1, dim)[:extent]
        scale = row_scales.reshape(-1)[:extent]
        scores = torch.einsum("thd,pd->thp", q[b].to(dtype), kv).relu()
        full = torch.einsum("thp,th->tp", scores, weights[b * next_n:(b + 1) * next_n].to(dtype)) * scale
        inside = torch.arange(extent, device=q.device)[None, :] < lens[b][:, None]
        logits[b * next_n:(b + 1) * next_n, :extent] = torch.where(inside, full, float("-inf")).float()
    return logits


def _tma_maps(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, block_stride: int) -> tuple:
    """The ``tma`` design's four tensor maps (``paged_mqa_logits_tma``): the cache as 128-byte rows
    (boxes of a block's 64 rows, 128B-swizzled, and of its scales' two rows), q's rows (a
    sequence's ``next_n * H`` per box, 128B-swizzled) and the weights (a sequence's per box)."""
    row = contract.TMA_ROW_BYTES
    rows = ((kv_cache.shape[0] - 1) * block_stride + contract.BLOCK_KV * KV_ROW_BYTES) // row
    batch, next_n, heads, dim = q.shape
    n = next_n * heads
    return (encode_2d(kv_cache.data_ptr(), "uint8", row, rows, row, row, contract.BLOCK_KV, 128, 256),
            encode_2d(kv_cache.data_ptr(), "uint8", row, rows, row, row, 4 * contract.BLOCK_KV // row, 0, 256),
            encode_2d(q.data_ptr(), "uint8", dim, batch * n, dim, dim, n, 128, 256),
            encode_2d(weights.data_ptr(), "float32", n, batch, 4 * n, n, 1, 0, 0))


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False, *, design: str | None = None) -> torch.Tensor:
    """The indexer's paged logits (module doc): float32 ``[B * next_n, max_context_len]``, a view of
    DeepGEMM's padded buffer. ``design`` picks the CUDA logits kernel's design (one of
    ``deep_tile.kernels.paged_mqa_logits.DESIGNS``; None: ``pick_design``'s, the default ``DESIGNS[0]``
    or ``tma_loader_wg`` for N 128 and long calls; the others are kept to time against); the CPU path
    ignores it.

    Raises:
        TypeError: an argument of the wrong type (a non-tensor, a non-int length, a non-bool flag).
        ValueError: a dtype, shape, layout, device or alignment the kernels do not take.
    """
    q, kv_cache, weights, context_lens, block_table, schedule_meta = _check(
        q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits, design)
    context_lens = per_token_lengths(context_lens, q.shape[1])
    if not q.is_cuda:
        return paged_mqa_logits_reference(q, kv_cache, weights, context_lens, block_table, max_context_len)
    batch, next_n, heads, _ = q.shape
    rows, stride = batch * next_n, paged_logits_stride(max_context_len)
    logits = torch.empty((rows, max(stride, 1)), dtype=torch.float32, device=q.device)[:, :max_context_len]
    if not rows or not max_context_len:
        return logits
    device = q.device
    stream = torch.cuda.current_stream(device).cuda_stream
    num_slots = schedule_meta.shape[0] - 1
    if design is None:
        design = contract.pick_design(next_n, heads, contract.blocks_per_slot(batch, max_context_len,
                                                                             block_table.shape[1], num_slots))
    num_blocks = kv_cache.shape[0]
    block_stride = kv_cache.stride(0) if num_blocks > 1 else contract.BLOCK_KV * KV_ROW_BYTES
    if design in contract.TMA_DESIGNS and (block_stride % contract.TMA_ROW_BYTES
                                           or num_blocks * block_stride >= 2 ** 38 or num_blocks == 0):
        design = contract.FALLBACK  # blocks off the TMA's 128-byte rows (rows past int32, no rows): cp.async
    kernel = get_kernel(contract.ENTRY, {}, contract.symbol(next_n, heads, design))
    tail = (context_lens.data_ptr(), block_table.data_ptr(), block_table.stride(0), block_table.shape[1],
            schedule_meta.data_ptr(), logits.data_ptr(), stride, max_context_len, batch)
    if design in contract.TMA_DESIGNS:
        kinds, values = contract.TMA_LOGITS_ARGUMENT_KINDS, _tma_maps(q, kv_cache, weights, block_stride) + (
            block_stride // contract.TMA_ROW_BYTES, num_blocks) + tail
    else:
        kinds, values = contract.LOGITS_ARGUMENT_KINDS, (
            q.data_ptr(), kv_cache.data_ptr(), kv_cache.stride(0) if num_blocks > 1 else 0, num_blocks,
            weights.data_ptr()) + tail
    with torch.cuda.device(device):
        kernel.launch(grid=contract.grid(num_slots, design), block=contract.threads(design),
                      smem_bytes=contract.smem_bytes(next_n, heads, design), stream=stream,
                      args=KernelArgs(list(zip(kinds, values))), device=device.index, pdl=get_pdl())
    if clean_logits:
        clean = get_kernel(contract.ENTRY, {}, contract.CLEAN_SYMBOL)
        limit = min(max_context_len, contract.BLOCK_KV * block_table.shape[1])  # rows past the table are outside
        values = (context_lens.data_ptr(), logits.data_ptr(), rows, stride, max_context_len, limit)
        with torch.cuda.device(device):
            clean.launch(grid=contract.clean_grid(rows, get_num_sms()), block=contract.CLEAN_THREADS, smem_bytes=0,
                         stream=stream, args=KernelArgs(list(zip(contract.CLEAN_ARGUMENT_KINDS, values))),
                         device=device.index, pdl=get_pdl())
    return logits
