"""DeepGEMM's hyper-connection and einsum names over deep_tile: ``tf32_hc_prenorm_gemm``,
``einsum``, ``fp8_einsum``.

Each function has DeepGEMM's parameters (names, order, defaults), writes into its output
tensors and returns None, as DeepGEMM does; it forwards to the public deep_tile function of the
same name, looked up on the package at call time, which checks the tensors.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

import deep_tile

__all__ = ["tf32_hc_prenorm_gemm", "einsum", "fp8_einsum"]


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                         num_splits: Optional[int] = None) -> None:
    """DeepGEMM's ``tf32_hc_prenorm_gemm``: ``d = a @ b.T`` in TF32 and ``sqr_sum`` the rows' sums
    of squares of bf16 ``a [m, k]`` and float32 ``b [n, k]`` (``[num_splits, ...]`` partials over K
    with ``num_splits``), run by :func:`deep_tile.tf32_hc_prenorm_gemm` (same arguments; it raises
    ValueError / TypeError on what it does not take: n other than 8, 16, 24, 32, k not a multiple of 64)."""
    deep_tile.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=num_splits)


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
           use_cublaslt: bool = False) -> None:
    """DeepGEMM's ``einsum``: the bf16 expressions it runs on SM90 (``'bmk,bnk->mn'`` on deep_tile's
    kernel; ``'bhr,hdr->bhd'`` and ``'bhd,hdr->bhr'`` through torch for now), run by
    :func:`deep_tile.einsum` (same arguments; it raises ValueError on other expressions and on what
    DeepGEMM refuses, TypeError on non-tensors)."""
    deep_tile.einsum(expr, a, b, d, c=c, use_cublaslt=use_cublaslt)


_Pair = Tuple[torch.Tensor, torch.Tensor]  # (FP8 tensor, float32 scales)


def fp8_einsum(expr: str, a: _Pair, b: _Pair, d: torch.Tensor, c: Optional[torch.Tensor] = None,
               recipe: Tuple[int, int, int] = (1, 128, 128)) -> None:
    """DeepGEMM's ``fp8_einsum`` on SM90: ``'bhr,hdr->bhd'`` of scaled FP8 pairs into bf16 ``d`` (the
    masked grouped FP8 GEMM, one group per head), run by :func:`deep_tile.fp8_einsum` (same arguments; the SM100-only expressions
    and recipes other than ``(1, 128, 128)`` raise ValueError)."""
    deep_tile.fp8_einsum(expr, a, b, d, c=c, recipe=recipe)
