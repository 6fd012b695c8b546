"""FP8 training layers: a ``torch.nn.Linear`` whose three GEMMs run deep_tile's FP8 kernels.

The DeepSeek-V3 recipe, per layer ``Y = X Wᵀ`` (X ``[T, K]`` tokens x features, W ``[N, K]``):

==========  ==========================================  =====================================
GEMM        operands, as quantised                      kernel
==========  ==========================================  =====================================
fprop       X 1x128 along K; W 128x128                  :func:`deep_tile.fp8_gemm` (bf16 Y)
dgrad       dY 1x128 along N; Wᵀ 128x128                :func:`deep_tile.fp8_gemm` (bf16 dX)
wgrad       dYᵀ and Xᵀ, each 1x128 along T              :func:`deep_tile.fp8_gemm_1d1d`
==========  ==========================================  =====================================

Wᵀ's FP8 data and scales are the exact transposes of W's (a 128x128 block's amax does not change
under transposition). The weight gradient is accumulated in FP32 into ``weight.main_grad`` when
the weight has one (as Megatron-style trainers keep a main gradient; :class:`Fp8Linear` makes one
by default) and autograd then gets no gradient for the weight; without it the gradient is
returned to autograd in the weight's dtype, which the kernel writes itself for a bf16 or float32
weight (rounded once from the FP32 sum, as the FP32 result converted would be). Activations and gradients flowing between layers stay
bf16. The forward keeps for the backward Xᵀ quantised (FP8 + scales, half of bf16 X's bytes) and
Wᵀ quantised. Token counts that are not a multiple of 16 are padded with zero tokens for the
weight gradient only (1D1D needs K, here T, to be a multiple of 16; zeros add nothing).

Casts: :mod:`deep_tile.casts.cast_transpose` (one pass writes a tensor's FP8 copy and its transposed
one); needs an sm_90 GPU for the GEMMs.
"""
from __future__ import annotations

import torch

from deep_tile import gemm
from deep_tile.casts import cast_transpose

__all__ = ["Fp8Linear", "fp8_linear"]


def wgrad_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype a weight gradient without a main gradient is written in: the weight's own when
    the kernels write it (bfloat16, float32), else float32 (converted afterwards)."""
    return weight.dtype if weight.dtype in (torch.bfloat16, torch.float32) else torch.float32


def _quantize_acts(x: torch.Tensor):
    """``(q, s, qt, st)``: ``x [T, C]`` 1x128 along C and its transpose ``[C, align16(T)]`` 1x128
    along T (padded tokens zero), in one pass, in the layouts the GEMMs read without a copy."""
    return cast_transpose.per_token_cast_transpose_to_fp8(x, transpose=True)


def _quantize_weight(w: torch.Tensor):
    """``(wq, ws, wtq, wts)``: W 128x128-quantised and its exact transpose, in one pass."""
    return cast_transpose.per_block_cast_transpose_to_fp8(w, transpose=True)


class _Fp8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor):
        n, k = weight.shape
        xq, xs, xtq, xts = _quantize_acts(x.reshape(-1, k))
        wq, ws, wtq, wts = _quantize_weight(weight)
        y = gemm.fp8_gemm(xq, xs, wq, ws)
        ctx.save_for_backward(xtq, xts, wtq, wts, weight)
        ctx.x_shape = x.shape
        return y.view(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        xtq, xts, wtq, wts, weight = ctx.saved_tensors
        n, k = weight.shape
        dyq, dys, dytq, dyts = _quantize_acts(dy.reshape(-1, n).to(torch.bfloat16))
        dx = gemm.fp8_gemm(dyq, dys, wtq, wts).view(ctx.x_shape) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:
            main_grad = getattr(weight, "main_grad", None)
            if main_grad is not None:
                gemm.fp8_gemm_1d1d(dytq, dyts, xtq, xts, main_grad, c=main_grad)
            else:
                dw = gemm.fp8_gemm_1d1d(dytq, dyts, xtq, xts, out_dtype=wgrad_dtype(weight)).to(weight.dtype)
        return dx, dw


def fp8_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` (no bias) with the FP8 GEMMs of the module doc in forward and backward.

    Args:
        x: ``[..., K]`` bfloat16 CUDA tensor.
        weight: ``[N, K]`` bfloat16 CUDA tensor (a parameter); K and N multiples of 16. With a
            float32 ``weight.main_grad`` of its shape the weight gradient is added to it.

    Returns:
        ``[..., N]`` bfloat16.

    Raises:
        TypeError, ValueError: a bad dtype, device, rank or size (before anything runs).
    """
    _check(x, weight)
    return _Fp8LinearFunction.apply(x, weight)


def _check(x, weight) -> None:
    fn = "fp8_linear"
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(t).__name__}.")
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype != torch.bfloat16 or not t.is_cuda:
            raise ValueError(f"{fn}: {name} must be a bfloat16 CUDA tensor; got {t.dtype} on {t.device}.")
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{fn}: expected x [..., K] and weight [N, K]; got x {tuple(x.shape)}, "
                         f"weight {tuple(weight.shape)}.")
    n, k = weight.shape
    if n % 16 or k % 16 or n == 0 or k == 0:
        raise ValueError(f"{fn}: in and out features must be positive multiples of 16; got weight [{n}, {k}].")
    main_grad = getattr(weight, "main_grad", None)
    if main_grad is not None and (not isinstance(main_grad, torch.Tensor) or main_grad.dtype != torch.float32
                                  or main_grad.shape != weight.shape or main_grad.device != weight.device
                                  or not main_grad.is_contiguous()):
        raise ValueError(f"{fn}: weight.main_grad must be a contiguous float32 tensor of the weight's shape "
                         f"{tuple(weight.shape)} on {weight.device}.")


class Fp8Linear(torch.nn.Module):
    """``torch.nn.Linear`` (bf16 in and out) whose forward and backward GEMMs are deep_tile's FP8
    kernels (:func:`fp8_linear`).

    Args:
        in_features, out_features: multiples of 16.
        bias: add a bf16 bias (in bf16, by torch).
        main_grad: give the weight a float32 ``main_grad`` (zeros) into which every backward adds
            the weight gradient (the weight's ``.grad`` then stays None); False: autograd gets the
            gradient in bf16.
        device: where the parameters live (a CUDA device for the GEMMs to run).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, main_grad: bool = True,
                 device=None):
        super().__init__()
        if in_features % 16 or out_features % 16 or in_features <= 0 or out_features <= 0:
            raise ValueError(f"Fp8Linear: in_features and out_features must be positive multiples of 16; "
                             f"got {in_features}, {out_features}.")
        self.in_features, self.out_features = in_features, out_features
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=torch.bfloat16, device=device))
        self.bias = (torch.nn.Parameter(torch.zeros(out_features, dtype=torch.bfloat16, device=device))
                     if bias else None)
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        if main_grad:
            self.weight.main_grad = torch.zeros(out_features, in_features, dtype=torch.float32, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = fp8_linear(x, self.weight)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"main_grad={getattr(self.weight, 'main_grad', None) is not None}")
