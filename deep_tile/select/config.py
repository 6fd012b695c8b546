"""``KernelConfig``: one instance of the FP8 GEMM kernel plus its launch parameters.

The fields map one-to-one onto the kernel's compile-time defines and its run-time launch
parameters (grid size, raster band width); everything else (shared memory, threads, registers,
the defines themselves) is derived through :mod:`deep_tile.kernels.fp8_gemm`, the owner of the
kernel's contract, so a config cannot disagree with the kernel or with itself.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

from deep_tile import arch
from deep_tile.common import ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind

__all__ = ["KernelConfig", "config_label", "RASTER_WIDTH", "WIDE_RASTER_WIDTH", "raster"]

RASTER_WIDTH = 8
"""Raster band width in tiles. With G tiles in flight per band row, about grid/G A panels and
G B panels are live in L2; G near sqrt(grid) keeps that smallest. Measured with 128x128 tiles at
4096x7168x16384 and 8192^3: width 8 ran 9% faster than 16 on an H100 (50 MB L2) and the same on
an H200 (60 MB L2); 4 was close to 8, 32 worse."""


WIDE_RASTER_WIDTH = 16
"""Raster band width (in m-blocks) of tiles wider than tall, whose bands run along M (see
:func:`raster`)."""


def raster(block_m: int, block_n: int, num_multicast: int = 1, split_k: int = 1,
           expert_m_blocks: Optional[int] = None) -> tuple:
    """``(raster_along_m, raster_width)`` of the persistent schedule the selector gives a tile.

    ``expert_m_blocks``: for the masked and offsets kinds (``ProblemKind.has_table``), the m-blocks
    an expert is expected to have. Along M those kinds order their tiles expert by expert
    (include/deep_tile/scheduler/tile_scheduler.cuh). When one band of :data:`WIDE_RASTER_WIDTH`
    m-blocks holds a whole expert of two or more m-blocks, a tile without multicast runs in bands
    along M whatever its shape: the band walks the expert's n-blocks, each expert's weights are
    read once and its rows stay in L2 (ncu found far fewer DRAM reads than in bands along N over
    all experts). Experts of one m-block read the same bytes in either order and keep the rule by
    shape, the per-expert order being slower there, except for 256-row tiles, each holding a whole
    expert, which run faster along M.

    Tiles wider than tall (128x256, 128x192, 64x128, ...) run without multicast in bands of
    :data:`WIDE_RASTER_WIDTH` m-blocks, consecutive tiles sharing the B tile; the others and split-K
    launches keep bands of :data:`RASTER_WIDTH` n-blocks. Under multicast the axis is None: the
    multicast operand fixes it (:class:`KernelConfig`). Bands along M help 128x256 and 128x192 at large
    M; 256x128 gains nothing reliable from either axis or width
    (docs/performance.md, 'What the selector picks, and why').
    """
    if num_multicast == 2:
        return None, RASTER_WIDTH
    whole_expert_tile = expert_m_blocks == 1 and block_m == max(family.LEGAL_BLOCK_M)
    if split_k == 1 and expert_m_blocks is not None and (2 <= expert_m_blocks <= WIDE_RASTER_WIDTH or whole_expert_tile):
        return True, WIDE_RASTER_WIDTH
    if split_k == 1 and block_n > block_m:
        return True, WIDE_RASTER_WIDTH
    return False, RASTER_WIDTH


def config_label(block_m: int, block_n: int, num_stages: int, num_multicast: int = 1, multicast_on_a: bool = False,
                 split_k: int = 1, accum_buffers: int = 1, wgmma_n: Optional[int] = None,
                 a_scale_row_major: bool = False, raster_along_m: bool = False, evict_first_b: bool = False,
                 k_unroll: int = 3, problem_kind: ProblemKind = ProblemKind.DENSE,
                 l2_promotion: int = family.DEFAULT_L2_PROMOTION, swap_n: int = 0, out_dtype: str = "bfloat16",
                 c_dtype: Optional[str] = None, b_scale_1d: bool = False, staged_epilogue: bool = False,
                 static_k_blocks: int = 0, static_ring: bool = False) -> str:
    """Short name of a kernel instance for tables and logs, e.g. ``"256x128 s3 mcA"``, ``"64x64 s8 k4 x2"``.

    ``mcA``/``mcB``: multicast; ``kS``: split-K over S CTAs; ``x2``: two accumulator buffers;
    ``/N``: WGMMAs of N columns; ``rm``: reads a row-major a_scale; ``gM``: raster bands along M
    without multicast (``mcB`` implies it); ``ef``: B loaded evict-first, A evict-last in L2;
    ``u6``: the one-buffer k-loop unrolled by 6; ``p128``: the FP8 maps' L2 promotion when not
    the default 256 bytes; ``sw8``/``sw16``: swap-AB with 8 or 16 token columns per WGMMA;
    ``contiguous``/``masked``/``offsets``: the grouped kind's kernel; ``f32``: FP32 output;
    ``+c16``/``+c32``: a bf16 / FP32 C added (``D = C + A.B^T``); ``+=``: D accumulated in place;
    ``1d1d``: b_scale per row of B (the weight gradient's operands); ``staged``: the K-grouped
    kind's FP32 D loaded, added to and stored through shared memory by a storer thread
    (``KernelConfig.staged_epilogue``); ``kb4``: 4 K blocks fixed at compile time
    (``KernelConfig.static_k_blocks``); ``ring``: the stage ring as immediates
    (``KernelConfig.static_ring``).
    """
    text = f"{block_m}x{block_n} s{num_stages}"
    if num_multicast == 2:
        text += " mcA" if multicast_on_a else " mcB"
    if split_k > 1:
        text += f" k{split_k}"
    if accum_buffers == 2:
        text += " x2"
    if wgmma_n is not None and wgmma_n != block_n:
        text += f" /{wgmma_n}"
    if a_scale_row_major:
        text += " rm"
    if raster_along_m and num_multicast == 1:
        text += " gM"
    if evict_first_b:
        text += " ef"
    if k_unroll != 3:
        text += f" u{k_unroll}"
    if l2_promotion != family.DEFAULT_L2_PROMOTION:
        text += f" p{l2_promotion}"
    if swap_n:
        text += f" sw{swap_n}"
    if problem_kind.grouped:
        text += " " + problem_kind.short_name
    if out_dtype == "float32":
        text += " f32"
    if b_scale_1d:
        text += " 1d1d"
    if c_dtype == "out":
        text += " +="
    elif c_dtype is not None:
        text += " +c" + ("32" if c_dtype == "float32" else "16")
    if staged_epilogue:
        text += " staged"
    if static_k_blocks:
        text += f" kb{static_k_blocks}"
    if static_ring:
        text += " ring"
    return text


def _check_int(name: str, value, allowed: str, ok: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not ok:
        raise ValueError(f"KernelConfig: {name} must be {allowed}; got {value!r}")


@dataclass(frozen=True, kw_only=True)
class KernelConfig:
    """A fully specified FP8 GEMM kernel configuration (keyword-only construction).

    Attributes:
        block_m: tile rows, 64, 128 or 256.
        block_n: tile columns, one of :data:`deep_tile.kernels.fp8_gemm.LEGAL_BLOCK_N` (with the K-grouped
            staged epilogue also :data:`deep_tile.kernels.fp8_gemm.STAGED_PLAIN_BLOCK_N`).
        block_k: reduction depth per stage; always 128 (the scale group).
        num_stages: depth of the TMA pipeline, in [2, 16] and within the shared memory.
        num_multicast: CTAs per multicast cluster, 1 or 2 (persistent kernel only).
        multicast_on_a: with ``num_multicast == 2``, the cluster shares the A tile (same m-block,
            adjacent n-blocks) if True, else the B tile. Forced to False when ``num_multicast == 1``.
        split_k: CTAs sharing one output tile, each a range of K, reduced in a fixed order through
            a cluster's shared memory (1: the persistent kernel). In [1, 8].
        accum_buffers: WGMMA accumulators per consumer thread, 1 or 2 (2 overlaps the next
            sub-tile's WGMMAs with this one's promotion).
        wgmma_n: columns per WGMMA: ``block_n`` (default) or half of it (two column parts).
        a_scale_row_major: the kernel reads a row-major ``[M, ceil(K/128)]`` a_scale (K blocks a
            multiple of 4) instead of the TMA-aligned column-major layout. The launcher sets it
            from the tensor it is given; the selector leaves it False.
        raster_width: width in tiles of a raster band of the persistent schedule (even, >= 2).
        raster_along_m: the raster bands span ``raster_width`` m-blocks, consecutive tiles sharing
            an n-block (B tile), instead of n-blocks sharing an m-block (a compile-time choice).
            Multicast fixes it: a pair shares its operand, so True with multicast of B and False
            with multicast of A; ``None`` (default) takes that, or False without multicast.
        grid_size: CTAs of the persistent grid (even under multicast); a split-K launch uses
            ``tiles * split_k`` CTAs instead (:func:`deep_tile.kernels.fp8_gemm.launch_grid`).
        evict_first_b: the TMA loads of B carry an L2 evict-first policy and those of A
            evict-last (a compile-time choice). For problems where each B tile is read by one or
            two tiles only (small M, see :func:`deep_tile.select.selector.streams_b`): the weight
            stream then recycles its own L2 lines. Default False (plain loads).
        k_unroll: k-blocks per unrolled body of the one-buffer k-loop, one of
            :data:`deep_tile.kernels.fp8_gemm.K_UNROLLS`: 3 (default) or, with
            ``accum_buffers == 1``, 6 (long K ranges, see
            :func:`deep_tile.select.selector.k_unroll_for`).
        problem_kind: the :class:`deep_tile.gemm.problem.ProblemKind` the kernel runs (its scheduler;
            ``DT_PROBLEM_KIND``); the grouped kinds are persistent (``split_k == 1``).
        l2_promotion: bytes an L2 miss of the A and B loads fetches, one of
            :data:`deep_tile.kernels.fp8_gemm.L2_PROMOTIONS` (a launch-time choice: the tensor
            maps' ``CU_TENSOR_MAP_L2_PROMOTION``; the kernel is the same). Default 256; see
            :func:`deep_tile.select.selector.l2_promotion_for`.
        swap_n: swap-AB, one of :data:`deep_tile.kernels.fp8_gemm.SWAP_NS`: 0 (default, off), or
            8 or 16: the weights are each WGMMA's 64-row operand and the first ``swap_n`` rows of
            A its N side (the output transposed back in the epilogue), for an A of at most
            ``swap_n`` rows (the launcher checks M). Needs ``block_m == 64``, ``block_n`` a multiple
            of 64 with ``wgmma_n == block_n``, the dense kind and no multicast. See
            :func:`deep_tile.select.selector.swap_n_for`.
        out_dtype: the output's type, one of :data:`deep_tile.kernels.fp8_gemm.OUT_DTYPES`
            (``"bfloat16"``, default, or ``"float32"``).
        c_dtype: the addend C of ``D = C + A.B^T``, one of
            :data:`deep_tile.kernels.fp8_gemm.C_DTYPES`: None (no C), ``"bfloat16"`` /
            ``"float32"`` (a tensor apart from D) or ``"out"`` (D itself, in place). Every variant
            but bf16 without C is an output variant (:attr:`direct_store`): an FP32 D without C, or
            a 1D1D FP32 D accumulated in place (added to D by the unit's reduce-add), is written by
            the TMA unit through a 64-row FP32 staging of dense persistent kernels
            (:func:`deep_tile.kernels.fp8_gemm.tma_f32_store`), the others straight from
            registers. :meth:`for_problem` takes both from the problem (:meth:`with_output`).
        b_scale_1d: the 1D1D variant: b_scale ``[n, ceil(k/128)]`` per row of B (read in the
            TMA-aligned column-major layout), each accumulator promoted with ``a_scale[row] *
            b_scale[col]``; dense, no swap-AB (:meth:`with_b_scale_1d`, which :meth:`for_problem`
            applies to a 1D1D problem).
        staged_epilogue: the K-grouped kind's FP32 D (without C, or accumulated in place) goes
            through a 64-row shared-memory staging per consumer warpgroup, which a storer thread
            of the producer warpgroup fills with C by TMA during the tile's k-loop and stores by
            TMA after the consumers added their sums (include/deep_tile/epilogue/store_staged.cuh),
            instead of each thread reading C and writing D between two tiles' k-loops. One
            sub-tile per consumer warpgroup; the problem's ``m`` a multiple of 64
            (:func:`deep_tile.kernels.fp8_gemm.staged_epilogue_allowed`: :meth:`for_problem`
            turns it off otherwise, and refuses a width only it takes,
            :data:`deep_tile.kernels.fp8_gemm.STAGED_PLAIN_BLOCK_N`). Default False.
        static_k_blocks: the problem's K blocks (``ceil(k / 128)``) fixed at compile time, or 0
            (default): K a run-time value. The kernel's k-loops then have constant trip counts (the
            consumers' unrolled by :data:`deep_tile.kernels.fp8_gemm.STATIC_K_UNROLL`); it is right
            for problems of that many K blocks only (:meth:`for_problem` refuses others). Persistent
            kernels with one accumulator buffer, of any kind but the K-grouped one. See
            :func:`deep_tile.select.selector.static_k_blocks_for`.
        static_ring: with ``static_k_blocks`` a multiple of ``num_stages`` (the dense kind, 1D2D
            scales), every tile starts at stage 0 and the consumers walk the stage ring in passes of straight code
            whose stage, barrier and descriptor offsets are constants. Default False. See
            :func:`deep_tile.select.selector.static_ring_for`.

    Raises:
        ValueError: a field is out of range or the combination cannot be built (the message
            names the rule).
    """

    block_m: int
    block_n: int
    block_k: int = family.BLOCK_K
    num_stages: int
    num_multicast: int = 1
    multicast_on_a: bool = False
    split_k: int = 1
    accum_buffers: int = 1
    wgmma_n: Optional[int] = None
    a_scale_row_major: bool = False
    raster_width: int = RASTER_WIDTH
    raster_along_m: Optional[bool] = None
    grid_size: int
    evict_first_b: bool = False
    k_unroll: int = 3
    problem_kind: ProblemKind = ProblemKind.DENSE
    l2_promotion: int = family.DEFAULT_L2_PROMOTION
    swap_n: int = 0
    out_dtype: str = "bfloat16"
    c_dtype: Optional[str] = None
    b_scale_1d: bool = False
    staged_epilogue: bool = False
    static_k_blocks: int = 0
    static_ring: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "num_stages", "num_multicast", "split_k", "accum_buffers",
                     "raster_width", "grid_size"):
            _check_int(name, getattr(self, name), "an int", True)
        _check_int("block_k", self.block_k, str(family.BLOCK_K), self.block_k == family.BLOCK_K)
        if not isinstance(self.multicast_on_a, bool):
            raise ValueError(f"KernelConfig: multicast_on_a must be a bool; got {self.multicast_on_a!r}")
        if not isinstance(self.a_scale_row_major, bool):
            raise ValueError(f"KernelConfig: a_scale_row_major must be a bool; got {self.a_scale_row_major!r}")
        if not isinstance(self.problem_kind, ProblemKind):
            raise ValueError(f"KernelConfig: problem_kind must be a deep_tile.gemm.problem.ProblemKind; got {self.problem_kind!r}")
        if not isinstance(self.evict_first_b, bool):
            raise ValueError(f"KernelConfig: evict_first_b must be a bool; got {self.evict_first_b!r}")
        _check_int("l2_promotion", self.l2_promotion, f"one of {family.L2_PROMOTIONS}",
                   self.l2_promotion in family.L2_PROMOTIONS)
        _check_int("k_unroll", self.k_unroll, f"one of {family.K_UNROLLS} (6 with accum_buffers == 1 only)",
                   self.k_unroll in family.K_UNROLLS and (self.k_unroll == 3 or self.accum_buffers == 1))
        if self.num_multicast == 1:
            object.__setattr__(self, "multicast_on_a", False)
        multicast_b = self.num_multicast == 2 and not self.multicast_on_a
        if self.raster_along_m is None:
            object.__setattr__(self, "raster_along_m", multicast_b)
        if not isinstance(self.raster_along_m, bool):
            raise ValueError(f"KernelConfig: raster_along_m must be a bool or None; got {self.raster_along_m!r}")
        if self.num_multicast == 2 and self.raster_along_m != multicast_b:
            raise ValueError(f"KernelConfig: raster_along_m must be {multicast_b} with multicast of "
                             f"{'B' if multicast_b else 'A'} (the pair shares that operand); got {self.raster_along_m}")
        if self.wgmma_n is None:
            object.__setattr__(self, "wgmma_n", self.block_n)
        _check_int("wgmma_n", self.wgmma_n, "an int", True)
        if not isinstance(self.staged_epilogue, bool):
            raise ValueError(f"KernelConfig: staged_epilogue must be a bool; got {self.staged_epilogue!r}")
        problems_of_output = family.output_problems(self.out_dtype, self.c_dtype)
        problems = family.tile_problems(self.block_m, self.block_n, self.num_stages, self.num_multicast,
                                        self.split_k, self.wgmma_n, self.accum_buffers, arch.MAX_SMEM_PER_BLOCK,
                                        self.a_scale_row_major, self.problem_kind,
                                        None if problems_of_output else family.d_staging_bytes(self),
                                        bool(self.b_scale_1d), family.epilogue_barriers(self), self.staged_epilogue)
        if not isinstance(self.b_scale_1d, bool):
            raise ValueError(f"KernelConfig: b_scale_1d must be a bool; got {self.b_scale_1d!r}")
        problems += family.b_scale_1d_problems(self.b_scale_1d, self.swap_n, self.problem_kind, self.wgmma_n)
        _check_int("swap_n", self.swap_n, f"one of {family.SWAP_NS}", self.swap_n in family.SWAP_NS)
        problems += problems_of_output
        problems += family.swap_problems(self.swap_n, self.block_m, self.block_n, self.wgmma_n, self.num_multicast,
                                         self.problem_kind)
        if not problems:
            problems += family.f32_staging_problems(self)
            problems += family.staged_epilogue_problems(self.staged_epilogue, self.problem_kind, self.out_dtype,
                                                        self.c_dtype, self.num_subtiles)
        _check_int("static_k_blocks", self.static_k_blocks, "an int >= 0",
                   isinstance(self.static_k_blocks, int) and self.static_k_blocks >= 0)
        problems += family.static_k_problems(self.static_k_blocks, self.problem_kind, self.split_k, self.accum_buffers)
        if not isinstance(self.static_ring, bool):
            raise ValueError(f"KernelConfig: static_ring must be a bool; got {self.static_ring!r}")
        problems += family.static_ring_problems(self.static_ring, self.static_k_blocks, self.num_stages,
                                                bool(self.b_scale_1d), self.problem_kind)
        if problems:
            raise ValueError("KernelConfig: " + "; ".join(problems))
        _check_int("raster_width", self.raster_width, "an even int >= 2", self.raster_width >= 2 and self.raster_width % 2 == 0)
        _check_int("grid_size", self.grid_size, "an int >= 1", self.grid_size >= 1)
        if self.num_multicast == 2 and self.grid_size % 2:
            raise ValueError(f"KernelConfig: grid_size must be even when num_multicast == 2 "
                             f"(clusters of 2 CTAs); got {self.grid_size}")

    @property
    def num_math_warpgroups(self) -> int:
        """Consumer warpgroups: 1 for 64-row tiles, else 2."""
        return family.math_warpgroups(self.block_m)

    @property
    def wg_m(self) -> int:
        """Rows of the tile owned by one consumer warpgroup (64 or 128)."""
        return self.block_m // self.num_math_warpgroups

    @property
    def num_threads(self) -> int:
        """Threads per CTA: one producer warpgroup plus the consumer warpgroups."""
        return family.num_threads(self.block_m)

    @property
    def num_subtiles(self) -> int:
        """WGMMA sub-tiles (64-row slab x column part) per consumer warpgroup."""
        return family.num_subtiles(self.block_m, self.block_n, self.wgmma_n)

    @property
    def accum_registers(self) -> int:
        """Accumulator registers per consumer thread (at most 192)."""
        return family.accum_registers(self.block_m, self.block_n, self.wgmma_n, self.accum_buffers)

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (split-K factor, else multicast width)."""
        return family.cluster_size(self)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory in bytes."""
        return family.smem_bytes(self.block_m, self.block_n, self.num_stages, self.split_k, self.a_scale_row_major,
                                 self.problem_kind.has_table, family.d_staging_bytes(self), self.b_scale_1d,
                                 family.epilogue_barriers(self), self.problem_kind.has_tile_slots)

    @property
    def direct_store(self) -> bool:
        """Whether this output variant stores straight from registers
        (:func:`deep_tile.kernels.fp8_gemm.direct_store`: FP32 out, or a C to add)."""
        return family.direct_store(self.out_dtype, self.c_dtype, self.problem_kind)

    def smem_breakdown(self) -> dict:
        """Bytes per shared-memory region (see :func:`deep_tile.kernels.fp8_gemm.smem_breakdown`)."""
        return family.smem_breakdown(self.block_m, self.block_n, self.num_stages, self.split_k,
                                     self.a_scale_row_major, self.problem_kind.has_table, family.d_staging_bytes(self),
                                     self.b_scale_1d, family.epilogue_barriers(self), self.problem_kind.has_tile_slots)

    def _restaged(self, num_stages: int, **changes) -> "KernelConfig":
        """This config with ``changes`` and ``num_stages`` stages, keeping the stage ring as
        immediates (``static_ring``) only where the kernel can still have it
        (:func:`deep_tile.kernels.fp8_gemm.static_ring_problems`: the fixed K blocks whole passes
        over the stages, 1D2D scales)."""
        ring = self.static_ring and not family.static_ring_problems(
            True, self.static_k_blocks, num_stages, bool(changes.get("b_scale_1d", self.b_scale_1d)), self.problem_kind)
        return dataclasses.replace(self, num_stages=num_stages, static_ring=ring, **changes)

    def with_row_major_a_scale(self) -> "KernelConfig":
        """This config reading a row-major a_scale, with one stage fewer where the wider a_scale
        tiles would not fit the shared memory (and without the stage ring as immediates where its
        fixed K blocks are then no whole passes over the stages)."""
        stages = self.num_stages
        staging = family.d_staging_bytes(self)
        while stages > family.MIN_STAGES and family.smem_bytes(self.block_m, self.block_n, stages, self.split_k, True,
                                                                 self.problem_kind.has_table, staging, self.b_scale_1d,
                                                                 family.epilogue_barriers(self),
                                                                 self.problem_kind.has_tile_slots) > arch.MAX_SMEM_PER_BLOCK:
            stages -= 1
        return self._restaged(stages, a_scale_row_major=True)

    def with_b_scale_1d(self) -> "KernelConfig":
        """This config as the 1D1D variant (b_scale per row of B): swap-AB off, and one stage fewer
        where the stages' b_scale columns do not fit the shared memory."""
        stages = self.num_stages
        while stages > family.MIN_STAGES and family.smem_bytes(
                self.block_m, self.block_n, stages, self.split_k, self.a_scale_row_major, self.problem_kind.has_table,
                family.d_staging_bytes(self), True, family.epilogue_barriers(self),
                self.problem_kind.has_tile_slots) > arch.MAX_SMEM_PER_BLOCK:
            stages -= 1
        return self._restaged(stages, b_scale_1d=True, swap_n=0)

    def with_output(self, out_dtype: str = "bfloat16", c_dtype=None) -> "KernelConfig":
        """This config with another output variant (``out_dtype``, ``c_dtype``), with the stages that
        fit its output staging (the FP32 one can be larger than the bf16 tile's: a stage fewer;
        the variants with C have none: a config at the most stages the bf16 staging left gets the
        most that fit without it, others keep theirs)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        staging = family.d_staging_bytes(SimpleNamespace(**{**fields, "out_dtype": out_dtype, "c_dtype": c_dtype}))

        def most_stages(d_staging) -> int:
            stages = family.MAX_STAGES
            while stages > family.MIN_STAGES and family.smem_bytes(
                    self.block_m, self.block_n, stages, self.split_k, self.a_scale_row_major,
                    self.problem_kind.has_table, d_staging, self.b_scale_1d,
                    family.epilogue_barriers(self), self.problem_kind.has_tile_slots) > arch.MAX_SMEM_PER_BLOCK:
                stages -= 1
            return stages

        most = most_stages(staging)
        # a config at the most stages its own staging allows gets the most the new one allows
        at_most = self.num_stages == most_stages(family.d_staging_bytes(self))
        stages = most if at_most else min(self.num_stages, most)
        return self._restaged(stages, out_dtype=out_dtype, c_dtype=c_dtype)

    def for_problem(self, problem) -> "KernelConfig":
        """This config as the launcher builds it for ``problem`` (a
        :class:`deep_tile.gemm.problem.Problem`): the problem's kind, and its a_scale variant (row-major
        when the problem reads a_scale so, see :meth:`with_row_major_a_scale`).

        Raises:
            ValueError: a swap-AB config (``swap_n``) for a problem of more rows than ``swap_n``
                (or not dense); a config with K fixed (``static_k_blocks``) for a problem of
                another K-block count (or K-grouped)."""
        if self.swap_n and (problem.kind is not ProblemKind.DENSE or problem.m > self.swap_n):
            raise ValueError(f"KernelConfig: swap_n={self.swap_n} needs a dense problem of at most {self.swap_n} rows; "
                             f"got {problem.kind.value} with M={problem.m}")
        if self.static_k_blocks and (problem.kind is ProblemKind.K_GROUPED
                                     or ceil_div(problem.k, family.BLOCK_K) != self.static_k_blocks):
            raise ValueError(f"KernelConfig: static_k_blocks={self.static_k_blocks} needs a problem (not k_grouped) of "
                             f"{self.static_k_blocks} K blocks of {family.BLOCK_K}; got {problem.kind.value} with K={problem.k}")
        # the staged epilogue only where the problem takes it (its output variant, m % 64)
        if self.staged_epilogue and not family.staged_epilogue_allowed(problem):
            if self.block_n not in family.LEGAL_BLOCK_N:
                raise ValueError(f"KernelConfig: a {self.block_m}x{self.block_n} tile runs only with the staged epilogue "
                                 f"(a k_grouped problem with a float32 out, without c or accumulated in place, m a "
                                 f"multiple of {family.STAGED_EPILOGUE_ROWS}); got {problem.kind.value} with "
                                 f"m={problem.m}, out {problem.out_dtype}, c_dtype={problem.c_dtype!r}")
            return dataclasses.replace(self, staged_epilogue=False).for_problem(problem)
        # K-grouped pairs only where each group has an even number of tiles
        if (problem.kind is ProblemKind.K_GROUPED and self.num_multicast == 2
                and not family.k_grouped_multicast_allowed(problem, self.block_m, self.block_n)):
            return dataclasses.replace(self, num_multicast=1, multicast_on_a=False).for_problem(problem)
        if problem.kind is ProblemKind.K_GROUPED and not self.b_scale_1d:  # the kind is 1D1D only
            config = dataclasses.replace(self.with_b_scale_1d(), problem_kind=problem.kind)
        else:
            config = self if self.problem_kind is problem.kind else dataclasses.replace(self, problem_kind=problem.kind)
        if problem.b_scale_1d and not config.b_scale_1d:
            config = config.with_b_scale_1d()
        if (config.out_dtype, config.c_dtype) != (problem.out_dtype, problem.c_dtype):
            config = config.with_output(problem.out_dtype, problem.c_dtype)
        if config.a_scale_row_major == problem.a_scale_row_major:
            return config
        return config.with_row_major_a_scale() if problem.a_scale_row_major else dataclasses.replace(
            config, a_scale_row_major=False)

    @property
    def label(self) -> str:
        """Short name for tables and logs (see :func:`config_label`)."""
        return config_label(self.block_m, self.block_n, self.num_stages, self.num_multicast, self.multicast_on_a,
                            self.split_k, self.accum_buffers, self.wgmma_n, self.a_scale_row_major,
                            self.raster_along_m, self.evict_first_b, self.k_unroll, self.problem_kind,
                            self.l2_promotion, self.swap_n, self.out_dtype, self.c_dtype, self.b_scale_1d,
                            self.staged_epilogue, self.static_k_blocks, self.static_ring)

    def defines(self) -> dict:
        """The kernel's compile-time defines, contract defines included (all ints)."""
        return family.defines(self)
