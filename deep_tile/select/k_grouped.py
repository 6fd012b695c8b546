"""The K-grouped kernel's configuration: a simple rule, not the cost model.

The K-grouped GEMM (:func:`deep_tile.k_grouped_fp8_gemm_1d1d`, MoE weight gradients) computes
``num_groups`` outputs of ``m x n``, each over its group's share of the ``k`` tokens. The rule:
where the problem allows the staged epilogue (an FP32 out without C or accumulated in place, ``m``
a multiple of 64: :func:`deep_tile.kernels.fp8_gemm.staged_epilogue_allowed`), it with a 128x128
tile of one accumulator buffer (:data:`STAGED_TILE`), or with :data:`TILE` for long groups in
place (:func:`wide_staged_pays`); otherwise a 128x160 tile in one WGMMA of 160
columns and one accumulator buffer (:data:`TILE`), stored from registers; the 64x128 tile with two
buffers when ``m <= 64`` (:data:`SHORT_TILE`, staged where allowed); each made a K-grouped kernel:
persistent on every SM (no split-K: the groups already give ``num_groups`` times the tiles), no
multicast but the pairs below (a pair of tiles in lock step needs one K range), no swap-AB, column-major
a_scale, the k-loop unrolled by 3 (by 6 the builds with C of 128x256 /128 and 256x128 spilled), the
most stages that fit.

Why 128x160: forced tiles of the kernel accumulating FP32 in place beside DeepGEMM latest
(benchmarks/probes/k_grouped_configs.py, 4096x7168 and 7168x2048 with 4 to 64 groups of 1k-8k
tokens) ran 128x160 fastest on most shapes and close to the fastest on the rest; 128x128 with two
buffers, 256x128 and 256x64 were slower, and 128x256 /128 (the dense rule's pick for many of them
before) far slower: with many groups each tile's k-loop is short and the in-place epilogue (C read
and D written from registers) dominates, and the narrower tile's epilogue holds more loads of C in
flight per thread.

Why the staged epilogue with 128x128: a storer thread loads C by TMA during the tile's k-loop and
stores the sums by TMA after it, so D's traffic overlaps the tensor cores' work (include/deep_tile/
epilogue/store_staged.cuh). It beat the direct store's 128x160 in geomean over the benchmark's
K-grouped shapes (losing only with many groups of ~1k tokens at 4096x7168); with its 80 KB staging
128x160 keeps 3 stages and 128x144 makes 64-byte TMA boxes, both slower; the same 128x128 storing
from registers was slower too. In place, the kernel adds a tile of 12 k-blocks or more to D by the
TMA unit's reduce-add instead (no C loaded); with it, 128x144, 128x160, 128x128 with two buffers and
128x96 were each slower than 128x128 on at least three of the six shapes of 4-16 groups of 2-8k tokens.

Why 128x160 staged for long groups (:func:`wide_staged_pays`): in place, with 4 groups of ~8k
tokens at 7168x2048 and 4096x7168, and with 8 groups of ~4k at 4096x7168 (m < n), the 128x160
tile with the staged epilogue (3 stages) ran 1.5-3.0% faster than 128x128 on an H200 beside
DeepGEMM latest (two runs); with 8 groups of ~4k at 7168x2048 and with 16 of ~2k it was 0.4-2.7%
slower, so the rule keeps 128x128 there.

Why pairs (2-CTA multicast of B, :data:`PAIRS_MAX_TOKENS`): with the staged epilogue, in place,
the 128x128 tile in pairs sharing B (along M) ran faster than alone at 4096x7168 with 32 and 64
groups of ~1k tokens (m < n, tiles of at most 8 k-blocks), even with 8 groups sharing 2048 tokens,
but slower with 8-16 groups of 2-4k tokens there, and at 7168x2048 (m > n) with 32-64 groups of ~1k.
At 7168x2048 (m > n) with 16 groups of ~2k tokens, though, the pairs ran 0.975x and 0.969x DeepGEMM
latest in two H200 runs where 128x128 alone ran 0.956x in both (128x160 0.942x and 0.930x): there a
tile's 16 k-blocks leave the per-tile costs (the staged epilogue's registers-to-staging copy, during
which both consumer warpgroups issue no WGMMA) a larger share than at ~8k tokens, and the pair halves
the L2 reads of B per tile. The rule takes pairs only where they were measured to pay: m < n with at
most :data:`PAIRS_MAX_TOKENS` tokens per group on average (the benchmark's "~1k" sets average
1016-1030), or m > n with more than that and at most :data:`PAIRS_MAX_TOKENS_M_ABOVE_N` (~2k: 16
k-blocks a tile; at ~4k, 8 groups, alone and in pairs ran within 0.3%), and an even number of tiles
per group (:func:`deep_tile.kernels.fp8_gemm.k_grouped_multicast_allowed`). An empirical rule, not a model.

Pure Python, no torch.
"""
from __future__ import annotations

import dataclasses

from deep_tile import arch
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select.config import RASTER_WIDTH, KernelConfig

__all__ = ["select_k_grouped_config", "most_stages", "pairs_pay", "wide_staged_pays", "TILE", "SHORT_TILE",
           "STAGED_TILE", "PAIRS_MAX_TOKENS", "PAIRS_MAX_TOKENS_M_ABOVE_N", "WIDE_MIN_TOKENS",
           "WIDE_MIN_TOKENS_M_BELOW_N"]

TILE = (128, 160, 160, 1)
"""(block_m, block_n, wgmma_n, accum_buffers) of the rule's tile."""

SHORT_TILE = (64, 128, 128, 2)
"""The tile for ``m <= 64`` (one consumer warpgroup of 64 rows)."""

STAGED_TILE = (128, 128, 128, 1)
"""The tile with the staged epilogue (an FP32 out without C or in place, ``m`` a multiple of 64 and
above 64: :func:`deep_tile.kernels.fp8_gemm.staged_epilogue_allowed`)."""


PAIRS_MAX_TOKENS = 1536
"""The most tokens per group, on average, at which the staged tile runs in pairs sharing B
(:func:`pairs_pay`): 12 k-blocks a tile, between the ~1k tokens (8 k-blocks) where pairs paid and
the ~2k (16) where they did not; tiles of fewer k-blocks load C (the staged epilogue's
kStagedReduceMinKBlocks)."""


PAIRS_MAX_TOKENS_M_ABOVE_N = 3072
"""When ``m > n``: the most tokens per group, on average, at which the staged tile runs in pairs
sharing B, from above :data:`PAIRS_MAX_TOKENS` (:func:`pairs_pay`): measured to pay at ~2k tokens
(16 k-blocks a tile), not at ~1k (below :data:`PAIRS_MAX_TOKENS`) nor ~4k."""


WIDE_MIN_TOKENS = 6144
"""Tokens per group, on average, from which the staged epilogue runs the 128x160 tile
(:func:`wide_staged_pays`): measured to pay at ~8k (64 k-blocks a tile), not at ~2k."""

WIDE_MIN_TOKENS_M_BELOW_N = 3072
"""The same threshold when ``m < n``: measured to pay at ~4k there too, not at 7168x2048."""


def wide_staged_pays(problem: Problem, staged: bool) -> bool:
    """Whether the rule runs the K-grouped ``problem``'s staged epilogue with the 128x160 tile
    instead of 128x128: in place (FP32 D accumulated), ``m`` above 64, at least
    :data:`WIDE_MIN_TOKENS` tokens per group on average (:data:`WIDE_MIN_TOKENS_M_BELOW_N` when
    ``m < n``); the module docstring says why."""
    if not staged or problem.c_dtype != "out" or problem.m <= 64:
        return False
    tokens = problem.k / max(problem.num_groups, 1)
    return tokens >= (WIDE_MIN_TOKENS_M_BELOW_N if problem.m < problem.n else WIDE_MIN_TOKENS)


def pairs_pay(problem: Problem, staged: bool) -> bool:
    """Whether the rule runs the K-grouped ``problem``'s staged tile in 2-CTA pairs sharing B: in
    place (FP32 D accumulated), every group an even number of tiles, and on average per group at most
    :data:`PAIRS_MAX_TOKENS` tokens when ``m < n``, or more than that and at most
    :data:`PAIRS_MAX_TOKENS_M_ABOVE_N` when ``m > n`` (the module docstring says why)."""
    block_m, block_n, _, _ = STAGED_TILE
    groups = max(problem.num_groups, 1)
    if problem.m < problem.n:
        tokens_pay = problem.k <= PAIRS_MAX_TOKENS * groups
    else:
        tokens_pay = (problem.m > problem.n
                      and PAIRS_MAX_TOKENS * groups < problem.k <= PAIRS_MAX_TOKENS_M_ABOVE_N * groups)
    return (staged and problem.c_dtype == "out" and tokens_pay
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
