"""The selector's performance model: predicted run time of a candidate on a problem.

The kernel is a pipeline per CTA: a producer streams one 128-wide K block of A and B per stage
from L2 (and HBM behind it) while the consumers run WGMMAs and promote the partial sums. Per CTA
and k-block the model combines three costs in SM clock cycles (a soft maximum, ``softness``,
since they overlap imperfectly):

- ``tensor``: the tile's FP8 MACs at :data:`TENSOR_FLOP_PER_CYCLE` per SM, times the reachable
  fraction of that peak and the efficiency of the tile's WGMMA width (:func:`wgmma_efficiency`);
- ``l2``: the bytes the CTA loads, A rows (halved under multicast on A) plus B rows (halved
  under multicast on B) times 128, at ``l2_bytes_per_cycle`` per SM;
- ``latency``: the dependent chain of one k-block (wait for data, WGMMA, wait, promote):
  ``chain_cycles`` per sub-tile of a consumer warpgroup (the warpgroups of a tile run their
  chains side by side), shortened by ``overlap_factor`` with two accumulator buffers, plus the
  k-block's bytes at ``stream_bytes_per_cycle`` (what one SM pulls when it works alone).

Multicast couples the two CTAs of a cluster stage by stage: their k-blocks cost
``1 + multicast_penalty`` times as much, and their chain ``multicast_chain_cycles`` more. A CTA runs its tiles one after another (persistent
grid) paying ``tile_cycles`` per tile (epilogue, pipeline fill). A split-K launch runs one
tile per cluster in waves of the clusters that fit at once (:meth:`ChipFacts.resident_clusters`)
and adds the reduction (``split_k_cycles``, ``split_k_cycles_per_cta`` per CTA of the
cluster, and reading the valid rows of the partials at ``dsmem_bytes_per_cycle``). The whole problem is
also held to its compulsory HBM traffic at ``hbm_efficiency`` of the chip's bandwidth (soft
maximum again), plus ``launch_seconds``. The constants are a :class:`ModelParams`, fitted by
benchmarks/probes/fit_model.py to sweeps of forced configurations (benchmarks/data/); the model ranks
candidates, its absolute times are estimates. Pure Python.
"""
from __future__ import annotations

from dataclasses import dataclass

from deep_tile.arch import DEFAULT_CHIP, ChipFacts
from deep_tile.common import ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind
from deep_tile.select.candidates import Candidate
from deep_tile.select.config import RASTER_WIDTH

__all__ = ["ModelParams", "DEFAULT_PARAMS", "TENSOR_FLOP_PER_CYCLE", "MIN_BALANCED_ROUNDS", "COUNT_SPREAD",
           "wgmma_efficiency", "Estimate", "estimate", "grid_size", "table_grid_size", "table_rounds",
           "averages_over_counts", "min_bytes",
           "multicast_shared_fraction", "streamed_b_pair", "MAX_GROUP_TILE_M"]

TENSOR_FLOP_PER_CYCLE = 8192
"""Dense FP8 tensor-core FLOP per cycle per SM (1979 TFLOPS / 132 SMs / 1.83 GHz)."""


@dataclass(frozen=True)
class ModelParams:
    """The model's constants (see the module doc for where each enters). The defaults were
    fitted by benchmarks/probes/fit_model.py (``--picks 400``) to the H100 sweeps
    benchmarks/data/sweep_*_h100_diet_*.json (999 timed configurations on 55 shapes, taken after
    the k-loop was slimmed): with them the selector's pick lands close to the best measured
    configuration (docs/performance.md, 'What the selector picks, and why'). (``clock_hz`` and
    ``overlap_factor`` ended on their search bounds: they are fitting constants, not facts.)

    Attributes:
        clock_hz: SM clock the cycle counts are converted at.
        tensor_efficiency: fraction of the FP8 tensor peak a full-width WGMMA chain reaches.
        irregular_width_efficiency: relative speed of WGMMA widths that are multiples of 32 but
            not powers of two (96, 160, 192, ...). Set by hand to 0.9 (the fit gave 0.763 before
            b_scale was staged in shared memory): 128x192 tiles ran a little slower per FLOP than
            128x256, and the dense picks that the value moves ran faster.
        odd_width_efficiency: the same for widths that are not multiples of 32 (80, 112, 144,
            ...): the fit's 0.763 squared, set by hand: the benchmark ran 64x112 at
            128x7168x2048 much slower than the sweep had it, and slower than 64x128.
        l2_bytes_per_cycle: L2 -> shared memory bytes per cycle per SM with every SM loading.
        chain_cycles: one k-block's dependent chain per sub-tile.
        overlap_factor: fraction of the chain left with two accumulator buffers.
        stream_bytes_per_cycle: bytes per cycle one SM streams on its own (latency bound).
        multicast_penalty: extra cost per k-block of a 2-CTA multicast pair (a fraction).
        multicast_chain_cycles: extra chain per k-block of a multicast pair (the stage handshake
            between the two CTAs).
        tile_cycles: per tile outside the k-loop (epilogue store, pipeline fill).
        split_k_cycles: the split-K epilogue besides reading the partials, per tile.
        split_k_cycles_per_cta: and per CTA of the cluster (barriers and reads grow with it).
        dsmem_bytes_per_cycle: rate at which a CTA reads the cluster's partials (the valid rows).
        hbm_efficiency: fraction of the chip's HBM bandwidth a GEMM reaches.
        launch_seconds: fixed time of a launch (grid start, the tail of the last CTAs).
        softness: the exponent of the soft maxima (large: the maximum).
    """

    clock_hz: float = 2.0e9
    tensor_efficiency: float = 0.921
    irregular_width_efficiency: float = 0.9
    odd_width_efficiency: float = 0.763 ** 2
    l2_bytes_per_cycle: float = 65.9
    chain_cycles: float = 180.4
    overlap_factor: float = 1.0
    stream_bytes_per_cycle: float = 366.2
    multicast_penalty: float = 0.0701
    multicast_chain_cycles: float = 287.4
    tile_cycles: float = 1130.1
    split_k_cycles: float = 3989.5
    split_k_cycles_per_cta: float = 115.5
    dsmem_bytes_per_cycle: float = 2.90
    hbm_efficiency: float = 0.915
    launch_seconds: float = 7.42e-6
    softness: float = 1.764

DEFAULT_PARAMS = ModelParams()
"""The constants :func:`estimate` uses unless given others."""


def wgmma_efficiency(wgmma_n: int, params: "ModelParams | None" = None) -> float:
    """Tensor-pipe efficiency of a chain of ``m64 x wgmma_n x k32`` WGMMAs relative to 128 columns:
    narrow ones cannot keep the pipe full (assumed linear below 64 columns), and widths that are
    not a power of two ran measurably slower (``irregular_width_efficiency``, and
    ``odd_width_efficiency`` for widths that are not a multiple of 32; cause unknown)."""
    params = params or DEFAULT_PARAMS
    if wgmma_n & (wgmma_n - 1) == 0:
        irregular = 1.0
    elif wgmma_n % 32 == 0:
        irregular = params.irregular_width_efficiency
    else:  # 80, 112, 144, ...: slower still
        irregular = params.odd_width_efficiency
    return min(1.0, 0.3 + 0.7 * wgmma_n / 64) * irregular


def min_bytes(problem) -> int:
    """Minimal HBM bytes of ``problem`` (a :class:`deep_tile.gemm.problem.Problem`): FP8 A and B (one B
    per group), bf16 D, fp32 1x128 A scales and 128x128 B scales (per group)."""
    n, k, groups, k_blocks = problem.n, problem.k, problem.num_groups, problem.k_blocks
    m = problem.num_groups * problem.expected_m if problem.kind.grouped else problem.m  # real rows
    return m * k + groups * n * k + 2 * m * n + 4 * m * k_blocks + 4 * groups * ceil_div(n, 128) * k_blocks


def multicast_shared_fraction(m_blocks: int, n_blocks: int, on_a: bool, raster_width: int) -> float:
    """Fraction of the tiles whose cluster pair shares the multicast operand in the raster order
    (a band of odd width leaves one pair per row unshared)."""
    fast = n_blocks if on_a else m_blocks
    slow = m_blocks if on_a else n_blocks
    if fast * slow < 2:
        return 0.0
    last = fast % raster_width
    if last % 2 == 0:
        return 1.0
    unshared = slow * 1  # one unpaired tile per row of the odd last band
    return max(0.0, 1.0 - unshared / (fast * slow))


def streamed_b_pair(c: Candidate, problem) -> bool:
    """Whether ``c`` multicasts B over the two m-blocks of an expert of a grouped ``problem`` whose
    experts have at most two m-blocks (``expected_m <= 2 * block_m``): each weight tile is then read
    once, by the pair, as a stream from HBM.

    Measured on masked experts of 192 rows: 128x256 pairs sharing B ran faster than without, where the
    model with the multicast costs of L2-fed (dense) pairs ranked them slower. Not where one tile of
    :data:`MAX_GROUP_TILE_M` rows holds the whole expert: that tile reads each weight tile once
    without the pair's coupling, and ran faster."""
    return (problem.kind.grouped and c.num_multicast == 2 and not c.multicast_on_a
            and MAX_GROUP_TILE_M < problem.expected_m <= 2 * c.block_m)


MAX_GROUP_TILE_M = max(family.LEGAL_BLOCK_M)
"""The tallest tile: a group of at most this many rows fits one m-block of it."""


@dataclass(frozen=True)
class Estimate:
    """The model's account of one candidate on one problem.

    Attributes:
        candidate: the kernel instance.
        tiles: output tiles.
        ctas: CTAs doing work at once (grid, capped by the SM count).
        tiles_per_cta: tiles the busiest CTA runs (persistent), 1 under split-K; for a table kind
            the average over group sizes (:func:`table_rounds`).
        k_blocks_per_cta: k-blocks per tile and CTA.
        tensor_cycles, l2_cycles, latency_cycles: per k-block and CTA (see the module doc).
        compute_s: the CTAs' time, ``tiles_per_cta * (k_blocks * per-k-block + tile_cycles)``.
        memory_s: compulsory HBM traffic at the chip's bandwidth.
        time_s: the prediction.
    """

    candidate: Candidate
    tiles: int
    ctas: int
    tiles_per_cta: float
    k_blocks_per_cta: int
    tensor_cycles: float
    l2_cycles: float
    latency_cycles: float
    compute_s: float
    memory_s: float
    time_s: float

    @property
    def bound(self) -> str:
        """What limits the k-loop: ``"tensor"``, ``"l2"``, ``"latency"``, or ``"hbm"`` overall."""
        if self.memory_s >= self.compute_s:
            return "hbm"
        worst = max(self.tensor_cycles, self.l2_cycles, self.latency_cycles)
        return ("tensor" if worst == self.tensor_cycles else "l2" if worst == self.l2_cycles else "latency")


def _soft_max(values, q: float) -> float:
    return sum(v ** q for v in values) ** (1.0 / q)


MIN_BALANCED_ROUNDS = 3
"""Rounds of tiles per CTA from which :func:`grid_size` balances the persistent grid."""


def grid_size(tiles: int, num_sms: int, num_multicast: int, chip: ChipFacts = DEFAULT_CHIP) -> int:
    """CTAs of the persistent grid: ``min(num_sms, tiles)`` (under multicast rounded up to even, at
    least 2, and within the SMs and the 2-CTA clusters that can be resident at once on ``chip``;
    the launcher also caps it by the device's own count), then, from :data:`MIN_BALANCED_ROUNDS` rounds of tiles on,
    balanced: the fewest CTAs that finish in the same number of rounds, so every CTA gets the same
    number of tiles (to one). With fewer rounds the grid stays full: halving it for, say, 133
    tiles keeps the rounds but leaves half the SMs to pull the operands (not measured).

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    grid = min(num_sms, tiles)
    if num_multicast == 2:
        # An odd tile count rounds up: the last cluster's second CTA idles rather than one CTA
        # taking two tiles (64x64 mcA at 64x2112x7168, 33 tiles: 32 CTAs 32.2 us, 34 CTAs 19.8).
        grid = min(grid + grid % 2, num_sms - num_sms % 2, 2 * max(1, chip.resident_clusters(2, num_sms)))
        grid = max(2, grid)
    grid = max(grid, 1)
    rounds = ceil_div(tiles, grid)
    if rounds < MIN_BALANCED_ROUNDS:
        return grid
    balanced = ceil_div(tiles, rounds)
    if num_multicast == 2:
        balanced = max(2, balanced + balanced % 2)
    return min(grid, balanced)


def table_grid_size(problem, block_m: int, block_n: int, num_sms: int, num_multicast: int,
                    chip: ChipFacts = DEFAULT_CHIP) -> int:
    """CTAs of the persistent grid of a table kind (masked, offsets), whose tile count is known
    on the device only: full (:func:`grid_size` of at most ``num_sms`` tiles) up to the most
    tiles the kernel can run; balanced (:func:`grid_size` of them) only for the masked kind when
    every group size of :data:`COUNT_SPREAD` runs as many m-blocks as the buffer holds (``max_m``
    and 0.7 x ``expected_m`` in the same m-block count), so the tile count is as good as known.
    Where the counts may fall short of the most, a grid balanced for the most can cost a whole
    round (masked 6 x ~1024 rows, 4096x7168, ``max_m`` 896: 656 tiles run in 5 rounds on 132 CTAs,
    6 on 112).

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    most = problem.max_m_blocks(block_m) * ceil_div(problem.n, block_n)
    if problem.kind is ProblemKind.GROUPED_MASKED:
        if set(_spread_m_blocks(problem, block_m)) == {ceil_div(problem.m, block_m)}:
            return grid_size(most, num_sms, num_multicast, chip)
    return grid_size(min(most, num_sms), num_sms, num_multicast, chip)


def _spread_m_blocks(problem, block_m: int) -> tuple:
    """M-blocks of ``block_m`` rows of one group of each size of :data:`COUNT_SPREAD` times
    ``expected_m`` (at least 1 row; at most ``m`` rows for the masked kind)."""
    cap = problem.m if problem.kind is ProblemKind.GROUPED_MASKED else None
    rows = (max(int(f * problem.expected_m), 1) for f in COUNT_SPREAD)
    return tuple(ceil_div(r if cap is None else min(r, cap), block_m) for r in rows)


COUNT_SPREAD = tuple(0.7 + 0.05 * i for i in range(13))
"""Rows of one group of a table kind, as fractions of ``expected_m``, over which
:func:`table_rounds` averages: ``expected_m`` is a hint, and a group's real rows scatter around it
(DeepGEMM's tests draw them from 0.7-1.3 x ``expected_m``; routing does the like), so its last
m-block is on average half empty, and the tile count's rounds over the grid vary."""


def averages_over_counts(problem) -> bool:
    """Whether the model averages the tile rounds of ``problem`` over group sizes
    (:func:`table_rounds`): the table kinds whose tile count is known on the device only. The psum
    kind's padded rows give its count (:meth:`deep_tile.gemm.problem.Problem.m_blocks`)."""
    return problem.kind.has_table and problem.kind is not ProblemKind.GROUPED_PSUM


def table_rounds(problem, block_m: int, block_n: int, ctas: int) -> float:
    """Tiles per CTA of a table kind, averaged over group sizes of :data:`COUNT_SPREAD` times
    ``expected_m`` (at most ``m`` rows for the masked kind): a tile shape whose rows fit the hint
    exactly is charged for the padding real counts bring (256-row tiles twice that of 128-row
    ones), and the wave quantization of one count is not taken for certain.

    Measured: docs/performance.md, 'What the selector picks, and why'.
    """
    n_blocks = ceil_div(problem.n, block_n)
    spread = _spread_m_blocks(problem, block_m)
    return sum(ceil_div(problem.num_groups * blocks * n_blocks, ctas) for blocks in spread) / len(spread)


def estimate(c: Candidate, problem, num_sms: int, chip: ChipFacts, raster_width: int = RASTER_WIDTH,
             params: ModelParams = DEFAULT_PARAMS) -> Estimate:
    """Predict the run time of candidate ``c`` on ``problem`` (a :class:`deep_tile.gemm.problem.Problem`)
    with ``num_sms`` SMs on ``chip``."""
    m, n, k = problem.expected_m, problem.n, problem.k  # rows per group (dense: m)
    m_blocks, n_blocks = problem.m_blocks(c.block_m), ceil_div(n, c.block_n)
    tiles = m_blocks * n_blocks
    num_k_blocks = ceil_div(k, family.BLOCK_K)
    if c.split_k > 1:
        fit = max(1, chip.resident_clusters(c.split_k, num_sms))
        ctas = min(tiles, fit) * c.split_k
        tiles_per_cta = ceil_div(tiles, fit)  # waves of clusters
        k_blocks = ceil_div(num_k_blocks, c.split_k)
    elif problem.kind.has_table:
        ctas = table_grid_size(problem, c.block_m, c.block_n, num_sms, c.num_multicast, chip)
        tiles_per_cta = (table_rounds(problem, c.block_m, c.block_n, ctas) if averages_over_counts(problem)
                         else ceil_div(tiles, ctas))
        k_blocks = num_k_blocks
    else:
        ctas = grid_size(tiles, num_sms, c.num_multicast, chip)
        tiles_per_cta = ceil_div(tiles, ctas)
        k_blocks = num_k_blocks

    # Rows past the tensor are zero-filled by TMA, not read; a masked expert's slab is read whole
    # (its rows past masked_m too), so a tile there loads min(block_m, max_m) rows.
    rows_a = min(c.block_m, problem.m if problem.kind is ProblemKind.GROUPED_MASKED else m)
    a_bytes, b_bytes = rows_a * family.BLOCK_K, min(c.block_n, n) * family.BLOCK_K
    if c.num_multicast == 2:
        shared = multicast_shared_fraction(m_blocks, n_blocks, c.multicast_on_a, raster_width)
        if c.multicast_on_a:
            a_bytes *= 1 - shared / 2
        else:
            b_bytes *= 1 - shared / 2
    loaded = a_bytes + b_bytes + 4 * c.block_m
    l2 = loaded / params.l2_bytes_per_cycle
    tensor = (2 * c.block_m * c.block_n * family.BLOCK_K / TENSOR_FLOP_PER_CYCLE
              / (params.tensor_efficiency * wgmma_efficiency(c.wgmma_n, params)))
    # Each consumer warpgroup runs its own chain; the two warpgroups of a tile run side by side.
    subtiles = family.num_subtiles(c.block_m, c.block_n, c.wgmma_n)
    # The pair's coupling costs (multicast_penalty, multicast_chain_cycles) were fitted where the
    # operands come from L2; a grouped problem whose expert weights stream from HBM (each B tile
    # read by the two m-blocks of its expert at most) pays the stream's latency anyway, and
    # sharing B there measured faster than loading it twice (streamed_b_pair).
    coupled = c.num_multicast == 2 and not streamed_b_pair(c, problem)
    latency = (params.chain_cycles * subtiles * (params.overlap_factor if c.accum_buffers == 2 else 1.0)
               + loaded / params.stream_bytes_per_cycle
               + (params.multicast_chain_cycles if coupled else 0.0))
    per_k_block = _soft_max((tensor, l2, latency), params.softness)
    if coupled:
        per_k_block *= 1 + params.multicast_penalty
    cycles = tiles_per_cta * (k_blocks * per_k_block + params.tile_cycles)
    if c.split_k > 1:
        # Each CTA sums 1/S of the valid rows of S partials over distributed shared memory.
        partial_read = min(c.block_m, m) * c.block_n * 4 / params.dsmem_bytes_per_cycle
        cycles += tiles_per_cta * (params.split_k_cycles + params.split_k_cycles_per_cta * c.split_k + partial_read)
    compute_s = cycles / params.clock_hz
    memory_s = min_bytes(problem) / (chip.hbm_bytes_per_s * params.hbm_efficiency)
    time_s = _soft_max((compute_s, memory_s), params.softness) + params.launch_seconds
    return Estimate(c, tiles, ctas, tiles_per_cta, k_blocks, tensor, l2, latency, compute_s, memory_s, time_s)
