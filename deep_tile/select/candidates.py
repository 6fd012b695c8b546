"""The legal tile shapes: every (block_m, block_n) the kernel can build, with its stage count.

A candidate is legal when (docs/design.md section 3.1):

- ``block_m`` is 64, 128 or 256 and ``block_n`` is in :data:`deep_tile.arch.LEGAL_BLOCK_N`
  (multiples of 16 whose b_scale span is at most two 128-wide blocks);
- the accumulators fit the register budget, ``wg_m * block_n / 64 <= 168``, and the tile compiles
  without spills: ``block_n <= arch.MAX_BLOCK_N[block_m]`` (144, 160, 64 for block_m 64, 128, 256);
- at least :data:`deep_tile.arch.MIN_STAGES` pipeline stages fit the shared-memory limit.

Each candidate takes as many stages as fit, capped at :data:`deep_tile.arch.MAX_STAGES`: deeper
pipelines hide more TMA latency and cost nothing else. Pure Python; no device access.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from deep_tile import arch
from deep_tile.select.config import accum_registers, smem_bytes

__all__ = ["Candidate", "legal_block_ns", "max_stages", "enumerate_candidates"]


@dataclass(frozen=True)
class Candidate:
    """A legal tile shape and the pipeline depth it gets.

    Attributes:
        block_m: tile rows.
        block_n: tile columns.
        num_stages: pipeline stages (the most that fit, capped at 8).
    """

    block_m: int
    block_n: int
    num_stages: int

    @property
    def smem_bytes(self) -> int:
        """Shared memory the candidate uses, in bytes."""
        return smem_bytes(self.block_m, self.block_n, self.num_stages)

    @property
    def shape(self) -> str:
        """``"128x160"``."""
        return f"{self.block_m}x{self.block_n}"


def legal_block_ns(block_m: int) -> tuple:
    """The block_n values allowed with ``block_m`` (straddle rule and register budget)."""
    if block_m not in arch.LEGAL_BLOCK_M:
        raise ValueError(f"legal_block_ns: block_m must be one of {arch.LEGAL_BLOCK_M}; got {block_m!r}")
    return tuple(bn for bn in arch.LEGAL_BLOCK_N
                 if accum_registers(block_m, bn) <= arch.MAX_ACCUM_REGISTERS and bn <= arch.MAX_BLOCK_N[block_m])


def max_stages(block_m: int, block_n: int, max_smem: int) -> int:
    """The most stages (capped at 8) of a ``block_m x block_n`` tile fitting ``max_smem`` bytes.

    Returns 0 when not even one stage fits.
    """
    stages = 0
    while stages < arch.MAX_STAGES and smem_bytes(block_m, block_n, stages + 1) <= max_smem:
        stages += 1
    return stages


@functools.lru_cache(maxsize=None)
def enumerate_candidates(max_smem: int = arch.MAX_SMEM_PER_BLOCK) -> tuple:
    """Every legal :class:`Candidate` for a shared-memory limit of ``max_smem`` bytes.

    ``max_smem`` is clipped to the sm_90 maximum (232448). Candidates with fewer than 3 stages
    are left out. Ordered by block_m, then block_n.

    Raises:
        ValueError: ``max_smem`` is not a positive int.
    """
    if isinstance(max_smem, bool) or not isinstance(max_smem, int) or max_smem <= 0:
        raise ValueError(f"enumerate_candidates: max_smem must be a positive int (bytes); got {max_smem!r}")
    limit = min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    found = []
    for block_m in arch.LEGAL_BLOCK_M:
        for block_n in legal_block_ns(block_m):
            stages = max_stages(block_m, block_n, limit)
            if stages >= arch.MIN_STAGES:
                found.append(Candidate(block_m, block_n, stages))
    return tuple(found)
