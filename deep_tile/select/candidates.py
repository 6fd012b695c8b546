"""The kernel instances the selector considers for a problem.

A :class:`Candidate` is everything compile-time about a kernel (tile, WGMMA width, accumulator
buffers, stages, multicast, split-K); whether it is legal is decided by
:func:`deep_tile.kernels.fp8_gemm.tile_problems`. On top of legality the selector's policy:

- each tile shape takes as many stages as fit, from :data:`MIN_SELECTED_STAGES` up to
  :data:`MAX_SELECTED_STAGES` (deeper pipelines hide more load latency and cost nothing else);
- a tile is computed with whole-width WGMMAs when its accumulators fit, else with two column parts;
- two accumulator buffers wherever they fit;
- 64-row tiles at most 128 wide (wider ones, 144..256, ran slower than 64x128 wherever measured
  on an H100, and the model has no data to rank them);
- multicast (persistent kernel, even SM count) on A, on B or neither;
- split-K factors 2..4 (:data:`MAX_SELECTED_SPLIT_K`) with one or two consumer warpgroups and two accumulator buffers, only
  for problems whose tiles do not fill the SMs (:func:`split_k_factors`); split tiles with one
  buffer (wider than 128) measured slower than narrower ones.

Pure Python; no device access.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from deep_tile.common import ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.select.config import config_label

__all__ = ["Candidate", "MIN_SELECTED_STAGES", "MAX_SELECTED_STAGES", "MAX_SELECTED_SPLIT_K", "max_stages", "tile_shapes",
           "split_k_factors", "enumerate_candidates"]

MIN_SELECTED_STAGES = 3
"""Fewest pipeline stages the selector uses (below this TMA latency is exposed)."""
MAX_SELECTED_STAGES = 16
"""Most pipeline stages the selector uses (the kernel's maximum)."""
MAX_SELECTED_SPLIT_K = 4
"""Largest split-K factor the selector uses. The kernel takes up to 8, but on an H100 splits of
5..8 were never more than 2% faster than the best split of 2..4 where measured, and often slower
(bigger clusters fit fewer times into the GPCs, and the reduction grows with them)."""


@dataclass(frozen=True)
class Candidate:
    """The compile-time part of a configuration.

    Attributes:
        block_m, block_n: the tile.
        wgmma_n: columns per WGMMA.
        accum_buffers: WGMMA accumulators per consumer thread.
        num_stages: pipeline stages.
        num_multicast, multicast_on_a: 2-CTA multicast and its operand.
        split_k: CTAs per output tile (1: persistent).
        group_table: the kernel keeps the per-expert table in shared memory (the masked and
            offsets kinds), which the stages leave room for.
    """

    block_m: int
    block_n: int
    wgmma_n: int
    accum_buffers: int
    num_stages: int
    num_multicast: int = 1
    multicast_on_a: bool = False
    split_k: int = 1
    group_table: bool = False

    @property
    def smem_bytes(self) -> int:
        """Shared memory the candidate uses, in bytes."""
        return family.smem_bytes(self.block_m, self.block_n, self.num_stages, self.split_k,
                                 group_table=self.group_table)

    @property
    def label(self) -> str:
        """Short name, as :attr:`deep_tile.select.KernelConfig.label`."""
        return config_label(self.block_m, self.block_n, self.num_stages, self.num_multicast, self.multicast_on_a,
                            self.split_k, self.accum_buffers, self.wgmma_n)


@functools.lru_cache(maxsize=None)
def max_stages(block_m: int, block_n: int, max_smem: int, split_k: int = 1, group_table: bool = False) -> int:
    """The most stages (up to :data:`MAX_SELECTED_STAGES`) of a tile that fit ``max_smem`` bytes
    (beside the per-expert table when ``group_table``); 0 if none."""
    stages = 0
    while stages < MAX_SELECTED_STAGES and family.smem_bytes(block_m, block_n, stages + 1, split_k,
                                                             group_table=group_table) <= max_smem:
        stages += 1
    return stages


def kernel_shape(block_m: int, block_n: int):
    """(wgmma_n, accum_buffers) of a tile: whole-width WGMMAs if they fit, two buffers if they fit;
    None if the tile fits no register budget."""
    for wgmma_n in family.legal_wgmma_ns(block_n):
        for buffers in (2, 1):
            if buffers == 2 and family.num_subtiles(block_m, block_n, wgmma_n) > 2:
                continue
            if family.accum_registers(block_m, block_n, wgmma_n, buffers) <= family.ACCUM_REGISTER_BUDGET:
                return wgmma_n, buffers
    return None


@functools.lru_cache(maxsize=None)
def tile_shapes(max_smem: int) -> tuple:
    """Every buildable ``(block_m, block_n, wgmma_n, accum_buffers)`` for the persistent kernel."""
    found = []
    for block_m in family.LEGAL_BLOCK_M:
        for block_n in family.LEGAL_BLOCK_N:
            if block_m == 64 and block_n > 128:
                continue
            shape = kernel_shape(block_m, block_n)
            if shape is None or max_stages(block_m, block_n, max_smem) < MIN_SELECTED_STAGES:
                continue
            found.append((block_m, block_n) + shape)
    return tuple(found)


def split_k_factors(tiles: int, num_k_blocks: int, num_sms: int) -> tuple:
    """Split-K factors worth trying: 2..:data:`MAX_SELECTED_SPLIT_K` while the split tiles still fit in one wave of
    ``num_sms`` CTAs and every CTA keeps at least two k-blocks."""
    return tuple(s for s in range(2, MAX_SELECTED_SPLIT_K + 1)
                 if tiles * s <= num_sms and ceil_div(num_k_blocks, s) >= 2)


def enumerate_candidates(max_smem: int, num_sms: int, tiles_of, num_k_blocks: int, grouped: bool = False,
                         group_table: bool = False, group_m_blocks=None, max_block_m: int = 256) -> list:
    """Every candidate for a problem.

    Args:
        max_smem: the device's dynamic shared-memory limit per block.
        num_sms: SMs the grid may use.
        tiles_of: ``(block_m, block_n) -> number of output tiles`` of the problem.
        num_k_blocks: 128-wide K blocks of the problem.
        grouped: a grouped (Mixture-of-Experts) problem: no split-K; multicast of B (the pair
            shares a weight tile over two m-blocks) only where ``group_m_blocks(block_m)``, the
            m-blocks of one group, is at least 2.
        group_table: the kernel keeps the per-expert table in shared memory.
        max_block_m: the tallest tile the problem's kind takes.
    """
    found = []
    for block_m, block_n, wgmma_n, buffers in tile_shapes(max_smem):
        stages = max_stages(block_m, block_n, max_smem, 1, group_table)
        if stages < MIN_SELECTED_STAGES or block_m > max_block_m:
            continue
        found.append(Candidate(block_m, block_n, wgmma_n, buffers, stages, group_table=group_table))
        if num_sms % 2 == 0 and tiles_of(block_m, block_n) >= 2:
            for on_a in (True, False):
                if grouped and not on_a and group_m_blocks(block_m) < 2:
                    continue
                found.append(Candidate(block_m, block_n, wgmma_n, buffers, stages, 2, on_a, group_table=group_table))
        if grouped:
            continue
        if block_m <= 128 and buffers == 2:
            for split in split_k_factors(tiles_of(block_m, block_n), num_k_blocks, num_sms):
                split_stages = max_stages(block_m, block_n, max_smem, split)
                if not family.tile_problems(block_m, block_n, split_stages, 1, split, wgmma_n, buffers, max_smem):
                    found.append(Candidate(block_m, block_n, wgmma_n, buffers, split_stages, split_k=split))
    return found
