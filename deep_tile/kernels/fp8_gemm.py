"""The FP8 GEMM kernel family's contract: the one place each fact about the kernel is written.

``csrc/entry/fp8_gemm_sm90.cu`` (symbol :data:`SYMBOL`) is compiled with the defines of
:func:`defines`; the entry file ``static_assert``s the contract defines (shared-memory bytes,
stage range, store swizzle, scale group, threads) against what the kernel derives itself, so a
disagreement between this module and the CUDA side fails the compile. The selector
(:mod:`deep_tile.select`), the launcher (:mod:`deep_tile.gemm`), warm-up and the tests read the
rest from here: legal tiles, register and shared-memory budgets, TMA boxes, launch geometry and
the kernel's argument order.

Pure Python (no torch, no CUDA) so that the selector can import it.

Kernel shapes. A consumer warpgroup owns ``wg_m = block_m / math_warpgroups`` rows of the tile and
computes them as ``wg_m / 64`` slabs of 64 rows times ``block_n / wgmma_n`` column parts: each
such sub-tile is one chain of ``m64 x wgmma_n x k32`` WGMMAs per 128-wide K block into an
accumulator of ``wgmma_n / 2`` floats per thread, promoted into the FP32 result. ``accum_buffers``
accumulators are reused over the sub-tiles (2: the next sub-tile's WGMMAs overlap this one's
promotion). Two launch kinds: persistent (``split_k == 1``; optional 2-CTA multicast) and
split-K (``split_k`` CTAs per output tile in one cluster, reduced deterministically).
"""
from __future__ import annotations

import math

from deep_tile.gemm import kernel_args as spec
from deep_tile.common import SCALE_GROUP, align_up, ceil_div
from deep_tile.gemm.problem import ProblemKind

__all__ = [
    "ENTRY", "SYMBOL", "BLOCK_K", "L2_PROMOTIONS", "DEFAULT_L2_PROMOTION", "LEGAL_BLOCK_M", "LEGAL_BLOCK_N", "STAGED_PLAIN_BLOCK_N", "LEGAL_MULTICAST", "MIN_STAGES",
    "MAX_STAGES", "MAX_SPLIT_K", "ACCUM_REGISTER_BUDGET", "SPILLING_SPLIT_TILES", "CONSUMER_REGISTERS",
    "THREADS_PER_WARPGROUP", "ARGUMENTS", "math_warpgroups", "num_threads", "legal_wgmma_ns",
    "ROW_MAJOR_A_SCALE_KINDS", "kind_of_code", "num_subtiles", "accum_registers", "a_scale_columns", "row_major_a_scale_readable", "smem_breakdown", "smem_bytes", "partial_pitch", "partial_bytes",
    "store_swizzle", "tile_problems", "k_grouped_multicast_allowed", "defines", "TensorMapBoxes", "a_box_rows", "a_scale_box_rows", "tensor_map_boxes", "cluster_size",
    "launch_grid", "OPERANDS", "argument_specs", "GROUPED_SYMBOL", "GROUPED_ARGUMENTS", "GROUPED_ARGUMENT_KINDS",
    "PROBLEM_KIND_CODES", "CONTIGUOUS_ALIGNMENT", "MAX_TABLE_GROUPS", "GROUP_TABLE_BYTES", "TILE_SLOT_BYTES", "symbol", "arguments", "GROUPED_OPERANDS",
    "K_UNROLLS", "SWAP_NS", "swap_problems", "OUT_DTYPES", "C_DTYPES", "direct_store", "output_problems",
    "C_ARGUMENTS", "C_ARGUMENT_KINDS", "tma_f32_store", "SPILLING_1D1D_F32_STAGING_TILES", "f32_staging_spills", "f32_staging_problems", "f32_plain_staging", "f32_atom_cols", "d_staging_bytes",
    "B_SCALE_1D_ARGUMENTS", "B_SCALE_1D_ARGUMENT_KINDS", "K_GROUPED_MAX_WGMMA_N", "b_scale_1d_problems", "b_scale_pitch", "b_scale_ring", "b_scale_slots",
    "K_UNROLLS", "SWAP_NS", "swap_problems", "SIGNAL_SYMBOL", "SIGNAL_DEFINE", "SIGNAL_AFTER_STORE", "SIGNAL_AT_NEXT_STORE", "SIGNAL_MODES", "SIGNAL_ARGUMENTS",
    "SIGNAL_ARGUMENT_KINDS", "SIGNAL_OPERANDS", "signal_rows", "signal_threshold", "signal_argument_specs",
    "STAGED_EPILOGUE_DEFINE", "STAGED_EPILOGUE_ROWS", "staged_epilogue_problems", "staged_epilogue_allowed",
    "epilogue_barriers", "STATIC_K_DEFINE", "STATIC_K_UNROLL_DEFINE", "STATIC_K_UNROLL", "static_k_problems",
    "STATIC_RING_DEFINE", "static_ring_problems", "PROBE_OVERRIDES_DEFINE", "probe_defines",
    "K_GROUPED_BLOCKS_CODE", "K_GROUPED_BLOCKS_ARGUMENTS", "K_GROUPED_BLOCKS_OPERANDS", "k_grouped_blocks_defines",
    "k_grouped_blocks_argument_specs", "HEAD_STRIDED_DEFINE", "head_strided_problems", "head_strided_defines",
    "head_strided_argument_specs",
]

ENTRY = "fp8_gemm_sm90"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
SYMBOL = "deep_tile_fp8_gemm_sm90"
"""The ``extern "C"`` kernel symbol in the cubin (dense kind)."""
GROUPED_SYMBOL = "deep_tile_fp8_gemm_grouped_sm90"
"""The kernel symbol of the grouped kinds (the same entry file built with ``DT_PROBLEM_KIND != 0``)."""
PROBLEM_KIND_CODES = {ProblemKind.DENSE: 0, ProblemKind.GROUPED_CONTIGUOUS: 1, ProblemKind.GROUPED_MASKED: 2,
                      ProblemKind.GROUPED_OFFSETS: 3, ProblemKind.K_GROUPED: 4, ProblemKind.GROUPED_PSUM: 5}
"""``DT_PROBLEM_KIND`` of each kind (the value of the kernel's ``ProblemKind``)."""
L2_PROMOTIONS = spec.L2_PROMOTIONS
"""The L2 promotions (bytes an L2 miss fetches) the FP8 operands' tensor maps may have."""
DEFAULT_L2_PROMOTION = spec.DEFAULT_L2_PROMOTION
"""The FP8 operands' L2 promotion unless the selector picks another (KernelConfig.l2_promotion)."""
ROW_MAJOR_A_SCALE_KINDS = (ProblemKind.GROUPED_OFFSETS,)
"""The kinds whose kernels read a_scale row-major only (their tiles start at any row, and a
column-major a_scale box starting at a row that is not a multiple of 4 faulted; the kernel
static_asserts it). The launcher copies a column-major a_scale into rows for them."""
CONTIGUOUS_ALIGNMENT = 128
"""Rows at whose multiples each expert's run starts in the contiguous layout
(:func:`deep_tile.get_m_alignment_for_contiguous_layout`): the contiguous kind's tiles are at most
this high, so a tile's rows belong to one expert (or are padding)."""
MAX_TABLE_GROUPS = 512
"""Most groups (experts) of the masked, offsets and psum kinds, whose kernel keeps a per-expert table in
shared memory (``kMaxTableGroups``); the contiguous kind has no limit."""
GROUP_TABLE_BYTES = align_up((3 * MAX_TABLE_GROUPS + 1) * 4, 16)
"""Shared-memory bytes of that table (``kGroupTableBytes``): each expert's first m-block, first row
and row end, and the total."""
TILE_SLOT_BYTES = 16
"""Shared-memory bytes per pipeline stage after the table of the masked, offsets and psum kinds
(``kTileSlotBytes``, ``ProblemKind.has_tile_slots``): the tile whose first k-block the stage holds,
which the producer hands the consumers there (``TileSlot``)."""

BLOCK_K = SCALE_GROUP
"""Reduction depth of one pipeline stage: one 1x128 / 128x128 scale group."""
LEGAL_BLOCK_M = (64, 128, 256)
"""Tile heights: 64 (one consumer warpgroup), 128 and 256 (two)."""
LEGAL_BLOCK_N = tuple(n for n in range(16, 257, 16) if n <= 128 or n - math.gcd(n, 128) <= 128)
"""Tile widths: multiples of 16 up to 256 whose b_scale span is at most two 128-wide blocks
(16..128, 144, 160, 192, 256). The register budget narrows this per block_m."""
STAGED_PLAIN_BLOCK_N = tuple(range(24, 185, 16))
"""More tile widths, of the K-grouped staged epilogue alone (one column part): multiples of 8 but
not 16 up to 184, whose FP32 staging is unswizzled at a pitch of the width (``kF32PlainStaging``),
e.g. 152, where 4 stages fit beside the 64-row stagings (160: 3)."""
LEGAL_MULTICAST = (1, 2)
"""CTAs sharing a multicast operand (persistent kernel)."""
MIN_STAGES = 2
"""Fewest pipeline stages the kernel accepts (``Fp8GemmConfig::kMinStages``)."""
MAX_STAGES = 16
"""Most pipeline stages the kernel accepts (``Fp8GemmConfig::kMaxStages``)."""
MAX_SPLIT_K = 8
"""Most CTAs in a split-K cluster (the portable cluster size)."""
K_UNROLLS = (3, 6)
"""k-blocks per unrolled body of the one-buffer k-loop (``DT_K_UNROLL``): 3, the depth of the
b_scale queue, or 6 (one accumulator buffer only; the two-buffer loop has its own unrolling)."""
SWAP_NS = (0, 8, 16)
"""Swap-AB (``DT_SWAP_N``): 0 (off), or the token columns of each WGMMA when the weights are its
64-row operand, 8 or 16; an A of at most that many rows (``KernelConfig.swap_n``)."""


OUT_DTYPES = ("bfloat16", "float32")
"""The output types (``DT_OUT_KIND``: the index here): bf16, or FP32 (training: a weight gradient
accumulated in FP32)."""
C_DTYPES = (None, "bfloat16", "float32", "out")
"""The addend C of ``D = C + A.B^T`` (``DT_C_KIND``: the index here): none, a bf16 or FP32 tensor
apart from D, or ``"out"``: D itself (in-place accumulation, in D's type)."""


def direct_store(out_dtype: str = "bfloat16", c_dtype=None, kind: ProblemKind = ProblemKind.DENSE) -> bool:
    """Whether the kernel of this output variant stores straight from registers
    (include/deep_tile/epilogue/store_direct.cuh, ``Fp8GemmConfig::kDirectStore``): every variant
    but bf16 without C, which stores through shared memory and TMA, and every K-grouped kernel.
    It has no output staging in shared memory, no D tensor map, and takes :data:`C_ARGUMENTS`
    after the others."""
    return out_dtype != OUT_DTYPES[0] or c_dtype is not None or kind is ProblemKind.K_GROUPED


STAGED_EPILOGUE_DEFINE = "DT_STAGED_EPILOGUE"
"""The define that builds a K-grouped kernel with the staged epilogue (``KernelConfig.staged_epilogue``,
``Fp8GemmConfig::kStagedEpilogue``), set to 1; absent, the kernels are unchanged."""
STAGED_EPILOGUE_ROWS = 64
"""Rows of one TMA box of the staged epilogue (a consumer warpgroup's slab): the groups' outputs
are one [G * m, n] map, so m must be a multiple of it (no box reaches the next group's rows)."""


STATIC_K_DEFINE = "DT_STATIC_K_BLOCKS"
"""The define that fixes a kernel's K blocks at compile time (``KernelConfig.static_k_blocks``,
``Fp8GemmConfig::kStaticKBlocks``), set to their count; absent, K is a run-time value and the
kernels are unchanged."""
STATIC_K_UNROLL_DEFINE = "DT_STATIC_K_UNROLL"
"""The define, beside :data:`STATIC_K_DEFINE`, of the K blocks per unrolled body of the k-loop of a
kernel with K fixed (:data:`STATIC_K_UNROLL`; ``Fp8GemmConfig::kStaticKUnroll``)."""
STATIC_K_UNROLL = 4
"""K blocks per unrolled body of the k-loop of a kernel with K fixed at compile time: up to 4 K
blocks are straight code, longer ranges a loop of constant trip count.

NOTES: fully unrolled instead, 256x128 kernels of 6 (row-major a_scale), 9, 12 and 15 K blocks spilled
(by 4, none of 1-16), and where none spilled full unrolling was no faster."""


PROBE_OVERRIDES_DEFINE = "DT_PROBE_OVERRIDES"
"""Set on every build with extra defines (probes, tools): the entry then compiles
include/deep_tile/probes/overrides.cuh, where measurement-only defines change tuned choices. The
library's own builds never set it."""


def probe_defines(extra_defines) -> dict:
    """``extra_defines`` (a dict, or None) with :data:`PROBE_OVERRIDES_DEFINE` beside them; empty without."""
    return {PROBE_OVERRIDES_DEFINE: 1, **extra_defines} if extra_defines else {}


STATIC_RING_DEFINE = "DT_STATIC_RING"
"""The define, set to 1, of a kernel with K fixed whose consumers walk the stage ring as
immediates (``KernelConfig.static_ring``, ``Fp8GemmConfig::kStaticRing``); absent, the kernels are
unchanged."""


def static_ring_problems(static_ring: bool, static_k_blocks: int, num_stages: int, b_scale_1d: bool,
                         problem_kind: ProblemKind) -> list:
    """Why a kernel with the stage ring as immediates (``static_ring``) cannot be built: K must be
    fixed at a positive multiple of the stages (so every tile starts at stage 0), with 1D2D scales,
    for the dense kind (the grouped kinds' tile loops are not tested with it; the contiguous kind's,
    tried with 128x192, ran slower)."""
    if not static_ring:
        return []
    if static_k_blocks <= 0 or static_k_blocks % num_stages or b_scale_1d or problem_kind is not ProblemKind.DENSE:
        return [f"static_ring needs static_k_blocks a positive multiple of num_stages, 1D2D scales and the dense "
                f"kind; got static_k_blocks={static_k_blocks}, num_stages={num_stages}, b_scale_1d={b_scale_1d}, "
                f"{problem_kind.value}"]
    return []


def static_k_problems(static_k_blocks: int, problem_kind: ProblemKind, split_k: int, accum_buffers: int) -> list:
    """Why a kernel with ``static_k_blocks`` (> 0) K blocks fixed at compile time cannot be built:
    it must be persistent with one accumulator buffer (the k-loop with a constant trip count), of
    any kind but the K-grouped one (whose tiles each have their own K range)."""
    if static_k_blocks == 0:
        return []
    if problem_kind is ProblemKind.K_GROUPED or split_k != 1 or accum_buffers != 1:
        return [f"static_k_blocks > 0 needs a kind other than k_grouped, split_k == 1 and accum_buffers == 1; got "
                f"{problem_kind.value}, split_k={split_k}, accum_buffers={accum_buffers}"]
    return []


def staged_epilogue_problems(staged: bool, problem_kind: ProblemKind, out_dtype: str, c_dtype, subtiles: int) -> list:
    """Why a kernel with the staged epilogue (``staged``) cannot be built, one phrase per broken rule:
    it is the K-grouped kind's FP32 D, without C or accumulated in place, one sub-tile per consumer
    warpgroup (include/deep_tile/epilogue/store_staged.cuh)."""
    if not staged:
        return []
    problems = []
    if problem_kind is not ProblemKind.K_GROUPED or out_dtype != "float32" or c_dtype not in (None, "out"):
        problems.append("staged_epilogue needs the k_grouped kind with a float32 out, without c or accumulated in place "
                        f"(c_dtype None or 'out'); got {problem_kind.value}, {out_dtype}, c_dtype={c_dtype!r}")
    if subtiles != 1:
        problems.append(f"staged_epilogue needs one sub-tile per consumer warpgroup (wgmma_n == block_n, at most "
                        f"128 rows); got {subtiles}")
    return problems


def staged_epilogue_allowed(problem) -> bool:
    """Whether ``problem`` (a :class:`deep_tile.gemm.problem.Problem`) can run a kernel with the staged
    epilogue: K-grouped, FP32 out without C or in place, and ``m`` a multiple of
    :data:`STAGED_EPILOGUE_ROWS`."""
    return (problem.kind is ProblemKind.K_GROUPED and problem.out_dtype == "float32"
            and problem.c_dtype in (None, "out") and problem.m % STAGED_EPILOGUE_ROWS == 0)


def k_grouped_multicast_allowed(problem, block_m: int, block_n: int) -> bool:
    """Whether the K-grouped ``problem`` can run 2-CTA multicast with ``block_m x block_n`` tiles:
    each group has an even number of tiles, so the two tiles of every pair (tile indices 2i and
    2i + 1, group after group) are of one group, with one K range (the kernel's pairs run their
    k-blocks in step and release each other's stages)."""
    return ceil_div(problem.m, block_m) * ceil_div(problem.n, block_n) % 2 == 0


def epilogue_barriers(config) -> int:
    """The staged epilogue's mbarriers (``kNumEpilogueBarriers``): `ready` and `staged` per consumer
    warpgroup, or none."""
    return 2 * math_warpgroups(config.block_m) if config.staged_epilogue else 0


def tma_f32_store(config) -> bool:
    """Whether ``config``'s kernel writes an FP32 D through shared memory and the TMA unit
    (``Fp8GemmConfig::kTmaF32Store``: dense, persistent, no swap-AB, FP32 out without C, or the
    1D1D kind's FP32 D accumulated in place, which the unit's reduce-add adds to D); its D tensor
    map is FP32 (:func:`tensor_map_boxes`). The other variants with C store straight from
    registers (the reduce-add measured slower for them, include/deep_tile/kernels/fp8_gemm_config.cuh)."""
    c_ok = config.c_dtype is None or (config.c_dtype == "out" and bool(config.b_scale_1d))
    return (config.out_dtype == "float32" and c_ok and config.split_k == 1
            and config.swap_n == 0 and config.problem_kind is ProblemKind.DENSE)


SPILLING_1D1D_F32_STAGING_TILES = frozenset({(256, 128, 128, 1)})
"""(block_m, block_n, wgmma_n, accum_buffers) whose 1D1D build with the FP32 D through shared
memory (:func:`tma_f32_store`: FP32 out without C, or accumulated in place), without multicast and
unrolled by 3, spills in the consumers' k-loop (a 32-byte stack frame, 40 bytes stored: two 64x128
sub-tiles per warpgroup beside their column scales), with NVRTC 13.5 and nvcc 13.0 alike; the
selector skips it there and :func:`f32_staging_problems` refuses it. The same tile with multicast,
unrolled by 6, with C apart or a bf16 out, and 256-row tiles up to 112 columns, build spill-free."""


def f32_staging_spills(block_m: int, block_n: int, wgmma_n: int, accum_buffers: int, num_multicast: int,
                       k_unroll: int) -> bool:
    """Whether the 1D1D build with the FP32 D through shared memory of this tile spills: one of
    :data:`SPILLING_1D1D_F32_STAGING_TILES`, without multicast, unrolled by 3."""
    return ((block_m, block_n, wgmma_n, accum_buffers) in SPILLING_1D1D_F32_STAGING_TILES
            and num_multicast == 1 and k_unroll == 3)


def f32_staging_problems(config) -> list:
    """Why ``config``'s 1D1D kernel with the FP32 D through shared memory cannot be built
    (:func:`f32_staging_spills`), one phrase."""
    if config.b_scale_1d and tma_f32_store(config) and f32_staging_spills(
            config.block_m, config.block_n, config.wgmma_n, config.accum_buffers, config.num_multicast,
            config.k_unroll):
        return [f"a {config.block_m}x{config.block_n} tile with wgmma_n={config.wgmma_n} and {config.accum_buffers} "
                f"accumulator buffer(s) spills registers under 1D1D with the FP32 D stored through shared memory "
                f"(FP32 out without C, or accumulated in place) without multicast and unrolled by 3: take "
                f"k_unroll=6, multicast or another tile"]
    return []


def f32_plain_staging(config) -> bool:
    """Whether ``config``'s FP32 staging is unswizzled, one atom of the sub-tile's whole width
    (``kF32PlainStaging``): the staged epilogue with a width that is not a multiple of 16."""
    return bool(config.staged_epilogue) and config.wgmma_n % 16 != 0


def f32_atom_cols(wgmma_n: int, plain: bool = False) -> int:
    """FP32 columns of one TMA atom of the FP32 staging (``kF32AtomCols``): the widest of 32, 16, 8
    dividing a sub-tile's width (a 128-, 64- or 32-byte swizzle span), or the whole width when the
    staging is unswizzled (``plain``, :func:`f32_plain_staging`)."""
    if plain:
        return wgmma_n
    return 32 if wgmma_n % 32 == 0 else (16 if wgmma_n % 16 == 0 else 8)


def d_staging_bytes(config) -> int:
    """Shared-memory bytes of the output staging of ``config``'s kernel (``kSmemDBytes``): the bf16
    tile (the default persistent kernel), a 64-row FP32 sub-tile per consumer warpgroup
    (:func:`tma_f32_store`, or the staged epilogue), or none (split-K and the other output variants)."""
    if tma_f32_store(config) or config.staged_epilogue:
        return align_up(math_warpgroups(config.block_m) * 64 * config.wgmma_n * 4, 1024)
    if config.split_k > 1 or direct_store(config.out_dtype, config.c_dtype, config.problem_kind):
        return 0
    return align_up(config.block_m * config.block_n * 2, 1024)


def output_problems(out_dtype, c_dtype) -> list:
    """Why an output variant cannot be built, one phrase per broken rule."""
    problems = []
    if out_dtype not in OUT_DTYPES:
        problems.append(f"out_dtype must be one of {OUT_DTYPES}; got {out_dtype!r}")
    if c_dtype not in C_DTYPES:
        problems.append(f"c_dtype must be one of {C_DTYPES}; got {c_dtype!r}")
    return problems


def swap_problems(swap_n: int, block_m: int, block_n: int, wgmma_n: int, num_multicast: int,
                  problem_kind: ProblemKind) -> list:
    """Why a swap-AB kernel (``swap_n`` > 0) cannot be built, one phrase per broken rule."""
    if swap_n == 0:
        return []
    problems = []
    if block_m != 64 or block_n % 64 or wgmma_n != block_n:
        problems.append(f"swap_n needs block_m 64 and block_n a multiple of 64 in one column part (wgmma_n == block_n); "
                        f"got {block_m}x{block_n} with wgmma_n={wgmma_n}")
    if num_multicast != 1 or problem_kind is not ProblemKind.DENSE:
        problems.append("swap_n needs the dense kind without multicast")
    return problems
ACCUM_REGISTER_BUDGET = 192
"""Most accumulator registers per consumer thread, ``(sub-tiles + buffers) * wgmma_n / 2``; the
rest of the 232 after ``setmaxnreg`` holds addresses, scales and loop state (checked spill-free
with ptxas 13 by tests/test_kernel_build.py)."""
SPILLING_SPLIT_TILES = frozenset({
    (64, 80, 80, 1), (64, 80, 80, 2), (128, 80, 80, 1), (128, 80, 80, 2), (256, 80, 80, 1),
    (64, 112, 112, 1), (128, 112, 112, 1),
    (64, 144, 144, 1), (128, 144, 144, 1),
    (64, 160, 160, 1), (128, 160, 160, 1), (64, 160, 80, 1), (128, 160, 80, 1),
    (64, 192, 192, 1), (128, 192, 192, 1),
    (64, 256, 128, 1), (128, 256, 128, 1),
})
"""(block_m, block_n, wgmma_n, accum_buffers) whose split-K build spills a few bytes (8-byte stack
frame, 4 bytes stored, 12 loaded), so ``tile_problems`` refuses them as split-K tiles. Found by
compiling every legal split-K kind with nvcc 13.0.88, aligned and row-major a_scale
alike; NVRTC 13.5 spills on a subset of these. The
selector's split tiles (at most 128 wide, two buffers) are all spill-free; tests/test_kernel_build.py
compiles one of each."""
CONSUMER_REGISTERS = 232
"""Registers per consumer thread after ``setmaxnreg.inc`` (the producer keeps 40 after
``setmaxnreg.dec``: 384 x 168 = 128 x 40 + 256 x 232)."""
THREADS_PER_WARPGROUP = 128
"""Four warps: the unit that issues one WGMMA."""

ARGUMENTS = ("tma_a", "tma_b", "tma_a_scale", "tma_d", "b_scale", "d", "ldd", "m", "n", "k", "raster_width")
"""The kernel's parameters in declaration order (csrc/entry/fp8_gemm_sm90.cu; tests/test_contract.py
compares the two): four 128-byte tensor maps, the b_scale pointer, the output pointer and row
pitch (elements), then ``m, n, k`` and the raster band width (tiles) as int32. Their values:
:func:`argument_specs`."""
ARGUMENT_KINDS = ("tensormap",) * 4 + ("ptr", "ptr") + ("i32",) * 5
"""The :class:`deep_tile.jit.runtime.KernelArgs` kind of each of :data:`ARGUMENTS`."""
GROUPED_ARGUMENTS = ARGUMENTS + ("group_info", "num_groups", "group_rows")
"""The grouped kernel's parameters (:data:`GROUPED_SYMBOL`): the dense ones, then the kind's int32
array on the device (``m_indices``, ``masked_m``, ``offsets`` or the psum kind's expert ends), the
number of groups and, for the masked kind, the rows of each group's slab (max_m), for the psum
kind the alignment of the experts' starts (:data:`CONTIGUOUS_ALIGNMENT`)."""
GROUPED_ARGUMENT_KINDS = ARGUMENT_KINDS + ("ptr", "i32", "i32")
"""The kind of each of :data:`GROUPED_ARGUMENTS`."""
C_ARGUMENTS = ("c", "ldc")
"""The parameters the output variants (:func:`direct_store`) take after the others: C's pointer
(D's when there is no C; C may be D) and row pitch in elements (``DT_C_PARAMS`` in the entry)."""
C_ARGUMENT_KINDS = ("ptr", "i32")
"""The kind of each of :data:`C_ARGUMENTS`."""
B_SCALE_1D_ARGUMENTS = ("tma_b_scale",)
"""The parameter the 1D1D variant (``KernelConfig.b_scale_1d``) takes last: b_scale's tensor map
(``DT_B1D_PARAMS`` in the entry)."""
B_SCALE_1D_ARGUMENT_KINDS = ("tensormap",)
"""The kind of each of :data:`B_SCALE_1D_ARGUMENTS`."""


K_GROUPED_MAX_WGMMA_N = 192
"""The widest column part (``wgmma_n``) of a K-grouped kernel: 192 columns (C loaded 8 column
pairs at a time, ``kCLoadPairs``; all 24 at once spilled and stored wrong sums) are built, run and
checked; a 256-column part is not."""


def b_scale_1d_problems(b_scale_1d: bool, swap_n: int, problem_kind: ProblemKind, wgmma_n: int) -> list:
    """Why a 1D1D kernel (b_scale per row of B, ``DT_B_SCALE_1D``) cannot be built, and why a
    K-grouped one (always 1D1D; column parts of at most :data:`K_GROUPED_MAX_WGMMA_N`) cannot."""
    if b_scale_1d and (swap_n or problem_kind not in (ProblemKind.DENSE, ProblemKind.K_GROUPED)):
        return ["b_scale_1d needs the dense or the k_grouped kind without swap-AB (swap_n == 0)"]
    if problem_kind is ProblemKind.K_GROUPED and not b_scale_1d:
        return ["the k_grouped kind needs b_scale_1d (both operands scaled 1x128 along K)"]
    if problem_kind is ProblemKind.K_GROUPED and wgmma_n > K_GROUPED_MAX_WGMMA_N:
        return [f"the k_grouped kind takes column parts (wgmma_n) of at most {K_GROUPED_MAX_WGMMA_N}; got {wgmma_n} "
                f"(a wider part is not built or checked: split the tile, e.g. wgmma_n = block_n / 2)"]
    return []


def b_scale_pitch(block_n: int, b_scale_1d: bool) -> int:
    """Floats of a stage's b_scale slot (``kBScalePitch``): the two rows' values, or under 1D1D the
    tile's ``block_n`` column values in whole 128-byte lines (a TMA destination)."""
    return align_up(block_n * 4, 128) // 4 if b_scale_1d else 2


def b_scale_ring(block_n: int, b_scale_1d: bool) -> bool:
    """Whether a tile's b_scale values live in a ring of twice the stages' slots
    (``Fp8GemmConfig::kBScaleRing``): the 1D1D tiles of at most 128 columns, which may hand a stage
    back before the promotion reads its columns' values."""
    return b_scale_1d and block_n <= 128


def b_scale_slots(num_stages: int, b_scale_1d: bool, block_n: int) -> int:
    """b_scale slots in shared memory (``kBScaleSlots``): one per stage, or twice the stages where
    they are a ring (:func:`b_scale_ring`)."""
    return 2 * num_stages if b_scale_ring(block_n, b_scale_1d) else num_stages


SIGNAL_SYMBOL = "deep_tile_fp8_gemm_masked_signal_sm90"
"""The symbol of the masked kernel with completion signals (the entry built with
``DT_PROBLEM_KIND == 2`` and :data:`SIGNAL_DEFINE` = 1; SGLang's single-batch overlap)."""
SIGNAL_DEFINE = "DT_SIGNAL"
"""The define that builds the signalling masked kernel, set to one of :data:`SIGNAL_MODES`; absent
or 0 the kernels are unchanged."""
SIGNAL_AFTER_STORE = 1
"""``DT_SIGNAL`` 1: a slab's counter is raised right after its tile's store (the storing thread
waits for its bulk stores to complete before the warpgroup's next tile)."""
SIGNAL_AT_NEXT_STORE = 2
"""``DT_SIGNAL`` 2: a slab's counter is raised once the warpgroup stores its next tile (whose wait
for the staging buffer then waits for completion; the last one after the CTA's last tile), by a
warp of the producer warpgroup the storing warpgroup hands the slab to (named barriers): no wait
and no GPU-scope release on the consumers' path, one tile later."""
SIGNAL_MODES = (SIGNAL_AFTER_STORE, SIGNAL_AT_NEXT_STORE)
SIGNAL_ARGUMENTS = GROUPED_ARGUMENTS + ("signal",)
"""The signalling kernel's parameters: the grouped ones, then the int32 completion counters."""
SIGNAL_ARGUMENT_KINDS = GROUPED_ARGUMENT_KINDS + ("ptr",)
"""The kind of each of :data:`SIGNAL_ARGUMENTS`."""


def kind_of_code(code: int) -> ProblemKind:
    """The kind whose ``DT_PROBLEM_KIND`` is ``code`` (:data:`PROBLEM_KIND_CODES` read backwards)."""
    return next(kind for kind, c in PROBLEM_KIND_CODES.items() if c == code)


def symbol(kind: ProblemKind) -> str:
    """The kernel symbol of a problem kind."""
    return SYMBOL if kind is ProblemKind.DENSE else GROUPED_SYMBOL


def arguments(kind: ProblemKind, direct: bool = False, b_scale_1d: bool = False) -> tuple:
    """The kernel parameters of a problem kind, in declaration order (``direct``: of an output
    variant, :func:`direct_store`, with :data:`C_ARGUMENTS` after the others; ``b_scale_1d``: the
    1D1D variant, with :data:`B_SCALE_1D_ARGUMENTS` last)."""
    return ((ARGUMENTS if kind is ProblemKind.DENSE else GROUPED_ARGUMENTS) + (C_ARGUMENTS if direct else ())
            + (B_SCALE_1D_ARGUMENTS if b_scale_1d else ()))


def math_warpgroups(block_m: int) -> int:
    """Consumer warpgroups of a tile ``block_m`` rows high: 1 for 64 rows, else 2."""
    return 1 if block_m == 64 else 2


def num_threads(block_m: int) -> int:
    """Threads per CTA: the producer warpgroup plus the consumer warpgroups."""
    return THREADS_PER_WARPGROUP * (1 + math_warpgroups(block_m))


def legal_wgmma_ns(block_n: int) -> tuple:
    """WGMMA widths a ``block_n`` tile can be computed with: the whole width, or half of it
    (two column parts) when the half is a multiple of 16."""
    return (block_n,) + ((block_n // 2,) if block_n % 32 == 0 and block_n >= 64 else ())


def num_subtiles(block_m: int, block_n: int, wgmma_n: int) -> int:
    """(64-row slab x column part) sub-tiles per consumer warpgroup."""
    wg_m = block_m // math_warpgroups(block_m)
    return (wg_m // 64) * (block_n // wgmma_n)


def accum_registers(block_m: int, block_n: int, wgmma_n: int, accum_buffers: int) -> int:
    """Accumulator registers per consumer thread: the FP32 result plus the WGMMA buffers."""
    return (num_subtiles(block_m, block_n, wgmma_n) + accum_buffers) * wgmma_n // 2


def store_swizzle(block_n: int) -> int:
    """Swizzle span (bytes) of the bf16 output staging and of the D tensor map: the widest of
    128/64/32 dividing a bf16 row of the tile (``Fp8GemmConfig::kStoreSwizzleBytes``)."""
    return 128 if block_n % 64 == 0 else (64 if block_n % 32 == 0 else 32)


def partial_pitch(block_n: int) -> int:
    """Row pitch (floats) of the split-K FP32 partial tile: block_n padded to 8 mod 32 words."""
    return block_n + (40 - block_n % 32) % 32


def partial_bytes(block_m: int, block_n: int) -> int:
    """Bytes of the split-K partial tile (it reuses the A/B stage memory)."""
    return block_m * partial_pitch(block_n) * 4


def a_scale_columns(a_scale_row_major: bool) -> int:
    """Floats per row of a stage's a_scale tile: 1 (TMA-aligned column-major layout), or 4 (a
    16-byte box of 4 K blocks from a row-major tensor, ``Fp8GemmConfig::kAScaleCols``)."""
    return 4 if a_scale_row_major else 1


def row_major_a_scale_readable(k_blocks: int) -> bool:
    """Whether the kernel can read a row-major [M, k_blocks] a_scale directly: its rows must be a
    multiple of 16 bytes (TMA), i.e. ``k_blocks % 4 == 0`` (K a multiple of 512)."""
    return k_blocks % 4 == 0


def smem_breakdown(block_m: int, block_n: int, num_stages: int, split_k: int = 1,
                   a_scale_row_major: bool = False, group_table: bool = False, d_staging=None,
                   b_scale_1d: bool = False, extra_barriers: int = 0, tile_slots=None) -> dict:
    """Shared-memory bytes per region in kernel layout order: ``d_staging`` (persistent kernel
    only: the bf16 tile; ``d_staging`` overrides it for the output variants, :func:`d_staging_bytes`), ``a_stages``, ``b_stages``, ``a_scale_stages``, ``b_scale_stages`` (two
    floats per stage: the one-buffer k-loop reads each k-block's b_scale values there),
    ``barriers`` (the stages' two, plus ``extra_barriers``: the staged epilogue's, :func:`epilogue_barriers`),
    ``group_table`` (the kinds with a table, :data:`GROUP_TABLE_BYTES`, and with ``tile_slots``
    :data:`TILE_SLOT_BYTES` per stage; ``tile_slots`` None: as ``group_table``, the M-grouped table
    kinds') and ``total``."""
    slots = group_table if tile_slots is None else tile_slots
    parts = {
        "d_staging": (0 if split_k > 1 else align_up(block_m * block_n * 2, 1024)) if d_staging is None else d_staging,
        "a_stages": num_stages * block_m * BLOCK_K,
        "b_stages": num_stages * block_n * BLOCK_K,
        "a_scale_stages": num_stages * block_m * 4 * a_scale_columns(a_scale_row_major),
        "b_scale_stages": b_scale_slots(num_stages, b_scale_1d, block_n) * b_scale_pitch(block_n, b_scale_1d) * 4,
        "barriers": (num_stages * 2 + extra_barriers) * 8,
        "group_table": (GROUP_TABLE_BYTES if group_table else 0) + (num_stages * TILE_SLOT_BYTES if slots else 0),
    }
    parts["total"] = sum(parts.values())
    return parts


def smem_bytes(block_m: int, block_n: int, num_stages: int, split_k: int = 1, a_scale_row_major: bool = False,
               group_table: bool = False, d_staging=None, b_scale_1d: bool = False, extra_barriers: int = 0,
               tile_slots=None) -> int:
    """Dynamic shared memory in bytes (``Fp8GemmConfig::kSmemBytes``)."""
    return smem_breakdown(block_m, block_n, num_stages, split_k, a_scale_row_major, group_table, d_staging,
                          b_scale_1d, extra_barriers, tile_slots)["total"]


def tile_problems(block_m: int, block_n: int, num_stages: int, num_multicast: int, split_k: int,
                  wgmma_n: int, accum_buffers: int, max_smem: int, a_scale_row_major: bool = False,
                  problem_kind: ProblemKind = ProblemKind.DENSE, d_staging=None, b_scale_1d: bool = False,
                  extra_barriers: int = 0, staged_epilogue: bool = False) -> list:
    """Why a kernel instance cannot be built, one phrase per broken rule (empty: legal).
    ``d_staging``: the output staging's bytes when not the bf16 tile's (:func:`d_staging_bytes`);
    ``extra_barriers``: the staged epilogue's (:func:`epilogue_barriers`); ``staged_epilogue``: the
    K-grouped staged epilogue, which also takes :data:`STAGED_PLAIN_BLOCK_N` in one column part."""
    problems = []
    if problem_kind.grouped and split_k != 1:
        problems.append(f"the {problem_kind.value} kind runs persistent kernels only (split_k == 1); got {split_k}")
    if problem_kind is ProblemKind.K_GROUPED and a_scale_row_major:
        problems.append("the k_grouped kind needs the column-major a_scale")
    if problem_kind is ProblemKind.GROUPED_CONTIGUOUS and block_m > CONTIGUOUS_ALIGNMENT:
        problems.append(f"the grouped_contiguous kind needs block_m <= {CONTIGUOUS_ALIGNMENT} (a tile must not span two "
                        f"experts' runs, which start at multiples of {CONTIGUOUS_ALIGNMENT} rows); got {block_m}")
    if block_m not in LEGAL_BLOCK_M:
        problems.append(f"block_m must be one of {LEGAL_BLOCK_M}; got {block_m}")
    plain = staged_epilogue and problem_kind is ProblemKind.K_GROUPED and block_n in STAGED_PLAIN_BLOCK_N
    if plain and wgmma_n != block_n:
        problems.append(f"a staged K-grouped tile of block_n={block_n} (not a multiple of 16) is one column part: "
                        f"wgmma_n must be {block_n}; got {wgmma_n}")
    if block_n not in LEGAL_BLOCK_N and not plain:
        problems.append(f"block_n must be one of {LEGAL_BLOCK_N} (multiple of 16, at most two b_scale blocks), or with "
                        f"the K-grouped staged epilogue one of {STAGED_PLAIN_BLOCK_N}; got {block_n}")
    if block_n in LEGAL_BLOCK_N and wgmma_n not in legal_wgmma_ns(block_n):
        problems.append(f"wgmma_n must be one of {legal_wgmma_ns(block_n)} for block_n={block_n}; got {wgmma_n}")
    if not MIN_STAGES <= num_stages <= MAX_STAGES:
        problems.append(f"num_stages must be in [{MIN_STAGES}, {MAX_STAGES}]; got {num_stages}")
    if num_multicast not in LEGAL_MULTICAST:
        problems.append(f"num_multicast must be one of {LEGAL_MULTICAST}; got {num_multicast}")
    if not 1 <= split_k <= MAX_SPLIT_K:
        problems.append(f"split_k must be in [1, {MAX_SPLIT_K}]; got {split_k}")
    if split_k > 1 and num_multicast != 1:
        problems.append("split_k > 1 needs num_multicast == 1")
    if problems:
        return problems
    subtiles = num_subtiles(block_m, block_n, wgmma_n)
    if accum_buffers not in (1, 2) or (accum_buffers == 2 and subtiles > 2):
        problems.append(f"accum_buffers must be 1, or 2 with at most two sub-tiles per warpgroup "
                        f"({subtiles} here); got {accum_buffers}")
    elif accum_registers(block_m, block_n, wgmma_n, accum_buffers) > ACCUM_REGISTER_BUDGET:
        problems.append(f"{block_m}x{block_n} with wgmma_n={wgmma_n} and {accum_buffers} accumulator buffer(s) needs "
                        f"{accum_registers(block_m, block_n, wgmma_n, accum_buffers)} accumulator registers per "
                        f"consumer thread; the budget is {ACCUM_REGISTER_BUDGET}")
    total = smem_bytes(block_m, block_n, num_stages, split_k, a_scale_row_major, problem_kind.has_table, d_staging,
                       b_scale_1d, extra_barriers, problem_kind.has_tile_slots)
    if total > max_smem:
        problems.append(f"{num_stages} stages of a {block_m}x{block_n} tile need {total} bytes of shared memory; "
                        f"the limit is {max_smem}")
    if split_k > 1 and (block_m, block_n, wgmma_n, accum_buffers) in SPILLING_SPLIT_TILES:
        problems.append(f"a {block_m}x{block_n} tile with wgmma_n={wgmma_n} and {accum_buffers} accumulator "
                        f"buffer(s) spills registers when split along K (split_k > 1)")
    if split_k > 1 and partial_bytes(block_m, block_n) > num_stages * (block_m + block_n) * BLOCK_K:
        problems.append(f"the split-K partial tile ({partial_bytes(block_m, block_n)} bytes) does not fit in the "
                        f"{num_stages} A/B stages it reuses")
    return problems


def defines(config) -> dict:
    """The compile-time defines of ``config`` (a :class:`deep_tile.select.KernelConfig`), the
    contract defines included; all values are ints. :data:`STAGED_EPILOGUE_DEFINE` only where the
    config has the staged epilogue, :data:`STATIC_K_DEFINE` and :data:`STATIC_K_UNROLL_DEFINE` only
    where it fixes K, :data:`STATIC_RING_DEFINE` only with the ring as immediates (the other
    kernels' defines, and so their cache keys, stay)."""
    staged = {STAGED_EPILOGUE_DEFINE: 1} if config.staged_epilogue else {}
    static_k = ({STATIC_K_DEFINE: config.static_k_blocks, STATIC_K_UNROLL_DEFINE: STATIC_K_UNROLL}
                if config.static_k_blocks else {})
    static_ring = {STATIC_RING_DEFINE: 1} if config.static_ring else {}
    return {
        "DT_BLOCK_M": config.block_m,
        "DT_BLOCK_N": config.block_n,
        "DT_NUM_STAGES": config.num_stages,
        "DT_NUM_MULTICAST": config.num_multicast,
        "DT_MULTICAST_ON_A": int(config.multicast_on_a),
        "DT_SPLIT_K": config.split_k,
        "DT_ACCUM_BUFFERS": config.accum_buffers,
        "DT_WGMMA_N": config.wgmma_n,
        "DT_A_SCALE_ROW_MAJOR": int(config.a_scale_row_major),
        "DT_RASTER_ALONG_M": int(config.raster_along_m),
        "DT_EVICT_FIRST_B": int(config.evict_first_b),
        "DT_K_UNROLL": config.k_unroll,
        "DT_PROBLEM_KIND": PROBLEM_KIND_CODES[config.problem_kind],
        "DT_SWAP_N": config.swap_n,
        "DT_OUT_KIND": OUT_DTYPES.index(config.out_dtype),
        "DT_C_KIND": C_DTYPES.index(config.c_dtype),
        "DT_B_SCALE_1D": int(config.b_scale_1d),
        "DT_SMEM_BYTES": config.smem_bytes,
        "DT_MIN_STAGES": MIN_STAGES,
        "DT_MAX_STAGES": MAX_STAGES,
        "DT_STORE_SWIZZLE": store_swizzle(config.block_n),
        "DT_SCALE_GROUP": SCALE_GROUP,
        "DT_NUM_THREADS": num_threads(config.block_m),
    } | staged | static_k | static_ring


class TensorMapBoxes:
    """TMA boxes of one config: (inner, outer) elements and swizzle bytes of each tensor map.

    Attributes:
        a: box of A ``(128, rows)``, 128B swizzle; ``rows`` is half the tile under multicast on A,
            and M itself when M is below one tile (:func:`a_box_rows`).
        b: box of B, likewise for multicast on B.
        a_scale: box of a_scale, no swizzle: ``(rows, 1)`` in the column-major layout, or
            ``(4, rows)`` (4 K blocks of ``rows`` rows) from a row-major tensor; ``rows`` is the
            tile's, or M rounded up to 4 when M is below one tile (:func:`a_scale_box_rows`).
        d: box of the bf16 output ``(swizzle / 2, rows per consumer warpgroup)``.
        d_swizzle: the output map's swizzle span in bytes.
    """

    __slots__ = ("a", "b", "a_scale", "d", "d_swizzle")

    def __init__(self, a, b, a_scale, d, d_swizzle):
        self.a, self.b, self.a_scale, self.d, self.d_swizzle = a, b, a_scale, d, d_swizzle


def a_box_rows(config, m: int) -> int:
    """Rows of A one TMA load brings: half the tile under multicast on A (each CTA of the pair
    loads one half), else the tile, or just the ``m`` rows of the matrix when ``m < block_m``.

    The kernel derives its expected byte count per stage from the same rule
    (``producer_loop`` in include/deep_tile/kernels/fp8_gemm_sm90.cuh); keep the two together.
    NOTES: a box mostly beyond M is zero-filled by the TMA unit, and that is not free: on an H200
    the 64x32 tile ran Mx4096x7168 at M = 8..32 in 20.1-21.5 us against 17.4 us at M = 64. The
    tile rows a short box leaves untouched hold stale data; they only feed output rows >= M,
    which are never stored (nor read by the split-K reduction).
    """
    multicast_a = config.num_multicast == 2 and config.multicast_on_a
    if multicast_a:
        return config.block_m // 2
    return max(1, min(config.block_m, m))


def a_scale_box_rows(config, m: int) -> int:
    """Rows of a_scale one TMA load brings: the tile's, or ``m`` rounded up to 4 (a column-major
    box's row span must be a multiple of 16 bytes) when ``m`` is below one tile. Each CTA loads
    its tile's whole a_scale rows, multicast or not.

    The kernel's expected byte count per stage follows the same rule (``stage_tx_bytes_for`` in
    include/deep_tile/scheduler/tile_scheduler.cuh); keep the two together.
    NOTES: as for A (:func:`a_box_rows`), a box mostly beyond M is zero-filled at a cost, which at M = 1
    made the whole tile's a_scale rows a visible share of a decode GEMM. The rows a short box leaves
    untouched hold stale values; they only scale output rows >= M, which are never stored.
    """
    return min(config.block_m, align_up(max(1, m), 4))


def tensor_map_boxes(config, m: int) -> TensorMapBoxes:
    """The tensor-map boxes ``config``'s kernel loads and stores with, for an ``m``-row A."""
    multicast_b = config.num_multicast == 2 and not config.multicast_on_a
    swizzle = store_swizzle(config.block_n)
    scale_rows = a_scale_box_rows(config, m)
    d = (swizzle // 2, config.block_m // math_warpgroups(config.block_m))
    if tma_f32_store(config) or config.staged_epilogue:  # FP32 atoms of one 64-row sub-tile
        plain = f32_plain_staging(config)
        atom = f32_atom_cols(config.wgmma_n, plain)
        d, swizzle = (atom, 64), 0 if plain else atom * 4
    return TensorMapBoxes(a=(BLOCK_K, a_box_rows(config, m)),
                          b=(BLOCK_K, config.block_n // (2 if multicast_b else 1)),
                          a_scale=(4, scale_rows) if config.a_scale_row_major else (scale_rows, 1),
                          d=d, d_swizzle=swizzle)


def cluster_size(config) -> int:
    """CTAs per cluster: the split-K factor, else the multicast width."""
    return config.split_k if config.split_k > 1 else config.num_multicast


def launch_grid(config, m: int, n: int) -> int:
    """CTAs to launch for an ``m x n`` output: the persistent grid, or one cluster per tile
    under split-K (``tiles * split_k``)."""
    if config.split_k > 1:
        return ceil_div(m, config.block_m) * ceil_div(n, config.block_n) * config.split_k
    return config.grid_size


OPERANDS = ("a", "a_scale", "b", "b_scale", "out")
"""The tensors :func:`argument_specs` refers to, by index: the op's arguments in order (a_scale as
the kernel reads it, b_scale contiguous, out allocated when the op was not given one). The output
variants (:func:`direct_store`) take one more after these (and after ``group_info`` when grouped):
``c``, C as a 2-D view, or ``out`` again when there is no C."""
GROUPED_OPERANDS = OPERANDS + ("group_info",)
"""The tensors of the grouped kinds, each as a 2-D view: ``a`` [rows, k] (the masked kind's
[G, max_m, k] flattened), ``a_scale`` as the kernel reads it (the masked kind's column-major
[G, max_m, K blocks] as [G * K blocks, max_m], its row-major one as [G * max_m, K blocks]), ``b``
[G * n, k], ``b_scale`` contiguous, ``out`` [rows, n], then the int32 ``m_indices`` / ``masked_m``
/ ``offsets`` / psum ``expert_ends``."""
_A, _A_SCALE, _B, _B_SCALE, _OUT, _GROUP_INFO = range(len(GROUPED_OPERANDS))
SIGNAL_OPERANDS = GROUPED_OPERANDS + ("signal",)
"""The signalling masked kernel's tensors: the grouped ones, then the int32 counters [at least
``G * ceil(max_m / signal_rows(config))``]."""
_SIGNAL = len(GROUPED_OPERANDS)


def signal_rows(config) -> int:
    """Rows per completion counter of the signalling masked kernel: each consumer warpgroup
    counts its own ``block_m / math_warpgroups`` rows of a tile (64 for block_m 64 and 128, 128
    for 256), so SGLang's ``block_m``. Counter ``g * ceil(max_m / rows) + j`` covers rows
    ``j * rows ..`` of expert ``g``."""
    return config.block_m // math_warpgroups(config.block_m)


def signal_threshold(config, n: int) -> int:
    """The value a counter reaches once its rows are written in all ``n`` columns: one add per
    tile column, ``ceil(n / block_n)`` (SGLang's ``threshold``)."""
    return ceil_div(n, config.block_n)


def signal_argument_specs(config, problem) -> tuple:
    """:func:`argument_specs` of the masked ``problem`` for the signalling kernel
    (:data:`SIGNAL_ARGUMENTS`, operands :data:`SIGNAL_OPERANDS`)."""
    return argument_specs(config, problem) + (spec.Pointer(_SIGNAL),)


def argument_specs(config, problem) -> tuple:
    """How each kernel parameter (:data:`ARGUMENTS`, or :data:`GROUPED_ARGUMENTS` for a grouped
    ``problem``) is made from the call's tensors (:mod:`deep_tile.gemm.kernel_args` specs, in the same
    order), for ``config`` and ``problem`` (a :class:`deep_tile.gemm.problem.Problem`). Both host paths
    fill the kernel's parameters from these, the Python one in :mod:`deep_tile.gemm.launch`, the native
    one in C++.

    A and B are ``[rows, k]`` FP8 (read as bytes, 128-byte swizzle, the config's L2 promotion);
    a_scale is read column-major
    (dim 0, the rows of A, contiguous) or, in the row-major variant, row-major (dim 1, the K
    blocks, contiguous); the output map is a zero map under split-K, which stores through
    ``d`` and ``ldd`` instead. For the grouped kinds (operands :data:`GROUPED_OPERANDS`) ``n``,
    the group count and max_m are plan constants (B is passed as [G * n, k]).
    """
    m = problem.rows
    boxes = tensor_map_boxes(config, m)
    if config.a_scale_row_major:
        a_scale = spec.TensorMap(_A_SCALE, "float32", 1, 0, boxes.a_scale, 0)
    else:
        a_scale = spec.TensorMap(_A_SCALE, "float32", 0, 1, boxes.a_scale, 0)
    direct = direct_store(config.out_dtype, config.c_dtype, config.problem_kind)
    if tma_f32_store(config) or config.staged_epilogue:  # the staged epilogue: D's [G * m, n] view
        d = spec.TensorMap(_OUT, "float32", 1, 0, boxes.d, boxes.d_swizzle)
    elif config.split_k > 1 or direct:
        d = spec.ZeroMap()
    else:  # the grouped kinds store partial slabs through the slab view (kernel_args.TensorMap)
        d = spec.TensorMap(_OUT, "bfloat16", 1, 0, boxes.d, boxes.d_swizzle,
                           slab_rows=boxes.d[1] if problem.kind.grouped else 0)
    c_index = len(OPERANDS) + (1 if problem.kind.grouped else 0)  # the operand after the kind's others
    tail = (spec.Pointer(c_index), spec.Stride(c_index, 0)) if direct else ()
    if a_scale_masked_columns(problem, config):  # [G * K blocks, max_m]: rows of one expert's K block
        a_scale = spec.TensorMap(_A_SCALE, "float32", 1, 0, boxes.a_scale, 0)
    head = (spec.TensorMap(_A, "uint8", 1, 0, boxes.a, 128, config.l2_promotion),
            spec.TensorMap(_B, "uint8", 1, 0, boxes.b, 128, config.l2_promotion),
            a_scale, d, spec.Pointer(_B_SCALE), spec.Pointer(_OUT), spec.Stride(_OUT, 0), spec.Size(_A, 0))
    if config.b_scale_1d:  # b_scale [n, K blocks] read column-major: [block_n] of a K block per stage
        tail += (spec.TensorMap(_B_SCALE, "float32", 0, 1, (config.block_n, 1), 0),)
    if not problem.kind.grouped:
        return head + (spec.Size(_B, 0), spec.Size(_A, 1), spec.Value(config.raster_width)) + tail
    # GroupArgs.group_rows: the masked kind's slab rows, the psum kind's alignment of the experts' starts
    group_rows = {ProblemKind.GROUPED_MASKED: problem.m, ProblemKind.GROUPED_PSUM: CONTIGUOUS_ALIGNMENT}.get(
        problem.kind, 0)
    return head + (spec.Value(problem.n), spec.Size(_A, 1), spec.Value(config.raster_width),
                   spec.Pointer(_GROUP_INFO), spec.Value(problem.num_groups), spec.Value(group_rows)) + tail


K_GROUPED_BLOCKS_CODE = 6
"""``DT_PROBLEM_KIND`` of the K-grouped kind reading A and B in DeepGEMM's NT layout (the kernel's
``ProblemKind::kKGroupedBlocks``): a K-grouped config's kernel with each group's A and B block read
through its own tensor map from a table in global memory (include/deep_tile/kernels/k_grouped_maps.cuh).
Not a :class:`deep_tile.gemm.problem.ProblemKind`: the problem, the selector's pick and the other
arguments are the K-grouped kind's (:func:`deep_tile.gemm.launch.run_k_grouped` with ``layout="blocks"``)."""
K_GROUPED_BLOCKS_ARGUMENTS = ("group_maps",)
"""The parameters that kernel takes after the K-grouped kind's: the table of the groups' maps
(``2 * G`` maps of 128 bytes: A then B of each group)."""
K_GROUPED_BLOCKS_OPERANDS = GROUPED_OPERANDS + ("c", "group_maps")
"""That kernel's tensors: the K-grouped kind's (``a`` and ``b`` the flat buffers viewed as [m, K]
and [n, K]: the templates of the maps), C, then the map table (uint8 [2 * G * 128])."""


def k_grouped_blocks_defines(config) -> dict:
    """The defines of the K-grouped ``config``'s kernel in DeepGEMM's NT layout: its own, the kind
    :data:`K_GROUPED_BLOCKS_CODE`."""
    if config.problem_kind is not ProblemKind.K_GROUPED:
        raise ValueError(f"k_grouped_blocks_defines: needs a k_grouped config; got {config.problem_kind.value}")
    return defines(config) | {"DT_PROBLEM_KIND": K_GROUPED_BLOCKS_CODE}


def k_grouped_blocks_argument_specs(config, problem) -> tuple:
    """:func:`argument_specs` of the K-grouped ``problem`` for that kernel: the K-grouped kind's
    (A's and B's maps those of the [m, K] and [n, K] views, the templates), then the table's
    pointer (operands :data:`K_GROUPED_BLOCKS_OPERANDS`)."""
    return argument_specs(config, problem) + (spec.Pointer(len(K_GROUPED_BLOCKS_OPERANDS) - 1),)


def a_scale_masked_columns(problem, config) -> bool:
    """Whether the kernel reads the masked kind's column-major a_scale ``[G, max_m, K blocks]``
    (strides ``(K blocks * align4(max_m), 1, align4(max_m))``), passed as the 2-D view
    ``[G * K blocks, max_m]``: a row of max_m floats per (expert, K block)."""
    return problem.kind is ProblemKind.GROUPED_MASKED and not config.a_scale_row_major


HEAD_STRIDED_DEFINE = "DT_HEAD_STRIDED"
"""The define, set to 1, of the masked kernel reading A and its row-major scales and writing D
through ``[max_m, G * cols]`` views (``HeadStridedConfig`` in include/deep_tile/kernels/fp8_gemm_config.cuh):
fp8_einsum's ``x [b, h, r]``, ``sx [b, h, r / 128]`` and ``d [b, h, d]`` read and written in place,
group (head) g's rows ``i`` at row i, from column ``g * r``, ``g * r / 128`` and ``g * d``. Absent,
the kernels are unchanged."""


def head_strided_problems(config, problem) -> list:
    """Why ``config``'s kernel cannot run the masked ``problem`` head-strided, one phrase per broken
    rule: the masked kind with the row-major a_scale, bf16 out without C, no swap-AB or split-K,
    1D2D scales; K a multiple of 512 (whole 128-blocks, so a box never reaches the next head's
    columns, and each head's scales start 16-byte aligned) and n a multiple of 64 (nor a store
    atom)."""
    problems = []
    if (problem.kind is not ProblemKind.GROUPED_MASKED or not config.a_scale_row_major or config.swap_n
            or config.split_k != 1 or config.b_scale_1d or config.out_dtype != "bfloat16"
            or config.c_dtype is not None):
        problems.append("head_strided needs the masked kind with the row-major a_scale, bf16 out without c, no "
                        f"swap-AB, split-K or 1D1D scales; got {config.label}")
    if problem.k % (4 * BLOCK_K) or problem.n % 64:
        problems.append(f"head_strided needs k a multiple of {4 * BLOCK_K} and n of 64; got k={problem.k}, "
                        f"n={problem.n}")
    return problems


def head_strided_defines(config) -> dict:
    """The defines of ``config``'s head-strided kernel: its own and :data:`HEAD_STRIDED_DEFINE`."""
    return defines(config) | {HEAD_STRIDED_DEFINE: 1}


def head_strided_argument_specs(config, problem) -> tuple:
    """:func:`argument_specs` of the head-strided masked kernel, operands :data:`GROUPED_OPERANDS`
    as the views ``a [max_m, G * k]`` (FP8), ``a_scale [max_m, G * K blocks]`` (row-major),
    ``b [G * n, k]``, ``b_scale`` contiguous, ``out [max_m, G * n]`` and ``masked_m``: the kernel's
    m is max_m (its boxes, and its stage bytes, of at most max_m rows) and k the problem's."""
    m = problem.m
    boxes = tensor_map_boxes(config, m)
    return (spec.TensorMap(_A, "uint8", 1, 0, boxes.a, 128, config.l2_promotion),
            spec.TensorMap(_B, "uint8", 1, 0, boxes.b, 128, config.l2_promotion),
            spec.TensorMap(_A_SCALE, "float32", 1, 0, boxes.a_scale, 0),
            spec.TensorMap(_OUT, "bfloat16", 1, 0, boxes.d, boxes.d_swizzle, slab_rows=boxes.d[1]),
            spec.Pointer(_B_SCALE), spec.Pointer(_OUT), spec.Stride(_OUT, 0), spec.Size(_A, 0),
            spec.Value(problem.n), spec.Value(problem.k), spec.Value(config.raster_width), spec.Pointer(_GROUP_INFO),
            spec.Value(problem.num_groups), spec.Value(m))
