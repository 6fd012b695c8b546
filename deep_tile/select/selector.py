"""``select_config``: problem shape and SM count -> :class:`KernelConfig`. Pure and cached.

Steps:

1. rank every legal tile shape (:mod:`deep_tile.select.candidates`) by the rules of
   :mod:`deep_tile.select.cost` and take the best;
2. :func:`choose_multicast`: 2-CTA clusters when they tile the grid (as DeepGEMM does);
3. :func:`grid_size`: launch ``min(num_sms, tiles)`` CTAs (even under multicast);
4. :func:`choose_group_size`: the swizzle group width.
"""
from __future__ import annotations

import functools
import math

from deep_tile import arch
from deep_tile.errors import UnsupportedProblemError
from deep_tile.select.candidates import enumerate_candidates
from deep_tile.select.config import KernelConfig
from deep_tile.select.cost import Score, rank_key, score

__all__ = ["select_config", "rank_candidates", "config_from_score", "choose_multicast", "grid_size",
           "choose_group_size", "MULTICAST_MIN_M", "check_positive_int"]

MULTICAST_MIN_M = 512
"""Smallest M for which 2-CTA multicast is enabled (DeepGEMM's threshold): below it the
problem is memory-bound on B, which multicast on A does not reduce, and the cluster launch
constraint only costs scheduling freedom."""


def check_positive_int(func: str, name: str, value) -> None:
    """Raise ``ValueError`` naming ``func`` and ``name`` unless ``value`` is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{func}: {name} must be a positive int; got {value!r}")


def choose_multicast(m: int, n: int, block_m: int, block_n: int, num_sms: int) -> tuple:
    """``(num_multicast, multicast_on_a)`` for a ``block_m x block_n`` tile of an ``m x n`` output.

    Multicast is used only where the tile needs it to compile without spills
    (:data:`deep_tile.arch.SPILLS_WITHOUT_MULTICAST`, empty today): measured on an H200 it runs
    at 0.94-0.97x the same tile without it. It then needs an even SM count, ``m >= 512``, and a pairing that
    tiles the grid: on A (two CTAs share an m-block, adjacent n-blocks) the number of n-blocks
    must be even; on B (shared n-block, adjacent m-blocks) the number of m-blocks must be even.
    A is preferred.
    """
    if (block_m, block_n) not in arch.SPILLS_WITHOUT_MULTICAST:
        return 1, False
    if num_sms % 2 or m < MULTICAST_MIN_M:
        return 1, False
    if math.ceil(n / block_n) % 2 == 0:
        return 2, True
    if math.ceil(m / block_m) % 2 == 0:
        return 2, False
    return 1, False


def grid_size(tiles: int, num_sms: int, num_multicast: int) -> int:
    """CTAs to launch: ``min(num_sms, tiles)``, rounded down to even under multicast.

    Multicast is only chosen when both ``num_sms`` and ``tiles`` are even, so the rounding is a
    safeguard; the result is at least ``num_multicast``.
    """
    grid = min(num_sms, tiles)
    if num_multicast == 2:
        grid = max(2, grid - grid % 2)
    return grid


def choose_group_size(grid: int) -> int:
    """Swizzle group width in tiles: 8.

    With ``grid`` tiles in flight in groups of width G, about ``grid / G`` A panels and G B panels
    are live in L2; G near ``sqrt(grid)`` keeps that smallest (8 to 16 for 78..132 SMs). Measured
    with 128x128 tiles at 4096x7168x16384 and 8192^3: width 8 ran 9% faster than 16 on an H100
    (1205 vs 1100 TFLOPS; 50 MB L2) and the same on an H200 (60 MB L2); 4 was close to 8, 32 worse.
    """
    return 8


def buildable(m: int, n: int, s: Score) -> bool:
    """Whether the candidate of `s` compiles spill-free with the multicast it would get."""
    c = s.candidate
    if (c.block_m, c.block_n) not in arch.SPILLS_WITHOUT_MULTICAST:
        return True
    return choose_multicast(m, n, c.block_m, c.block_n, s.num_sms)[0] == 2


@functools.lru_cache(maxsize=1024)
def _ranked(m: int, n: int, num_sms: int, max_smem: int) -> tuple:
    candidates = enumerate_candidates(max_smem)
    if not candidates:
        raise UnsupportedProblemError(
            f"select_config: no tile shape fits max_smem={max_smem} bytes with {arch.MIN_STAGES} stages")
    scores = (score(c, m, n, num_sms) for c in candidates)
    return tuple(sorted((s for s in scores if buildable(m, n, s)), key=rank_key))


def _check_args(func: str, m, n, k, num_sms, max_smem) -> None:
    for name, value in (("m", m), ("n", n), ("k", k), ("num_sms", num_sms), ("max_smem", max_smem)):
        check_positive_int(func, name, value)


def rank_candidates(m: int, n: int, k: int, num_sms: int,
                    max_smem: int = arch.MAX_SMEM_PER_BLOCK) -> tuple:
    """Every legal, buildable candidate's :class:`~deep_tile.select.cost.Score`, best first.

    Raises:
        ValueError: an argument is not a positive int.
    """
    _check_args("rank_candidates", m, n, k, num_sms, max_smem)
    return _ranked(m, n, num_sms, max_smem)


def config_from_score(m: int, n: int, s: Score) -> KernelConfig:
    """Build the :class:`KernelConfig` (multicast, grid, group size) for a ranked candidate."""
    c = s.candidate
    num_multicast, on_a = choose_multicast(m, n, c.block_m, c.block_n, s.num_sms)
    grid = grid_size(s.tiles, s.num_sms, num_multicast)
    return KernelConfig(block_m=c.block_m, block_n=c.block_n, num_stages=c.num_stages,
                        num_multicast=num_multicast, multicast_on_a=on_a,
                        group_size=choose_group_size(grid), num_sms=grid)


@functools.lru_cache(maxsize=4096)
def _select(m: int, n: int, k: int, num_sms: int, max_smem: int) -> KernelConfig:
    return config_from_score(m, n, _ranked(m, n, num_sms, max_smem)[0])


def select_config(m: int, n: int, k: int, num_sms: int,
                  max_smem: int = arch.MAX_SMEM_PER_BLOCK) -> KernelConfig:
    """The kernel configuration for ``out[m, n] = a[m, k] @ b[n, k]^T`` on ``num_sms`` SMs.

    Pure and cached. ``max_smem`` is the device's dynamic shared-memory limit per block in bytes
    (clipped to the sm_90 maximum, 232448). ``k`` does not change the choice today; it is part
    of the signature so that future rules (and the cache) can depend on it.

    Raises:
        ValueError: an argument is not a positive int (the message names it).
        UnsupportedProblemError: no tile shape fits ``max_smem``.
    """
    _check_args("select_config", m, n, k, num_sms, max_smem)
    return _select(m, n, k, num_sms, max_smem)
