"""DeepGEMM's ``deep_gemm.utils.math``: integer helpers, and its FP8 casts for the float32-scale
format deep_tile runs (by :mod:`deep_tile.casts.quant`, deep_tile's own casts: the same recipe, 1x128
groups for activations and 128x128 blocks for weights). UE8M0 scales and FP4 are not supported
(NotImplementedError)."""
from __future__ import annotations

from typing import Tuple

import torch

__all__ = ["ceil_div", "align", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "pack_ue8m0_to_int"]


def ceil_div(x: int, y: int) -> int:
    """``x / y`` rounded up, for ints (DeepGEMM's ``ceil_div``)."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """``x`` rounded up to a multiple of ``y`` (DeepGEMM's ``align``)."""
    return ceil_div(x, y) * y


def _check_cast(fn: str, use_ue8m0: bool, gran_k: int) -> None:
    if use_ue8m0:
        raise NotImplementedError(f"{fn}: use_ue8m0=True (power-of-two scales) is not supported; deep_tile's "
                                  "casts make float32 scales: pass use_ue8m0=False.")
    if gran_k != 128:
        raise NotImplementedError(f"{fn}: gran_k={gran_k} is not supported; deep_tile casts 128-wide groups.")


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """DeepGEMM's ``per_token_cast_to_fp8`` with ``use_ue8m0=False``: ``x [M, K]`` to FP8 with one
    float32 scale per row per 128 columns, by :func:`deep_tile.per_token_cast_to_fp8`."""
    _check_cast("per_token_cast_to_fp8", use_ue8m0 or use_packed_ue8m0, gran_k)
    import deep_tile

    return deep_tile.per_token_cast_to_fp8(x)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    """DeepGEMM's ``per_block_cast_to_fp8`` with ``use_ue8m0=False``: ``x [N, K]`` to FP8 with one
    float32 scale per 128x128 block, by :func:`deep_tile.per_block_cast_to_fp8`."""
    _check_cast("per_block_cast_to_fp8", use_ue8m0, gran_k)
    import deep_tile

    return deep_tile.per_block_cast_to_fp8(x)


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's UE8M0 packing (its SM100 scale format): not supported (NotImplementedError)."""
    raise NotImplementedError("pack_ue8m0_to_int: packed UE8M0 scales are not supported; deep_tile runs float32 "
                              "scales as they are.")
