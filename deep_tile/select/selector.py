"""``select_config``: problem shape and SM count -> :class:`KernelConfig`. Pure and cached.

Steps:

1. list the candidates (:mod:`deep_tile.select.candidates`): every buildable tile with its
   WGMMA width, accumulator buffers and stages, each with and without 2-CTA multicast, and the
   split-K variants when the tiles do not fill the SMs;
2. predict each one's time with the performance model (:func:`deep_tile.select.cost.estimate`)
   and take the fastest; ties go to fewer CTAs per tile (no multicast, no split; but to split-K
   where the k-loop is latency-bound, and a split within 7% of a latency-bound first choice goes
   first; an unsplit candidate within 4% of an HBM-bound split first choice goes first), then
   (masked, offsets) a tile holding a whole group (masked: not over its transposed tile), then the
   smaller tile; at small M (small groups) only two-buffer k-loops are ranked
   (:func:`overlaps_promotion`);
3. the grid the estimate assumed: :func:`grid_size`, ``min(SMs, tiles)`` balanced over its rounds,
   even and within the resident clusters under multicast; for the masked and offsets kinds
   :func:`deep_tile.select.cost.table_grid_size`; split-K launches ``tiles * split_k`` CTAs;
4. :func:`streams_b`: L2 policies for the loads (B evict-first when at most two m-blocks read it,
   over at least 8 k-blocks, or at most eight over at least 32).
"""
from __future__ import annotations

import dataclasses
import functools
import math

from deep_tile import arch
from deep_tile.arch import ChipFacts
from deep_tile.common import ceil_div
from deep_tile.errors import UnsupportedProblemError
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select.candidates import enumerate_candidates
from deep_tile.select.config import RASTER_WIDTH, KernelConfig, raster
from deep_tile.select.cost import DEFAULT_PARAMS, Estimate, estimate, grid_size

__all__ = ["select_config", "select_signal_config", "rank_candidates", "config_from_estimate", "streams_b", "STREAM_MAX_M_BLOCKS",
           "STREAM_MIN_K_BLOCKS", "STATIC_K_MAX_K_BLOCKS", "STATIC_K_LONG_MAX_K_BLOCKS", "STATIC_K_KINDS", "static_k_blocks_for", "STATIC_RING_TILES", "RING_TILE", "RING_TILE_OVER", "RING_TILE_MIN_K_BLOCKS", "RING_TILE_TOLERANCE", "static_ring_for", "LONG_STREAM_MAX_M_BLOCKS", "LONG_STREAM_MIN_K_BLOCKS", "k_unroll_for", "unroll_width", "SWAP_UNROLL_BLOCK_NS", "swap_unroll_for", "LONG_K_BLOCKS", "ONE_M_BLOCK_MAX_M", "ONE_M_BLOCK_TOLERANCE", "bf16_without_c", "plain_bf16", "one_m_block_rows", "straddle_copies", "UNROLL_MAX_STRADDLE_COPIES", "swap_n_for", "SWAP_MAX_M", "overlaps_promotion", "SERIAL_LOOP_MIN_M", "one_buffer_for_two_warpgroups",
           "GROUP_TILE_MIN_M",
           "SPLIT_TOLERANCE", "UNSPLIT_TOLERANCE", "ONE_SUBTILE_TOLERANCE", "accumulates_weight_gradient", "one_subtile_per_warpgroup", "STREAM_MIN_BLOCK_N", "grid_size", "GROUPED_STREAM_MAX_M",
           "GROUPED_MANY_STREAMS_MIN_GROUPS", "GROUPED_MANY_STREAMS_MIN_K_BLOCKS", "grouped_streams_b",
           "RASTER_WIDTH", "check_positive_int"]

TIE_TOLERANCE = 0.015
"""Predicted times within this fraction of each other rank as equal (the tie-break decides)."""
WIDE_TILE_MIN_K_BLOCKS = 56
"""From this many k-blocks per tile on, ties between equal-area tiles of at least 128x128 go to the
wider one (rastered along M, :func:`deep_tile.select.config.raster`); otherwise to the taller one."""


def check_positive_int(func: str, name: str, value) -> None:
    """Raise ``ValueError`` naming ``func`` and ``name`` unless ``value`` is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{func}: {name} must be a positive int; got {value!r}")


def _tie_break(e: Estimate, problem: Problem, whole_group: bool = True) -> tuple:
    """Sort key: the predicted time in steps of TIE_TOLERANCE, then simpler kernels (a
    latency-bound candidate: split-K first, which shortens its chain of k-blocks), then for the
    masked and offsets kinds (``problem``; unless ``whole_group`` is false) tiles tall enough for a
    whole group (it reads each expert's weights once and measured faster than the tiles that split
    the group; for the masked kind :func:`_transposed_tie` does not rank a tile by it against its
    transpose), then (equal areas) taller tiles, except that from
    :data:`WIDE_TILE_MIN_K_BLOCKS` k-blocks per tile on,
    tiles of at least 128x128 go wider first. The model costs 256x128 and 128x256 nearly alike;
    measured, 256x128 was faster at short K and 128x256 rastered along M at long K; among 64-row
    and 128x64 tiles the taller was faster.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    c = e.candidate
    wider_first = e.k_blocks_per_cta >= WIDE_TILE_MIN_K_BLOCKS and min(c.block_m, c.block_n) >= 128
    split_rank = int(c.split_k == 1) if e.bound == "latency" else c.split_k
    # a table kind's tile that holds a whole group (one m-block per expert) before one that does not
    splits_group = whole_group and problem.kind.has_table and c.block_m < problem.expected_m
    return (round(math.log(e.time_s) / math.log(1 + TIE_TOLERANCE)), split_rank, c.num_multicast, splits_group,
            c.block_m * c.block_n, c.block_m if wider_first else -c.block_m, -c.num_stages, -c.accum_buffers,
            not c.multicast_on_a)


SERIAL_LOOP_MIN_M = 129
"""Fewest rows of the output for which candidates with one accumulator buffer are ranked."""


GROUP_TILE_MIN_M = 65
"""Fewest rows per group (``expected_m``) from which a grouped problem of at least
:data:`SERIAL_LOOP_MIN_M` rows in all ranks one-buffer candidates (:func:`overlaps_promotion`)."""


def overlaps_promotion(problem: Problem) -> bool:
    """Whether only candidates with two accumulator buffers are ranked for ``problem`` (k-loops
    that overlap the next WGMMAs with the promotion): when it has fewer than
    :data:`SERIAL_LOOP_MIN_M` rows (a group's ``expected_m`` for the grouped kinds), except a
    grouped problem of at least that many rows in all whose groups overflow a 64-row tile
    (``expected_m`` >= :data:`GROUP_TILE_MIN_M`): its many tiles keep the tensor cores busy
    without the overlap, and the larger one-buffer tiles measured faster there, while groups
    that fit a 64-row tile stay with the 64-row two-buffer tiles.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    if problem.expected_m >= SERIAL_LOOP_MIN_M:
        return False
    return not (problem.kind.grouped and problem.expected_m >= GROUP_TILE_MIN_M
                and problem.expected_m * problem.num_groups >= SERIAL_LOOP_MIN_M)


def one_buffer_for_two_warpgroups(problem: Problem, tile) -> bool:
    """Whether the model's pick ``tile`` (a ranked :class:`Candidate` or a :class:`KernelConfig`)
    for ``problem`` runs with one accumulator buffer instead of its two: an unsplit tile of two consumer warpgroups (``block_m`` >= 128) for the dense bf16 GEMM
    (:func:`plain_bf16`), at any M. The two warpgroups already take turns on the tensor cores, so
    the second buffer's overlap inside one warpgroup buys nothing there, and its registers and
    instructions cost; 64-row tiles (one warpgroup) keep two, and so do split-K picks (even
    either way). The config is otherwise the same (tile, stages, grid, k-loop unrolled by 3, K a
    run-time value), except that narrow tiles over many m-blocks unroll by 6 over long K
    (:func:`swap_unroll_for`): the model still ranks the two-buffer candidate, and
    :func:`config_from_estimate` swaps the buffers (the twin measured).

    Measured, one buffer against two on both chips: the unsplit picks of two consumer warpgroups
    ran faster at every M tried, the split-K picks even, and 64-row tiles slower, so those keep two.
    """
    return (plain_bf16(problem) and tile.accum_buffers == 2
            and family.math_warpgroups(tile.block_m) == 2 and tile.split_k == 1)


@functools.lru_cache(maxsize=1024)
def _ranked(problem: Problem, num_sms: int, max_smem: int, chip: ChipFacts) -> tuple:
    m, n, k = problem.shape
    tiles_of = lambda bm, bn: problem.m_blocks(bm) * ceil_div(n, bn)  # noqa: E731
    candidates = enumerate_candidates(max_smem, num_sms, tiles_of, ceil_div(k, family.BLOCK_K), problem.kind.grouped,
                                      problem.kind.has_table, problem.group_m_blocks,
                                      family.CONTIGUOUS_ALIGNMENT if problem.kind is ProblemKind.GROUPED_CONTIGUOUS else 256)
    if overlaps_promotion(problem) and any(c.accum_buffers == 2 for c in candidates):
        candidates = [c for c in candidates if c.accum_buffers == 2]
    if not candidates:
        raise UnsupportedProblemError(f"select_config: no tile shape fits max_smem={max_smem} bytes")
    estimates = [estimate(c, problem, num_sms, chip, RASTER_WIDTH) for c in candidates]
    ranked = tuple(sorted(estimates, key=lambda e: _tie_break(e, problem)))
    ranked = _unsplit_hbm_bound(_split_latency_bound(_transposed_tie(ranked, problem)))
    ranked = _ring_tile_first(_one_m_block_first(ranked, problem), problem)
    if accumulates_weight_gradient(problem):
        ranked = _one_slab_first(_one_subtile_first(ranked, problem, num_sms, chip), problem)
    return tuple(e for e in ranked if not _skips_f32_staging_tile(problem, e.candidate))


def _skips_f32_staging_tile(problem: Problem, c) -> bool:
    """Whether the selector leaves out unsplit candidate ``c`` of the dense 1D1D ``problem`` with an
    FP32 D through shared memory (FP32 out without C, or in place) as a build that spills
    (``family.f32_staging_spills``): in place at the unroll it would get; without C at any unroll
    (128x256 /128 measured 4-9% faster than 256x128 at seven shapes on an H200, docs/performance.md)."""
    if not (problem.kind is ProblemKind.DENSE and problem.b_scale_1d and problem.out_dtype == "float32"
            and problem.c_dtype in (None, "out") and c.split_k == 1):
        return False
    unroll = 3 if problem.c_dtype is None else k_unroll_for(c.accum_buffers, ceil_div(problem.k, family.BLOCK_K))
    return family.f32_staging_spills(c.block_m, c.block_n, c.wgmma_n, c.accum_buffers, c.num_multicast, unroll)


def bf16_without_c(problem: Problem) -> bool:
    """Whether ``problem`` writes a bf16 output without C, from 1x128 x 128x128 scales (not an
    output variant, not a weight gradient)."""
    return problem.out_dtype == "bfloat16" and problem.c_dtype is None and not problem.b_scale_1d


def plain_bf16(problem: Problem) -> bool:
    """Whether ``problem`` is the dense GEMM of :func:`bf16_without_c`: the kind the rules measured
    on it alone (:func:`_one_m_block_first`, the second tier of :func:`streams_b`, the copies limit
    of :func:`k_unroll_for`) apply to; the output variants and the weight gradients keep the rules
    they were measured with."""
    return problem.kind is ProblemKind.DENSE and bf16_without_c(problem)


ONE_M_BLOCK_MAX_M = 128
"""Most rows of a dense problem for which :func:`_one_m_block_first` applies (one 128-row tile)."""
ONE_M_BLOCK_TOLERANCE = 0.10
"""How much slower than the first choice a candidate that covers all of M in one m-block may be
predicted and still go first (:func:`_one_m_block_first`)."""


def one_m_block_rows(problem: Problem) -> bool:
    """Whether :func:`_one_m_block_first` considers ``problem``: the dense bf16 kind
    (:func:`plain_bf16`) with 65 to :data:`ONE_M_BLOCK_MAX_M` rows (``explain`` asks it too)."""
    return plain_bf16(problem) and 64 < problem.m <= ONE_M_BLOCK_MAX_M


def _one_m_block_first(ranked: tuple, problem: Problem) -> tuple:
    """``ranked`` with, for a dense bf16 problem (:func:`plain_bf16`) of 65 to
    :data:`ONE_M_BLOCK_MAX_M` rows whose first choice splits M into several m-blocks, the first
    candidate of one m-block (``block_m >= m``) of half its width (a multiple of 32), split alike
    and on at least as many CTAs (the same grid of tiles of the same area), first when it is
    predicted within :data:`ONE_M_BLOCK_TOLERANCE` of the first choice. Then each weight tile is
    read by one CTA, once; with 64-row tiles two CTAs read it, and under the evict-first policy
    (:func:`streams_b`) the second may find it gone from L2. The model costs both reads as L2
    hits.

    Measured with forced tiles: 128x32 beat or matched a 64x64 first choice (split alike) at 72-128
    rows. Other one-m-block tiles lost to a 64x96 first choice: on fewer CTAs, of a width not a
    multiple of 32, split in 2 or wider; one of the same width split in 2 beat a 64x64 first choice
    but not 64x96 (docs/performance.md, 'What the selector picks, and why').
    """
    m = problem.m
    if not one_m_block_rows(problem) or ranked[0].candidate.block_m >= m:
        return ranked
    best = ranked[0]
    b = best.candidate
    pick = next((e for e in ranked if e.candidate.block_m >= m and 2 * e.candidate.block_n == b.block_n
                 and e.candidate.block_n % 32 == 0 and e.candidate.split_k == b.split_k and e.ctas >= best.ctas
                 and e.time_s <= best.time_s * (1 + ONE_M_BLOCK_TOLERANCE)), None)
    if pick is None:
        return ranked
    return (pick,) + tuple(x for x in ranked if x is not pick)


def accumulates_weight_gradient(problem: Problem) -> bool:
    """Whether ``problem`` is the dense 1D1D GEMM accumulated in place into an FP32 output (the
    weight gradient added to a main gradient), whose ranking :func:`_one_subtile_first` amends."""
    return (problem.kind is ProblemKind.DENSE and problem.b_scale_1d and problem.out_dtype == "float32"
            and problem.c_dtype == "out")


def one_subtile_per_warpgroup(c) -> bool:
    """Whether candidate ``c``'s tile has 128 rows and one sub-tile (64-row slab, one column part)
    per consumer warpgroup (:func:`_one_subtile_first`)."""
    return c.block_m == 128 and family.num_subtiles(c.block_m, c.block_n, c.wgmma_n) == 1


ONE_SUBTILE_TOLERANCE = 0.10
"""How much slower than the first choice an unsplit tile with one sub-tile per consumer warpgroup
may be predicted and still go first for the in-place weight gradient (:func:`_one_subtile_first`)."""


IN_PLACE_ODD_WIDTH_EFFICIENCY = 0.85
"""The relative speed :func:`_one_subtile_first` gives a one-sub-tile tile whose width is not a
multiple of 32 (128x144, 128x112) instead of the model's ``odd_width_efficiency`` (0.58, set from
a 64x112 tile at small M): about what 128x144 measured against 128x160 on the in-place weight
gradient's shapes (forced tiles, rounds of tiles counted)."""


def _one_subtile_first(ranked: tuple, problem: Problem, num_sms: int, chip: ChipFacts) -> tuple:
    """``ranked`` with an unsplit one-buffer candidate whose consumer warpgroups hold one sub-tile
    each (``family.num_subtiles`` 1: 128 rows, one column part) first: the first such in
    ``ranked`` when the first has several sub-tiles and that one is predicted within
    :data:`ONE_SUBTILE_TOLERANCE` of it; and in its place (or in place of a first that has one
    sub-tile) a one-sub-tile candidate of a width not a multiple of 32 that the model, with
    :data:`IN_PLACE_ODD_WIDTH_EFFICIENCY` for such widths, predicts faster still. The in-place FP32
    epilogue (the TMA unit's reduce-add through one 64-row staging per warpgroup) makes a
    warpgroup with several sub-tiles wait for the unit to read each before it stages the next;
    with one, the wait falls in the next tile's k-loop. The model sees neither that nor the stages
    the staging costs.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    best = ranked[0]
    eligible = [e for e in ranked if one_subtile_per_warpgroup(e.candidate) and e.candidate.accum_buffers == 1
                and e.candidate.split_k == 1]
    if one_subtile_per_warpgroup(best.candidate):
        pick = best
    else:
        pick = next((e for e in eligible if e.time_s <= best.time_s * (1 + ONE_SUBTILE_TOLERANCE)), None)
    if pick is None:
        return ranked
    odd = [e for e in eligible if e.candidate.wgmma_n % 32]
    if odd:
        params = dataclasses.replace(DEFAULT_PARAMS, odd_width_efficiency=IN_PLACE_ODD_WIDTH_EFFICIENCY)
        times = {id(e): estimate(e.candidate, problem, num_sms, chip, RASTER_WIDTH, params).time_s for e in odd}
        fastest = min(odd, key=lambda e: times[id(e)])
        if times[id(fastest)] < pick.time_s:
            pick = fastest
    if pick is best:
        return ranked
    return (pick,) + tuple(x for x in ranked if x is not pick)


def one_slab_over_tall(problem: Problem, one_slab, tall) -> bool:
    """Whether, for ``problem``, estimate ``one_slab`` (a one-buffer unsplit 128-row tile) goes
    before estimate ``tall`` (a 256-row tile, two 64-row slabs per consumer warpgroup) that the
    model ties it with (within :data:`TIE_TOLERANCE`): for the in-place weight gradient
    (:func:`accumulates_weight_gradient`), where only a warpgroup of one slab has the registers to
    form part of its 1D1D scale products while its WGMMAs run (``Fp8GemmConfig::kPreScaleGroups``),
    which the model does not see; the tie would otherwise go to the taller tile
    (:func:`_one_slab_first`; ``explain`` says so).

    Measured: at 32768x512 over 4096 tokens 128x256 /128 ran faster than the 256x128 pick.
    """
    c = one_slab.candidate
    return (accumulates_weight_gradient(problem) and tall.candidate.block_m == 256 and c.block_m == 128
            and c.accum_buffers == 1 and c.split_k == 1 and abs(one_slab.time_s / tall.time_s - 1) <= TIE_TOLERANCE)


def _one_slab_first(ranked: tuple, problem: Problem) -> tuple:
    """``ranked`` with the first candidate that :func:`one_slab_over_tall` puts before a 256-row
    first moved to the front."""
    pick = next((e for e in ranked[1:] if one_slab_over_tall(problem, e, ranked[0])), None)
    if pick is None:
        return ranked
    return (pick,) + tuple(x for x in ranked if x is not pick)


def _transposed_tie(ranked: tuple, problem: Problem) -> tuple:
    """``ranked`` with the first choice's transposed tile first (256x128 for 128x256 and back, of
    tiles at least 128 on each side, split and multicast alike) when that tile is predicted within
    :data:`TIE_TOLERANCE` of it and :func:`_tie_break` would put it first on an equal time: below
    :data:`WIDE_TILE_MIN_K_BLOCKS` k-blocks per tile the taller, from there on the wider. The
    masked kind too: its tile that holds a whole group goes first over smaller tiles
    (:func:`_tie_break`), not over its transpose: at 56 k-blocks (K = 7168) and 160-224 rows per
    expert 128x256 measured faster than 256x128 on an H200 and even on an H100. The offsets kind
    keeps the whole-group tile first (its measurements went either way).

    :func:`_tie_break` ranks predicted times in steps of the tolerance from a fixed origin, so two
    predictions a fraction of a step apart can fall into different steps and skip the orientation
    rule: at 4096x7168x2048 and 2048x7168x2048 the H200's model picks 128x256 and the H100's
    256x128, and both ran well beside DeepGEMM latest.

    Measured: docs/performance.md, 'What the selector picks, and why'; below 56 k-blocks 256x128
    beat 128x256 on nearly every shape on both chips.
    """
    best = ranked[0]
    b = best.candidate
    if b.block_m == b.block_n or min(b.block_m, b.block_n) < 128:
        return ranked
    whole_group = problem.kind is not ProblemKind.GROUPED_MASKED
    key = lambda e: _tie_break(e, problem, whole_group)[1:]  # noqa: E731  (without the time step)
    for e in ranked[1:]:
        c = e.candidate
        transposed = (c.block_m, c.block_n) == (b.block_n, b.block_m)
        alike = c.num_multicast == b.num_multicast and c.split_k == b.split_k
        if transposed and alike and e.time_s <= best.time_s * (1 + TIE_TOLERANCE) and key(e) < key(best):
            return (e,) + tuple(x for x in ranked if x is not e)
    return ranked


SPLIT_TOLERANCE = 0.07
"""How much slower than a latency-bound unsplit first choice a split-K candidate may be predicted
and still go first (:func:`_split_latency_bound`)."""


def _split_latency_bound(ranked: tuple) -> tuple:
    """``ranked`` with the fastest split-K candidate first when the first is an unsplit,
    latency-bound one and the split is predicted within :data:`SPLIT_TOLERANCE` of it.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    best = ranked[0]
    if best.bound != "latency" or best.candidate.split_k > 1:
        return ranked
    for e in ranked[1:]:
        if e.candidate.split_k > 1 and e.time_s <= best.time_s * (1 + SPLIT_TOLERANCE):
            return (e,) + tuple(x for x in ranked if x is not e)
    return ranked


UNSPLIT_TOLERANCE = 0.04
"""How much slower than an HBM-bound split-K first choice an unsplit candidate may be predicted and
still go first (:func:`_unsplit_hbm_bound`)."""
STREAM_MIN_BLOCK_N = 64
"""Fewest rows of B per TMA box (tile columns) for which :func:`_unsplit_hbm_bound` trusts an
unsplit candidate to stream as fast as the split one."""


def _unsplit_hbm_bound(ranked: tuple) -> tuple:
    """``ranked`` with an unsplit candidate first when the first is an HBM-bound split-K one and the
    unsplit candidate is HBM-bound too, predicted within :data:`UNSPLIT_TOLERANCE`, runs at least as
    many CTAs and loads B boxes of at least :data:`STREAM_MIN_BLOCK_N` rows. When both stream HBM
    the stream sets the time, but the model's soft maximum of k-loop and HBM time still credits the
    split for halving each CTA's k-loop, more than its reduction costs it; measured, the unsplit
    kernel was faster. Narrower boxes stream more slowly than the model predicts, so they are left
    out.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    best = ranked[0]
    if best.bound != "hbm" or best.candidate.split_k == 1:
        return ranked
    for e in ranked[1:]:
        c = e.candidate
        if (c.split_k == 1 and e.bound == "hbm" and e.ctas >= best.ctas and c.block_n >= STREAM_MIN_BLOCK_N
                and e.time_s <= best.time_s * (1 + UNSPLIT_TOLERANCE)):
            return (e,) + tuple(x for x in ranked if x is not e)
    return ranked


def _checked(func: str, problem, num_sms, max_smem) -> Problem:
    """``problem`` checked (sizes positive ints), as the selector sees it: the a_scale layout is
    the launcher's choice of kernel variant, so it does not enter the selection."""
    if not isinstance(problem, Problem):
        raise TypeError(f"{func}: problem must be a deep_tile.gemm.problem.Problem; got {type(problem).__name__}")
    for name, value in (("m", problem.m), ("n", problem.n), ("k", problem.k), ("num_groups", problem.num_groups),
                        ("expected_m", problem.expected_m), ("num_sms", num_sms), ("max_smem", max_smem)):
        check_positive_int(func, name, value)
    return problem.with_a_scale_row_major(False) if problem.a_scale_row_major else problem


def rank_candidates(problem: Problem, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK,
                    chip: ChipFacts = arch.DEFAULT_CHIP) -> tuple:
    """Every candidate's :class:`~deep_tile.select.cost.Estimate` for ``problem``, fastest first.

    Raises:
        TypeError: ``problem`` is not a :class:`deep_tile.gemm.problem.Problem`.
        ValueError: a size, ``num_sms`` or ``max_smem`` is not a positive int.
    """
    problem = _checked("rank_candidates", problem, num_sms, max_smem)
    return _ranked(problem, num_sms, min(max_smem, arch.MAX_SMEM_PER_BLOCK), chip)


def config_from_estimate(problem: Problem, e: Estimate, num_sms: int, chip: ChipFacts = arch.DEFAULT_CHIP) -> KernelConfig:
    """The :class:`KernelConfig` (grid, raster band, L2 policies) of a ranked candidate.

    The loads of B are marked evict-first (and A's evict-last) when B is a stream
    (:func:`streams_b`; for a grouped problem :func:`grouped_streams_b`); the one-buffer k-loop is
    unrolled by 6 over long K ranges (:func:`k_unroll_for`), or has K fixed at compile time
    (:func:`static_k_blocks_for`: short K ranges, and long ones of loops unrolled by 3 and of the
    masked kind; with the stage ring as immediates where :func:`static_ring_for` says so); a
    two-buffer candidate of two consumer warpgroups
    gets one buffer where :func:`one_buffer_for_two_warpgroups` says so."""
    c = e.candidate
    plain = plain_bf16(problem)
    grid = e.ctas if c.split_k == 1 else grid_size(e.tiles, num_sms, c.num_multicast, chip)
    expert_m_blocks = problem.group_m_blocks(c.block_m) if problem.kind.has_table else None
    raster_along_m, raster_width = raster(c.block_m, c.block_n, c.num_multicast, c.split_k, expert_m_blocks)
    if in_place_rows_along_m(problem, c, grid):
        raster_along_m = True
    # K's form stays the ranked candidate's (a run-time value), and so does its unrolling but for
    # narrow tiles over many m-blocks (swap_unroll_for)
    one_buffer_swap = one_buffer_for_two_warpgroups(problem, c)
    accum_buffers = 1 if one_buffer_swap else c.accum_buffers
    k_unroll = (swap_unroll_for(problem, c, e.k_blocks_per_cta) if one_buffer_swap
                else k_unroll_for(c.accum_buffers, e.k_blocks_per_cta, unroll_width(problem, c)))
    static_ring = static_ring_for(problem, c, k_unroll)
    static_k_blocks = ceil_div(problem.k, family.BLOCK_K) if static_ring else static_k_blocks_for(problem, c, k_unroll)
    if static_k_blocks:
        k_unroll = 3  # the run-time loop's unrolling: unused with K fixed (STATIC_K_UNROLL), so one kernel
    return KernelConfig(block_m=c.block_m, block_n=c.block_n, num_stages=c.num_stages, num_multicast=c.num_multicast,
                        multicast_on_a=c.multicast_on_a, split_k=c.split_k, accum_buffers=accum_buffers,
                        wgmma_n=c.wgmma_n, raster_width=raster_width, raster_along_m=raster_along_m, grid_size=grid,
                        evict_first_b=streams_b(ceil_div(problem.m, c.block_m), e.k_blocks_per_cta * c.split_k, plain)
                        if not problem.kind.grouped else grouped_streams_b(problem, e.k_blocks_per_cta),
                        k_unroll=k_unroll, problem_kind=problem.kind,
                        l2_promotion=l2_promotion_for(problem, c.block_m, chip), swap_n=swap_n_for(problem, c),
                        static_k_blocks=static_k_blocks, static_ring=static_ring)


def in_place_rows_along_m(problem: Problem, c, grid: int) -> bool:
    """Whether ``problem``, the in-place weight gradient (:func:`accumulates_weight_gradient`),
    runs candidate or config ``c`` on ``grid`` CTAs in bands along M instead of
    :func:`deep_tile.select.config.raster`'s bands of RASTER_WIDTH n-blocks: an unsplit tile
    without multicast whose n-blocks are more than one band along N but fit ``grid /
    RASTER_WIDTH``, so the tiles in flight together cover whole rows of D (one contiguous block of
    the FP32 D they read and write back) rather than parts of twice as many rows.

    Measured on 7168x2048 (128x128 x2 on 128 CTAs, two rounds; the one shape of the weight-gradient
    set the rule moves): faster over 4096 and 8192 tokens, even over 16384.
    """
    n_blocks = ceil_div(problem.n, c.block_n)
    return (accumulates_weight_gradient(problem) and c.num_multicast == 1 and c.split_k == 1
            and RASTER_WIDTH < n_blocks and n_blocks * RASTER_WIDTH <= grid)


SWAP_MAX_M = max(family.SWAP_NS)
"""Most rows of A for which :func:`swap_n_for` swaps the WGMMA operands (the widest swap)."""


def swap_n_for(problem: Problem, c) -> int:
    """Swap-AB (``KernelConfig.swap_n``) for candidate ``c`` (a
    :class:`deep_tile.select.candidates.Candidate`) of ``problem``: a dense problem of at most
    :data:`SWAP_MAX_M` rows on a tile that allows it (64 rows, a width that is a multiple of 64 in
    one column part, no multicast) gets 8 token columns per WGMMA up to 8 rows, else 16; otherwise
    0. The model's ranking does not see it: it is applied to the pick, like :func:`k_unroll_for`.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    if problem.m > SWAP_MAX_M:
        return 0
    swap_n = min(n for n in family.SWAP_NS if n >= problem.m and n > 0)
    legal = not family.swap_problems(swap_n, c.block_m, c.block_n, c.wgmma_n, c.num_multicast, problem.kind)
    return swap_n if legal else 0


def l2_promotion_for(problem: Problem, block_m: int, chip: ChipFacts) -> int:
    """The L2 promotion of the FP8 maps (``KernelConfig.l2_promotion``): the chip's
    ``stream_l2_promotion`` where each weight tile is read by few tiles (a dense problem within
    :data:`STREAM_MAX_M_BLOCKS` m-blocks of ``block_m`` rows, any K; a masked one with at most
    :data:`GROUPED_STREAM_MAX_M` rows per group), else the default 256 bytes.

    Measured on an H200 (bench_decode.py beside the same configs at 256 bytes): 128 bytes shortened
    the dense decode chain at M = 1 to 128, more with every GEMM of the layer promoted (the masked
    experts too), and the layer chain. On an H100 the dense chain gained nothing: it keeps 256. Large
    M loses with 128 on both chips; the contiguous and offsets kinds were not measured: both keep 256.
    """
    if problem.kind is ProblemKind.DENSE:
        few_readers = ceil_div(problem.m, block_m) <= STREAM_MAX_M_BLOCKS
    else:
        few_readers = problem.kind is ProblemKind.GROUPED_MASKED and problem.expected_m <= GROUPED_STREAM_MAX_M
    return chip.stream_l2_promotion if few_readers else family.DEFAULT_L2_PROMOTION


GROUPED_STREAM_MAX_M = 64
"""Most rows per group (``expected_m``) for which a grouped problem's weights load evict-first
(:func:`grouped_streams_b`).

Measured: with evict-first, masked experts of 20 rows ran faster on every shape tried, and experts
of 192 rows (256x128 tile) slower."""

GROUPED_MANY_STREAMS_MIN_GROUPS = 16
"""With at least this many groups, each over at least :data:`GROUPED_MANY_STREAMS_MIN_K_BLOCKS`
k-blocks, a grouped problem's weights load without the evict-first policy (:func:`grouped_streams_b`)."""
GROUPED_MANY_STREAMS_MIN_K_BLOCKS = 24
"""See :data:`GROUPED_MANY_STREAMS_MIN_GROUPS` (24 k-blocks: K >= 3072)."""


def grouped_streams_b(problem: Problem, k_blocks: int) -> bool:
    """Whether a grouped ``problem`` whose CTAs run ``k_blocks`` k-blocks per tile loads its
    weights evict-first (``KernelConfig.evict_first_b``): a group of at most
    :data:`GROUPED_STREAM_MAX_M` rows (each expert's weights then stream once) over at least
    :data:`STREAM_MIN_K_BLOCKS` k-blocks, unless there are at least
    :data:`GROUPED_MANY_STREAMS_MIN_GROUPS` groups over at least
    :data:`GROUPED_MANY_STREAMS_MIN_K_BLOCKS` k-blocks each.

    Measured (the selector's masked pick built with and without the policy, both chips): without it
    16 and 32 experts of 20 rows at K >= 3072 ran faster; with it the same counts at K = 2048 ran
    faster, and 6 experts at every K. Why the policy costs with many long
    streams was not found: not the evict-last A (B alone evict-first measured the same) and not
    the L2 promotion.
    """
    if problem.expected_m > GROUPED_STREAM_MAX_M or not streams_b(1, k_blocks):
        return False
    return not (problem.num_groups >= GROUPED_MANY_STREAMS_MIN_GROUPS and k_blocks >= GROUPED_MANY_STREAMS_MIN_K_BLOCKS)


LONG_K_BLOCKS = 32
"""Fewest k-blocks per CTA (K >= 4096 unsplit) for which :func:`k_unroll_for` picks 6."""


UNROLL_MAX_STRADDLE_COPIES = 3
"""Most copies of the k-loop (:func:`straddle_copies`) a kernel may have for :func:`k_unroll_for`
to pick 6."""


def straddle_copies(block_n: int) -> int:
    """How many copies of the k-loop a kernel of ``block_n``-wide tiles holds: one per point at
    which a tile can straddle two 128-row b_scale blocks, as the kernel's
    ``dispatch_first_blocks`` instantiates them (multiples of ``gcd(block_n, 128) / 8`` 8-column
    blocks up to 16 and below ``block_n / 8``), plus the whole tile; 1 when ``block_n`` divides
    128. E.g. 128: 1, 256: 2, 192: 3, 160: 5, 144: 9."""
    if 128 % block_n == 0:
        return 1
    whole, step = block_n // 8, math.gcd(block_n, 128) // 8
    return len([c for c in range(step, 128 // 8 + 1, step) if c < whole]) + 1


def k_unroll_for(accum_buffers: int, k_blocks_per_cta: int, block_n=None) -> int:
    """k-blocks per unrolled body of the one-buffer k-loop (``KernelConfig.k_unroll``) for a CTA
    that runs ``k_blocks_per_cta`` k-blocks per tile: 6 from :data:`LONG_K_BLOCKS` on, else 3;
    always 3 with two accumulator buffers (their loop has its own unrolling), and, given the
    tiles' width ``block_n`` (the dense bf16 kind, :func:`plain_bf16`; None: not checked), for
    tiles whose kernel holds more than :data:`UNROLL_MAX_STRADDLE_COPIES` copies of the k-loop
    (:func:`straddle_copies`). A pick given one buffer by :func:`one_buffer_for_two_warpgroups`
    takes :func:`swap_unroll_for` instead.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    NOTES: the copies' code outgrows the SM's instruction cache (128x160 by 6 is 5,704 instructions
    against 3,704 by 3): after another kernel (a cold instruction cache, as in a model's layer) it
    lost against by 3, though it was as fast when it ran after itself.
    """
    if accum_buffers != 1 or (block_n is not None and straddle_copies(block_n) > UNROLL_MAX_STRADDLE_COPIES):
        return 3
    return 6 if k_blocks_per_cta >= LONG_K_BLOCKS else 3


def unroll_width(problem: Problem, c):
    """The tile width :func:`k_unroll_for` checks for candidate or config ``c`` of ``problem``:
    ``c.block_n`` for the dense bf16 kind (:func:`plain_bf16`), else None (not checked)."""
    return c.block_n if plain_bf16(problem) else None


SWAP_UNROLL_BLOCK_NS = (64, 96)
"""Tile widths for which a pick given one buffer by :func:`one_buffer_for_two_warpgroups` may run
its k-loop unrolled by 6 (:func:`swap_unroll_for`)."""


def swap_unroll_for(problem: Problem, c, k_blocks_per_cta: int) -> int:
    """``KernelConfig.k_unroll`` of candidate ``c``, a two-buffer pick that runs with one buffer
    (:func:`one_buffer_for_two_warpgroups`), over ``k_blocks_per_cta`` k-blocks per tile: 6 from
    :data:`LONG_K_BLOCKS` on when its tiles are :data:`SWAP_UNROLL_BLOCK_NS` columns wide and
    ``problem`` has more than :data:`STREAM_MAX_M_BLOCKS` m-blocks of them, else 3 (the two-buffer
    loop's unrolling).

    Measured: docs/performance.md, 'What the selector picks, and why'.
    NOTES: within two m-blocks the H200's picks promote L2 misses to 128 bytes (:func:`l2_promotion_for`),
    which the A/B did not run; there (128x7168x16384 at M = 128) the decode chain was slower by 6 than by 3.
    """
    if c.block_n not in SWAP_UNROLL_BLOCK_NS or ceil_div(problem.m, c.block_m) <= STREAM_MAX_M_BLOCKS:
        return 3
    return k_unroll_for(1, k_blocks_per_cta, c.block_n)


STATIC_K_MAX_K_BLOCKS = 16
"""Most K blocks (K <= 2048) for which :func:`static_k_blocks_for` fixes K at compile time on any
one-buffer k-loop."""
STATIC_K_LONG_MAX_K_BLOCKS = 64
"""Most K blocks (K <= 8192) for which :func:`static_k_blocks_for` fixes K at compile time on a
dense one-buffer k-loop the selector would unroll by 3 (``KernelConfig.k_unroll``), or on any one
of the masked kind (one kernel per K: K of up to 8192 only)."""
STATIC_K_KINDS = (ProblemKind.DENSE, ProblemKind.GROUPED_MASKED, ProblemKind.GROUPED_OFFSETS, ProblemKind.GROUPED_PSUM)
"""The kinds whose bf16 GEMM :func:`static_k_blocks_for` builds for their K (the contiguous kind
measured even; the K-grouped kind cannot)."""


def static_k_blocks_for(problem: Problem, c, k_unroll: int = 3) -> int:
    """``KernelConfig.static_k_blocks`` for candidate or config ``c`` of ``problem`` whose
    run-time k-loop would be unrolled by ``k_unroll``: its K blocks (``ceil(k / 128)``) when they
    are a multiple of the kernel's unrolled body (:data:`deep_tile.kernels.fp8_gemm.STATIC_K_UNROLL`)
    and at most :data:`STATIC_K_MAX_K_BLOCKS`, or at most :data:`STATIC_K_LONG_MAX_K_BLOCKS` for the
    dense kind with ``k_unroll`` 3 or the masked kind, the problem is one of :func:`bf16_without_c` of a kind in
    :data:`STATIC_K_KINDS`, and ``c`` runs the persistent one-buffer k-loop (no split-K, one
    accumulator buffer); else 0 (K a run-time value).

    Measured: docs/performance.md, 'What the selector picks, and why'.
    NOTES: over long K a dense loop the selector unrolls by 6 keeps K a run-time value: with K fixed
    it would run unrolled by 4, and on 128x256 and 256x128 that was even where measured; the masked
    kind's such loops ran a little faster with it on both chips. The offsets and psum kinds were not
    measured over long K.
    """
    if problem.kind not in STATIC_K_KINDS or not bf16_without_c(problem):
        return 0
    k_blocks = ceil_div(problem.k, family.BLOCK_K)
    long_tier = (k_unroll == 3 and problem.kind is ProblemKind.DENSE) or problem.kind is ProblemKind.GROUPED_MASKED
    longest = STATIC_K_LONG_MAX_K_BLOCKS if long_tier else STATIC_K_MAX_K_BLOCKS
    if k_blocks > longest or k_blocks % family.STATIC_K_UNROLL != 0:
        return 0
    return 0 if family.static_k_problems(k_blocks, problem.kind, c.split_k, c.accum_buffers) else k_blocks


STATIC_RING_TILES = ((128, 64),)
"""(block_m, block_n) of the narrow one-buffer twins whose k-loop unrolled by 6 :func:`static_ring_for`
runs with the stage ring as immediates."""
RING_TILE = (128, 192)
"""(block_m, block_n) of the wide one-buffer tile whose k-loop :func:`static_ring_for` runs with the
stage ring as immediates over :data:`RING_TILE_MIN_K_BLOCKS` to :data:`STATIC_K_LONG_MAX_K_BLOCKS`
K blocks, and which :func:`_ring_tile_first` puts before the wider tiles where it fits N."""
RING_TILE_OVER = ((128, 256), (256, 128))
"""(block_m, block_n) of the wider first choices :func:`_ring_tile_first` puts :data:`RING_TILE`
before."""
RING_TILE_MIN_K_BLOCKS = 28
"""Fewest K blocks (K = 3584) for which :func:`static_ring_for` gives :data:`RING_TILE` the ring."""


def static_ring_for(problem: Problem, c, k_unroll: int) -> bool:
    """``KernelConfig.static_ring`` for candidate ``c`` of ``problem`` whose one-buffer k-loop
    would be unrolled by ``k_unroll`` (then K is fixed at its K blocks, ``static_k_blocks``): the
    dense bf16 GEMM (:func:`plain_bf16`) without split-K or multicast, whose K blocks are at most
    :data:`STATIC_K_LONG_MAX_K_BLOCKS` and whole passes over its stages
    (:func:`deep_tile.kernels.fp8_gemm.static_ring_problems`), on
    - a :data:`STATIC_RING_TILES` tile unrolled by 6 (the narrow one-buffer twins over long K:
      :func:`swap_unroll_for`), or
    - the one-buffer :data:`RING_TILE` from :data:`RING_TILE_MIN_K_BLOCKS` K blocks on.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    NOTES: 128x96 ran faster with it on an H200 but slower on an H100, and 256x64 was even on both;
    so not those.
    """
    k_blocks = ceil_div(problem.k, family.BLOCK_K)
    tile = (c.block_m, c.block_n)
    narrow = tile in STATIC_RING_TILES and k_unroll == 6
    wide = tile == RING_TILE and c.accum_buffers == 1 and k_blocks >= RING_TILE_MIN_K_BLOCKS
    return (plain_bf16(problem) and (narrow or wide) and c.split_k == 1 and c.num_multicast == 1
            and k_blocks <= STATIC_K_LONG_MAX_K_BLOCKS
            and not family.static_ring_problems(True, k_blocks, c.num_stages, problem.b_scale_1d, problem.kind))


RING_TILE_TOLERANCE = 0.08
"""How much slower than a wider first choice the model may predict :data:`RING_TILE` and still put
it first (:func:`_ring_tile_first`)."""


def _ring_tile_first(ranked: tuple, problem: Problem) -> tuple:
    """``ranked`` with the one-buffer :data:`RING_TILE` candidate first when the first choice is an
    unsplit 128x256 or 256x128 tile without multicast, the ring tile's columns fit N exactly
    (``N % 192 == 0``), the ring applies to it (:func:`static_ring_for`) and the model predicts
    it within :data:`RING_TILE_TOLERANCE` of the first choice. The model sees neither the ring nor
    that 128x192's WGMMAs, 192 wide, read less shared memory per FLOP than the 128-wide parts of
    128x256 (one WGMMA chain per k-block and warpgroup instead of two that each read the slab's
    A): it predicted 128x192 slower than the wider tiles at N = 3072 and 6144, where it ran faster
    with the ring on both chips.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    best = ranked[0]
    b = best.candidate
    if (not plain_bf16(problem) or problem.n % RING_TILE[1] or b.split_k != 1 or b.num_multicast != 1
            or (b.block_m, b.block_n) not in RING_TILE_OVER):
        return ranked
    for e in ranked[1:]:
        c = e.candidate
        # (static_ring_for holds RING_TILE to one buffer; its ring does not depend on the unrolling)
        if ((c.block_m, c.block_n) == RING_TILE and static_ring_for(problem, c, 6)
                and e.time_s <= best.time_s * (1 + RING_TILE_TOLERANCE)):
            return (e,) + tuple(x for x in ranked if x is not e)
    return ranked


STREAM_MAX_M_BLOCKS = 2
"""Most m-blocks for which :func:`streams_b` holds over :data:`STREAM_MIN_K_BLOCKS` k-blocks."""
STREAM_MIN_K_BLOCKS = 8
"""Fewest 128-wide k-blocks for which :func:`streams_b` holds."""
LONG_STREAM_MAX_M_BLOCKS = 8
"""Most m-blocks for which :func:`streams_b` holds over :data:`LONG_STREAM_MIN_K_BLOCKS` k-blocks."""
LONG_STREAM_MIN_K_BLOCKS = 32
"""Fewest k-blocks (K >= 4096) for which B read by up to :data:`LONG_STREAM_MAX_M_BLOCKS` m-blocks
is a stream (:func:`streams_b`)."""


def streams_b(m_blocks: int, k_blocks: int, long_tier: bool = True) -> bool:
    """Whether B is a long stream for a tiling with ``m_blocks`` tiles along M and ``k_blocks``
    128-wide blocks along K (all splits together), so that its lines should not displace others
    in L2 (``KernelConfig.evict_first_b``): each B tile is read by at most
    :data:`STREAM_MAX_M_BLOCKS` tiles (one per m-block) over at least :data:`STREAM_MIN_K_BLOCKS`
    k-blocks, or (``long_tier``: the dense bf16 kind, :func:`plain_bf16`) by at most
    :data:`LONG_STREAM_MAX_M_BLOCKS` over at least :data:`LONG_STREAM_MIN_K_BLOCKS`.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    NOTES: up to eight m-blocks at K <= 2048 it lost, hence the longer K of the second tier.
    """
    if long_tier and k_blocks >= LONG_STREAM_MIN_K_BLOCKS:
        return m_blocks <= LONG_STREAM_MAX_M_BLOCKS
    return m_blocks <= STREAM_MAX_M_BLOCKS and k_blocks >= STREAM_MIN_K_BLOCKS


@functools.lru_cache(maxsize=4096)
def _select(problem: Problem, num_sms: int, max_smem: int, chip: ChipFacts) -> KernelConfig:
    best = _ranked(problem, num_sms, max_smem, chip)[0]
    return config_from_estimate(problem, best, num_sms, chip)


@functools.lru_cache(maxsize=256)
def _select_capped(problem: Problem, num_sms: int, max_smem: int, chip: ChipFacts, max_block_n: int,
                   mode: int) -> KernelConfig:
    for e in _ranked(problem, num_sms, max_smem, chip):
        c = e.candidate
        if c.block_n > max_block_n or c.split_k > 1:
            continue
        registers = family.accum_registers(c.block_m, c.block_n, c.wgmma_n, c.accum_buffers)
        if mode == family.SIGNAL_AFTER_STORE and not (
                c.block_m <= 128 and c.accum_buffers == 2 and c.num_multicast == 1
                and (c.block_m == 64 or registers < family.ACCUM_REGISTER_BUDGET)):
            continue
        # K stays a run-time value: static_k_blocks_for was measured without completion signals
        return dataclasses.replace(config_from_estimate(problem, e, num_sms, chip), static_k_blocks=0)
    raise UnsupportedProblemError(f"select_config: no tile of at most {max_block_n} columns fits max_smem={max_smem} bytes")


def select_signal_config(problem: Problem, num_sms: int, max_block_n: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK,
                         chip: ChipFacts = arch.DEFAULT_CHIP, mode: int = family.SIGNAL_AT_NEXT_STORE) -> KernelConfig:
    """:func:`select_config` for the signalling masked kernel (``mode``, one of
    :data:`deep_tile.kernels.fp8_gemm.SIGNAL_MODES`): the fastest-ranked candidate whose tile is at
    most ``max_block_n`` columns wide (SGLang's cap on DeepGEMM's tile width; the counters'
    threshold is ``ceil(N / block_n)``) and not split-K (the grouped kinds never are). Mode
    SIGNAL_AFTER_STORE also needs at most 128 rows, two accumulator buffers, no multicast, and with
    two consumer warpgroups fewer accumulator registers than the budget.
    NOTES: built with the counters raised right after each store (mode 1), configs at the register
    limit spilled (nvrtc/nvcc 13): 256-row tiles, one-buffer k-loops (128x256 /128, 128x192), 64x128
    with multicast of A, and under nvcc 128x128 with two buffers of 64 registers; raised at the next
    store (mode 2) the plain selector's picks of 11 masked shapes (256x128 and 128x256 one-buffer,
    multicast included) built spill-free with both compilers (tests/test_kernel_build.py builds a few
    of each mode).

    Raises:
        as :func:`select_config`; UnsupportedProblemError also when no candidate is narrow enough.
    """
    problem = _checked("select_signal_config", problem, num_sms, max_smem)
    check_positive_int("select_signal_config", "max_block_n", max_block_n)
    if mode not in family.SIGNAL_MODES:
        raise ValueError(f"select_signal_config: mode must be one of {family.SIGNAL_MODES}; got {mode!r}")
    return _select_capped(problem, num_sms, min(max_smem, arch.MAX_SMEM_PER_BLOCK), chip, max_block_n, mode)


def select_config(problem: Problem, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK,
                  chip: ChipFacts = arch.DEFAULT_CHIP) -> KernelConfig:
    """The kernel configuration for ``problem`` (a :class:`deep_tile.gemm.problem.Problem`, e.g.
    ``Problem(m, n, k)`` for ``out[m, n] = a[m, k] @ b[n, k]^T``) on ``num_sms`` SMs.

    Pure and cached. ``max_smem`` is the device's dynamic shared-memory limit per block in bytes
    (clipped to the sm_90 maximum, 232448); ``chip`` supplies the HBM bandwidth and the
    resident clusters of the model.

    Raises:
        TypeError: ``problem`` is not a :class:`deep_tile.gemm.problem.Problem`.
        ValueError: a size, ``num_sms`` or ``max_smem`` is not a positive int (the message names it).
        UnsupportedProblemError: no tile shape fits ``max_smem``.
    """
    problem = _checked("select_config", problem, num_sms, max_smem)
    return _select(problem, num_sms, min(max_smem, arch.MAX_SMEM_PER_BLOCK), chip)
