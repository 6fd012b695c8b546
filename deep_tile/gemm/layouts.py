"""The a_scale layouts the FP8 GEMM kernel reads, and the rule that picks between them.

The kernel loads ``a_scale`` with TMA either column-major (the zero-copy layout, strides
``(1, align4(m))``: :func:`get_tma_aligned_a_scale` makes it, :func:`is_tma_aligned` recognises
it) or, in a kernel variant, row-major as ``per_token_cast_to_fp8`` returns it
(:func:`reads_row_major`). The grouped kinds choose by :func:`grouped_reads_row_major` (the
masked kind's 3-D a_scale by :func:`reads_row_major_3d` / :func:`is_tma_aligned_3d`; the offsets
kind reads row-major only, :func:`is_row_major_aligned` or a copy). Both host paths take the same
decision: the native path replays the copies these functions made for the first call of a
signature (:func:`recording_copies`; the plan records where each operand comes from), so the
rule is written here only.
"""
from __future__ import annotations

from contextvars import ContextVar

import torch

from deep_tile.common import align4, recording
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind

__all__ = ["get_tma_aligned_a_scale", "is_tma_aligned", "reads_row_major", "is_tma_aligned_3d", "reads_row_major_3d",
           "get_row_major_a_scale", "is_row_major_aligned", "grouped_reads_row_major", "contiguous", "recording_copies"]

_copies: ContextVar = ContextVar("deep_tile_layout_copies", default=None)


def recording_copies():
    """A list that gets ``(source, copy, scale)`` for every copy the functions of this module make
    inside the block (``scale``: a scale-layout copy, counted by the native path's stats)."""
    return recording(_copies)


def _made(source: torch.Tensor, copy: torch.Tensor, scale: bool = True) -> torch.Tensor:
    log = _copies.get()
    if log is not None:
        log.append((source, copy, scale))
    return copy


def contiguous(x: torch.Tensor) -> torch.Tensor:
    """``x.contiguous()``, the copy recorded as the scale-layout ones are."""
    return x if x.is_contiguous() else _made(x, x.contiguous(), scale=False)


def get_tma_aligned_a_scale(a_scale: torch.Tensor) -> torch.Tensor:
    """Return `a_scale` [m, g] in the layout the kernel reads without a copy.

    That layout is column-major with the column stride rounded up to a multiple of 4 floats
    (16 bytes, a TMA requirement): strides ``(1, align4(m))``, i.e. memory ``[g][align4(m)]``.
    A tensor already in that layout (16-byte aligned) is returned as is; any other layout,
    row-major included, is copied once into it (one small device copy of m*g floats).

    A 3-D ``[groups, m, g]`` a_scale (the masked grouped GEMM's) gets that layout per group,
    the groups one after another: strides ``(g * align4(m), 1, align4(m))``.
    """
    if isinstance(a_scale, torch.Tensor) and a_scale.dim() == 3:
        return _tma_aligned_3d(a_scale)
    if not isinstance(a_scale, torch.Tensor) or a_scale.dim() != 2:
        raise ValueError("get_tma_aligned_a_scale: a_scale must be a 2-D tensor of shape (m, ceil(k/128)) "
                         "or a 3-D one of shape (groups, m, ceil(k/128)); "
                         f"got {getattr(a_scale, 'shape', type(a_scale).__name__)}")
    m, k_blocks = a_scale.shape
    pitch = align4(m)
    if is_tma_aligned(a_scale):
        return a_scale
    aligned = torch.empty((k_blocks, pitch), dtype=a_scale.dtype, device=a_scale.device).t()[:m]
    aligned.copy_(a_scale)
    return _made(a_scale, aligned)


def is_tma_aligned(a_scale: torch.Tensor) -> bool:
    """Whether `a_scale` is already in the TMA-aligned column-major layout."""
    m, k_blocks = a_scale.shape
    if m == 0 or k_blocks == 0:
        return True
    column_ok = a_scale.stride(0) == 1 or m == 1
    pitch_ok = k_blocks == 1 or (a_scale.stride(1) % 4 == 0 and a_scale.stride(1) >= m)
    return column_ok and pitch_ok and a_scale.data_ptr() % 16 == 0


def reads_row_major(a_scale, m: int, k_blocks: int) -> bool:
    """Whether the kernel reads this a_scale as it is, row-major: contiguous rows of ``k_blocks``
    floats, 16-byte aligned, ``k_blocks`` a multiple of 4 (and not already the column-major layout)."""
    return (m > 1 and k_blocks > 1 and family.row_major_a_scale_readable(k_blocks) and a_scale.stride(1) == 1
            and a_scale.stride(0) == k_blocks and a_scale.data_ptr() % 16 == 0)


def _tma_aligned_3d(a_scale: torch.Tensor) -> torch.Tensor:
    """:func:`get_tma_aligned_a_scale` of a ``[groups, m, g]`` tensor."""
    groups, m, k_blocks = a_scale.shape
    if is_tma_aligned_3d(a_scale):
        return a_scale
    pitch = align4(m)
    aligned = torch.empty((groups, k_blocks, pitch), dtype=a_scale.dtype, device=a_scale.device).transpose(1, 2)[:, :m]
    aligned.copy_(a_scale)
    return _made(a_scale, aligned)


def is_tma_aligned_3d(a_scale: torch.Tensor) -> bool:
    """Whether a ``[groups, m, g]`` a_scale is in the per-group TMA-aligned column-major layout,
    strides ``(g * align4(m), 1, align4(m))`` (16-byte aligned)."""
    groups, m, k_blocks = a_scale.shape
    if a_scale.numel() == 0:
        return True
    pitch = align4(m)
    return (a_scale.stride(1) == 1 and (k_blocks == 1 or a_scale.stride(2) == pitch)
            and (groups == 1 or a_scale.stride(0) == k_blocks * pitch) and a_scale.data_ptr() % 16 == 0)


def reads_row_major_3d(a_scale) -> bool:
    """Whether the kernel reads a ``[groups, m, g]`` a_scale as it is, row-major: contiguous,
    16-byte aligned, ``g`` a multiple of 4 (and not already the column-major layout)."""
    groups, m, k_blocks = a_scale.shape
    return (m > 1 and k_blocks > 1 and family.row_major_a_scale_readable(k_blocks) and a_scale.is_contiguous()
            and a_scale.data_ptr() % 16 == 0)


def get_row_major_a_scale(a_scale: torch.Tensor) -> torch.Tensor:
    """A 2-D ``[m, g]`` a_scale the kernel's row-major variant reads as it is: row-major with rows
    (and base) 16-byte aligned; ``a_scale`` itself when it already is (:func:`is_row_major_aligned`),
    else a copy into rows of ``align4(g)`` floats (the offsets kind reads only this layout). ``g``
    need not be a multiple of 4: the box past the last K block is zero-filled."""
    if is_row_major_aligned(a_scale):
        return a_scale
    rows, k_blocks = a_scale.shape
    copy = torch.empty((rows, align4(k_blocks)), dtype=a_scale.dtype, device=a_scale.device)[:, :k_blocks]
    copy.copy_(a_scale)
    return _made(a_scale, copy)


def is_row_major_aligned(a_scale: torch.Tensor) -> bool:
    """Whether a 2-D ``[m, g]`` a_scale is row-major with 16-byte rows and base, as the offsets
    kind reads it without a copy."""
    rows, k_blocks = a_scale.shape
    return ((a_scale.stride(1) == 1 or k_blocks == 1) and (rows <= 1 or (a_scale.stride(0) % 4 == 0
            and a_scale.stride(0) >= k_blocks)) and a_scale.data_ptr() % 16 == 0)


def grouped_reads_row_major(kind: ProblemKind, a_scale, rows: int, k_blocks: int) -> bool:
    """Whether the grouped kernel of ``kind`` reads this (checked) a_scale row-major: always for
    the kinds of :data:`deep_tile.kernels.fp8_gemm.ROW_MAJOR_A_SCALE_KINDS` (the offsets kind: as
    it is, or copied by :func:`get_row_major_a_scale`); the masked kind's ``[G, max_m, g]`` when
    :func:`reads_row_major_3d`; the contiguous kind's ``[rows, g]`` as the dense GEMM's
    (:func:`reads_row_major`)."""
    if kind in family.ROW_MAJOR_A_SCALE_KINDS:
        return True
    if kind is ProblemKind.GROUPED_MASKED:
        return reads_row_major_3d(a_scale)
    return reads_row_major(a_scale, rows, k_blocks)
