"""The FP8 GEMMs: their entries, argument checks, problem descriptor, planner and launcher.

- entries: :mod:`~deep_tile.gemm.dense` (``fp8_gemm``, ``fp8_gemm_1d1d``), :mod:`~deep_tile.gemm.grouped`
  (the M-grouped MoE GEMMs), :mod:`~deep_tile.gemm.k_grouped` (the K-grouped weight gradients);
- checks and the call's description: :mod:`~deep_tile.gemm.checks`, :mod:`~deep_tile.gemm.problem`,
  :mod:`~deep_tile.gemm.layouts` (the a_scale layouts);
- launching: :mod:`~deep_tile.gemm.planner` (the one plan both host paths consume),
  :mod:`~deep_tile.gemm.plan_index` (plans remembered on disk), :mod:`~deep_tile.gemm.kernel_args`
  and :mod:`~deep_tile.gemm.tma` (the kernel's parameters and tensor maps), :mod:`~deep_tile.gemm.launch`
  (the Python host path), :mod:`~deep_tile.gemm.warmup` (filling the kernel cache ahead of time);
- :mod:`~deep_tile.gemm.moe_layout`: the layout kernels beside the grouped GEMMs.

``deep_tile.gemm.fp8_gemm`` and ``deep_tile.gemm.fp8_gemm_1d1d`` are the dense entries, loaded on first
use: this package's own import stays light, so the low-level modules above can be imported alone.
"""
from __future__ import annotations

import importlib

_ENTRIES = ("fp8_gemm", "fp8_gemm_1d1d", "get_tma_aligned_a_scale")

__all__ = list(_ENTRIES)


def __getattr__(name):
    if name not in _ENTRIES:
        raise AttributeError(f"module 'deep_tile.gemm' has no attribute {name!r}")
    value = getattr(importlib.import_module("deep_tile.gemm.dense"), name)
    globals()[name] = value
    return value
