"""DeepGEMM's BF16 GEMM names over deep_tile's BF16 kernel (:mod:`deep_tile.bf16`), with DeepGEMM's
parameters, order and defaults; each writes ``d`` and returns None. ``compiled_dims`` and
``ensure_zero_padding`` are accepted and ignored (they steer DeepGEMM's compilation and its SM100
kernels). The psum layout of the contiguous GEMM is turned into m_indices on the device
(:func:`deep_tile.psum_to_m_indices`, at the current ``set_mk_alignment_for_contiguous_layout``).
``k_grouped_bf16_gemm_tn_contiguous`` takes ks_cpu (DeepGEMM's SM90 form; no psum layout).
"""
from __future__ import annotations

from typing import Optional

import torch

import deep_tile

__all__ = ["bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
           "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
           "k_grouped_bf16_gemm_tn_contiguous"]


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """``d = a @ b.T (+ c)``: :func:`deep_tile.bf16_gemm_nt` (a, b each K- or MN-major)."""
    deep_tile.bf16_gemm_nt(a, b, d, c)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    """``d = a @ b (+ c)``, ``b`` [k, n]: :func:`deep_tile.bf16_gemm_nn`."""
    deep_tile.bf16_gemm_nn(a, b, d, c)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """``d = a.T @ b (+ c)``, ``a`` [k, m], ``b`` [k, n]: :func:`deep_tile.bf16_gemm_tn`."""
    deep_tile.bf16_gemm_tn(a, b, d, c)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    """``d = a.T @ b.T (+ c)``, ``a`` [k, m], ``b`` [n, k]: :func:`deep_tile.bf16_gemm_tt`."""
    deep_tile.bf16_gemm_tt(a, b, d, c)


def _m_indices(fn: str, a: torch.Tensor, grouped_layout: torch.Tensor, use_psum_layout: bool,
               expected_m_for_psum_layout) -> torch.Tensor:
    from deep_tile.compat.deepgemm._api import get_mk_alignment_for_contiguous_layout

    if expected_m_for_psum_layout is not None and not use_psum_layout:  # DeepGEMM asserts the same
        raise ValueError(f"{fn}: expected_m_for_psum_layout is a hint of the psum layout only; "
                         "it needs use_psum_layout=True.")
    if not use_psum_layout:
        return grouped_layout
    if not isinstance(a, torch.Tensor) or a.dim() != 2:
        raise ValueError(f"{fn}: a must be a 2-D tensor [M, k].")
    return deep_tile.psum_to_m_indices(grouped_layout, a.shape[0], get_mk_alignment_for_contiguous_layout())


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, grouped_layout: torch.Tensor,
                                      compiled_dims: str = "nk", use_psum_layout: bool = False,
                                      ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: Optional[int] = None) -> None:
    """Grouped ``d = a @ b[g].T`` over m_indices (or DeepGEMM's psum layout, the groups' row ends):
    :func:`deep_tile.m_grouped_bf16_gemm_nt_contiguous`."""
    fn = "m_grouped_bf16_gemm_nt_contiguous"
    deep_tile.m_grouped_bf16_gemm_nt_contiguous(
        a, b, d, _m_indices(fn, a, grouped_layout, use_psum_layout, expected_m_for_psum_layout))


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, grouped_layout: torch.Tensor,
                                      compiled_dims: str = "nk", use_psum_layout: bool = False,
                                      ensure_zero_padding: bool = True) -> None:
    """:func:`m_grouped_bf16_gemm_nt_contiguous` with ``b`` [G, k, n]."""
    fn = "m_grouped_bf16_gemm_nn_contiguous"
    deep_tile.m_grouped_bf16_gemm_nn_contiguous(a, b, d, _m_indices(fn, a, grouped_layout, use_psum_layout, None))


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str = "nk") -> None:
    """Masked grouped ``d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T``:
    :func:`deep_tile.m_grouped_bf16_gemm_nt_masked`."""
    deep_tile.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
"""DeepGEMM's older name of :func:`m_grouped_bf16_gemm_nt_masked`."""


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks_cpu, grouped_layout: torch.Tensor,
                                      c: Optional[torch.Tensor] = None, compiled_dims: str = "mn",
                                      use_psum_layout: bool = False) -> None:
    """``d[g] = c[g] + a[rows_g].T @ b[rows_g]``: :func:`deep_tile.k_grouped_bf16_gemm_tn_contiguous`."""
    deep_tile.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout, c, use_psum_layout=use_psum_layout)
