"""DeepGEMM's paged indexer-logits names (DeepSeek-V3.2 decode) over deep_tile:
``get_paged_mqa_logits_metadata``, ``fp8_paged_mqa_logits`` and ``fp8_fp4_paged_mqa_logits`` with
FP8 ``q``, DeepGEMM's signatures. The schedule tensor is deep_tile's own format (the same shape,
int32 ``[num_sms + 1, 2]``): make it with this module's ``get_paged_mqa_logits_metadata`` and pass
it on unread, as engines do. ``indices`` (DeepGEMM's SM100-only varlen form), FP4 ``q`` and
non-float32 logits raise NotImplementedError.
"""
from __future__ import annotations

from typing import Optional

import torch

import deep_tile
from deep_tile.compat.deepgemm._api import fp8_q_of_pair

__all__ = ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"]


def _no_indices(fn: str, indices) -> None:
    if indices is not None:
        raise NotImplementedError(f"{fn}: indices (the varlen form, SM100-only in DeepGEMM) is not supported; "
                                  "pass indices=None.")


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  indices: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DeepGEMM's ``get_paged_mqa_logits_metadata``: the schedule of :func:`fp8_paged_mqa_logits`
    for int32 ``context_lens [B, next_n]`` over ``num_sms`` SMs (``block_kv`` 64), by
    :func:`deep_tile.get_paged_mqa_logits_metadata`."""
    _no_indices("get_paged_mqa_logits_metadata", indices)
    return deep_tile.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False, indices: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DeepGEMM's ``fp8_paged_mqa_logits``: float32 logits ``[B * next_n, max_context_len]`` of FP8
    ``q [B, next_n, H, 128]`` against the fused paged cache, by :func:`deep_tile.fp8_paged_mqa_logits`
    (same arguments; ``clean_logits`` works with 2-D ``context_lens``, which DeepGEMM refuses)."""
    _no_indices("fp8_paged_mqa_logits", indices)
    return deep_tile.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                          max_context_len, clean_logits)


def fp8_fp4_paged_mqa_logits(q, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                             block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                             clean_logits: bool = False, logits_dtype: torch.dtype = torch.float32,
                             indices: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DeepGEMM's ``fp8_fp4_paged_mqa_logits`` with ``q = (q_fp8, None)``: :func:`fp8_paged_mqa_logits`.
    FP4 ``q`` (a scale tensor in ``q[1]``) and a ``logits_dtype`` other than float32 raise NotImplementedError."""
    fn = "fp8_fp4_paged_mqa_logits"
    q_fp8 = fp8_q_of_pair(fn, q, logits_dtype)
    _no_indices(fn, indices)
    return fp8_paged_mqa_logits(q_fp8, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                                clean_logits)
