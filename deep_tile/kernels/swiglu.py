"""The SwiGLU kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/swiglu.cu`` holds two elementwise kernels of the FP8 experts layer (no defines):
``deep_tile_swiglu_forward`` (``h13 [rows, 2I]`` bf16 -> ``h [rows, I]``) and
``deep_tile_swiglu_backward`` (``h13``, ``dh [rows, I]`` -> ``d13 [rows, 2I]``), eight columns per
thread. Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "FORWARD_SYMBOL", "BACKWARD_SYMBOL", "BLOCK_THREADS", "FORWARD_ARGUMENT_KINDS",
           "BACKWARD_ARGUMENT_KINDS", "COLUMNS_PER_THREAD", "grid"]

ENTRY = "swiglu"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
FORWARD_SYMBOL = "deep_tile_swiglu_forward"
"""Symbol of the forward kernel: (h13, h, rows, inter)."""
BACKWARD_SYMBOL = "deep_tile_swiglu_backward"
"""Symbol of the backward kernel: (h13, dh, d13, rows, inter)."""
BLOCK_THREADS = 256
"""Threads per CTA of both kernels (their ``__launch_bounds__``)."""
COLUMNS_PER_THREAD = 8
"""Columns of ``h`` per thread (one 16-byte vector): ``inter`` must be a multiple."""
FORWARD_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the forward kernel's parameters."""
BACKWARD_ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the backward kernel's parameters."""


def grid(rows: int, inter: int) -> int:
    """CTAs covering ``rows * inter / 8`` threads (at least one)."""
    return max(1, ceil_div(rows * (inter // COLUMNS_PER_THREAD), BLOCK_THREADS))
