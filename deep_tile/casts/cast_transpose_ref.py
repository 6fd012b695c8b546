"""Torch reference of the fused casts of :mod:`deep_tile.casts.cast_transpose`: the same float32 math,
any device, bitwise equal to the CUDA kernels (tests/test_cast_transpose.py checks it against an
independent float64 formulation on the CPU; the GPU tests check the kernels against it).

NOTES: ``448.0 / tensor`` is ``tensor.reciprocal() * 448`` in torch (two roundings), so every
division is spelled ``torch.div`` of two tensors (correctly rounded).
"""
from __future__ import annotations

import torch

from deep_tile.common import SCALE_GROUP, align_up, ceil_div

__all__ = ["FP8_MAX", "AMAX_MIN", "inv_and_scale", "token_cast_transpose_ref", "grouped_token_cast_transpose_ref",
           "block_cast_transpose_ref", "padded_group_starts"]

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn value; each group's amax maps onto it."""
AMAX_MIN = 1e-4
"""Lower clamp of a group's amax (an all-zero group gets a finite, non-zero scale)."""


def inv_and_scale(amax: torch.Tensor, power_of_two: bool):
    """``(inv, scale)`` of float32 amax (clamped here): ``448 / amax`` and ``amax / 448``; with
    ``power_of_two``, ``inv`` keeps only its exponent bits (``2^floor(log2(inv))``) and
    ``scale = 1 / inv`` (exact: the scale rounded up to a power of two)."""
    amax = amax.float().clamp(min=AMAX_MIN)
    inv = torch.div(torch.full_like(amax, FP8_MAX), amax)
    if power_of_two:
        inv = (inv.view(torch.int32) & 0x7F800000).view(torch.float32)
        return inv, torch.div(torch.ones_like(inv), inv)
    return inv, torch.div(amax, torch.full_like(amax, FP8_MAX))


def _tiles(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32 zero-padded to whole 128x128 tiles, shaped ``[rb, 128, cb, 128]``."""
    rows, cols = x.shape
    rb, cb = ceil_div(rows, SCALE_GROUP), ceil_div(cols, SCALE_GROUP)
    xf = torch.nn.functional.pad(x.float(), (0, cb * SCALE_GROUP - cols, 0, rb * SCALE_GROUP - rows))
    return xf.reshape(rb, SCALE_GROUP, cb, SCALE_GROUP)


def token_cast_transpose_ref(x: torch.Tensor, transpose: bool = True, power_of_two: bool = False):
    """``(q, s, qt, st)`` of the 1x128 cast of ``x [T, D]`` (no checks; ``qt, st`` None without
    ``transpose``): ``q [T, D]``, ``s [T, ceil(D/128)]`` (groups along D); ``qt [D, align16(T)]``
    (zero past T), ``st [D, ceil(T/128)]`` (groups along T). Scales float32, contiguous here (the
    public function returns them column-major; the values are the same)."""
    rows, cols = x.shape
    xt = _tiles(x)                                                    # [rb, 128 t, cb, 128 d]
    inv, s = inv_and_scale(xt.abs().amax(dim=3), power_of_two)        # [rb, 128, cb]
    q = (xt * inv.unsqueeze(3)).to(torch.float8_e4m3fn)
    rb, cb = xt.shape[0], xt.shape[2]
    q = q.reshape(rb * SCALE_GROUP, cb * SCALE_GROUP)[:rows, :cols]
    s = s.reshape(rb * SCALE_GROUP, cb)[:rows]
    if not transpose:
        return q.contiguous(), s.contiguous(), None, None
    inv_t, s_t = inv_and_scale(xt.abs().amax(dim=1), power_of_two)    # [rb, cb, 128 d]
    qt = (xt * inv_t.unsqueeze(1)).to(torch.float8_e4m3fn)            # [rb, 128 t, cb, 128 d]
    qt = qt.permute(2, 3, 0, 1).reshape(cb * SCALE_GROUP, rb * SCALE_GROUP)[:cols, :align_up(rows, 16)]
    s_t = s_t.permute(1, 2, 0).reshape(cb * SCALE_GROUP, rb)[:cols]
    return q.contiguous(), s.contiguous(), qt.contiguous(), s_t.contiguous()


def block_cast_transpose_ref(w: torch.Tensor, transpose: bool = True, power_of_two: bool = False):
    """``(q, s, qt, st)`` of the 128x128 cast of ``w [N, K]`` (no checks; ``qt, st`` None without
    ``transpose``): ``q [N, K]``, ``s [ceil(N/128), ceil(K/128)]``, ``qt = q.T``, ``st = s.T``
    (contiguous)."""
    rows, cols = w.shape
    wt = _tiles(w)
    inv, s = inv_and_scale(wt.abs().amax(dim=(1, 3)), power_of_two)  # [rb, cb]
    q = (wt * inv[:, None, :, None]).to(torch.float8_e4m3fn)
    q = q.reshape(wt.shape[0] * SCALE_GROUP, wt.shape[2] * SCALE_GROUP)[:rows, :cols].contiguous()
    if not transpose:
        return q, s, None, None
    return q, s, q.t().contiguous(), s.t().contiguous()


def padded_group_starts(group_offsets: list, rows: int) -> list:
    """``[(first, end, padded)]`` per group of the grouped activation cast: its rows ``[first, end)``
    (each offset clamped into ``[previous end, rows]``, the first into ``[0, rows]``) and the
    transposed copy's row where they start (the groups before it rounded up to 128 rows each)."""
    out, start, pad = [], min(max(group_offsets[0], 0), rows), 0
    for g in range(len(group_offsets) - 1):
        end = min(max(group_offsets[g + 1], start), rows)
        out.append((start, end, pad))
        pad += align_up(end - start, SCALE_GROUP)
        start = end
    return out


def grouped_token_cast_transpose_ref(x: torch.Tensor, group_offsets: list, power_of_two: bool = False):
    """``(q, s, qt, st)`` of the grouped activation cast of ``x [T, D]`` (no checks): ``q``, ``s`` as
    :func:`token_cast_transpose_ref`; ``qt [D, 128 * (ceil(T/128) + G)]`` and ``st [D, ceil(T/128) +
    G]`` the transposed cast of ``x``'s rows placed group by group, each group from its padded start
    (:func:`padded_group_starts`), zeros around them (so every 128-row block of qt holds one group's
    rows only)."""
    rows, cols = x.shape
    groups = len(group_offsets) - 1
    bands = ceil_div(rows, SCALE_GROUP) + groups
    placed = x.new_zeros((bands * SCALE_GROUP, cols))
    for first, end, padded in padded_group_starts(group_offsets, rows):
        placed[padded:padded + end - first] = x[first:end]
    q, s, _, _ = token_cast_transpose_ref(x, False, power_of_two)
    _, _, qt, st = token_cast_transpose_ref(placed, True, power_of_two)
    return q, s, qt, st
