"""DeepGEMM's hyper-connection and einsum names over deep_tile: ``tf32_hc_prenorm_gemm``.

Each function has DeepGEMM's parameters (names, order, defaults), writes into its output
tensors and returns None, as DeepGEMM does; it forwards to the public deep_tile function of the
same name, looked up on the package at call time, which checks the tensors.
"""
from __future__ import annotations

from typing import Optional

import torch

import deep_tile

__all__ = ["tf32_hc_prenorm_gemm"]


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                         num_splits: Optional[int] = None) -> None:
    """DeepGEMM's ``tf32_hc_prenorm_gemm``: ``d = a @ b.T`` in TF32 and ``sqr_sum`` the rows' sums
    of squares of bf16 ``a [m, k]`` and float32 ``b [n, k]`` (``[num_splits, ...]`` partials over K
    with ``num_splits``), run by :func:`deep_tile.tf32_hc_prenorm_gemm` (same arguments; it raises
    ValueError / TypeError on what it does not take: n other than 8, 16, 24, 32, k not a multiple of 64)."""
    deep_tile.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)
