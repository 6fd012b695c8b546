"""The row layouts of the grouped GEMMs: which row of the expert-grouped buffer holds each
(token, slot) pair (:class:`Permutation`, planned per layout on the device), and moving token rows
into that buffer and back (:func:`permute`, :func:`permute_fp8`, :func:`unpermute`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from deep_tile.common import align4, ceil_div
from deep_tile.testing.moe.routing import check_expert_ids

__all__ = ["LAYOUTS", "CONTIGUOUS_ALIGNMENT", "Permutation", "contiguous_rows_bound", "plan_contiguous",
           "plan_offsets", "plan_masked", "plan", "tma_aligned_scale_buffer", "permute", "permute_fp8", "unpermute"]

LAYOUTS = ("contiguous", "offsets", "masked")
"""The row layouts of the grouped GEMMs, one per deep_tile entry point."""

CONTIGUOUS_ALIGNMENT = 128
"""Row alignment of each expert's run in the contiguous layout (the value
``deep_tile.get_m_alignment_for_contiguous_layout()`` returns on Hopper)."""


@dataclass(frozen=True)
class Permutation:
    """Where each (token, slot) pair lives in the expert-grouped buffer of one layout.

    ``row_of_pair [T*k]`` int64: pair ``p = t * top_k + j`` (token t's j-th expert) sits in row
    ``row_of_pair[p]`` of the buffer viewed as ``[num_rows, ...]`` (for ``masked`` the slabs
    ``[E, max_m, ...]`` flattened, row ``g * max_m + r``). Within an expert, pairs keep token order.
    ``counts [E]`` int32 is the number of pairs per expert. The layout's GEMM argument is
    ``m_indices [num_rows]`` int32 (contiguous: expert id or -1), ``offsets [E+1]`` int32, or
    ``masked_m [E]`` int32 with ``max_m`` and ``expected_m``; the others are None. All tensors are
    on the device of the ids.
    """

    layout: str
    num_tokens: int
    top_k: int
    num_experts: int
    num_rows: int
    row_of_pair: torch.Tensor
    counts: torch.Tensor
    m_indices: Optional[torch.Tensor] = None
    offsets: Optional[torch.Tensor] = None
    masked_m: Optional[torch.Tensor] = None
    max_m: Optional[int] = None
    expected_m: Optional[int] = None

    @property
    def num_pairs(self) -> int:
        """``T * top_k``."""
        return self.num_tokens * self.top_k

    def buffer_shape(self, width: int) -> tuple:
        """Shape of the grouped buffer with ``width`` columns: ``(num_rows, width)``, or
        ``(E, max_m, width)`` for the masked layout."""
        if self.layout == "masked":
            return (self.num_experts, self.max_m, width)
        return (self.num_rows, width)


def tma_aligned_scale_buffer(shape, device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero-filled a_scale buffer in the layout the kernels read without a copy.

    ``shape = (rows, kb)``: column-major, strides ``(1, align4(rows))`` (what
    ``deep_tile.get_tma_aligned_a_scale`` makes); ``shape = (groups, rows, kb)``: column-major per
    group, strides ``(kb * align4(rows), 1, align4(rows))`` (the masked GEMM's, and DeepGEMM's).
    """
    if len(shape) == 2:
        rows, kb = shape
        return torch.zeros((kb, align4(rows)), dtype=dtype, device=device).t()[:rows]
    if len(shape) == 3:
        groups, rows, kb = shape
        return torch.zeros((groups, kb, align4(rows)), dtype=dtype, device=device).transpose(1, 2)[:, :rows]
    raise ValueError(f"tma_aligned_scale_buffer: shape must be (rows, kb) or (groups, rows, kb); got {tuple(shape)}.")


def _sort_pairs(topk_ids, num_experts):
    """``(counts int64 [E], sorted_ids int64 [P], order int64 [P], rank int64 [P])``: the pairs in
    expert order (stable, so token order within an expert) and each one's rank within its expert."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    sorted_ids, order = torch.sort(flat, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(flat.numel(), device=flat.device) - starts[sorted_ids]
    return counts, sorted_ids, order, rank


def _scatter_rows(order, rows_sorted):
    """``row_of_pair`` from the rows of the pairs in sorted order (``row_of_pair[order] = rows_sorted``)."""
    row_of_pair = torch.empty_like(rows_sorted)
    row_of_pair[order] = rows_sorted
    return row_of_pair


def contiguous_rows_bound(num_pairs: int, num_experts: int, alignment: int = CONTIGUOUS_ALIGNMENT) -> int:
    """Most rows the padded contiguous layout can need for ``num_pairs`` pairs over ``num_experts``
    experts: each non-empty expert adds fewer than ``alignment`` padding rows, and the total is a
    multiple of ``alignment``."""
    worst = num_pairs + min(num_experts, num_pairs) * (alignment - 1)
    return worst // alignment * alignment


def plan_contiguous(topk_ids: torch.Tensor, num_experts: int, alignment: int = CONTIGUOUS_ALIGNMENT,
                    exact_rows: bool = False) -> Permutation:
    """Padded contiguous layout: expert ``g``'s pairs fill rows ``[start_g, start_g + count_g)`` with
    ``start_g`` a multiple of ``alignment``; ``m_indices`` holds ``g`` there and -1 in every padding
    row (the tail of each expert's run, and the unused tail of the buffer).

    The buffer has :func:`contiguous_rows_bound` rows (no host sync; the GEMM skips all-padding
    blocks), or with ``exact_rows=True`` exactly ``sum(align(count_g))`` rows, read back with one
    host sync (``.item()``) to size it.
    """
    check_expert_ids("plan_contiguous", topk_ids, num_experts)
    if not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"plan_contiguous: alignment must be a positive int; got {alignment!r}.")
    num_tokens, top_k = topk_ids.shape
    counts, sorted_ids, order, rank = _sort_pairs(topk_ids, num_experts)
    padded = (counts + alignment - 1) // alignment * alignment
    padded_starts = torch.cumsum(padded, 0) - padded
    rows_sorted = padded_starts[sorted_ids] + rank
    if exact_rows:
        num_rows = int(padded.sum().item())  # the one host sync: sizes the buffer exactly
    else:
        num_rows = contiguous_rows_bound(num_tokens * top_k, num_experts, alignment)
    m_indices = torch.full((num_rows,), -1, dtype=torch.int32, device=topk_ids.device)
    m_indices[rows_sorted] = sorted_ids.to(torch.int32)
    return Permutation("contiguous", num_tokens, top_k, num_experts, num_rows, _scatter_rows(order, rows_sorted),
                       counts.to(torch.int32), m_indices=m_indices)


def plan_offsets(topk_ids: torch.Tensor, num_experts: int) -> Permutation:
    """Unpadded layout: the ``T * top_k`` pairs sorted by expert (token order within one), expert
    ``g`` in rows ``[offsets[g], offsets[g+1])``, ``offsets = [0, cumsum(counts)]`` int32 [E+1]."""
    check_expert_ids("plan_offsets", topk_ids, num_experts)
    num_tokens, top_k = topk_ids.shape
    counts, _, order, _ = _sort_pairs(topk_ids, num_experts)
    rows_sorted = torch.arange(order.numel(), device=order.device)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32, device=topk_ids.device)
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    return Permutation("offsets", num_tokens, top_k, num_experts, order.numel(), _scatter_rows(order, rows_sorted),
                       counts.to(torch.int32), offsets=offsets)


def plan_masked(topk_ids: torch.Tensor, num_experts: int, max_m: Optional[int] = None,
                expected_m: Optional[int] = None) -> Permutation:
    """Masked layout (DeepEP low-latency): expert ``g``'s pairs in rows ``[0, masked_m[g])`` of its
    slab of ``max_m`` rows, ``masked_m = counts``.

    ``max_m`` defaults to ``T`` and must be at least ``T`` (an expert gets each token at most once,
    so no slab can overflow; nothing needs reading back). ``expected_m`` (the GEMM's hint) defaults
    to ``ceil(T * top_k / E)``.
    """
    check_expert_ids("plan_masked", topk_ids, num_experts)
    num_tokens, top_k = topk_ids.shape
    max_m = num_tokens if max_m is None else max_m
    if not isinstance(max_m, int) or max_m < max(num_tokens, 1):
        raise ValueError(f"plan_masked: max_m must be an int >= T = {num_tokens} (and >= 1) so that no expert's "
                         f"slab overflows; got {max_m!r}.")
    if expected_m is None:
        expected_m = max(1, ceil_div(num_tokens * top_k, num_experts))
    counts, sorted_ids, order, rank = _sort_pairs(topk_ids, num_experts)
    rows_sorted = sorted_ids * max_m + rank
    counts32 = counts.to(torch.int32)
    return Permutation("masked", num_tokens, top_k, num_experts, num_experts * max_m, _scatter_rows(order, rows_sorted),
                       counts32, masked_m=counts32, max_m=max_m, expected_m=int(expected_m))


def plan(topk_ids: torch.Tensor, num_experts: int, layout: str, **options) -> Permutation:
    """:func:`plan_contiguous`, :func:`plan_offsets` or :func:`plan_masked` by ``layout`` name
    (``options`` go to that function)."""
    planners = {"contiguous": plan_contiguous, "offsets": plan_offsets, "masked": plan_masked}
    if layout not in planners:
        raise ValueError(f"plan: layout must be one of {LAYOUTS}; got {layout!r}.")
    return planners[layout](topk_ids, num_experts, **options)


def _token_of_pair(perm: Permutation) -> torch.Tensor:
    return torch.arange(perm.num_pairs, device=perm.row_of_pair.device) // perm.top_k


def permute(x: torch.Tensor, perm: Permutation) -> torch.Tensor:
    """Gather token rows into the grouped buffer: ``out[row_of_pair[p]] = x[p // top_k]``.

    ``x [T, ...]`` (any dtype; FP8 is moved as bytes). Returns a zero-filled buffer of
    ``perm.buffer_shape`` (``[num_rows, ...]`` or ``[E, max_m, ...]``) with the pairs' rows in place.
    """
    if x.shape[0] != perm.num_tokens:
        raise ValueError(f"permute: x must have T = {perm.num_tokens} rows; got shape {tuple(x.shape)}.")
    rest = tuple(x.shape[1:])
    src = x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x
    out = torch.zeros((perm.num_rows,) + rest, dtype=src.dtype, device=x.device)
    out[perm.row_of_pair] = src[_token_of_pair(perm)]
    if x.dtype == torch.float8_e4m3fn:
        out = out.view(torch.float8_e4m3fn)
    return out.view(perm.buffer_shape(1)[:-1] + rest)


def permute_fp8(q: torch.Tensor, s: torch.Tensor, perm: Permutation):
    """Gather FP8 activations and their per-token scales into the grouped buffer, the scales written
    straight into the TMA-aligned column-major layout the kernels read without a copy.

    Args:
        q: [T, H] float8_e4m3fn, s: [T, ceil(H/128)] float32 (as ``per_token_cast_to_fp8`` returns).
        perm: the layout.

    Returns:
        ``(a, a_scale)``: a [num_rows, H] (or [E, max_m, H]) float8_e4m3fn, zero in unused rows;
        a_scale [num_rows, kb] with strides ``(1, align4(num_rows))`` (or [E, max_m, kb] with strides
        ``(kb * align4(max_m), 1, align4(max_m))``, per-expert column-major), zero in unused rows.
    """
    if q.dtype != torch.float8_e4m3fn or q.dim() != 2 or s.dim() != 2 or s.shape[0] != q.shape[0]:
        raise ValueError(f"permute_fp8: need q [T, H] float8_e4m3fn and s [T, kb]; got {q.dtype} {tuple(q.shape)} "
                         f"and {tuple(s.shape)}.")
    a = permute(q, perm)
    tokens = _token_of_pair(perm)
    a_scale = tma_aligned_scale_buffer(perm.buffer_shape(s.shape[1]), s.device, s.dtype)
    if perm.layout == "masked":
        expert, row = perm.row_of_pair // perm.max_m, perm.row_of_pair % perm.max_m
        a_scale[expert, row] = s[tokens]
    else:
        a_scale[perm.row_of_pair] = s[tokens]
    return a, a_scale


def unpermute(y: torch.Tensor, perm: Permutation, topk_weights: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Combine: ``out[t] = sum_j topk_weights[t, j] * y[row_of_pair[t * top_k + j]]``, summed in
    float32 (slot order), then cast to ``out_dtype``. ``y`` is the grouped buffer (``[num_rows, H]``
    or ``[E, max_m, H]``); rows no pair maps to are never read. Returns ``[T, H]``."""
    width = y.shape[-1]
    if tuple(y.shape) != perm.buffer_shape(width):
        raise ValueError(f"unpermute: y must have shape {perm.buffer_shape(width)}; got {tuple(y.shape)}.")
    if tuple(topk_weights.shape) != (perm.num_tokens, perm.top_k):
        raise ValueError(f"unpermute: topk_weights must be [T, top_k] = {(perm.num_tokens, perm.top_k)}; got "
                         f"{tuple(topk_weights.shape)}.")
    rows = y.reshape(perm.num_rows, width)[perm.row_of_pair].view(perm.num_tokens, perm.top_k, width)
    return (rows.float() * topk_weights.float().unsqueeze(-1)).sum(dim=1).to(out_dtype)
