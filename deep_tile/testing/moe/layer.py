"""The routed-experts forward through deep_tile's grouped FP8 GEMMs (:func:`moe_forward`), the
GEMMs it calls (:class:`GroupedGemms`), its activation and its useful FLOPs."""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

from deep_tile.casts.quant import per_token_cast_to_fp8
from deep_tile.testing.moe.layouts import LAYOUTS, Permutation, permute_fp8, plan, unpermute
from deep_tile.testing.moe.weights import MoEWeights

__all__ = ["GroupedGemms", "deep_tile_gemms", "silu_and_mul", "moe_forward", "moe_flops"]


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    """``SiLU(gate) * up`` for ``h [..., 2I]`` (gate = first I columns, up = last I): computed in
    float32 (float64 when ``h`` is float64), returned in that dtype, shape ``[..., I]``."""
    if h.shape[-1] % 2:
        raise ValueError(f"silu_and_mul: the last dimension must be even (gate and up); got {tuple(h.shape)}.")
    half = h.shape[-1] // 2
    dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
    return F.silu(h[..., :half].to(dtype)) * h[..., half:].to(dtype)


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


def _grouped_gemm(gemms: GroupedGemms, perm: Permutation, a, a_scale, b, b_scale, out):
    if perm.layout == "contiguous":
        return gemms.contiguous(a, a_scale, b, b_scale, perm.m_indices, out)
    if perm.layout == "offsets":
        return gemms.offsets(a, a_scale, b, b_scale, perm.offsets, out)
    return gemms.masked(a, a_scale, b, b_scale, perm.masked_m, perm.expected_m, out)


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


def moe_flops(num_tokens: int, top_k: int, hidden: int, intermediate: int) -> float:
    """Useful FLOPs of the two expert GEMMs for ``num_tokens * top_k`` pairs:
    ``2 * pairs * (2I * H + H * I)`` (padding rows not counted)."""
    return 2.0 * num_tokens * top_k * (2 * intermediate * hidden + hidden * intermediate)
