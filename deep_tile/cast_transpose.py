"""Fused FP8 casts for training: one pass over a bf16 tensor writes its FP8 copy and, on request,
its transposed FP8 copy, each with the scales the FP8 GEMMs read without a copy (docs/training.md, "Fused FP8 casts").

- :func:`per_token_cast_transpose_to_fp8` -- activations and gradients ``x [T, D]``: row-wise
  1x128 groups along D (fprop / dgrad operand) and ``x^T [D, T]`` with 1x128 groups along T
  (the weight gradient's operands, ``dY^T`` and ``X^T``, for :func:`deep_tile.fp8_gemm_1d1d`).
- :func:`per_block_cast_transpose_to_fp8` -- weights ``w [N, K]``: 128x128 blocks, and ``w^T``
  with the transposed scales (bit-exact transposes of ``q`` and ``s``; dgrad's b operand).

Both take ``power_of_two_scales``: each scale rounded up to a power of two (as DeepSeek-V3 and
TransformerEngine do). CUDA tensors run the kernels of :mod:`deep_tile.cast_transpose_kernels`;
CPU tensors the torch reference :mod:`deep_tile.cast_transpose_ref`, which they match bitwise.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from deep_tile import cast_transpose_kernels
from deep_tile.cast_transpose_ref import block_cast_transpose_ref, token_cast_transpose_ref
from deep_tile.common import SCALE_GROUP, align4, align_up, ceil_div
from deep_tile.kernels import cast_transpose as contract

__all__ = ["CastOutputs", "per_token_cast_transpose_to_fp8", "per_block_cast_transpose_to_fp8", "MAX_ROWS"]

MAX_ROWS = 65535 * SCALE_GROUP
"""Most rows a cast takes (the grid's y dimension holds one CTA per 128 rows)."""


class CastOutputs(NamedTuple):
    """The results of a fused cast: ``q``/``s`` and, when asked for, ``qt``/``st`` (else None)."""

    q: torch.Tensor
    s: torch.Tensor
    qt: Optional[torch.Tensor]
    st: Optional[torch.Tensor]


def _check(fn: str, name: str, x, transpose, power_of_two_scales, rows_multiple: int) -> None:
    """TypeError/ValueError, naming ``fn`` and the argument, unless ``x`` is a bf16 2-D tensor that
    the kernels take (nothing is allocated or written before)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}.")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"{fn}: {name} must have dtype bfloat16 (the values to quantise); got {x.dtype}.")
    if x.dim() != 2:
        raise ValueError(f"{fn}: {name} must be 2-D; got {x.dim()}-D of shape {tuple(x.shape)}.")
    for flag, value in (("transpose", transpose), ("power_of_two_scales", power_of_two_scales)):
        if not isinstance(value, bool):
            raise TypeError(f"{fn}: {flag} must be a bool; got {value!r}.")
    rows, cols = x.shape
    if cols == 0 or cols % contract.COL_ALIGN:
        raise ValueError(f"{fn}: {name} must have a positive multiple of {contract.COL_ALIGN} columns (16-byte FP8 "
                         f"rows, the GEMMs' K rule); got shape {tuple(x.shape)}.")
    if transpose and rows % rows_multiple:
        raise ValueError(f"{fn}: with transpose=True, {name} must have a multiple of {rows_multiple} rows (the "
                         f"transposed copy's rows must be 16-byte aligned); got shape {tuple(x.shape)}.")
    if rows > MAX_ROWS:
        raise ValueError(f"{fn}: {name} has {rows} rows; at most {MAX_ROWS} are supported.")


def _column_major(rows: int, cols: int, device) -> torch.Tensor:
    """A float32 ``[rows, cols]`` with strides ``(1, align4(rows))``: the TMA-aligned a_scale layout."""
    return torch.empty((cols, align4(rows)), dtype=torch.float32, device=device).t()[:rows]


def _input(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous and 16-byte aligned (a copy only when it is not)."""
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    return x


def per_token_cast_transpose_to_fp8(x: torch.Tensor, *, transpose: bool = True,
                                    power_of_two_scales: bool = False) -> CastOutputs:
    """Quantise ``x [T, D]`` (bf16) to FP8 in 1x128 groups along D and, with ``transpose``, its
    transpose in 1x128 groups along T, in one pass over ``x``.

    For each group G (128 consecutive elements of a row of ``x``, or of a column of ``x`` for the
    transposed copy; a tail group is zero-padded for the amax), in float32::

        amax = max(max_{G} |x|, 1e-4);  inv = 448 / amax        # correctly rounded
        power_of_two_scales: inv = 2^floor(log2(inv))           # scale rounded up to 2^n
        q = float8_e4m3fn(x * inv)  (RNE, saturating);  scale = amax / 448  (or 1 / inv)

    Args:
        x: bf16 ``[T, D]``, D a positive multiple of 16, any T >= 0 (any strides: copied to
            contiguous if it is not).
        transpose: also write ``qt``/``st``.
        power_of_two_scales: round every scale up to a power of two.

    Returns:
        :class:`CastOutputs` ``(q, s, qt, st)``, the layouts :func:`deep_tile.fp8_gemm` and
        :func:`deep_tile.fp8_gemm_1d1d` read without a copy:

        - ``q`` e4m3 ``[T, D]`` contiguous; ``s`` float32 ``[T, ceil(D/128)]``, column-major
          with pitch ``align4(T)`` (``deep_tile.get_tma_aligned_a_scale`` returns it as is).
        - ``qt`` e4m3 ``[D, Tp]`` contiguous with ``Tp = align16(T)``; columns ``T .. Tp-1`` are
          zero, so a weight-gradient GEMM over K = Tp equals the one over the T tokens (the GEMMs
          need K % 16 == 0). ``st`` float32 ``[D, ceil(T/128)]`` column-major with pitch
          ``align4(D)``; the last group covers the tokens past the last multiple of 128.
        - without ``transpose``: ``qt = st = None``.

    Raises:
        TypeError, ValueError: not a bf16 2-D tensor, D not a positive multiple of 16, T > MAX_ROWS,
            flags not bools (nothing written).
    """
    fn = "per_token_cast_transpose_to_fp8"
    _check(fn, "x", x, transpose, power_of_two_scales, 1)
    rows, cols = x.shape
    device = x.device
    if not x.is_cuda:
        q, s, qt, st = token_cast_transpose_ref(x, transpose, power_of_two_scales)
        s = _column_major(rows, s.shape[1], device).copy_(s)
        if transpose:
            st = _column_major(cols, st.shape[1], device).copy_(st)
        return CastOutputs(q, s, qt, st)
    q = torch.empty((rows, cols), dtype=torch.float8_e4m3fn, device=device)
    s = _column_major(rows, ceil_div(cols, SCALE_GROUP), device)
    qt = st = None
    if transpose:
        qt = torch.empty((cols, align_up(rows, 16)), dtype=torch.float8_e4m3fn, device=device)
        st = _column_major(cols, ceil_div(rows, SCALE_GROUP), device)
    cast_transpose_kernels.launch(False, _input(x), q, s, qt, st, power_of_two_scales)
    return CastOutputs(q, s, qt, st)


def per_block_cast_transpose_to_fp8(w: torch.Tensor, *, transpose: bool = True,
                                    power_of_two_scales: bool = False) -> CastOutputs:
    """Quantise ``w [N, K]`` (bf16) to FP8 in 128x128 blocks and, with ``transpose``, write
    ``w^T`` too (the bit-exact transpose of ``q`` and of ``s``), in one pass over ``w``.

    Per block (tail blocks zero-padded for the amax) the math of
    :func:`per_token_cast_transpose_to_fp8` with G the block.

    Args:
        w: bf16 ``[N, K]``, K a positive multiple of 16; with ``transpose`` N a multiple of 16
            too (``qt`` rows are 16-byte aligned: dgrad's K).
        transpose: also write ``qt``/``st``.
        power_of_two_scales: round every scale up to a power of two.

    Returns:
        :class:`CastOutputs`: ``q`` e4m3 ``[N, K]`` and ``s`` float32 ``[ceil(N/128), ceil(K/128)]``
        (the b / b_scale of :func:`deep_tile.fp8_gemm`), ``qt`` e4m3 ``[K, N]`` = ``q.T`` and
        ``st`` float32 ``[ceil(K/128), ceil(N/128)]`` = ``s.T``, all contiguous (``None`` without
        ``transpose``).

    Raises:
        TypeError, ValueError: as :func:`per_token_cast_transpose_to_fp8`, and N % 16 with
            ``transpose`` (nothing written).
    """
    _check("per_block_cast_transpose_to_fp8", "w", w, transpose, power_of_two_scales, 16)
    rows, cols = w.shape
    if not w.is_cuda:
        return CastOutputs(*block_cast_transpose_ref(w, transpose, power_of_two_scales))
    rb, cb = ceil_div(rows, SCALE_GROUP), ceil_div(cols, SCALE_GROUP)
    q = torch.empty((rows, cols), dtype=torch.float8_e4m3fn, device=w.device)
    s = torch.empty((rb, cb), dtype=torch.float32, device=w.device)
    qt = st = None
    if transpose:
        qt = torch.empty((cols, rows), dtype=torch.float8_e4m3fn, device=w.device)
        st = torch.empty((cb, rb), dtype=torch.float32, device=w.device)
    cast_transpose_kernels.launch(True, _input(w), q, s, qt, st, power_of_two_scales)
    return CastOutputs(q, s, qt, st)
