"""The fused cast-and-transpose kernels' contract: entry file, symbols, defines, grid, arguments.

``csrc/entry/cast_transpose.cu`` holds two kernels over a bf16 ``[rows, cols]`` tensor of 128x128
tiles, CTAs of :data:`THREADS` threads: ``deep_tile_cast_transpose_token`` (1x128 groups; the
transposed copy gets its own 1x128 groups along the rows) and ``deep_tile_cast_transpose_block``
(128x128 blocks; the transposed copy is the bit-exact transpose). Both write the transposed copy
only when its pointer is non-null.

Two designs (:data:`DESIGNS`, one build each; :data:`DESIGN` is the one launched):

- ``"tile"``: one CTA per tile (grid x along the columns, y along the rows); load, quantise the
  rows, stage the tile in shared memory, quantise the columns -- no overlap of a tile's loads with
  its stores: the transposed casts reach ~60-80% of the copy rate on an H100.
- ``"pipe"`` (default), ``"pipe3"``, ``"pipe_sectors"``: without a transposed copy the same
  per-tile kernel; with one, a persistent grid of :data:`MIN_BLOCKS` CTAs per SM, each walking
  tiles ``blockIdx.x + i * gridDim.x`` and streaming them with cp.async into 2 (3 for ``"pipe3"``)
  shared-memory buffers (dynamic shared memory, :func:`smem_bytes`), one (two) tiles ahead of the
  one it quantises; ``"pipe_sectors"`` keeps the per-tile kernel's column pass (:data:`LINES`).

Pure Python.
"""
from __future__ import annotations

from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["ENTRY", "TOKEN_SYMBOL", "BLOCK_SYMBOL", "SYMBOLS", "THREADS", "MIN_BLOCKS", "COL_ALIGN",
           "POWER_OF_TWO_FLAG", "ARGUMENTS", "ARGUMENT_KINDS", "MAX_GROUPS", "DESIGNS", "DESIGN", "STAGES", "LINES",
           "TILE_BYTES", "defines", "row_bands", "grid", "smem_bytes", "pipelined"]

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
"""CTAs per SM asked of ptxas (``__launch_bounds__`` second argument, ``DT_CT_MIN_BLOCKS``), and
the persistent grid's CTAs per SM in the pipelined designs (their shared memory fits them:
2 x (3 x 32 KiB + 2 KiB) at most)."""
STAGES = {"tile": 0, "pipe": 2, "pipe3": 3, "pipe_sectors": 2}
"""Shared-memory tile buffers of each design (``DT_CT_STAGES``; 0: the per-tile kernel)."""
LINES = {"tile": 0, "pipe": 1, "pipe3": 1, "pipe_sectors": 0}
"""``DT_CT_LINES`` of each design: 1, the pipelined column pass stores whole 128-byte ``qt`` lines
per warp (8 lanes of a column, 16 rows each, their amax met with shuffles); 0, a thread stores a
column's 32 bytes over 32 rows (one sector; the partial amaxes meet in shared memory behind a
barrier), as the per-tile kernel does."""
DESIGNS = tuple(STAGES)
"""The kernel designs (module docstring), one build each."""
DESIGN = "pipe"
"""The design :mod:`deep_tile.casts.cast_transpose_kernels` launches (benchmarks/bench_casts.py
``--design`` switches it to time both)."""
TILE_BYTES = SCALE_GROUP * SCALE_GROUP * 2
"""One raw bf16 128x128 tile in shared memory."""
COL_ALIGN = 16
"""The column count must be a multiple of this: 16-byte FP8 rows (the GEMMs' K and TMA pitch
rule) and 16-column chunks per thread."""
POWER_OF_TWO_FLAG = 1
"""Bit of the ``flags`` argument: round each scale up to a power of two."""
ARGUMENTS = ("x", "q", "s", "qt", "st", "rows", "cols", "s_pitch", "st_pitch", "qt_ld", "flags", "batch",
             "group_offsets", "num_groups")
"""Kernel parameters in order: bf16 input, FP8 output, its scales, the transposed FP8 output and
its scales (null: none), rows, cols, the scales' pitches (floats), qt's row pitch (bytes), flags,
the number of such matrices stacked contiguously (each cast on its own, the outputs stacked
likewise: one matrix's extent apart), and for the grouped token cast the int32 row offsets of
its ``num_groups`` groups (0: not grouped; :func:`row_bands`)."""
ARGUMENT_KINDS = ("ptr",) * 5 + ("i32",) * 7 + ("ptr", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kind of each of :data:`ARGUMENTS`."""
MAX_GROUPS = 512
"""Most row groups of the grouped token cast (``kMaxGroups``: its per-CTA table in shared memory)."""


def _design(design) -> str:
    design = DESIGN if design is None else design
    if design not in DESIGNS:
        raise ValueError(f"cast_transpose design must be one of {DESIGNS}; got {design!r}.")
    return design


def defines(design: str = None) -> dict:
    """Compile-time defines of the kernels of ``design`` (default :data:`DESIGN`; one build holds
    both symbols)."""
    design = _design(design)
    return {"DT_CT_THREADS": THREADS, "DT_CT_MIN_BLOCKS": MIN_BLOCKS, "DT_CT_STAGES": STAGES[design],
            "DT_CT_LINES": LINES[design]}


def pipelined(transposed: bool, design: str = None) -> bool:
    """Whether a launch runs the persistent, cp.async-pipelined kernel (``"pipe"`` with a transposed copy)."""
    return transposed and STAGES[_design(design)] > 0


def smem_bytes(transposed: bool, design: str = None) -> int:
    """Dynamic shared memory of a launch: the tile buffers of the pipelined kernel, else 0."""
    return STAGES[_design(design)] * TILE_BYTES if pipelined(transposed, design) else 0


def row_bands(rows: int, groups: int = 0) -> int:
    """128-row bands of a cast's tiles: ``ceil(rows / 128)``, one more per row group for the grouped
    token cast (each group's rows round up to whole bands; the transposed copy has ``128 *
    row_bands`` rows)."""
    return ceil_div(rows, SCALE_GROUP) + groups


def grid(rows: int, cols: int, transposed: bool = False, sms: int = 0, design: str = None, batch: int = 1,
         groups: int = 0) -> tuple:
    """Grid of a launch over ``batch`` stacked ``[rows, cols]`` matrices (or one matrix of
    ``groups`` row groups): ``(x, y, batch)`` with one CTA per 128x128 tile, x along the columns,
    y the row band (:func:`row_bands`), z the matrix; for the pipelined kernel
    ``(min(tiles, MIN_BLOCKS * sms), 1, 1)`` (``sms``: the device's SM count; tiles of every matrix)."""
    gx, gy = ceil_div(cols, SCALE_GROUP), row_bands(rows, groups)
    if not pipelined(transposed, design):
        return gx, gy, batch
    if sms <= 0:
        raise ValueError(f"cast_transpose grid: the pipelined kernel needs the SM count; got sms={sms}.")
    return min(gx * gy * batch, MIN_BLOCKS * sms), 1, 1
