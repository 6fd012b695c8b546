"""The FP8 cast kernels' contract: entry file, symbols, defines, launch geometry, arguments.

``csrc/entry/cast_fp8.cu`` holds two kernels built per input dtype (``DT_IN_DTYPE``):
``deep_tile_per_token_cast`` (one warp per row and 128-wide group) and
``deep_tile_per_block_cast`` (one 256-thread CTA per 128x128 block). Pure Python.
"""
from __future__ import annotations

from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["ENTRY", "PER_TOKEN_SYMBOL", "PER_BLOCK_SYMBOL", "SYMBOLS", "BLOCK_THREADS", "INPUT_DTYPES",
           "ARGUMENTS", "ARGUMENT_KINDS", "defines", "per_token_grid", "per_block_grid"]

ENTRY = "cast_fp8"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
PER_TOKEN_SYMBOL = "deep_tile_per_token_cast"
"""Symbol of the 1x128 (activation) cast."""
PER_BLOCK_SYMBOL = "deep_tile_per_block_cast"
"""Symbol of the 128x128 (weight) cast."""
SYMBOLS = (PER_TOKEN_SYMBOL, PER_BLOCK_SYMBOL)
"""Both symbols; one translation unit (one cubin) holds them."""
BLOCK_THREADS = 256
"""Threads per CTA of both kernels (their ``__launch_bounds__``)."""
INPUT_DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}
"""Input dtype name -> value of ``DT_IN_DTYPE``."""
ARGUMENTS = ("x", "q", "scales", "rows", "cols")
"""Kernel parameters in order: input, fp8 output, float32 scales (pointers), rows, cols (int32)."""
ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kind of each of :data:`ARGUMENTS`."""


def defines(dtype_name: str) -> dict:
    """Compile-time defines for inputs of dtype ``dtype_name`` (a key of :data:`INPUT_DTYPES`)."""
    return {"DT_IN_DTYPE": INPUT_DTYPES[dtype_name]}


def per_token_grid(rows: int, cols: int) -> int:
    """CTAs of the per-token cast: one warp per (row, 128-column group)."""
    warps = rows * ceil_div(cols, SCALE_GROUP)
    return ceil_div(warps * 32, BLOCK_THREADS)


def per_block_grid(rows: int, cols: int) -> tuple:
    """Grid ``(x, y)`` of the per-block cast: one CTA per 128x128 block, x along the columns."""
    return ceil_div(cols, SCALE_GROUP), ceil_div(rows, SCALE_GROUP)
