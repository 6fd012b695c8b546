"""The fused cast-and-transpose kernels' contract: entry file, symbols, defines, grid, arguments.

``csrc/entry/cast_transpose.cu`` holds two kernels over a bf16 ``[rows, cols]`` tensor, one CTA of
:data:`THREADS` threads per 128x128 tile (grid x along the columns, y along the rows):
``deep_tile_cast_transpose_token`` (1x128 groups; the transposed copy gets its own 1x128 groups
along the rows) and ``deep_tile_cast_transpose_block`` (128x128 blocks; the transposed copy is
the bit-exact transpose). Both write the transposed copy only when its pointer is non-null.
Pure Python.
"""
from __future__ import annotations

from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["ENTRY", "TOKEN_SYMBOL", "BLOCK_SYMBOL", "SYMBOLS", "THREADS", "MIN_BLOCKS", "COL_ALIGN",
           "POWER_OF_TWO_FLAG", "ARGUMENTS", "ARGUMENT_KINDS", "defines", "grid"]

ENTRY = "cast_transpose"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
TOKEN_SYMBOL = "deep_tile_cast_transpose_token"
"""Symbol of the 1x128 (activation / gradient) cast."""
BLOCK_SYMBOL = "deep_tile_cast_transpose_block"
"""Symbol of the 128x128 (weight) cast."""
SYMBOLS = (TOKEN_SYMBOL, BLOCK_SYMBOL)
"""Both symbols; one translation unit (one cubin) holds them."""
THREADS = 512
"""Threads per CTA (``DT_CT_THREADS``): 8 per row of 128 columns (16 each), 64 rows per pass.
With 256 the token kernel needs 84 registers (2 CTAs per SM); with 512 it needs 56 (2 CTAs of
512 threads per SM, twice the threads)."""
MIN_BLOCKS = 2
"""CTAs per SM asked of ptxas (``__launch_bounds__`` second argument, ``DT_CT_MIN_BLOCKS``)."""
COL_ALIGN = 16
"""The column count must be a multiple of this: 16-byte FP8 rows (the GEMMs' K and TMA pitch
rule) and 16-column chunks per thread."""
POWER_OF_TWO_FLAG = 1
"""Bit of the ``flags`` argument: round each scale up to a power of two."""
ARGUMENTS = ("x", "q", "s", "qt", "st", "rows", "cols", "s_pitch", "st_pitch", "qt_ld", "flags")
"""Kernel parameters in order: bf16 input, FP8 output, its scales, the transposed FP8 output and
its scales (null: none), rows, cols, the scales' pitches (floats), qt's row pitch (bytes), flags."""
ARGUMENT_KINDS = ("ptr",) * 5 + ("i32",) * 6
"""The :class:`deep_tile.jit.runtime.KernelArgs` kind of each of :data:`ARGUMENTS`."""


def defines() -> dict:
    """Compile-time defines of the kernels (one build holds both symbols)."""
    return {"DT_CT_THREADS": THREADS, "DT_CT_MIN_BLOCKS": MIN_BLOCKS}


def grid(rows: int, cols: int) -> tuple:
    """Grid ``(x, y)``: one CTA per 128x128 tile, x along the columns."""
    return ceil_div(cols, SCALE_GROUP), ceil_div(rows, SCALE_GROUP)
