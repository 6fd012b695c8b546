"""The K-grouped kernel's configuration: a simple rule, not the cost model.

The K-grouped GEMM (:func:`deep_tile.k_grouped_fp8_gemm_1d1d`, MoE weight gradients) computes
``num_groups`` outputs of ``m x n``, each over its group's share of the ``k`` tokens. Its tiles
are those of the dense 1D1D GEMM of one group, so the rule asks the dense selector for the
1D1D problem ``m x n x k_g`` with ``k_g`` the expected tokens per group (``k / num_groups``,
rounded up to a 128-wide block) and keeps its tile (``block_m``, ``block_n``, ``wgmma_n``,
accumulator buffers), then makes it a K-grouped kernel: persistent on every SM
(no split-K: the groups already give ``num_groups`` times the tiles), no multicast (a pair of
tiles in lock step would need the same K range), no swap-AB, column-major a_scale, the k-loop
unrolled by 3 (by 6 the builds with C spilled: 128x256 /128 and 256x128 40-48 bytes of stack,
NVRTC 13, 2026-11-25; by 3 they build spill-free). A dense pick
that is split-K or swap-AB (small ``m x n``) is replaced by the 128x128 tile with two
accumulator buffers (64x128 when ``m <= 64``), a tile whose K-grouped build spills by its
replacement (:data:`SPILLING_TILES`). The stages are the most that fit.

Pure Python, no torch.
"""
from __future__ import annotations

import dataclasses

from deep_tile import arch
from deep_tile.common import SCALE_GROUP, align_up, ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.problem import Problem, ProblemKind
from deep_tile.select.config import RASTER_WIDTH, KernelConfig

__all__ = ["select_k_grouped_config", "dense_problem_of", "SPILLING_TILES"]

SPILLING_TILES = {(128, 192, 192, 1): (128, 192, 96, 1)}
"""(block_m, block_n, wgmma_n, accum_buffers) of dense picks whose K-grouped build spills, and the
tile used instead: 128x192 in one column part with FP32 accumulated in place spilled 56 bytes of
stack (NVRTC and nvcc 13, 2026-11-25; every other tile the rule picked over 378 (m, n, tokens per
group, groups, SMs) built spill-free); in two column parts of 96 it holds fewer accumulators."""


def dense_problem_of(problem: Problem) -> Problem:
    """The dense 1D1D problem of one group of a K-grouped ``problem``: ``m x n`` over the expected
    tokens per group (``k / num_groups`` rounded up to 128, at least 128)."""
    k_group = max(SCALE_GROUP, align_up(ceil_div(problem.k, problem.num_groups), SCALE_GROUP))
    return Problem(max(problem.m, 1), problem.n, k_group, out_dtype=problem.out_dtype, c_dtype=problem.c_dtype,
                   b_scale_1d=True)


def _most_stages(config: KernelConfig, max_smem: int) -> int:
    stages = family.MAX_STAGES
    while stages > family.MIN_STAGES and family.smem_bytes(
            config.block_m, config.block_n, stages, 1, False, True, family.d_staging_bytes(config), True) > max_smem:
        stages -= 1
    return stages


def select_k_grouped_config(problem: Problem, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK) -> KernelConfig:
    """The :class:`KernelConfig` of the K-grouped ``problem`` (kind ``K_GROUPED``) on ``num_sms``
    SMs (the rule of this module's docstring). Pure; the problem's output variant is applied by
    :meth:`KernelConfig.for_problem`."""
    from deep_tile.select.selector import select_config

    if problem.kind is not ProblemKind.K_GROUPED:
        raise ValueError(f"select_k_grouped_config: needs a k_grouped problem; got {problem.kind.value}")
    dense = select_config(dense_problem_of(problem), num_sms, max_smem)
    if dense.split_k > 1 or dense.swap_n:
        block_m = 64 if problem.m <= 64 else 128
        fields = dict(block_m=block_m, block_n=128, wgmma_n=128, accum_buffers=2, k_unroll=3)
    else:
        tile = (dense.block_m, dense.block_n, dense.wgmma_n, dense.accum_buffers)
        block_m, block_n, wgmma_n, accum_buffers = SPILLING_TILES.get(tile, tile)
        fields = dict(block_m=block_m, block_n=block_n, wgmma_n=wgmma_n, accum_buffers=accum_buffers, k_unroll=3)
    config = KernelConfig(**fields, num_stages=family.MIN_STAGES, grid_size=num_sms, raster_width=RASTER_WIDTH,
                          problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True, out_dtype=problem.out_dtype,
                          c_dtype=problem.c_dtype)
    return dataclasses.replace(config, num_stages=_most_stages(config, min(max_smem, arch.MAX_SMEM_PER_BLOCK)))
