"""The expected values of :mod:`deep_tile.nn`'s FP8 layers, computed independently in float64.

:func:`expected_linear` quantises with deep_tile's casts and contracts the dequantised operands in
float64 the way the DeepSeek-V3 recipe defines each GEMM (module doc of :mod:`deep_tile.nn`), without
the layer's code: the transposes, paddings and the choice of operands are written out here again.
Used by tests/test_nn.py (on the CPU, the layer's GEMMs replaced by the float64 references) and
tests/gpu_nn_cases.py (the real kernels).
"""
from __future__ import annotations

import torch

from deep_tile.casts.quant import dequantize_per_block, dequantize_per_token, per_block_cast_to_fp8, per_token_cast_to_fp8

__all__ = ["expected_linear", "expected_experts", "compare"]


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


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16)


def expected_experts(x: torch.Tensor, sizes: list, w13: torch.Tensor, w2: torch.Tensor, dy: torch.Tensor) -> dict:
    """``{"y", "dx", "dw13", "dw2"}`` in float64 for the routed experts of
    :mod:`deep_tile.nn.experts` (x ``[T, H]`` sorted by expert, ``sizes`` a list of E ints, w13
    ``[E, 2I, H]``, w2 ``[E, H, I]``, dy ``[T, H]``), rounded to bf16 where the layer's GEMM
    outputs and SwiGLU are: per expert, the products of the dequantised operands (activations and
    gradients 1x128 along the features; weights 128x128; for the weight gradients the transposed
    activations 1x128 along each expert's own tokens, from its first on)."""
    starts = [sum(sizes[:e]) for e in range(len(sizes))]
    rows = [slice(st, st + n) for st, n in zip(starts, sizes)]
    w13d = [dequantize_per_block(*per_block_cast_to_fp8(w)).double() for w in w13]
    w2d = [dequantize_per_block(*per_block_cast_to_fp8(w)).double() for w in w2]
    inter = w2.shape[2]
    xr = _rows(x)
    h13 = torch.cat([xr[r] @ w13d[e].t() for e, r in enumerate(rows)])
    h13 = _bf16(h13).float()
    gate, up = h13[:, :inter], h13[:, inter:]
    h = _bf16(gate * torch.sigmoid(gate) * up)
    hr = _rows(h)
    y = torch.cat([hr[r] @ w2d[e].t() for e, r in enumerate(rows)])
    dyr = _rows(dy)
    dh = _bf16(torch.cat([dyr[r] @ w2d[e] for e, r in enumerate(rows)])).float()
    sig = torch.sigmoid(gate)
    d13 = _bf16(torch.cat([dh * up * sig * (1 + gate * (1 - sig)), dh * gate * sig], dim=1))
    d13r = _rows(d13)
    dx = torch.cat([d13r[r] @ w13d[e] for e, r in enumerate(rows)])
    def along(t, r):  # 1x128 along the expert's own tokens (an expert without tokens: none)
        if r.stop == r.start:
            return torch.zeros(t.shape[1], 0, dtype=torch.float64, device=t.device)
        return _rows(t[r].t().contiguous())

    dw2 = torch.stack([along(dy, r) @ along(h, r).t() for r in rows])
    dw13 = torch.stack([along(d13, r) @ along(x, r).t() for r in rows])
    return {"y": y, "dx": dx, "dw13": dw13, "dw2": dw2}


def compare(got: torch.Tensor, want: torch.Tensor) -> dict:
    """``{"max_rel", "diff", "nan"}``: the largest |got - want| over max|want|, calc_diff
    (deep_tile.testing.numeric) and the NaN count in got."""
    from deep_tile.testing.numeric import calc_diff

    got = got.double().to(want.device)
    return {"max_rel": float(((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()),
            "diff": float(calc_diff(got, want)), "nan": int(torch.isnan(got).sum().item())}
