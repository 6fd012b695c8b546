"""The hyper-connection pre-norm GEMM's contract: entry file, symbols, defines, shared memory,
tensor-map boxes, launch geometry, arguments.

``csrc/entry/hc_prenorm.cu`` (include/deep_tile/kernels/hc_prenorm.cuh) computes one K split of
``d = a @ b^T`` (TF32 wgmma, A from registers) and of ``sqr_sum = (a * a).sum(-1)`` for a bf16
``[m, k]`` and b float32 ``[N, k]``, in work items of :data:`BLOCK_M` rows and one K split,
taken in turn by persistent CTAs (:func:`grid`): :data:`MATH_GROUPS` math warpgroups of 64 rows
(sharing b's tiles, which every CTA reads from L2) and one TMA warp, :data:`STAGES` 64-wide K
blocks in flight across items, :data:`CTAS_PER_SM` CTA per SM. One symbol per N in :data:`NS`.
Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "NS", "MATH_GROUPS", "BLOCK_M", "BLOCK_K", "STAGES", "THREADS", "SWIZZLE", "B_BOX_K",
           "ARGUMENT_KINDS", "CTAS_PER_SM", "MIN_BLOCKS_PER_SPLIT", "defines", "symbol", "smem_bytes", "num_items",
           "grid", "k_blocks_of_split", "own_splits", "REDUCE_SYMBOL", "REDUCE_THREADS", "REDUCE_ARGUMENT_KINDS",
           "reduce_grid", "GROUP_CHOICES", "STAGES_OF", "SMALL_M", "MIN_BLOCKS_PER_PART", "block_m", "threads",
           "math_groups", "sub_splits", "k_blocks_of_part", "ONE_GROUP_MAX_K_BLOCKS", "ONE_GROUP_FULL_SHARE",
           "VARIANTS"]

ENTRY = "hc_prenorm"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
NS = (8, 16, 24, 32)
"""The column counts N with a kernel symbol (DeepGEMM's SM90 kernel takes N <= 32, a multiple of 8)."""
MATH_GROUPS = 2
"""Math warpgroups per CTA (``DT_HC_MATH_GROUPS``): two share each b tile, so b's L2 reads are
3/8 of a's bytes at N = 24 (one would read 3/4)."""
BLOCK_M = 64 * MATH_GROUPS
"""Rows per CTA (``kHcBlockM``: the TF32 wgmma's M per warpgroup)."""
BLOCK_K = 64
"""K per stage (``kHcBlockK``): 128 bytes of a bf16 row, one 128B-swizzle row; k must be a multiple."""
STAGES = 8
"""K blocks in flight per CTA (``DT_HC_STAGES``) with :data:`MATH_GROUPS` groups: 128 KB of a in flight per SM."""
GROUP_CHOICES = (1, 2)
"""The math warpgroups a call may use (one build each): two share b's tiles; one wastes no tensor
work on rows past m when m is small and gives twice the row blocks (CTAs) at small m."""
STAGES_OF = {1: 12, 2: STAGES}
"""Stages per math-group count: one group's stages are half as large, so more fit (12 at N = 32:
192 KB)."""
SMALL_M = 256
"""Largest m that runs one math warpgroup by default (:func:`math_groups`)."""
ONE_GROUP_MAX_K_BLOCKS = 128
"""Longest K (in :data:`BLOCK_K` blocks) at which :func:`math_groups` prefers one group without
splits over two groups split in two whatever the share of SMs one group's row blocks take
(docs/performance.md); beyond it only where they fill :data:`ONE_GROUP_FULL_SHARE` of the SMs."""
ONE_GROUP_FULL_SHARE = 0.9
"""Share of the SMs one group's row blocks must fill for :func:`math_groups` to prefer one group
without splits at any K: then its CTAs are DeepGEMM's (64 rows, all of K, 12 stages) and the
partials' second kernel is saved. (The earlier kernel's longer issue path between K blocks made
one group lose at long K: 144 against 134 us at m 8192, K 28672.)"""
MIN_BLOCKS_PER_PART = 4
"""The fewest K blocks a piece of a caller's split reads when :func:`sub_splits` cuts it (a CTA's
chain of blocks is what costs at small m; the pieces' sum is a second, short kernel)."""
THREADS = 128 * MATH_GROUPS + 32
"""Threads per CTA (``kHcThreads``): the math warpgroups and one TMA warp."""
SWIZZLE = 128
"""The 128B swizzle of both operands' tiles."""
B_BOX_K = 32
"""K extent of b's TMA box: 32 floats fill one 128-byte swizzle row, so a stage takes two boxes."""
CTAS_PER_SM = 1
"""CTAs per SM (``DT_HC_CTAS_PER_SM``, the launch bound). Not two: under the register bound of two
CTAs (112 per thread) ptxas serialises the wgmmas (C7512); the persistent loop over work items
keeps the pipeline running between short K splits instead."""
MIN_BLOCKS_PER_SPLIT = 2
"""The fewest K blocks a split of :func:`own_splits` reads (fewer would spend more on the
pipeline's start and the partials than they save)."""
ARGUMENT_KINDS = ("tensormap", "tensormap", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the parameters: (map_a, map_b, d,
sqr_sum, m, num_k_blocks, num_splits, d_row_stride, d_split_stride, sub_splits)."""


REDUCE_SYMBOL = "deep_tile_hc_prenorm_reduce"
"""The kernel that sums the host's own K splits (:func:`own_splits`) into d and sqr_sum, in split order."""
REDUCE_THREADS = 256
"""Threads per CTA of the sum (``kHcReduceThreads``)."""
REDUCE_ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""Parameter kinds of the sum: (work_d, work_s, d, sqr_sum, m, n, splits, d_row_stride, groups,
d_split_stride): ``groups`` outputs, each the sum of ``splits`` consecutive partials."""


def _groups(groups) -> int:
    groups = MATH_GROUPS if groups is None else groups
    if groups not in GROUP_CHOICES:
        raise ValueError(f"hc_prenorm: math groups must be one of {GROUP_CHOICES}, got {groups!r}.")
    return groups


VARIANTS = {"default": (1, 0), "prev": (0, 1), "short_path": (1, 1), "hint": (0, 0)}
"""Kernel variants (for side-by-side timing) as (``DT_HC_LEAN_ISSUE``, ``DT_HC_A_EVICT_FIRST``):
``default`` the short path from one block's wgmmas to the next (fragment register sets kept
apart, the squares after the issue, wgmma descriptors in uniform registers) and a's loads at L2's
normal priority (DeepGEMM's); ``prev`` the earlier kernel (a evict-first); ``short_path`` and ``hint``
one change each."""


def defines(groups: int | None = None, variant: str = "default") -> dict:
    """The entry's ``-D`` defines for ``groups`` math warpgroups (default :data:`MATH_GROUPS`) and
    the kernel ``variant`` (one of :data:`VARIANTS`)."""
    groups = _groups(groups)
    if variant not in VARIANTS:
        raise ValueError(f"hc_prenorm: variant must be one of {tuple(VARIANTS)}, got {variant!r}.")
    lean_issue, a_evict_first = VARIANTS[variant]
    return {"DT_HC_STAGES": STAGES_OF[groups], "DT_HC_MATH_GROUPS": groups, "DT_HC_CTAS_PER_SM": CTAS_PER_SM,
            "DT_HC_LEAN_ISSUE": lean_issue, "DT_HC_A_EVICT_FIRST": a_evict_first}


def block_m(groups: int | None = None) -> int:
    """Rows per work item with ``groups`` math warpgroups."""
    return 64 * _groups(groups)


def threads(groups: int | None = None) -> int:
    """Threads per CTA with ``groups`` math warpgroups (and the TMA warp)."""
    return 128 * _groups(groups) + 32


def math_groups(m: int, k: int = 0, num_splits: int | None = 1, num_sms: int = 0) -> int:
    """The math warpgroups a call of m rows uses by default: one up to :data:`SMALL_M` rows; one also
    when the caller passes no splits (``num_splits`` None), K is at most :data:`ONE_GROUP_MAX_K_BLOCKS`
    blocks (or its row blocks fill :data:`ONE_GROUP_FULL_SHARE` of the SMs) and one group's row blocks
    fill the SMs without splits where two groups' would be split (the same CTAs then write d
    directly: no partials, no second kernel)."""
    if m <= SMALL_M:
        return 1
    if (num_splits is None and num_sms > 0 and k >= BLOCK_K
            and own_splits(m, k, num_sms, 1) == 1 < own_splits(m, k, num_sms, MATH_GROUPS)
            and (k // BLOCK_K <= ONE_GROUP_MAX_K_BLOCKS or ceil_div(m, block_m(1)) >= ONE_GROUP_FULL_SHARE * num_sms)):
        return 1
    return MATH_GROUPS


def symbol(n: int) -> str:
    """The kernel of ``n`` columns (one of :data:`NS`)."""
    if n not in NS:
        raise ValueError(f"hc_prenorm: no kernel for n = {n}; the kernels take n in {NS}.")
    return f"deep_tile_hc_prenorm_gemm_n{n}"


def smem_bytes(n: int, groups: int | None = None) -> int:
    """Dynamic shared memory (``HcSmem<N>::kBytes``; the kernel traps if given less): per stage the
    a tile (block_m x 64 bf16) and b's (N x 64 float32), then a full and an empty barrier per stage."""
    symbol(n)
    groups = _groups(groups)
    stages = STAGES_OF[groups]
    return stages * (block_m(groups) * BLOCK_K * 2 + n * BLOCK_K * 4) + 2 * stages * 8


def num_items(m: int, num_splits: int, groups: int | None = None, sub: int = 1) -> int:
    """Work items: row blocks times K parts (``num_splits * sub``; item i: row block i // parts,
    part i % parts)."""
    return max(1, ceil_div(m, block_m(groups))) * num_splits * sub


def grid(m: int, num_splits: int, num_sms: int, groups: int | None = None, sub: int = 1) -> int:
    """Persistent CTAs: one per work item, at most :data:`CTAS_PER_SM` per SM."""
    return min(num_items(m, num_splits, groups, sub), CTAS_PER_SM * max(1, num_sms))


def k_blocks_of_split(num_k_blocks: int, num_splits: int, split: int) -> range:
    """The K blocks split ``split`` reads (the kernel's rule: the first ``num_k_blocks % num_splits``
    splits take one block more; a split past the blocks reads none and writes zeros)."""
    per, extra = divmod(num_k_blocks, num_splits)
    begin = split * per + min(split, extra)
    return range(begin, begin + per + (1 if split < extra else 0))


def k_blocks_of_part(num_k_blocks: int, num_splits: int, sub: int, part: int) -> range:
    """The K blocks of part ``part`` of ``num_splits * sub`` (the kernel's ``hc_part``): piece
    ``part % sub`` of split ``part // sub``'s blocks, by the same rule."""
    split = k_blocks_of_split(num_k_blocks, num_splits, part // sub)
    piece = k_blocks_of_split(len(split), sub, part % sub)
    return range(split.start + piece.start, split.start + piece.stop)


def own_splits(m: int, k: int, num_sms: int, groups: int | None = None) -> int:
    """K splits the host adds for ``num_splits=None`` (1: none): as many as one wave of
    :data:`CTAS_PER_SM` CTAs per SM holds when the row blocks alone are fewer (never a second,
    partial wave), each split at least :data:`MIN_BLOCKS_PER_SPLIT` K blocks. The partials are
    summed afterwards."""
    row_blocks = max(1, ceil_div(m, block_m(groups)))
    wanted = CTAS_PER_SM * max(1, num_sms) // row_blocks
    return max(1, min(wanted, (k // BLOCK_K) // MIN_BLOCKS_PER_SPLIT))


def sub_splits(m: int, k: int, num_splits: int, num_sms: int, groups: int | None = None) -> int:
    """Pieces per caller's split (1: none): when the caller's splits leave SMs idle, each split's
    K blocks are cut into as many pieces as one wave holds, each at least
    :data:`MIN_BLOCKS_PER_PART` blocks; the pieces' partials are summed into the split's."""
    items = num_items(m, num_splits, groups)
    wanted = CTAS_PER_SM * max(1, num_sms) // items
    return max(1, min(wanted, (k // BLOCK_K) // num_splits // MIN_BLOCKS_PER_PART))


def reduce_grid(m: int, n: int, num_sms: int, groups: int = 1) -> int:
    """CTAs of the sum: one output per thread up to four CTAs per SM (a grid-stride loop beyond)."""
    return max(1, min(ceil_div(groups * (m * n + m), REDUCE_THREADS), 4 * max(1, num_sms)))
