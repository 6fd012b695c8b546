"""Float64 references of the layer: :func:`ref_moe_forward` (expert by expert, on the same FP8
weights) and :func:`reference_gemms` (the layer's glue with float64 reference GEMMs in place of the
kernels, for CPU tests)."""
from __future__ import annotations

import torch

from deep_tile.casts.quant import per_token_cast_to_fp8
from deep_tile.reference import (
    ref_fp8_gemm,
    ref_m_grouped_fp8_gemm_contiguous,
    ref_m_grouped_fp8_gemm_masked,
    ref_m_grouped_fp8_gemm_offsets,
)
from deep_tile.testing.moe.layer import GroupedGemms, silu_and_mul
from deep_tile.testing.moe.routing import check_expert_ids
from deep_tile.testing.moe.weights import MoEWeights

__all__ = ["reference_gemms", "ref_moe_forward"]


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
    check_expert_ids("ref_moe_forward", topk_ids, weights.num_experts)
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
