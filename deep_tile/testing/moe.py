"""A routed-experts Mixture-of-Experts layer (DeepSeek-V3 style) on deep_tile's grouped FP8 GEMMs.

The forward, for tokens ``x [T, H]`` and ``E`` experts with weights ``w13 [E, 2I, H]`` (rows
``[0, I)`` the gate projection W1, rows ``[I, 2I)`` the up projection W3) and ``w2 [E, H, I]``::

    ids, weights = route(logits, top_k)                       # [T, k] each, on the device
    xq, xs = per_token_cast_to_fp8(x)                         # FP8 once, before the permutation
    perm   = plan_contiguous / plan_offsets / plan_masked(ids, E)
    a, sa  = permute_fp8(xq, xs, perm)                        # rows grouped by expert
    h1     = grouped GEMM(a, sa, w13)                         # [rows, 2I] bf16
    act    = silu_and_mul(h1)                                 # SiLU(gate) * up, float32
    a2, s2 = per_token_cast_to_fp8(act)
    h2     = grouped GEMM(a2, s2, w2)                         # [rows, H] bf16
    y      = unpermute(h2, perm, weights)                     # sum_j weights[t, j] * h2[row(t, j)]

in one of three row layouts (:data:`LAYOUTS`):

- ``contiguous``: each expert's rows padded to a multiple of the alignment (128), ``m_indices``
  gives each row's expert and -1 for padding rows (:func:`deep_tile.m_grouped_fp8_gemm_contiguous`);
- ``offsets``: the same order without padding, expert ``g`` owning rows ``offsets[g] ..
  offsets[g+1]-1`` (:func:`deep_tile.m_grouped_fp8_gemm_offsets`);
- ``masked``: one ``[max_m, H]`` slab per expert, the first ``masked_m[g]`` rows real, as DeepEP's
  low-latency dispatch delivers them (:func:`deep_tile.m_grouped_fp8_gemm_masked`).

Host synchronisation: routing, planning, permuting and un-permuting use device-side torch ops only
(``topk``, a stable ``sort``, ``scatter_add_``, ``cumsum``, index gathers and puts), so a real engine
could capture them in a CUDA graph. Buffer sizes come from the shapes alone: the contiguous buffer
is sized by an upper bound on the padded row count (``plan_contiguous(..., exact_rows=True)`` reads
the exact count back instead: the one optional host sync, to size that buffer), the offsets buffer
holds exactly ``T * top_k`` rows, and the masked slabs hold ``max_m >= T`` rows each (an expert
receives each token at most once). Expert ids must lie in ``[0, E)`` and be distinct per token;
that is not checked (checking would need a sync).

:func:`ref_moe_forward` is the float64 reference on the same FP8 weights; its docstring says exactly
which roundings it copies from the deep_tile path. :func:`reference_gemms` runs the pipeline
with float64 reference GEMMs instead of the kernels (CPU tests of the glue).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

from deep_tile.common import SCALE_GROUP, align4, ceil_div
from deep_tile.quant import per_block_cast_to_fp8, per_token_cast_to_fp8
from deep_tile.reference import (
    ref_fp8_gemm,
    ref_m_grouped_fp8_gemm_contiguous,
    ref_m_grouped_fp8_gemm_masked,
    ref_m_grouped_fp8_gemm_offsets,
)

__all__ = ["LAYOUTS", "SCORINGS", "CONTIGUOUS_ALIGNMENT", "MoEWeights", "Permutation", "GroupedGemms",
           "quantize_expert_weights", "make_expert_weights", "make_moe_weights", "tma_aligned_scale_buffer",
           "route", "expert_counts", "contiguous_rows_bound", "plan_contiguous", "plan_offsets", "plan_masked", "plan",
           "permute", "permute_fp8", "unpermute", "silu_and_mul", "deep_tile_gemms", "reference_gemms",
           "moe_forward", "ref_moe_forward", "moe_flops"]

LAYOUTS = ("contiguous", "offsets", "masked")
"""The row layouts of the grouped GEMMs, one per deep_tile entry point."""

CONTIGUOUS_ALIGNMENT = 128
"""Row alignment of each expert's run in the contiguous layout (the value
``deep_tile.get_m_alignment_for_contiguous_layout()`` returns on Hopper)."""

SCORINGS = ("sigmoid", "softmax")
"""Router score functions: ``sigmoid`` (DeepSeek-V3) and ``softmax`` (DeepSeek-V2, Mixtral)."""


# --------------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MoEWeights:
    """FP8 expert weights with their 128x128 block scales (float32).

    ``w13 [E, 2I, H]``: rows ``[0, I)`` gate (W1), rows ``[I, 2I)`` up (W3);
    ``w13_scale [E, ceil(2I/128), ceil(H/128)]``; ``w2 [E, H, I]``; ``w2_scale [E, ceil(H/128), ceil(I/128)]``.
    """

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor

    @property
    def num_experts(self) -> int:
        """E."""
        return self.w13.shape[0]

    @property
    def hidden(self) -> int:
        """H."""
        return self.w13.shape[2]

    @property
    def intermediate(self) -> int:
        """I (half the rows of w13)."""
        return self.w2.shape[2]


def quantize_expert_weights(w: torch.Tensor):
    """Per-expert ``per_block_cast_to_fp8`` of ``w [E, N, K]``: returns ``(q [E, N, K] float8_e4m3fn,
    s [E, ceil(N/128), ceil(K/128)] float32)``, both contiguous, on ``w``'s device."""
    if not isinstance(w, torch.Tensor) or w.dim() != 3:
        raise ValueError(f"quantize_expert_weights: w must be a 3-D tensor [E, N, K]; "
                         f"got {getattr(w, 'shape', type(w).__name__)}.")
    num_experts, n, k = w.shape
    q, s = _empty_expert_weights(num_experts, n, k, w.device)
    for e in range(num_experts):
        _store_expert(q, s, e, w[e])
    return q, s


def _empty_expert_weights(num_experts, n, k, device):
    q = torch.empty((num_experts, n, k), dtype=torch.float8_e4m3fn, device=device)
    s = torch.empty((num_experts, ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)), dtype=torch.float32,
                    device=device)
    return q, s


def _store_expert(q, s, e, w):
    """``q[e], s[e] = per_block_cast_to_fp8(w)``."""
    q_e, s_e = per_block_cast_to_fp8(w)
    q[e].view(torch.uint8).copy_(q_e.view(torch.uint8))
    s[e].copy_(s_e)


def make_expert_weights(num_experts: int, n: int, k: int, device, generator: Optional[torch.Generator] = None):
    """Random FP8 weights of ``num_experts`` experts: per expert ``randn(n, k) / sqrt(k)`` in bfloat16
    (one expert at a time, so the float staging stays ``n * k``) cast with ``per_block_cast_to_fp8``.

    Returns ``(q [E, n, k] float8_e4m3fn, s [E, ceil(n/128), ceil(k/128)] float32)`` on ``device``;
    ``generator`` (on ``device``) makes it reproducible.
    """
    for name, value in (("num_experts", num_experts), ("n", n), ("k", k)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"make_expert_weights: {name} must be a positive int; got {value!r}.")
    q, s = _empty_expert_weights(num_experts, n, k, device)
    for e in range(num_experts):
        _store_expert(q, s, e, (torch.randn((n, k), generator=generator, device=device) * k ** -0.5).to(torch.bfloat16))
    return q, s


def make_moe_weights(num_experts: int, hidden: int, intermediate: int, device, seed: int = 0) -> MoEWeights:
    """Random expert weights of a layer (:func:`make_expert_weights` for w13 ``[E, 2I, H]`` then w2
    ``[E, H, I]``, from one ``torch.Generator`` on ``device`` seeded with ``seed``).

    Args:
        num_experts, hidden, intermediate: E, H, I (H and I multiples of 128 for the kernels).
        device: where the weights live.
        seed: the generator's seed.

    Returns:
        :class:`MoEWeights`.
    """
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    w13, w13_scale = make_expert_weights(num_experts, 2 * intermediate, hidden, device, gen)
    w2, w2_scale = make_expert_weights(num_experts, hidden, intermediate, device, gen)
    return MoEWeights(w13, w13_scale, w2, w2_scale)


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


# --------------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------------

def route(logits: torch.Tensor, top_k: int, scoring: str = "sigmoid", *, correction_bias: Optional[torch.Tensor] = None,
          num_groups: int = 1, topk_groups: int = 1, renormalize: bool = True, scaling_factor: float = 1.0):
    """Router: expert ids and weights per token, all on the device (no host sync).

    DeepSeek-V3 (``scoring="sigmoid"``): ``scores = sigmoid(logits)``; the choice uses ``scores +
    correction_bias`` (bias for selection only); with ``num_groups > 1`` the experts form that many
    equal groups, each group is scored by the sum of its two best choice scores, and only the best
    ``topk_groups`` groups stay eligible; the ``top_k`` best eligible experts are taken; their weights
    are the unbiased ``scores``, divided by their sum when ``renormalize``, then times
    ``scaling_factor`` (2.5 in DeepSeek-V3). ``scoring="softmax"``: ``scores = softmax(logits)`` in
    float32, the same selection (no bias allowed) and weights.

    Args:
        logits: [T, E] floating tensor.
        top_k: experts per token, 1 <= top_k <= E.
        scoring: one of :data:`SCORINGS`.
        correction_bias: optional [E] selection bias (sigmoid scoring only).
        num_groups, topk_groups: group-limited routing (E divisible by num_groups, topk_groups groups
            kept, holding at least top_k experts).
        renormalize, scaling_factor: as above.

    Returns:
        ``(topk_ids, topk_weights)``: int32 [T, top_k] (distinct per token) and float32 [T, top_k].

    Raises:
        ValueError: bad rank, scoring, top_k or group settings.
    """
    fn = "route"
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"{fn}: logits must be a 2-D floating tensor [T, E]; got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}.")
    num_tokens, num_experts = logits.shape
    if scoring not in SCORINGS:
        raise ValueError(f"{fn}: scoring must be one of {SCORINGS}; got {scoring!r}.")
    if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"{fn}: top_k must be an int in [1, E={num_experts}]; got {top_k!r}.")
    if num_groups < 1 or num_experts % num_groups or not 1 <= topk_groups <= num_groups \
            or topk_groups * (num_experts // num_groups) < top_k:
        raise ValueError(f"{fn}: need E={num_experts} divisible by num_groups and 1 <= topk_groups <= num_groups "
                         f"with topk_groups * E / num_groups >= top_k={top_k}; got num_groups={num_groups}, "
                         f"topk_groups={topk_groups}.")
    if correction_bias is not None and scoring != "sigmoid":
        raise ValueError(f"{fn}: correction_bias is for sigmoid scoring (DeepSeek-V3) only.")
    logits = logits.float()
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    choice = scores if correction_bias is None else scores + correction_bias.float().unsqueeze(0)
    if num_groups > 1:
        per_group = num_experts // num_groups
        grouped = choice.view(num_tokens, num_groups, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(dim=-1)            # [T, groups]
        keep = torch.zeros_like(group_scores, dtype=torch.bool)
        keep.scatter_(1, group_scores.topk(topk_groups, dim=-1).indices, True)
        choice = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(num_tokens, num_experts)
    topk_ids = choice.topk(top_k, dim=-1).indices                                              # [T, k] int64
    weights = scores.gather(1, topk_ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_ids.to(torch.int32), (weights * scaling_factor).to(torch.float32)


# --------------------------------------------------------------------------------------------------
# Permutation: which row of the grouped buffer holds each (token, slot) pair
# --------------------------------------------------------------------------------------------------

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


def _check_ids(fn: str, topk_ids, num_experts) -> None:
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.dtype.is_floating_point \
            or topk_ids.dtype == torch.bool:
        raise ValueError(f"{fn}: topk_ids must be a 2-D integer tensor [T, top_k]; got "
                         f"{getattr(topk_ids, 'dtype', type(topk_ids).__name__)} "
                         f"{tuple(getattr(topk_ids, 'shape', ()))}.")
    if not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"{fn}: num_experts must be a positive int; got {num_experts!r}.")


def expert_counts(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """int32 [E]: how many (token, slot) pairs chose each expert. Device-side ``scatter_add_``
    (``torch.bincount`` on CUDA reads the maximum back to the host, so it is not used)."""
    _check_ids("expert_counts", topk_ids, num_experts)
    flat = topk_ids.reshape(-1).to(torch.int64)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    return counts.to(torch.int32)


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
    _check_ids("plan_contiguous", topk_ids, num_experts)
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
    _check_ids("plan_offsets", topk_ids, num_experts)
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
    _check_ids("plan_masked", topk_ids, num_experts)
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


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    """``SiLU(gate) * up`` for ``h [..., 2I]`` (gate = first I columns, up = last I): computed in
    float32 (float64 when ``h`` is float64), returned in that dtype, shape ``[..., I]``."""
    if h.shape[-1] % 2:
        raise ValueError(f"silu_and_mul: the last dimension must be even (gate and up); got {tuple(h.shape)}.")
    half = h.shape[-1] // 2
    dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
    return F.silu(h[..., :half].to(dtype)) * h[..., half:].to(dtype)


# --------------------------------------------------------------------------------------------------
# The GEMMs: deep_tile's kernels, or the float64 reference rounded like them
# --------------------------------------------------------------------------------------------------

class GroupedGemms(NamedTuple):
    """The three grouped GEMMs with deep_tile's signatures (each writes ``out`` and returns it):
    ``contiguous(a, a_scale, b, b_scale, m_indices, out)``, ``offsets(a, a_scale, b, b_scale,
    offsets, out)``, ``masked(a, a_scale, b, b_scale, masked_m, expected_m, out)``."""

    contiguous: Callable
    offsets: Callable
    masked: Callable


def deep_tile_gemms() -> GroupedGemms:
    """deep_tile's grouped FP8 GEMM kernels (looked up when called, so importing this module needs
    no kernel code)."""
    import deep_tile

    return GroupedGemms(
        contiguous=lambda a, sa, b, sb, m_indices, out:
            deep_tile.m_grouped_fp8_gemm_contiguous(a, sa, b, sb, m_indices, out=out),
        offsets=lambda a, sa, b, sb, offsets, out: deep_tile.m_grouped_fp8_gemm_offsets(a, sa, b, sb, offsets, out=out),
        masked=lambda a, sa, b, sb, masked_m, expected_m, out:
            deep_tile.m_grouped_fp8_gemm_masked(a, sa, b, sb, masked_m, expected_m, out=out),
    )


def _write_rows(out, ref, valid):
    """``out[valid] = ref[valid]`` cast to out's dtype (valid: bool mask over the leading dims)."""
    out[valid] = ref[valid].to(out.dtype)
    return out


def reference_gemms() -> GroupedGemms:
    """The float64 references of :mod:`deep_tile.reference`, rounded to ``out``'s dtype and written
    only into the rows the kernels compute (others untouched). Runs on CPU; host syncs freely."""
    def contiguous(a, sa, b, sb, m_indices, out):
        ref = ref_m_grouped_fp8_gemm_contiguous(a, sa, b, sb, m_indices)
        return _write_rows(out, ref, (m_indices >= 0) & (m_indices < b.shape[0]))

    def offsets(a, sa, b, sb, offsets, out):
        ref = ref_m_grouped_fp8_gemm_offsets(a, sa, b, sb, offsets)
        rows = torch.arange(a.shape[0], device=a.device)
        return _write_rows(out, ref, (rows >= offsets[0]) & (rows < offsets[-1]))

    def masked(a, sa, b, sb, masked_m, expected_m, out):
        ref = ref_m_grouped_fp8_gemm_masked(a, sa, b, sb, masked_m)
        rows = torch.arange(a.shape[1], device=a.device)
        return _write_rows(out, ref, rows.unsqueeze(0) < masked_m.to(a.device).unsqueeze(1))

    return GroupedGemms(contiguous, offsets, masked)


def _grouped_gemm(gemms: GroupedGemms, perm: Permutation, a, a_scale, b, b_scale, out):
    if perm.layout == "contiguous":
        return gemms.contiguous(a, a_scale, b, b_scale, perm.m_indices, out)
    if perm.layout == "offsets":
        return gemms.offsets(a, a_scale, b, b_scale, perm.offsets, out)
    return gemms.masked(a, a_scale, b, b_scale, perm.masked_m, perm.expected_m, out)


# --------------------------------------------------------------------------------------------------
# The layer
# --------------------------------------------------------------------------------------------------

def moe_forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, weights: MoEWeights,
                layout: str = "contiguous", *, gemms: Optional[GroupedGemms] = None,
                out_dtype: torch.dtype = torch.bfloat16, perm: Optional[Permutation] = None,
                **plan_options) -> torch.Tensor:
    """Routed-experts forward (module docstring) through one grouped-GEMM layout.

    Args:
        x: [T, H] bfloat16 (or float32/float16) tokens.
        topk_ids, topk_weights: [T, top_k] from :func:`route` (ids in [0, E), distinct per token).
        weights: :class:`MoEWeights`.
        layout: one of :data:`LAYOUTS`.
        gemms: the GEMMs (default :func:`deep_tile_gemms`; :func:`reference_gemms` on CPU).
        out_dtype: dtype of the result (the combine sums in float32).
        perm: a ready :class:`Permutation` of this layout (else planned here, with ``plan_options``
            passed to the planner, e.g. ``exact_rows`` or ``max_m``).

    Returns:
        [T, H] tensor of ``out_dtype``. No host sync beyond what the GEMMs and casts do (and
        ``exact_rows=True``).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"moe_forward: layout must be one of {LAYOUTS}; got {layout!r}.")
    if x.dim() != 2 or x.shape[1] != weights.hidden:
        raise ValueError(f"moe_forward: x must be [T, H={weights.hidden}]; got {tuple(x.shape)}.")
    if perm is None:
        if layout == "contiguous" and gemms is None and "alignment" not in plan_options:
            import deep_tile

            plan_options["alignment"] = deep_tile.get_m_alignment_for_contiguous_layout()
        perm = plan(topk_ids, weights.num_experts, layout, **plan_options)
    elif perm.layout != layout:
        raise ValueError(f"moe_forward: perm is for the {perm.layout!r} layout, not {layout!r}.")
    gemms = deep_tile_gemms() if gemms is None else gemms
    hidden, inter = weights.hidden, weights.intermediate
    xq, xs = per_token_cast_to_fp8(x)
    a, a_scale = permute_fp8(xq, xs, perm)
    h1 = torch.empty(perm.buffer_shape(2 * inter), dtype=torch.bfloat16, device=x.device)
    _grouped_gemm(gemms, perm, a, a_scale, weights.w13, weights.w13_scale, h1)
    act = silu_and_mul(h1)                                       # padding rows: garbage, never read back
    q2, s2 = per_token_cast_to_fp8(act.reshape(-1, inter))
    q2, s2 = q2.view(perm.buffer_shape(inter)), s2.view(perm.buffer_shape(s2.shape[1]))
    h2 = torch.empty(perm.buffer_shape(hidden), dtype=torch.bfloat16, device=x.device)
    _grouped_gemm(gemms, perm, q2, s2, weights.w2, weights.w2_scale, h2)
    return unpermute(h2, perm, topk_weights, out_dtype)


def ref_moe_forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, weights: MoEWeights,
                    mirror_roundings: bool = True) -> torch.Tensor:
    """Float64 reference of :func:`moe_forward` on the same FP8 weights, expert by expert.

    Exactly, for each expert ``e`` and the tokens ``t`` that chose it (slot ``j``):

    1. ``xq, xs = per_token_cast_to_fp8(x)`` -- the same cast, hence the same bytes, as the deep_tile
       path (a per-token cast is row-local, so permuting before or after it is the same);
    2. ``h1 = ref_fp8_gemm(xq[t], xs[t], w13[e], w13_scale[e])``: both operands dequantised to
       float64 (scales expanded), float64 matmul; with ``mirror_roundings`` rounded to bfloat16
       as the kernel writes it;
    3. ``act = silu_and_mul(h1)`` -- float32 from the bf16 ``h1`` (mirror), or float64 otherwise;
    4. ``q2, s2 = per_token_cast_to_fp8(act)`` (float64 ``act`` is first rounded to float32, the
       cast's widest input);
    5. ``h2 = ref_fp8_gemm(q2, s2, w2[e], w2_scale[e])`` float64, rounded to bfloat16 when mirroring;
    6. ``out[t] += topk_weights[t, j] * h2`` in float64.

    With ``mirror_roundings`` every rounding of the deep_tile path is repeated (FP8 casts, bf16 GEMM
    outputs), so the two differ only by the kernels' accumulation error, carried through the later
    roundings (it can flip a bf16 or FP8 rounding, or a group's amax), and the path's final float32
    combine and ``out_dtype`` cast. Without it, the intermediate stays float64 until the down-GEMM's
    FP8 cast: the error of the whole path against float64 arithmetic on the FP8 design.

    Returns:
        float64 [T, H] on ``x``'s device. Syncs the host (per-expert row lists).
    """
    _check_ids("ref_moe_forward", topk_ids, weights.num_experts)
    num_tokens, top_k = topk_ids.shape
    xq, xs = per_token_cast_to_fp8(x)
    out = torch.zeros((num_tokens, weights.hidden), dtype=torch.float64, device=x.device)
    flat = topk_ids.reshape(-1).to(device=x.device, dtype=torch.int64)
    flat_weights = topk_weights.reshape(-1).to(device=x.device, dtype=torch.float64)
    for e in range(weights.num_experts):
        pairs = (flat == e).nonzero().flatten()
        if pairs.numel() == 0:
            continue
        tokens = pairs // top_k
        xq_e = xq.view(torch.uint8)[tokens].view(torch.float8_e4m3fn)
        h1 = ref_fp8_gemm(xq_e, xs[tokens], weights.w13[e], weights.w13_scale[e])
        if mirror_roundings:
            h1 = h1.to(torch.bfloat16)
        act = silu_and_mul(h1)
        q2, s2 = per_token_cast_to_fp8(act.to(torch.float32))
        h2 = ref_fp8_gemm(q2, s2, weights.w2[e], weights.w2_scale[e])
        if mirror_roundings:
            h2 = h2.to(torch.bfloat16).to(torch.float64)
        out.index_add_(0, tokens, h2 * flat_weights[pairs].unsqueeze(1))
    return out


def moe_flops(num_tokens: int, top_k: int, hidden: int, intermediate: int) -> float:
    """Useful FLOPs of the two expert GEMMs for ``num_tokens * top_k`` pairs:
    ``2 * pairs * (2I * H + H * I)`` (padding rows not counted)."""
    return 2.0 * num_tokens * top_k * (2 * intermediate * hidden + hidden * intermediate)
