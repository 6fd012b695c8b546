"""The K-grouped kernel's configuration: a simple rule, not the cost model.

The K-grouped GEMM (:func:`deep_tile.k_grouped_fp8_gemm_1d1d`, MoE weight gradients) computes
``num_groups`` outputs of ``m x n``, each over its group's share of the ``k`` tokens. The rule:
where the problem allows the staged epilogue (an FP32 out without C or accumulated in place, ``m``
a multiple of 64: :func:`deep_tile.kernels.fp8_gemm.staged_epilogue_allowed`), a 128x152 tile of
one accumulator buffer (:data:`STAGED_TILE`; in place in 2-CTA pairs sharing B for groups of few
tokens, :func:`pairs_pay`, or :data:`TILE` for long groups with ``m < n``,
:func:`wide_staged_pays`); otherwise a 128x160 tile in one WGMMA of 160 columns
and one accumulator buffer (:data:`TILE`), stored from registers; the 64x128 tile with two buffers
when ``m <= 64`` (:data:`SHORT_TILE`, staged where allowed); each made a K-grouped kernel:
persistent on every SM (no split-K: the groups already give ``num_groups`` times the tiles), no
multicast but the pairs, no swap-AB, column-major a_scale, the k-loop unrolled by 3 (by 6 the
builds with C of 128x256 /128 and 256x128 spilled), the most stages that fit.

Why 128x160 for the direct store: forced tiles of the kernel accumulating FP32 in place beside
DeepGEMM latest (benchmarks/probes/k_grouped_configs.py, 4096x7168 and 7168x2048 with 4 to 64 groups
of 1k-8k tokens) ran 128x160 fastest on most shapes and close to the fastest on the rest; 128x128
with two buffers, 256x128 and 256x64 were slower, and 128x256 /128 far slower: with many groups each
tile's k-loop is short and the in-place epilogue (C read and D written from registers) dominates,
and the narrower tile's epilogue holds more loads of C in flight per thread.

Why the staged epilogue: a storer thread loads C by TMA during the tile's k-loop and stores the sums
by TMA after it, so D's traffic overlaps the tensor cores' work (include/deep_tile/epilogue/
store_staged.cuh). In place, the kernel adds a tile of 12 k-blocks or more to D by the TMA unit's
reduce-add instead (no C loaded).

Why 128x152: of the widths that keep 4 stages beside the two 64-row FP32 stagings, 152 is the
widest (160 keeps 3); 152 is not a multiple of 16, so its staging is one unswizzled box of the
whole width (``kF32PlainStaging``) instead of swizzled atoms. Beside DeepGEMM latest in place, it
ran faster than the earlier 128x128 (alone or in pairs) at every shape of 2k-4k tokens per group and
of ~1k tokens, 32 and 64 groups (by 7-14% there), and within 0.7% of it with 8 groups sharing 2048
tokens. Without C (DeepGEMM has no such kernel) it ran 3-7% faster than 128x128 and 128x160 at 2k,
1k and 8k tokens per group.

Why 128x160 staged for long groups with ``m < n`` (:func:`wide_staged_pays`): in place with 4 groups
of ~8k tokens, the 128x160 tile with the staged epilogue (3 stages) ran 0.2-0.9% faster than 128x152
at 4096x7168 in two runs, and 0.1-0.9% slower at 7168x2048; with 8 groups of ~4k 128x152 was faster
at both. Pairs of either tile, sharing A or B, were slower at ~8k tokens.

Why pairs (2-CTA multicast of B, :data:`PAIRS_MAX_TOKENS`): the 152-column staged tile in pairs
sharing B ran faster than alone (by 3.7% and 4.9%) with 8 groups sharing 2048 tokens (~256 per
group, tiles of about 2 k-blocks), where each tile's k-loop is short and halving the L2 reads of B
pays; with ~1k tokens per group (32 and 64 groups) and more, alone was faster at both (m, n). The
rule takes pairs where every group has an even number of tiles
(:func:`deep_tile.kernels.fp8_gemm.k_grouped_multicast_allowed`) and the groups average at most
:data:`PAIRS_MAX_TOKENS` tokens. An empirical rule, not a model.

Pure Python, no torch.
"""
from __future__ import annotations

import dataclasses

from deep_tile import arch
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select.config import RASTER_WIDTH, KernelConfig

__all__ = ["select_k_grouped_config", "most_stages", "pairs_pay", "wide_staged_pays", "TILE", "SHORT_TILE",
           "STAGED_TILE", "PAIRS_MAX_TOKENS", "WIDE_MIN_TOKENS"]

TILE = (128, 160, 160, 1)
"""(block_m, block_n, wgmma_n, accum_buffers) of the rule's tile."""

SHORT_TILE = (64, 128, 128, 2)
"""The tile for ``m <= 64`` (one consumer warpgroup of 64 rows)."""

STAGED_TILE = (128, 152, 152, 1)
"""The tile with the staged epilogue (an FP32 out without C or in place, ``m`` a multiple of 64 and
above 64: :func:`deep_tile.kernels.fp8_gemm.staged_epilogue_allowed`), its FP32 staging unswizzled
(:data:`deep_tile.kernels.fp8_gemm.STAGED_PLAIN_BLOCK_N`)."""


PAIRS_MAX_TOKENS = 512
"""The most tokens per group, on average, at which the staged tile runs in pairs sharing B
(:func:`pairs_pay`): 4 k-blocks a tile, between the ~256 tokens where pairs paid and the ~1k where
they did not."""


WIDE_MIN_TOKENS = 6144
"""Tokens per group, on average, from which the staged epilogue in place runs the 128x160 tile when
``m < n`` (:func:`wide_staged_pays`): measured faster at ~8k (64 k-blocks a tile), slower at ~4k."""


def wide_staged_pays(problem: Problem, staged: bool) -> bool:
    """Whether the rule runs the K-grouped ``problem``'s staged epilogue with the 128x160 tile
    instead of :data:`STAGED_TILE`: in place (FP32 D accumulated), ``64 < m < n``, at least
    :data:`WIDE_MIN_TOKENS` tokens per group on average; the module docstring says why."""
    if not staged or problem.c_dtype != "out" or not 64 < problem.m < problem.n:
        return False
    return problem.k >= WIDE_MIN_TOKENS * max(problem.num_groups, 1)


def pairs_pay(problem: Problem, staged: bool) -> bool:
    """Whether the rule runs the K-grouped ``problem``'s staged tile in 2-CTA pairs sharing B: in
    place (FP32 D accumulated), every group an even number of tiles, and at most
    :data:`PAIRS_MAX_TOKENS` tokens per group on average (the module docstring says why)."""
    block_m, block_n, _, _ = STAGED_TILE
    return (staged and problem.c_dtype == "out" and problem.k <= PAIRS_MAX_TOKENS * max(problem.num_groups, 1)
            and family.k_grouped_multicast_allowed(problem, block_m, block_n))


def most_stages(config: KernelConfig, max_smem: int) -> int:
    """The most pipeline stages the K-grouped kernel of ``config``'s tile fits in ``max_smem`` bytes
    of shared memory (its 1D1D b_scale stages and per-group table counted), at least the minimum."""
    stages = family.MAX_STAGES
    while stages > family.MIN_STAGES and family.smem_bytes(
            config.block_m, config.block_n, stages, 1, False, True, family.d_staging_bytes(config), True,
            family.epilogue_barriers(config), tile_slots=False) > max_smem:
        stages -= 1
    return stages


def select_k_grouped_config(problem: Problem, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK) -> KernelConfig:
    """The :class:`KernelConfig` of the K-grouped ``problem`` (kind ``K_GROUPED``) on ``num_sms``
    SMs (the rule of this module's docstring). Pure; the problem's output variant is applied by
    :meth:`KernelConfig.for_problem`."""
    if problem.kind is not ProblemKind.K_GROUPED:
        raise ValueError(f"select_k_grouped_config: needs a k_grouped problem; got {problem.kind.value}")
    staged = family.staged_epilogue_allowed(problem)
    block_m, block_n, wgmma_n, accum_buffers = SHORT_TILE if problem.m <= 64 else (
        STAGED_TILE if staged and not wide_staged_pays(problem, staged) else TILE)
    config = KernelConfig(block_m=block_m, block_n=block_n, wgmma_n=wgmma_n, accum_buffers=accum_buffers,
                          k_unroll=3, num_stages=family.MIN_STAGES, grid_size=num_sms, raster_width=RASTER_WIDTH,
                          problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True, out_dtype=problem.out_dtype,
                          c_dtype=problem.c_dtype, staged_epilogue=staged)
    if problem.m > 64 and pairs_pay(problem, staged):
        config = dataclasses.replace(config, num_multicast=2, multicast_on_a=False, raster_along_m=True)
    return dataclasses.replace(config, num_stages=most_stages(config, min(max_smem, arch.MAX_SMEM_PER_BLOCK)))
