"""The expected values of :mod:`deep_tile.nn`'s FP8 linear layer, computed independently in float64.

:func:`expected_linear` quantises with deep_tile's casts and contracts the dequantised operands in
float64 the way the DeepSeek-V3 recipe defines each GEMM (module doc of :mod:`deep_tile.nn`), without
the layer's code: the transposes, paddings and the choice of operands are written out here again.
Used by tests/test_nn.py (on the CPU, the layer's GEMMs replaced by the float64 references) and
tests/gpu_nn_cases.py (the real kernels).
"""
from __future__ import annotations

import torch

from deep_tile.quant import dequantize_per_block, dequantize_per_token, per_block_cast_to_fp8, per_token_cast_to_fp8

__all__ = ["expected_linear", "compare"]


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x [R, C] after the 1x128 (along C) round trip, float64."""
    q, s = per_token_cast_to_fp8(x)
    return dequantize_per_token(q, s).double()


def expected_linear(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor) -> dict:
    """``{"y", "dx", "dw"}`` in float64 for ``y = x @ weight.T`` (x ``[T, K]``, weight ``[N, K]``,
    dy ``[T, N]``, all bf16): y from x 1x128 along K and W 128x128; dx from dy 1x128 along N and W
    128x128; dw from dyᵀ and xᵀ, each 1x128 along T."""
    wq, ws = per_block_cast_to_fp8(weight)
    w = dequantize_per_block(wq, ws).double()                      # [N, K]
    y = _rows(x) @ w.t()                                            # [T, N]
    dx = _rows(dy) @ w                                              # [T, K]
    dw = _rows(dy.t().contiguous()) @ _rows(x.t().contiguous()).t()  # [N, T] @ [T, K]
    return {"y": y, "dx": dx, "dw": dw}


def compare(got: torch.Tensor, want: torch.Tensor) -> dict:
    """``{"max_rel", "diff", "nan"}``: the largest |got - want| over max|want|, calc_diff
    (deep_tile.testing.numeric) and the NaN count in got."""
    from deep_tile.testing.numeric import calc_diff

    got = got.double().to(want.device)
    return {"max_rel": float(((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()),
            "diff": float(calc_diff(got, want)), "nan": int(torch.isnan(got).sum().item())}
