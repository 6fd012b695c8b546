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

The package by purpose:

- :mod:`.weights`: :class:`MoEWeights` and random FP8 expert weights (:func:`make_moe_weights`,
  :func:`make_expert_weights`, :func:`quantize_expert_weights`);
- :mod:`.routing`: :func:`route`, :func:`expert_counts`, :func:`check_expert_ids`;
- :mod:`.layouts`: :class:`Permutation` and its planners (:func:`plan` and one per layout), the
  movers :func:`permute`, :func:`permute_fp8`, :func:`unpermute`, and
  :func:`tma_aligned_scale_buffer`;
- :mod:`.layer`: :func:`moe_forward`, :class:`GroupedGemms` / :func:`deep_tile_gemms`,
  :func:`silu_and_mul`, :func:`moe_flops`;
- :mod:`.reference`: :func:`ref_moe_forward` and :func:`reference_gemms`.

Every public name is also importable from ``deep_tile.testing.moe`` itself.
"""
from deep_tile.testing.moe.layer import GroupedGemms, deep_tile_gemms, moe_flops, moe_forward, silu_and_mul
from deep_tile.testing.moe.layouts import (
    CONTIGUOUS_ALIGNMENT,
    LAYOUTS,
    Permutation,
    contiguous_rows_bound,
    permute,
    permute_fp8,
    plan,
    plan_contiguous,
    plan_masked,
    plan_offsets,
    tma_aligned_scale_buffer,
    unpermute,
)
from deep_tile.testing.moe.reference import ref_moe_forward, reference_gemms
from deep_tile.testing.moe.routing import SCORINGS, check_expert_ids, expert_counts, route
from deep_tile.testing.moe.weights import MoEWeights, make_expert_weights, make_moe_weights, quantize_expert_weights

__all__ = ["LAYOUTS", "SCORINGS", "CONTIGUOUS_ALIGNMENT", "MoEWeights", "Permutation", "GroupedGemms",
           "quantize_expert_weights", "make_expert_weights", "make_moe_weights", "tma_aligned_scale_buffer",
           "route", "check_expert_ids", "expert_counts", "contiguous_rows_bound", "plan_contiguous", "plan_offsets",
           "plan_masked", "plan", "permute", "permute_fp8", "unpermute", "silu_and_mul", "deep_tile_gemms",
           "reference_gemms", "moe_forward", "ref_moe_forward", "moe_flops"]
