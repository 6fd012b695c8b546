"""DeepGEMM's ``deep_gemm.utils.layout``: the scale-layout helpers (SGLang imports
``get_mn_major_tma_aligned_tensor`` from here at load on SM90). The float32 ones forward to
:mod:`deep_tile.compat.deepgemm`; the packed-UE8M0 ones (SM100 scale formats) raise
NotImplementedError."""
from __future__ import annotations

import torch

from deep_tile.compat.deepgemm._api import (  # noqa: F401
    get_mn_major_tma_aligned_tensor, get_tma_aligned_size, transform_sf_into_required_layout,
)

__all__ = ["get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
           "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", "transform_sf_into_required_layout"]


def _no_ue8m0(fn: str):
    raise NotImplementedError(
        f"{fn}: packed UE8M0 scales (DeepGEMM's SM100 format) are not supported; deep_tile runs float32 "
        "scales: use get_mn_major_tma_aligned_tensor (or pass the float32 scales as they are).")


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's packed-UE8M0 scale layout: not supported by deep_tile (NotImplementedError)."""
    _no_ue8m0("get_mn_major_tma_aligned_packed_ue8m0_tensor")


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(*args, **kwargs) -> torch.Tensor:
    """DeepGEMM's K-grouped packed-UE8M0 scale layout: not supported by deep_tile (NotImplementedError)."""
    _no_ue8m0("get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor")
