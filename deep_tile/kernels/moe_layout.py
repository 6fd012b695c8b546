"""The MoE layout kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/moe_layout.cu`` holds two one-thread-per-element kernels (no defines):
``deep_tile_psum_to_m_indices`` turns DeepGEMM's psum contiguous layout (each expert's row end)
into the contiguous kind's ``m_indices`` (each row's expert, -1 for padding), and
``deep_tile_raise_signals`` raises the completion flags of a masked GEMM's real row blocks
(SGLang's single-batch overlap). The same entry holds ``deep_tile_k_grouped_maps``, the K-grouped
GEMM's per-group tensor maps in DeepGEMM's NT layout (:func:`deep_tile.gemm.launch.launch_k_grouped_blocks`),
and ``deep_tile_transpose_bytes``, the byte transposition of the K-grouped TN form's operands
(:func:`deep_tile.gemm.moe_layout.transpose_bytes_into`). Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "PSUM_SYMBOL", "SIGNAL_SYMBOL", "BLOCK_THREADS", "PSUM_ARGUMENT_KINDS", "SIGNAL_ARGUMENT_KINDS",
           "MAPS_SYMBOL", "MAPS_THREADS", "MAPS_ARGUMENT_KINDS", "MAP_BYTES", "TRANSPOSE_SYMBOL", "TRANSPOSE_THREADS",
           "TRANSPOSE_TILE", "TRANSPOSE_ARGUMENT_KINDS", "TRANSPOSE_ALIGN", "grid", "transpose_grid"]

ENTRY = "moe_layout"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
PSUM_SYMBOL = "deep_tile_psum_to_m_indices"
"""Symbol of the psum -> m_indices kernel: (ends, m_indices, num_groups, m, alignment)."""
SIGNAL_SYMBOL = "deep_tile_raise_signals"
"""Symbol of the signal kernel: (signal, masked_m, num_groups, blocks_per_group, max_m, block_m, threshold)."""
BLOCK_THREADS = 256
"""Threads per CTA of both kernels (their ``__launch_bounds__``)."""
PSUM_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the psum kernel's parameters."""
SIGNAL_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the signal kernel's parameters."""


MAPS_SYMBOL = "deep_tile_k_grouped_maps"
"""Symbol of the K-grouped GEMM's map-table kernel (include/deep_tile/kernels/k_grouped_maps.cuh):
(template map of A, template map of B, a, b, sizes, num_groups, k, m, n, maps); one CTA."""
MAPS_THREADS = 512
"""Threads of that CTA, one per group (``kKGroupedMapsThreads``; the K-grouped kind's most groups)."""
MAPS_ARGUMENT_KINDS = ("tensormap", "tensormap", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "ptr")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of its parameters."""
MAP_BYTES = 128
"""Bytes of one tensor map (``CUtensorMap``) in the table; the table holds 2 per group (A, B)."""

TRANSPOSE_SYMBOL = "deep_tile_transpose_bytes"
"""Symbol of the byte transposition (include/deep_tile/kernels/fp8_transpose.cuh):
(src0, dst0, cols0, src1, dst1, cols1, rows); src [rows, cols] -> dst [cols, rows], cols1 0: one matrix."""
TRANSPOSE_THREADS = 256
"""Threads per CTA of the transposition (``kTransposeThreads``)."""
TRANSPOSE_TILE = 128
"""Rows and columns (bytes) of the tile one CTA transposes (``kTransposeTile``)."""
TRANSPOSE_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "ptr", "ptr", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of its parameters."""
TRANSPOSE_ALIGN = 16
"""What rows, columns and the pointers must be multiples of (its 16-byte loads and stores)."""


def transpose_grid(rows: int, cols0: int, cols1: int) -> int:
    """CTAs of one transposition launch: the tiles of both matrices."""
    tiles_r = ceil_div(rows, TRANSPOSE_TILE)
    return tiles_r * (ceil_div(cols0, TRANSPOSE_TILE) + ceil_div(cols1, TRANSPOSE_TILE))


def grid(elements: int) -> int:
    """CTAs covering ``elements`` threads (at least one)."""
    return max(1, ceil_div(elements, BLOCK_THREADS))
