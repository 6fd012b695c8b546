"""The lightning indexer's logits (DeepSeek-V3.2): DeepGEMM's ``fp8_mqa_logits`` on deep_tile.

``fp8_mqa_logits(q, (kv, kv_scale), weights, ks, ke)`` returns float32 ``logits [seq_len, N]``,
``logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(sum_d q[i, h, d] * kv[j, d])`` for ``j`` in
``[ks[i], ke[i])`` (clamped to ``[0, seq_len_kv)``), with DeepGEMM's conventions:

* ``q`` float8_e4m3fn ``[seq_len, H, 128]`` (H 32 or 64), ``kv`` float8_e4m3fn ``[seq_len_kv, 128]``,
  ``kv_scale`` float32 ``[seq_len_kv]``, all contiguous; ``weights`` float32 ``[seq_len, H]`` with
  unit column stride; ``ks``, ``ke`` contiguous int32 ``[seq_len]``; all on one device.
* The result is a view of a padded buffer, as DeepGEMM allocates it: rows rounded up to
  ``128 / H``, the row stride ``align(seq_len_kv + 256, 256)`` floats (1024-byte rows).
* ``clean_logits`` (default): every column outside ``[ks[i], ke[i])`` holds ``-inf``; without it
  those columns are unspecified (the CUDA kernel leaves them unwritten).
* ``max_seqlen_k > 0`` (needs ``clean_logits=False``): the compressed form, ``N = max_seqlen_k``
  and ``logits[i, j - ks[i]]`` holds column ``j``; the rest of each row is unspecified.

On CUDA one JIT kernel of ``csrc/entry/mqa_logits.cu`` (contract:
:mod:`deep_tile.kernels.mqa_logits`, whose ``DESIGN`` picks CUDA cores or FP8 wgmma) on the
current stream; on the CPU the same sums in float32 torch (unspecified entries there are
``-inf``). Arguments are checked before anything is allocated or launched; the range values are
not (that would need a device sync): the kernel clamps them.
"""
from __future__ import annotations

from typing import Sequence

import torch

from deep_tile.common import align_up, ceil_div
from deep_tile.device import get_num_sms
from deep_tile.gemm.launch import launch_small_kernel
from deep_tile.gemm.tma import encode_2d
from deep_tile.kernels import mqa_logits as contract

__all__ = ["fp8_mqa_logits", "mqa_logits_reference", "logits_layout", "ROW_ALIGN_BYTES", "PAD_COLUMNS"]

ROW_ALIGN_BYTES = 1024
"""DeepGEMM's alignment of the logits' row stride."""
PAD_COLUMNS = 256
"""Columns DeepGEMM adds past seq_len_kv before aligning the stride (its kernel's kv block)."""
_BLOCK_QH = 128  # DeepGEMM's query rows x heads per block: rows are padded to 128 / H


def logits_layout(seq_len: int, seq_len_kv: int, num_heads: int, max_seqlen_k: int = 0) -> tuple:
    """(padded rows, row stride in floats, columns returned): DeepGEMM's allocation of the logits."""
    align = ROW_ALIGN_BYTES // 4
    if max_seqlen_k:
        stride = align_up(align_up(max_seqlen_k, PAD_COLUMNS), align)
        columns = max_seqlen_k
    else:
        stride = align_up(seq_len_kv + PAD_COLUMNS, align)
        columns = seq_len_kv
    return align_up(seq_len, _BLOCK_QH // num_heads), stride, columns


def _fail(message: str, error=ValueError):
    raise error(f"fp8_mqa_logits: {message}")


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}.", TypeError)
    return t


def _check(q, kv, weights, ks, ke, clean_logits, max_seqlen_k) -> tuple:
    """Every argument checked; returns (q, kv_fp8, kv_scale, weights, ks, ke)."""
    q = _tensor("q", q)
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        _fail(f"kv must be a pair (kv_fp8 [seq_len_kv, 128], kv_scale [seq_len_kv]); got {type(kv).__name__}.",
              TypeError)
    kv_fp8, kv_scale = _tensor("kv[0]", kv[0]), _tensor("kv[1]", kv[1])
    weights, ks, ke = _tensor("weights", weights), _tensor("cu_seq_len_k_start", ks), _tensor("cu_seq_len_k_end", ke)
    if not isinstance(clean_logits, bool):
        _fail(f"clean_logits must be a bool, got {type(clean_logits).__name__}.", TypeError)
    if isinstance(max_seqlen_k, bool) or not isinstance(max_seqlen_k, int) or max_seqlen_k < 0:
        _fail(f"max_seqlen_k must be a non-negative int, got {max_seqlen_k!r}.", TypeError
              if not isinstance(max_seqlen_k, int) or isinstance(max_seqlen_k, bool) else ValueError)
    if max_seqlen_k and clean_logits:
        _fail("max_seqlen_k > 0 (compressed logits) needs clean_logits=False, as in DeepGEMM.")
    if q.dtype != torch.float8_e4m3fn or q.dim() != 3 or q.shape[2] != contract.HEAD_DIM \
            or q.shape[1] not in contract.HEADS or not q.is_contiguous():
        _fail(f"q must be a contiguous float8_e4m3fn [seq_len, H, {contract.HEAD_DIM}] tensor with H in "
              f"{contract.HEADS}; got {q.dtype} {tuple(q.shape)}{'' if q.is_contiguous() else ' (not contiguous)'}.")
    seq_len, num_heads = q.shape[0], q.shape[1]
    if kv_fp8.dtype != torch.float8_e4m3fn or kv_fp8.dim() != 2 or kv_fp8.shape[1] != contract.HEAD_DIM \
            or not kv_fp8.is_contiguous():
        _fail(f"kv[0] must be a contiguous float8_e4m3fn [seq_len_kv, {contract.HEAD_DIM}] tensor; "
              f"got {kv_fp8.dtype} {tuple(kv_fp8.shape)}.")
    seq_len_kv = kv_fp8.shape[0]
    if kv_scale.dtype != torch.float32 or tuple(kv_scale.shape) != (seq_len_kv,) or not kv_scale.is_contiguous():
        _fail(f"kv[1] must be a contiguous float32 [{seq_len_kv}] tensor; "
              f"got {kv_scale.dtype} {tuple(kv_scale.shape)}.")
    if weights.dtype != torch.float32 or tuple(weights.shape) != (seq_len, num_heads) \
            or (seq_len > 1 and weights.stride(0) < num_heads) or (num_heads > 1 and weights.stride(1) != 1):
        _fail(f"weights must be a float32 [{seq_len}, {num_heads}] tensor with unit column stride; "
              f"got {weights.dtype} {tuple(weights.shape)} strides {weights.stride()}.")
    for name, t in (("cu_seq_len_k_start", ks), ("cu_seq_len_k_end", ke)):
        if t.dtype != torch.int32 or tuple(t.shape) != (seq_len,) or not t.is_contiguous():
            _fail(f"{name} must be a contiguous int32 [{seq_len}] tensor; got {t.dtype} {tuple(t.shape)}.")
    devices = {t.device for t in (q, kv_fp8, kv_scale, weights, ks, ke)}
    if len(devices) != 1:
        _fail(f"all tensors must be on one device; got {sorted(map(str, devices))}.")
    if q.is_cuda:
        for name, t in (("q", q), ("kv[0]", kv_fp8)):
            if t.data_ptr() % 16:
                _fail(f"{name} must start on a 16-byte boundary (the kernel loads 16-byte vectors).")
    return q, kv_fp8, kv_scale, weights, ks, ke


def mqa_logits_reference(q: torch.Tensor, kv: Sequence[torch.Tensor], weights: torch.Tensor, ks: torch.Tensor,
                         ke: torch.Tensor, clean_logits: bool = True, max_seqlen_k: int = 0,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The logits in torch on ``q``'s device, in ``dtype`` (float32: the CPU path; float64: the
    tests' reference), in the layout of :func:`fp8_mqa_logits`; unspecified entries are ``-inf``."""
    kv_fp8, kv_scale = kv
    seq_len, num_heads, _ = q.shape
    seq_len_kv = kv_fp8.shape[0]
    rows, stride, columns = logits_layout(seq_len, seq_len_kv, num_heads, max_seqlen_k)
    buffer = torch.full((rows, stride), float("-inf"), dtype=torch.float32, device=q.device)
    logits = buffer[:seq_len, :columns]
    if not seq_len or not seq_len_kv:
        return logits
    kv_f = kv_fp8.to(dtype)
    scale = kv_scale.to(dtype)
    starts = ks.to(torch.int64).clamp(min=0)
    ends = ke.to(torch.int64).clamp(max=seq_len_kv)
    cols = torch.arange(seq_len_kv, device=q.device)
    for begin in range(0, seq_len, 64):  # bounded memory: [64, H, seq_len_kv] at a time
        end = min(seq_len, begin + 64)
        scores = torch.einsum("ihd,jd->ihj", q[begin:end].to(dtype), kv_f).relu()
        full = torch.einsum("ihj,ih->ij", scores, weights[begin:end].to(dtype)) * scale
        inside = (cols >= starts[begin:end, None]) & (cols < ends[begin:end, None])
        if max_seqlen_k:
            for i in range(begin, end):
                lo, hi = int(starts[i]), int(ends[i])
                offset = lo - int(ks[i])  # columns count from the raw start, as the kernel's do
                width = max(0, min(hi - lo, max_seqlen_k - offset))
                if width > 0 and hi > lo:
                    logits[i, offset:offset + width] = full[i - begin, lo:lo + width].float()
        else:
            logits[begin:end] = torch.where(inside, full, torch.full_like(full, float("-inf"))).float()
    return logits


def fp8_mqa_logits(q: torch.Tensor, kv: Sequence[torch.Tensor], weights: torch.Tensor,
                   cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor,
                   clean_logits: bool = True, max_seqlen_k: int = 0) -> torch.Tensor:
    """The indexer's logits (module doc): float32 ``[seq_len, seq_len_kv]`` (``[seq_len,
    max_seqlen_k]`` compressed), a view of DeepGEMM's padded buffer.

    Raises:
        TypeError: an argument of the wrong type (a non-tensor, kv not a pair, a non-bool flag).
        ValueError: a dtype, shape, layout, device or alignment the kernel does not take.
    """
    q, kv_fp8, kv_scale, weights, ks, ke = _check(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                                                  clean_logits, max_seqlen_k)
    if not q.is_cuda:
        return mqa_logits_reference(q, (kv_fp8, kv_scale), weights, ks, ke, clean_logits, max_seqlen_k)
    seq_len, num_heads, _ = q.shape
    seq_len_kv = kv_fp8.shape[0]
    rows, stride, columns = logits_layout(seq_len, seq_len_kv, num_heads, max_seqlen_k)
    logits = torch.empty((rows, stride), dtype=torch.float32, device=q.device)[:seq_len, :columns]
    if not seq_len or not columns or not seq_len_kv:
        if clean_logits:
            logits.fill_(float("-inf"))  # no kv row: every column is outside the range
        return logits
    design = contract.DESIGN
    tma = design == "ring" or design in contract.PERSISTENT_DESIGNS
    if tma and kv_scale.data_ptr() % 16:
        design, tma = "wgmma", False  # TMA reads kv_scale from a 16-byte boundary only
    if tma:
        _launch_tma(design, q, kv_fp8, kv_scale, weights, ks, ke, logits, stride, clean_logits, max_seqlen_k)
        return logits
    rows_per_cta = contract.rows_per_cta(seq_len, seq_len_kv, get_num_sms(), num_heads, design)
    values = (q.data_ptr(), kv_fp8.data_ptr(), kv_scale.data_ptr(), weights.data_ptr(), weights.stride(0),
              ks.data_ptr(), ke.data_ptr(), logits.data_ptr(), seq_len, seq_len_kv, stride, rows_per_cta,
              int(clean_logits), max_seqlen_k)
    launch_small_kernel(contract.ENTRY, contract.symbol(num_heads, design), contract.ARGUMENT_KINDS, values,
                        contract.grid(seq_len, seq_len_kv, rows_per_cta, design), contract.BLOCK_THREADS[design],
                        q.device)
    return logits


def _launch_tma(design: str, q, kv_fp8, kv_scale, weights, ks, ke, logits, stride: int, clean_logits: bool,
                max_seqlen_k: int) -> None:
    """The ring or persistent design's launch: tensor maps of q ([seq_len * H, 128] bytes, boxes of
    128 rows for the ring, 256 for the persistent design), kv ([seq_len_kv, 128] bytes, boxes of 128
    rows; both 128B-swizzled) and kv_scale (one row of floats, boxes of 128)."""
    seq_len, num_heads, _ = q.shape
    seq_len_kv = kv_fp8.shape[0]
    q_box = contract.PERSISTENT_COLS if design in contract.PERSISTENT_DESIGNS else contract.WGMMA_N
    q_map = encode_2d(q.data_ptr(), "uint8", contract.HEAD_DIM, seq_len * num_heads, contract.HEAD_DIM,
                      contract.HEAD_DIM, q_box, 128, 256)
    kv_map = encode_2d(kv_fp8.data_ptr(), "uint8", contract.HEAD_DIM, seq_len_kv, contract.HEAD_DIM,
                       contract.HEAD_DIM, contract.BLOCK_KV["ring"], 128, 256)
    scale_map = encode_2d(kv_scale.data_ptr(), "float32", seq_len_kv, 1, align_up(4 * seq_len_kv, 16),
                          contract.BLOCK_KV["ring"], 1, 0, 0)
    num_sms = get_num_sms()
    rows = contract.rows_per_cta(seq_len, seq_len_kv, num_sms, num_heads, design)
    values = (q_map, kv_map, scale_map, weights.data_ptr(), weights.stride(0), ks.data_ptr(), ke.data_ptr(),
              logits.data_ptr(), seq_len, seq_len_kv, stride, int(clean_logits), max_seqlen_k)
    if design in contract.PERSISTENT_DESIGNS:
        splits = contract.PERSISTENT_SPLITS or contract.persistent_splits(seq_len, seq_len_kv, num_sms, num_heads)
        kinds, smem = contract.PERSISTENT_ARGUMENT_KINDS, contract.PERSISTENT_SMEM_BYTES
        values += (splits,)
    else:
        splits = contract.ring_splits(seq_len, seq_len_kv, num_sms, num_heads)
        kinds, smem = contract.RING_ARGUMENT_KINDS, contract.RING_SMEM_BYTES
    launch_small_kernel(contract.ENTRY, contract.symbol(num_heads, design), kinds, values,
                        contract.grid(seq_len, seq_len_kv, rows, design, splits, num_sms),
                        contract.BLOCK_THREADS[design], q.device, smem)
