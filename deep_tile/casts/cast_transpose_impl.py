"""The fused FP8 casts' implementations (:mod:`deep_tile.casts.cast_transpose` is their public face):
input checks, the outputs' layouts, and the real and fake kernels of the custom ops
``torch.ops.deep_tile.per_token_cast_transpose_to_fp8`` / ``per_block_cast_transpose_to_fp8``
that :mod:`deep_tile.ops` registers. CUDA tensors run the kernels of
:mod:`deep_tile.casts.cast_transpose_kernels`; CPU tensors the torch reference
:mod:`deep_tile.casts.cast_transpose_ref`, copied into the same layouts.
"""
from __future__ import annotations

import torch

from deep_tile.casts import cast_transpose_kernels
from deep_tile.casts.cast_transpose_ref import (block_cast_transpose_ref, grouped_token_cast_transpose_ref,
                                          token_cast_transpose_ref)
from deep_tile.common import SCALE_GROUP, align4, align_up, ceil_div
from deep_tile.kernels import cast_transpose as contract

__all__ = ["MAX_ROWS", "MAX_BATCH", "TOKEN_OP", "BLOCK_OP", "check", "check_group_offsets",
           "token_op_impl", "token_op_fake", "block_op_impl", "block_op_fake", "grouped_op_impl", "grouped_op_fake"]

MAX_ROWS = 65535 * SCALE_GROUP
"""Most rows a cast takes (the grid's y dimension holds one CTA per 128 rows)."""

MAX_BATCH = 65535
"""Most stacked matrices a weight cast takes (the per-tile grid's z dimension holds one per matrix)."""


def check(fn: str, name: str, x, transpose, power_of_two_scales, rows_multiple: int, batched: bool = False) -> None:
    """TypeError/ValueError, naming ``fn`` and the argument, unless ``x`` is a bf16 2-D tensor (or,
    with ``batched``, a 3-D stack of at most :data:`MAX_BATCH` such matrices) that the kernels take
    (nothing is allocated or written before)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}.")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"{fn}: {name} must have dtype bfloat16 (the values to quantise); got {x.dtype}.")
    if x.dim() != 2 and not (batched and x.dim() == 3):
        dims = "2-D or 3-D (a stack of matrices)" if batched else "2-D"
        raise ValueError(f"{fn}: {name} must be {dims}; got {x.dim()}-D of shape {tuple(x.shape)}.")
    for flag, value in (("transpose", transpose), ("power_of_two_scales", power_of_two_scales)):
        if not isinstance(value, bool):
            raise TypeError(f"{fn}: {flag} must be a bool; got {value!r}.")
    if x.dim() == 3 and x.shape[0] > MAX_BATCH:
        raise ValueError(f"{fn}: {name} stacks {x.shape[0]} matrices; at most {MAX_BATCH} are supported.")
    rows, cols = x.shape[-2:]
    if cols == 0 or cols % contract.COL_ALIGN:
        raise ValueError(f"{fn}: {name} must have a positive multiple of {contract.COL_ALIGN} columns (16-byte FP8 "
                         f"rows, the GEMMs' K rule); got shape {tuple(x.shape)}.")
    aligned = not transpose or rows % rows_multiple == 0
    aligned_why = (f"{fn}: with transpose=True, {name} must have a multiple of {rows_multiple} rows (the transposed "
                   f"copy's rows must be 16-byte aligned); got shape {tuple(x.shape)}.")
    few = rows <= MAX_ROWS
    few_why = f"{fn}: {name} has {rows} rows; at most {MAX_ROWS} are supported."
    if isinstance(rows, torch.SymInt):
        # the fake implementations: torch._check_with keeps a symbolic row count symbolic (the
        # public functions, traced by Dynamo, test it as an int)
        torch._check_with(ValueError, aligned, lambda: aligned_why)
        torch._check_with(ValueError, few, lambda: few_why)
    elif not aligned:
        raise ValueError(aligned_why)
    elif not few:
        raise ValueError(few_why)


def _column_major(like: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A float32 ``[rows, cols]`` on ``like``'s device with strides ``(1, align4(rows))``: the
    TMA-aligned a_scale layout."""
    pitch = align4(rows)
    return like.new_empty((cols, pitch), dtype=torch.float32).as_strided((rows, cols), (1, pitch))


def _input(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous and 16-byte aligned (a copy only when it is not)."""
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    return x


TOKEN_OP = "per_token_cast_transpose_to_fp8"
"""The name of the activation cast, as a function and as ``torch.ops.deep_tile.<name>``."""
BLOCK_OP = "per_block_cast_transpose_to_fp8"
"""The name of the weight cast, likewise."""


def check_group_offsets(fn: str, x: torch.Tensor, group_offsets) -> None:
    """TypeError/ValueError, naming ``fn``, unless ``group_offsets`` is a 1-D contiguous int32
    tensor of G + 1 offsets (1 <= G <= MAX_GROUPS) on ``x``'s device (its values are read by the
    kernel only)."""
    if not isinstance(group_offsets, torch.Tensor):
        raise TypeError(f"{fn}: group_offsets must be a torch.Tensor; got {type(group_offsets).__name__}.")
    groups = group_offsets.numel() - 1
    if (group_offsets.dtype != torch.int32 or group_offsets.dim() != 1 or not group_offsets.is_contiguous()
            or group_offsets.device != x.device or not 1 <= groups <= contract.MAX_GROUPS):
        raise ValueError(f"{fn}: group_offsets must be a contiguous 1-D int32 tensor of G + 1 row offsets "
                         f"(1 <= G <= {contract.MAX_GROUPS}) on x's device {x.device}; got {group_offsets.dtype} "
                         f"shape {tuple(group_offsets.shape)} on {group_offsets.device}.")


def _absent(x: torch.Tensor) -> tuple:
    """The op's ``(qt, st)`` without a transposed copy: two empty tensors."""
    return x.new_empty((0, 0), dtype=torch.float8_e4m3fn), x.new_empty((0, 0), dtype=torch.float32)


def _token_shapes(x: torch.Tensor, transpose: bool) -> tuple:
    """Empty ``(q, s, qt, st)`` of the activation cast of ``x`` in their final layouts (the row
    count left symbolic when it is)."""
    rows, cols = x.shape
    q = x.new_empty((rows, cols), dtype=torch.float8_e4m3fn)
    s = _column_major(x, rows, ceil_div(cols, SCALE_GROUP))
    if not transpose:
        return (q, s) + _absent(x)
    qt = x.new_empty((cols, align_up(rows, 16)), dtype=torch.float8_e4m3fn)
    return q, s, qt, _column_major(x, cols, ceil_div(rows, SCALE_GROUP))


def _grouped_shapes(x: torch.Tensor, groups: int) -> tuple:
    """Empty ``(q, s, qt, st)`` of the grouped activation cast of ``x`` over ``groups`` row groups:
    as :func:`_token_shapes` with ``transpose``, but ``qt`` ``[D, 128 * bands]`` and ``st``
    ``[D, bands]`` (``bands = contract.row_bands(T, groups)``)."""
    rows, cols = x.shape
    bands = contract.row_bands(rows, groups)
    q = x.new_empty((rows, cols), dtype=torch.float8_e4m3fn)
    s = _column_major(x, rows, ceil_div(cols, SCALE_GROUP))
    qt = x.new_empty((cols, bands * SCALE_GROUP), dtype=torch.float8_e4m3fn)
    return q, s, qt, _column_major(x, cols, bands)


def _block_shapes(w: torch.Tensor, transpose: bool) -> tuple:
    """Empty ``(q, s, qt, st)`` of the weight cast of ``w`` (``[N, K]``, or ``[E, N, K]``: the
    outputs get the same leading dimension), all contiguous."""
    lead, (rows, cols) = tuple(w.shape[:-2]), w.shape[-2:]
    rb, cb = ceil_div(rows, SCALE_GROUP), ceil_div(cols, SCALE_GROUP)
    q = w.new_empty(lead + (rows, cols), dtype=torch.float8_e4m3fn)
    s = w.new_empty(lead + (rb, cb), dtype=torch.float32)
    if not transpose:
        return (q, s) + _absent(w)
    return (q, s, w.new_empty(lead + (cols, rows), dtype=torch.float8_e4m3fn),
            w.new_empty(lead + (cb, rb), dtype=torch.float32))


def _cast_into(block: bool, x: torch.Tensor, outputs: tuple, transpose: bool, power_of_two_scales: bool,
               group_offsets: torch.Tensor = None) -> tuple:
    """Fill ``outputs`` (``(q, s, qt, st)`` in their final layouts) with the cast of ``x``: the
    kernels for a CUDA tensor, the torch reference (``block``: the weight cast; ``group_offsets``:
    the grouped activation cast) copied in for a CPU one. Returns ``outputs``."""
    q, s, qt, st = outputs
    if not x.is_cuda:
        if group_offsets is not None:
            results = [grouped_token_cast_transpose_ref(x, group_offsets.tolist(), power_of_two_scales)]
        else:
            reference = block_cast_transpose_ref if block else token_cast_transpose_ref
            # a stack: each matrix on its own
            results = [reference(matrix, transpose, power_of_two_scales) for matrix in (x if x.dim() == 3 else [x])]
        for i, values in enumerate(results):
            for into, value in zip(outputs[:4 if transpose else 2], values):
                (into[i] if x.dim() == 3 else into).copy_(value)
        return outputs
    cast_transpose_kernels.launch(block, _input(x), q, s, qt if transpose else None, st if transpose else None,
                                  power_of_two_scales, group_offsets=group_offsets)
    return outputs


def token_op_impl(x: torch.Tensor, transpose: bool, power_of_two_scales: bool) -> tuple:
    """``torch.ops.deep_tile.per_token_cast_transpose_to_fp8``: the kernels for CUDA tensors, the
    torch reference copied into the same layouts for CPU ones."""
    check(TOKEN_OP, "x", x, transpose, power_of_two_scales, 1)
    return _cast_into(False, x, _token_shapes(x, transpose), transpose, power_of_two_scales)


def token_op_fake(x: torch.Tensor, transpose: bool, power_of_two_scales: bool) -> tuple:
    """The checks (a symbolic row count stays symbolic), then the outputs' shapes and strides."""
    check(TOKEN_OP, "x", x, transpose, power_of_two_scales, 1)
    return _token_shapes(x, transpose)


def block_op_impl(w: torch.Tensor, transpose: bool, power_of_two_scales: bool) -> tuple:
    """``torch.ops.deep_tile.per_block_cast_transpose_to_fp8``: the kernels for CUDA tensors, the
    torch reference for CPU ones."""
    check(BLOCK_OP, "w", w, transpose, power_of_two_scales, 16, batched=True)
    return _cast_into(True, w, _block_shapes(w, transpose), transpose, power_of_two_scales)


def grouped_op_impl(x: torch.Tensor, group_offsets: torch.Tensor, power_of_two_scales: bool) -> tuple:
    """``torch.ops.deep_tile.per_token_cast_transpose_grouped_to_fp8``: the kernel's grouped token
    kind for CUDA tensors; for CPU ones the torch reference of the rows placed in their groups'
    bands (:func:`deep_tile.casts.cast_transpose_ref.grouped_token_cast_transpose_ref`)."""
    check(TOKEN_OP, "x", x, True, power_of_two_scales, 1)
    check_group_offsets(TOKEN_OP, x, group_offsets)
    return _cast_into(False, x, _grouped_shapes(x, group_offsets.numel() - 1), True, power_of_two_scales,
                      group_offsets)


def grouped_op_fake(x: torch.Tensor, group_offsets: torch.Tensor, power_of_two_scales: bool) -> tuple:
    """The checks, then the outputs' shapes and strides."""
    check(TOKEN_OP, "x", x, True, power_of_two_scales, 1)
    check_group_offsets(TOKEN_OP, x, group_offsets)
    return _grouped_shapes(x, group_offsets.numel() - 1)


def block_op_fake(w: torch.Tensor, transpose: bool, power_of_two_scales: bool) -> tuple:
    """The checks, then the outputs' shapes."""
    check(BLOCK_OP, "w", w, transpose, power_of_two_scales, 16, batched=True)
    return _block_shapes(w, transpose)
