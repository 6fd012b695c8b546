"""The routed experts of an MoE block in FP8: gate-up, SwiGLU, down, over tokens sorted by expert.

``y[t] = W2_e (silu(g) * u)`` with ``(g, u) = split(W13_e x[t])`` for the expert ``e`` that owns
token ``t``; the tokens come sorted by expert (expert ``e`` owns the next ``sizes[e]`` rows of ``x``,
no padding: the M-grouped GEMMs' offsets layout). W13 is ``[E, 2I, H]`` (gate rows first, then
up), W2 ``[E, H, I]``.

==========  ====================================================  =====================================
GEMM        operands, as quantised                                kernel
==========  ====================================================  =====================================
fprop       X, H 1x128 along the features; W13, W2 128x128       M-grouped offsets (bf16 out)
dgrad       dY, dG 1x128 along the features; W2ᵀ, W13ᵀ 128x128   M-grouped offsets (bf16 out)
wgrad       dYᵀ and Hᵀ, dGᵀ and Xᵀ, 1x128 along the tokens       K-grouped 1D1D (FP32 into main_grad)
==========  ====================================================  =====================================

Each activation and gradient is cast once (deep_tile.casts.cast_transpose: the FP8 copy and its
transposed copy in one pass). The transposed copies give each expert its own 128-token scale
groups, from its first token on (zeros after its last up to a multiple of 128: the cast's
``group_offsets``), so the K-grouped GEMM runs whole 128-token blocks, faster than masking each
expert's end blocks. Weights are cast once per
forward, all experts in one launch that writes each expert's transpose where dgrad reads it.
SwiGLU runs in float32 (deep_tile.casts.swiglu: one kernel forward, one backward) and is rounded to
bf16 before its cast.
Needs an sm_90 GPU for the GEMMs; H and I multiples of 128 (each expert's weight blocks whole).
"""
from __future__ import annotations

import torch

from deep_tile.casts import cast_transpose
from deep_tile.gemm import grouped, k_grouped
from deep_tile.nn.linear import wgrad_dtype
from deep_tile.casts.swiglu import swiglu, swiglu_backward

__all__ = ["Fp8Experts", "fp8_experts"]


def _acts(x: torch.Tensor, offsets: torch.Tensor):
    """x's 1x128 cast along the features and, per expert (``offsets``), along the tokens."""
    return cast_transpose.per_token_cast_transpose_to_fp8(x, transpose=True, group_offsets=offsets)


def _expert_weights(w: torch.Tensor):
    """``w [E, N, K]`` -> ``(q [E, N, K], s [E, N/128, K/128], qt [E, K, N], st [E, K/128, N/128])``:
    every expert's 128x128 cast and its transpose, all experts in one launch that writes each
    expert's transpose where the dgrad GEMM reads it.
    NOTES: a cast of the stacked ``[E*N, K]`` wrote the transposes side by side (``[K, E*N]``), and
    regrouping them per expert cost a copy of the FP8 weights, a visible share of the layer's step."""
    return tuple(cast_transpose.per_block_cast_transpose_to_fp8(w, transpose=True))


def _weight_grad(weight, a, a_scale, b, b_scale, sizes):
    """The K-grouped weight gradient: added into ``weight.main_grad`` (returns None) or returned."""
    main_grad = getattr(weight, "main_grad", None)
    if main_grad is not None:
        k_grouped.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, main_grad, c=main_grad)
        return None
    out_dtype = wgrad_dtype(weight)
    return k_grouped.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, out_dtype=out_dtype).to(weight.dtype)


class _Fp8ExpertsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sizes, offsets, w13, w2):
        xq, xs, xtq, xts = _acts(x, offsets)
        w13q, w13s, w13tq, w13ts = _expert_weights(w13)
        h13 = grouped.m_grouped_fp8_gemm_offsets(xq, xs, w13q, w13s, offsets)
        h = swiglu(h13)
        hq, hs, htq, hts = _acts(h, offsets)
        w2q, w2s, w2tq, w2ts = _expert_weights(w2)
        y = grouped.m_grouped_fp8_gemm_offsets(hq, hs, w2q, w2s, offsets)
        ctx.save_for_backward(sizes, offsets, xtq, xts, h13, htq, hts, w13tq, w13ts, w2tq, w2ts, w13, w2)
        return y

    @staticmethod
    def backward(ctx, dy):
        sizes, offsets, xtq, xts, h13, htq, hts, w13tq, w13ts, w2tq, w2ts, w13, w2 = ctx.saved_tensors
        dyq, dys, dytq, dyts = _acts(dy.to(torch.bfloat16).contiguous(), offsets)
        padded = cast_transpose.padded_group_sizes(offsets)  # the experts' tokens in whole 128-token blocks
        dh = grouped.m_grouped_fp8_gemm_offsets(dyq, dys, w2tq, w2ts, offsets)
        dw2 = _weight_grad(w2, dytq, dyts, htq, hts, padded) if ctx.needs_input_grad[4] else None
        d13q, d13s, d13tq, d13ts = _acts(swiglu_backward(h13, dh), offsets)
        dx = grouped.m_grouped_fp8_gemm_offsets(d13q, d13s, w13tq, w13ts, offsets) if ctx.needs_input_grad[0] else None
        dw13 = _weight_grad(w13, d13tq, d13ts, xtq, xts, padded) if ctx.needs_input_grad[3] else None
        return dx, None, None, dw13, dw2


def fp8_experts(x: torch.Tensor, group_sizes: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The routed experts (module doc) on ``x [T, H]`` sorted by expert.

    Args:
        x: bf16 CUDA ``[T, H]``, expert ``e``'s tokens the ``group_sizes[e]`` rows after those of
            the experts before it.
        group_sizes: int32 ``[E]`` on x's device (read on the device: no host sync), summing to T
            (rows past the sum are left unwritten in the output; tokens may be 0 for an expert).
        w13: bf16 ``[E, 2I, H]`` (gate rows, then up rows); w2: bf16 ``[E, H, I]``; H and I
            multiples of 128. A float32 ``main_grad`` of a weight's shape receives its gradient.

    Returns:
        bf16 ``[T, H]``.
    """
    _check(x, group_sizes, w13, w2)
    offsets = torch.zeros(group_sizes.numel() + 1, dtype=torch.int32, device=x.device)
    offsets[1:] = torch.cumsum(group_sizes, 0)
    return _Fp8ExpertsFunction.apply(x.contiguous(), group_sizes, offsets, w13, w2)


def _check(x, group_sizes, w13, w2) -> None:
    fn = "fp8_experts"
    for name, t in (("x", x), ("group_sizes", group_sizes), ("w13", w13), ("w2", w2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(t).__name__}.")
    for name, t in (("x", x), ("w13", w13), ("w2", w2)):
        if t.dtype != torch.bfloat16 or t.device != x.device or not t.is_cuda:
            raise ValueError(f"{fn}: {name} must be a bfloat16 CUDA tensor on x's device; got {t.dtype} on {t.device}.")
    if group_sizes.dtype != torch.int32 or group_sizes.dim() != 1 or group_sizes.device != x.device:
        raise ValueError(f"{fn}: group_sizes must be a 1-D int32 tensor on {x.device}; got {group_sizes.dtype} "
                         f"shape {tuple(group_sizes.shape)} on {group_sizes.device}.")
    if x.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"{fn}: expected x [T, H], w13 [E, 2I, H], w2 [E, H, I]; got {tuple(x.shape)}, "
                         f"{tuple(w13.shape)}, {tuple(w2.shape)}.")
    e, two_i, h = w13.shape
    if (w2.shape != (e, h, two_i // 2) or x.shape[1] != h or group_sizes.numel() != e or two_i % 2
            or h % 128 or (two_i // 2) % 128 or h == 0 or two_i == 0):
        raise ValueError(f"{fn}: expected x [T, H], group_sizes [E], w13 [E, 2I, H], w2 [E, H, I] with H and I "
                         f"positive multiples of 128; got x {tuple(x.shape)}, group_sizes {tuple(group_sizes.shape)}, "
                         f"w13 {tuple(w13.shape)}, w2 {tuple(w2.shape)}.")
    for name, w in (("w13", w13), ("w2", w2)):
        main_grad = getattr(w, "main_grad", None)
        if main_grad is not None and (not isinstance(main_grad, torch.Tensor) or main_grad.dtype != torch.float32
                                      or main_grad.shape != w.shape or not main_grad.is_contiguous()
                                      or main_grad.device != w.device):
            raise ValueError(f"{fn}: {name}.main_grad must be a contiguous float32 tensor of {name}'s shape "
                             f"{tuple(w.shape)} on {w.device}.")


class Fp8Experts(torch.nn.Module):
    """``num_experts`` SwiGLU experts (``hidden -> 2 x inter -> hidden``) run by :func:`fp8_experts`.

    Args:
        num_experts: E >= 1.
        hidden, inter: H and I, multiples of 128.
        main_grad: give both weights a float32 ``main_grad`` (zeros) that every backward adds to.
        device: where the parameters live.
    """

    def __init__(self, num_experts: int, hidden: int, inter: int, main_grad: bool = True, device=None):
        super().__init__()
        if num_experts < 1 or hidden % 128 or inter % 128 or hidden <= 0 or inter <= 0:
            raise ValueError(f"Fp8Experts: need num_experts >= 1 and hidden, inter positive multiples of 128; got "
                             f"{num_experts}, {hidden}, {inter}.")
        self.w13 = torch.nn.Parameter(torch.empty(num_experts, 2 * inter, hidden, dtype=torch.bfloat16, device=device))
        self.w2 = torch.nn.Parameter(torch.empty(num_experts, hidden, inter, dtype=torch.bfloat16, device=device))
        torch.nn.init.normal_(self.w13, std=hidden ** -0.5)
        torch.nn.init.normal_(self.w2, std=inter ** -0.5)
        if main_grad:
            for w in (self.w13, self.w2):
                w.main_grad = torch.zeros(w.shape, dtype=torch.float32, device=device)

    def forward(self, x: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
        return fp8_experts(x, group_sizes, self.w13, self.w2)
