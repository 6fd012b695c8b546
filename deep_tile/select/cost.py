"""How candidates are ranked, and the roofline estimate shown by ``explain``.

The ranking model
-----------------
The kernel is persistent: ``grid`` CTAs (one per SM) walk the tile list, so the run takes
``waves = ceil(tiles / num_sms)`` rounds, and each CTA pays every tile's full cost (its K loop)
plus a fixed per-tile overhead (pipeline fill = one load latency, the epilogue store). Within one
configuration all tiles cost about the same, so time ~ waves x (tile cost). Candidates are
compared lexicographically by these rules, each a small function below (smaller key is better):

0. :func:`fastest_compute` -- only for compute-bound problems (``2MN / (M + N)`` above
   :data:`deep_tile.arch.COMPUTE_BOUND_INTENSITY`): the estimated time
   ``waves x bm x bn / efficiency``, with the measured per-tile efficiency table
   :data:`deep_tile.arch.TILE_EFFICIENCY`. Tile shapes differ by up to 2.5x in throughput
   (128x128 runs 1.09x faster per tile than 128x144), which the wave count alone cannot see. For
   memory-bound problems the key is 0 for everyone and the rules below decide.
1. :func:`fewest_waves` -- fewer rounds of tiles. This is also where the per-tile overhead is
   accounted for: it is paid once per wave on the critical path, so fewer waves pay it less often.
   Among one-wave candidates every CTA pays it exactly once, so it does not separate them.
2. :func:`best_last_wave` -- more tiles in the last wave, i.e. more SMs busy. For a memory-bound
   problem more busy SMs means more aggregate load bandwidth (L2 -> SM); for a compute-bound one,
   more tensor cores. Consequence, as in DeepGEMM: for small M this picks narrow tiles, e.g.
   M=64, N=2112 -> 132 tiles of 64x16. That is deliberate: each SM then streams
   (64 + 16) x K bytes instead of (64 + 128) x K, and the whole weight matrix is read once either way.
3. :func:`highest_intensity` -- more FLOPs per byte of A/B tile loads over the whole problem:
   ``2MN / (M * n_blocks + N * m_blocks)``. A is loaded once per n-block and B once per m-block;
   rows and columns past the edge of the matrix are zero-filled by TMA and cost no traffic. For
   tiles that divide the problem this is the per-tile intensity ``2 bm bn / (bm + bn)``; when they
   do not, it penalises padding (so a 256-row tile never beats a 128-row one at M = 128).
4. :func:`most_stages` -- a deeper pipeline hides more load latency.
5. :func:`smallest_tile` -- a final deterministic tie-break: the smaller (less padded) tile.

The roofline estimate
---------------------
:func:`roofline` gives two lower bounds on the run time: compute-bound
``2MNK / (FP8 peak on num_sms SMs x wave efficiency)`` where the wave efficiency is the fraction
of the tile slots of all waves that hold useful output, ``MN / (waves x num_sms x bm x bn)``;
and memory-bound ``bytes / HBM bandwidth`` with the minimal traffic
``MK + NK + 2MN + 4 M ceil(K/128) + 4 ceil(N/128) ceil(K/128)`` (every operand read once, from
HBM, the bf16 output written once; re-reads of A and B are assumed to hit L2). The larger bound
names the regime. Pure Python; no device access.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from deep_tile import arch
from deep_tile.arch import ChipFacts
from deep_tile.select.candidates import Candidate

__all__ = [
    "Score", "score", "tile_efficiency", "fastest_compute", "fewest_waves", "best_last_wave", "highest_intensity", "most_stages",
    "smallest_tile", "RULES", "rank_key", "why_lost", "Roofline", "min_bytes", "roofline",
]


@dataclass(frozen=True)
class Score:
    """The facts the ranking rules look at, for one candidate on one problem.

    Attributes:
        candidate: the tile shape and stage count.
        m_blocks, n_blocks: tiles along M and N.
        num_sms: SMs the persistent grid may use.
        intensity: whole-problem FLOPs per byte of A/B tile loads (exact fraction).
    """

    candidate: Candidate
    m_blocks: int
    n_blocks: int
    num_sms: int
    intensity: Fraction
    problem_intensity: float = 0.0

    @property
    def tiles(self) -> int:
        """Output tiles in all."""
        return self.m_blocks * self.n_blocks

    @property
    def waves(self) -> int:
        """Rounds of tiles over ``num_sms`` SMs."""
        return math.ceil(self.tiles / self.num_sms)

    @property
    def last_wave_tiles(self) -> int:
        """Tiles (busy SMs) in the last wave."""
        return self.tiles - (self.waves - 1) * self.num_sms

    @property
    def last_wave_util(self) -> float:
        """Fraction of the SMs busy in the last wave."""
        return self.last_wave_tiles / self.num_sms

    @property
    def tile_intensity(self) -> float:
        """Nominal FLOPs per byte of one full tile: ``2 bm bn 128 / ((bm + bn) 128)``."""
        bm, bn = self.candidate.block_m, self.candidate.block_n
        return 2 * bm * bn / (bm + bn)


def score(candidate: Candidate, m: int, n: int, num_sms: int) -> Score:
    """Score ``candidate`` on an ``m x n`` output over ``num_sms`` SMs."""
    m_blocks = math.ceil(m / candidate.block_m)
    n_blocks = math.ceil(n / candidate.block_n)
    return Score(candidate, m_blocks, n_blocks, num_sms, Fraction(2 * m * n, m * n_blocks + n * m_blocks),
                 problem_intensity=2 * m * n / (m + n))


def tile_efficiency(block_m: int, block_n: int) -> float:
    """Measured throughput of a tile shape relative to 128x128 (multicast excluded)."""
    eff = arch.TILE_EFFICIENCY[block_m][block_n]
    if (block_m, block_n) in arch.SPILLS_WITHOUT_MULTICAST:
        eff *= arch.MULTICAST_EFFICIENCY
    return eff


def fastest_compute(s: Score) -> float:
    """Rule 0: for compute-bound problems, less estimated compute time is better."""
    if s.problem_intensity < arch.COMPUTE_BOUND_INTENSITY:
        return 0.0
    c = s.candidate
    return round(s.waves * c.block_m * c.block_n / tile_efficiency(c.block_m, c.block_n), 3)


def fewest_waves(s: Score) -> int:
    """Rule 1: fewer waves of tiles is better."""
    return s.waves


def best_last_wave(s: Score) -> int:
    """Rule 2: more tiles (busy SMs) in the last wave is better."""
    return -s.last_wave_tiles


def highest_intensity(s: Score) -> Fraction:
    """Rule 3: more FLOPs per byte of A/B loads is better."""
    return -s.intensity


def most_stages(s: Score) -> int:
    """Rule 4: a deeper pipeline is better."""
    return -s.candidate.num_stages


def smallest_tile(s: Score) -> tuple:
    """Rule 5: the smaller tile (then the shorter one) wins a complete tie."""
    return (s.candidate.block_m * s.candidate.block_n, s.candidate.block_m)


@dataclass(frozen=True)
class _Rule:
    name: str
    key: Callable[[Score], object]
    describe: Callable[[Score], str]


RULES = (
    _Rule("estimated time", fastest_compute,
          lambda s: f"{s.waves} waves x {s.candidate.shape} at efficiency "
                    f"{tile_efficiency(s.candidate.block_m, s.candidate.block_n):.2f}"),
    _Rule("waves", fewest_waves, lambda s: f"{s.waves} waves"),
    _Rule("last-wave use", best_last_wave, lambda s: f"last wave {s.last_wave_tiles}/{s.num_sms} SMs"),
    _Rule("intensity", highest_intensity, lambda s: f"{float(s.intensity):.1f} FLOP/B"),
    _Rule("stages", most_stages, lambda s: f"{s.candidate.num_stages} stages"),
    _Rule("tile size", smallest_tile, lambda s: f"{s.candidate.shape} tile"),
)
"""The ranking rules in priority order."""


def rank_key(s: Score) -> tuple:
    """Sort key of a score: the rule keys in priority order (smallest sorts first)."""
    return tuple(rule.key(s) for rule in RULES)


def why_lost(winner: Score, loser: Score) -> str:
    """One phrase naming the first rule that puts ``loser`` behind ``winner``."""
    for rule in RULES:
        if rule.key(winner) != rule.key(loser):
            return f"{rule.name}: {rule.describe(loser)} vs {rule.describe(winner)}"
    return "identical score"


@dataclass(frozen=True)
class Roofline:
    """Lower bounds on the run time of one problem with one tile shape.

    Attributes:
        flops: ``2 M N K``.
        bytes: minimal HBM traffic (see :func:`min_bytes`).
        wave_efficiency: useful fraction of all tile slots, ``MN / (waves num_sms bm bn)``.
        compute_s: compute-bound time in seconds.
        memory_s: memory-bound time in seconds.
    """

    flops: int
    bytes: int
    wave_efficiency: float
    compute_s: float
    memory_s: float

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``: whichever bound is larger."""
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def time_s(self) -> float:
        """The larger of the two bounds."""
        return max(self.compute_s, self.memory_s)


def min_bytes(m: int, n: int, k: int) -> int:
    """Minimal HBM bytes: FP8 A and B, bf16 D, fp32 1x128 A scales and 128x128 B scales."""
    k_groups = math.ceil(k / 128)
    return m * k + n * k + 2 * m * n + 4 * m * k_groups + 4 * math.ceil(n / 128) * k_groups


def roofline(m: int, n: int, k: int, s: Score, chip: ChipFacts) -> Roofline:
    """Compute- and memory-bound times of ``m x n x k`` with the tile of ``s`` on ``chip``."""
    tile_area = s.candidate.block_m * s.candidate.block_n
    efficiency = m * n / (s.waves * s.num_sms * tile_area)
    flops = 2 * m * n * k
    nbytes = min_bytes(m, n, k)
    return Roofline(flops, nbytes, efficiency, flops / (chip.fp8_flops_on(s.num_sms) * efficiency),
                    nbytes / chip.hbm_bytes_per_s)
