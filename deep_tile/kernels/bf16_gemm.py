"""The BF16 GEMMs' kernel contract: entry file, symbol, defines, shared memory, tile rule, arguments.

``csrc/entry/bf16_gemm.cu`` (include/deep_tile/kernels/bf16_gemm.cuh) computes
``D[m, n] (+)= sum_k A[m, k] B[n, k]`` with float32 accumulation, one kernel for every layout:
``Bf16Config.major_a`` / ``major_b`` say whether A / B is K-major (``"k"``: unit stride along k)
or MN-major (``"mn"``: unit stride along m / n), read through the BF16 wgmma's transpose
immediates (no transposing copies). Tiles are 128 x ``block_n`` (two consumer warpgroups of 64
rows) or, for the dense GEMM, 64 x ``block_n`` (``block_m`` 64: one consumer warpgroup, 256 threads),
``BLOCK_K`` = 64, one producer warpgroup, persistent CTAs. :func:`plan` picks a shape's tile
width, K splits and A box from a small cost model; :func:`select_block_n` is the earlier rule (the
legacy plan, kept selectable for comparisons). Pure Python.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "SYMBOL", "THREADS", "BLOCK_M", "BLOCK_K", "BLOCK_NS", "LEGACY_BLOCK_NS", "BOX_MS", "MAJORS",
           "GEMM_TYPES", "BLOCK_MS", "SMEM_LIMIT", "ARGUMENT_KINDS", "Bf16Config", "Bf16Plan", "stages_for", "smem_bytes",
           "select_block_n", "plan", "legacy_plan", "grid", "split_workspace_floats", "deep_stages", "plan_stages",
           "store_boxes", "staging_bytes", "stage_bytes", "MAX_RING_STAGES", "MAX_K_MERGE",
           "DEEP_MAX_STAGES", "DEEP_MAX_BLOCK_N", "HYSTERESIS",
           "MAX_SPLIT_M_BLOCKS", "plan_cost", "PAIRED_MAX_K_BLOCKS", "GEMV_ENTRY", "GEMV_SYMBOL", "GEMV_BLOCK_M",
           "GEMV_THREADS", "GEMV_ARGUMENT_KINDS", "gemv_defines", "gemv_grid", "SHORT_BOX_TYPES", "batched_cost",
           "batched_plan", "batched_stages"]

ENTRY = "bf16_gemm"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
SYMBOL = "deep_tile_bf16_gemm"
THREADS = 384
"""A producer warpgroup and two consumer warpgroups (``Bf16GemmConfig::kThreads``; 256 at ``block_m`` 64)."""
BLOCK_M = 128
BLOCK_MS = (64, 128)
"""Tile rows: 128 (two consumer warpgroups), or 64 for the dense GEMM (one; A boxes of at most 64 rows)."""
BLOCK_K = 64
BLOCK_NS = tuple(range(16, 257, 16))
"""Tile widths the kernel takes (an MN-major B: the multiples of 64)."""
LEGACY_BLOCK_NS = (64, 128, 256)
"""The widths of the earlier tile rule (:func:`select_block_n`)."""
BOX_MS = (16, 32, 64, 128)
"""A rows loaded per stage: 128, or fewer for the dense GEMM when m fits (TMA's out-of-bounds fill costs bandwidth)."""
MAX_SPLITS = 16
MAJORS = ("k", "mn")
GEMM_TYPES = {"normal": 0, "contiguous": 1, "masked": 2, "k_grouped": 3, "batched": 4}
"""``Bf16GemmType``: the dense GEMM, the M-grouped contiguous (m_indices) and masked (masked_m) GEMMs,
the K-grouped GEMM (each group's k rows, float32 D accumulated), the batched GEMM (``D_g = A_g B_g^T``
for every batch index g, A and B through 3-D maps whose third coordinate is g, D at g * group_ldd)."""
SHORT_BOX_TYPES = ("normal", "batched")
"""The GEMM types that take a short A box (``box_m`` < 128) and 64-row tiles."""
K_GROUP_ALIGNMENT = 128
"""The K-grouped GEMM's group sizes are multiples of this (DeepGEMM's SM90 alignment; the kernel needs BLOCK_K)."""
SMEM_LIMIT = 227 * 1024
MAX_STAGES = 8
SMEM_BUDGET = 200 * 1024
"""Bytes of operand stages a configuration aims for (4 stages of 128 x 256, 6 of 128 x 128, 8 of 128 x 64)."""
ARGUMENT_KINDS = ("tensormap", "tensormap", "tensormap", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "ptr", "ptr",
                  "i32")
"""(tmap_a, tmap_b, tmap_d, d, layout, m, n, k, ldd, num_groups, workspace, counters, group_ldd); tmap_d is
read only with ``tma_store``; the dense GEMM reads num_groups as its K splits, whose float32 partial tiles go
to ``workspace`` (:func:`split_workspace_floats`) and whose arrivals are counted in ``counters`` (one
uint32 per output tile, zero before the launch and left zero after it); the batched GEMM reads num_groups
as its batch count and group_ldd as D's batch stride in elements (the other types ignore it)."""
STORE_BYTES = 2 * 2 * 64 * 128
"""``tma_store``'s staging: two boxes of 64 rows x 128 bytes per consumer warpgroup."""
BOX_BYTES = 64 * 128
"""One staged box: a consumer warpgroup's 64 rows of 128 bytes."""
STORE_BOX = (64, 64)
"""bf16 D's TMA box (columns, rows): 128 bytes by one warpgroup's rows."""
STORE_BOX_F32 = (32, 64)
"""float32 D's TMA box (columns, rows)."""


def threads(block_m: int = BLOCK_M) -> int:
    """The block: a producer warpgroup and a consumer warpgroup per 64 tile rows."""
    return 128 * (1 + block_m // 64)


def stage_bytes(block_n: int, compact_a: bool = False, block_m: int = BLOCK_M, k_merge: int = 1) -> int:
    """One stage's slots: A (``block_m`` rows, or 64 with ``compact_a``) and B, ``k_merge`` 64-k blocks of each."""
    return ((64 if compact_a else block_m) + block_n) * BLOCK_K * 2 * k_merge


def store_boxes(block_n: int, out_f32: bool) -> int:
    """Whole store boxes in a tile row (``Bf16GemmConfig::kStoreBoxes`` with ``tma_store``)."""
    return block_n // (STORE_BOX_F32 if out_f32 else STORE_BOX)[0]


def staging_bytes(block_n: int, tma_store: bool, store_all: bool = False, out_f32: bool = False,
                  block_m: int = BLOCK_M) -> int:
    """``tma_store``'s shared memory: two boxes per consumer warpgroup, or (``store_all``) one per box."""
    if not tma_store:
        return 0
    per_group = store_boxes(block_n, out_f32) * BOX_BYTES if store_all else STORE_BYTES // 2
    return block_m // 64 * per_group


def stages_for(block_n: int, tma_store: bool = False, store_all: bool = False, out_f32: bool = False,
               block_m: int = BLOCK_M) -> int:
    """The ring's depth for ``block_n``: as many stages as SMEM_BUDGET holds (and shared memory with
    ``tma_store``'s staging), at most MAX_STAGES."""
    room = SMEM_LIMIT - staging_bytes(block_n, tma_store, store_all, out_f32, block_m) - 16 * MAX_STAGES
    per = stage_bytes(block_n, block_m=block_m)
    return min(MAX_STAGES, SMEM_BUDGET // per, room // per)


MAX_K_MERGE = 8
"""Most 64-k blocks one stage may hold (``Bf16Config.k_merge``)."""
DEEP_MAX_STAGES = 12
MAX_RING_STAGES = 16
"""The deepest ring a configuration (a forced plan) may name."""
DEEP_MAX_BLOCK_N = 128
"""Plans this narrow that store D from registers take :func:`deep_stages` (no staging to make room for)."""


def deep_stages(block_n: int, block_m: int = BLOCK_M, k_merge: int = 1) -> int:
    """The deepest ring shared memory holds for ``block_n`` without store staging (at most
    DEEP_MAX_STAGES, or MAX_RING_STAGES for 64-row tiles, whose stages are smaller: DeepGEMM runs 16
    there): narrow few-column and split plans wait on their loads' round trips, so more bytes in
    flight is their lever. ``k_merge`` > 1: stages of that many 64-k blocks, fewer of them."""
    cap = DEEP_MAX_STAGES if block_m == BLOCK_M else MAX_RING_STAGES
    return min(cap, SMEM_LIMIT // (stage_bytes(block_n, block_m=block_m, k_merge=k_merge) + 16))


def batched_stages(block_n: int, block_m: int = BLOCK_M, tma_store: bool = False, out_f32: bool = False) -> int:
    """The batched GEMM's ring: :func:`deep_stages`, less what ``tma_store``'s two staged boxes per
    consumer warpgroup take (its D never waits on a store inside a tile's k loop)."""
    if not tma_store:
        return deep_stages(block_n, block_m)
    cap = DEEP_MAX_STAGES if block_m == BLOCK_M else MAX_RING_STAGES
    room = SMEM_LIMIT - staging_bytes(block_n, True, False, out_f32, block_m)
    return min(cap, room // (stage_bytes(block_n, block_m=block_m) + 16))


def plan_stages(pl: "Bf16Plan", accumulate: bool = False) -> int:
    """The ring a plan runs (0: the configuration's default, :func:`stages_for`): :func:`deep_stages`
    for a split plan or a non-accumulating one at most DEEP_MAX_BLOCK_N wide, whose D then leaves
    from registers."""
    deep = pl.splits > 1 or (pl.block_n <= DEEP_MAX_BLOCK_N and not accumulate)
    return deep_stages(pl.block_n, pl.block_m, pl.k_merge) if deep else 0


def smem_bytes(block_n: int, stages: int, tma_store: bool = False, store_all: bool = False,
               out_f32: bool = False, compact_a: bool = False, block_m: int = BLOCK_M, k_merge: int = 1) -> int:
    """Dynamic shared memory: the stages, ``tma_store``'s staging, 2 mbarriers per stage
    (``Bf16GemmConfig::kSmemBytes``)."""
    return (stages * stage_bytes(block_n, compact_a, block_m, k_merge)
            + staging_bytes(block_n, tma_store, store_all, out_f32, block_m) + 16 * stages)


@dataclass(frozen=True)
class Bf16Config:
    """One kernel instance (``Bf16GemmConfig``'s fourteen template parameters)."""

    major_a: str = "k"
    major_b: str = "k"
    block_n: int = 256
    stages: int = 0  # 0: stages_for(block_n)
    out_f32: bool = False
    accumulate: bool = False
    gemm_type: str = "normal"
    tma_store: bool = False
    box_m: int = BLOCK_M
    cluster_m: int = 1
    store_all: bool = False  # tma_store: a buffer per box, one wait per tile (kStoreAll)
    compact_a: bool = False  # box_m <= 64: a 64-row A slot per stage, room for a deeper ring (kCompactA)
    block_m: int = BLOCK_M  # 64: one consumer warpgroup, 64-row tiles (the dense GEMM, box_m <= 64)
    k_merge: int = 1  # 64-k blocks per stage (kKMerge; the dense GEMM, K-major a and b, no pairs)

    def __post_init__(self):
        if self.major_a not in MAJORS or self.major_b not in MAJORS:
            raise ValueError(f"bf16_gemm: majors must be in {MAJORS}, got {self.major_a!r}, {self.major_b!r}.")
        if self.block_n not in BLOCK_NS or (self.major_b == "mn" and self.block_n % 64):
            raise ValueError(f"bf16_gemm: block_n must be a multiple of 16 up to 256 (of 64 for an MN-major b), "
                             f"got {self.block_n}.")
        if self.box_m not in BOX_MS or (self.box_m < BLOCK_M and (self.gemm_type not in SHORT_BOX_TYPES or
                                                                  (self.major_a == "mn" and self.box_m != 64))):
            raise ValueError(f"bf16_gemm: box_m must be 128, or 16 / 32 / 64 (MN-major a: 64) for the dense and "
                             f"batched GEMMs, "
                             f"got {self.box_m}.")
        if self.cluster_m not in (1, 2) or (self.cluster_m == 2 and (self.gemm_type != "normal" or self.major_b != "k"
                                                                      or self.box_m != BLOCK_M)):
            raise ValueError(f"bf16_gemm: cluster_m must be 1, or 2 for the dense GEMM with a K-major b and whole A "
                             f"boxes, got {self.cluster_m}.")
        if self.gemm_type not in GEMM_TYPES:
            raise ValueError(f"bf16_gemm: gemm_type must be in {tuple(GEMM_TYPES)}, got {self.gemm_type!r}.")
        if self.gemm_type == "batched" and (self.major_a != "k" or self.cluster_m != 1 or self.accumulate):
            raise ValueError("bf16_gemm: the batched kernel takes a K-major a, stores d (a 3-D map or registers) "
                             "without accumulation and runs no CTA pairs.")
        if self.gemm_type in ("contiguous", "masked") and (self.major_a != "k" or self.out_f32 or self.accumulate):
            raise ValueError("bf16_gemm: the M-grouped kernels take a K-major A and write bf16 without accumulation.")
        if self.gemm_type == "k_grouped" and not (self.out_f32 and self.accumulate and not self.tma_store):
            raise ValueError("bf16_gemm: the K-grouped kernel accumulates into float32 d (no TMA stores).")
        if self.tma_store and ((self.accumulate and not self.out_f32) or self.gemm_type in ("masked", "k_grouped")
                               or self.block_n < (STORE_BOX_F32 if self.out_f32 else STORE_BOX)[0]):
            raise ValueError("bf16_gemm: tma_store takes bf16 d without accumulation or float32 d, at least one "
                             "whole box wide, not the masked or K-grouped GEMM.")
        if self.store_all and not (self.tma_store and store_boxes(self.block_n, self.out_f32) >= 3):
            raise ValueError("bf16_gemm: store_all takes tma_store and at least three whole boxes per tile row.")
        if self.compact_a and self.box_m > 64:
            raise ValueError("bf16_gemm: compact_a takes box_m 64 or less.")
        if self.block_m not in BLOCK_MS or (self.block_m == 64 and (self.gemm_type not in SHORT_BOX_TYPES
                                                                    or self.box_m > 64
                                                                    or self.cluster_m != 1 or self.compact_a)):
            raise ValueError(f"bf16_gemm: block_m must be 128, or 64 for the dense or batched GEMM with box_m 64 or less, "
                             f"no CTA pairs and no compact_a (its A slot is 64 rows already), got {self.block_m}.")
        if not 1 <= self.k_merge <= MAX_K_MERGE or (self.k_merge > 1 and (
                self.gemm_type != "normal" or self.major_a != "k" or self.major_b != "k" or self.cluster_m != 1)):
            raise ValueError(f"bf16_gemm: k_merge must be 1, or up to {MAX_K_MERGE} for the dense GEMM with K-major a "
                             f"and b and no CTA pairs, got {self.k_merge}.")
        if not self.stages and self.k_merge > 1:  # the default ring counts 64-k blocks: the same bytes, fewer stages
            object.__setattr__(self, "stages", max(2, stages_for(self.block_n, self.tma_store, self.store_all,
                                                                 self.out_f32, self.block_m) // self.k_merge))
        if not self.stages:
            object.__setattr__(self, "stages", stages_for(self.block_n, self.tma_store, self.store_all, self.out_f32,
                                                          self.block_m))
        if self.stages < 2 or self.stages > MAX_RING_STAGES or self.smem > SMEM_LIMIT:
            raise ValueError(f"bf16_gemm: {self.stages} stages of block_n {self.block_n} do not fit shared memory.")

    @property
    def smem(self) -> int:
        return smem_bytes(self.block_n, self.stages, self.tma_store, self.store_all, self.out_f32, self.compact_a,
                          self.block_m, self.k_merge)

    @property
    def threads(self) -> int:
        return threads(self.block_m)

    def defines(self) -> dict:
        return {"DT_BF16_MAJOR_A": int(self.major_a == "mn"), "DT_BF16_MAJOR_B": int(self.major_b == "mn"),
                "DT_BF16_BLOCK_N": self.block_n, "DT_BF16_STAGES": self.stages,
                "DT_BF16_OUT_F32": int(self.out_f32), "DT_BF16_ACCUMULATE": int(self.accumulate),
                "DT_BF16_GEMM_TYPE": GEMM_TYPES[self.gemm_type], "DT_BF16_TMA_STORE": int(self.tma_store),
                "DT_BF16_BOX_M": self.box_m, "DT_BF16_CLUSTER_M": self.cluster_m,
                "DT_BF16_STORE_ALL": int(self.store_all), "DT_BF16_COMPACT_A": int(self.compact_a),
                "DT_BF16_BLOCK_M": self.block_m, "DT_BF16_K_MERGE": self.k_merge, "DT_BF16_SMEM_BYTES": self.smem,
                "DT_BF16_THREADS": self.threads}

    @property
    def label(self) -> str:
        return (f"bf16 {self.gemm_type} a:{self.major_a} b:{self.major_b} {self.block_m}x{self.block_n} s{self.stages}"
                f"{' f32' if self.out_f32 else ''}{' acc' if self.accumulate else ''}{' tma-store' if self.tma_store else ''}"
                f"{f' box{self.box_m}' if self.box_m != BLOCK_M else ''}{' x2' if self.cluster_m == 2 else ''}{' store-all' if self.store_all else ''}{' compact-a' if self.compact_a else ''}"
                f"{f' k{64 * self.k_merge}' if self.k_merge > 1 else ''}")


def select_block_n(m_blocks: int, n: int, num_sms: int) -> int:
    """The tile width: the fewest predicted time units, ``waves * (block_n + 64)`` (a wave of
    128 x block_n tiles costs about its width plus a fixed part for A and the epilogue), so small-M
    problems take narrow tiles (more CTAs streaming B) and large ones 128 x 256."""
    best, best_cost = LEGACY_BLOCK_NS[-1], None
    for block_n in reversed(LEGACY_BLOCK_NS):
        tiles = max(1, m_blocks) * ceil_div(max(1, n), block_n)
        cost = ceil_div(tiles, max(1, num_sms)) * (block_n + 64)
        if best_cost is None or cost < best_cost:
            best, best_cost = block_n, cost
    return best


@dataclass(frozen=True)
class Bf16Plan:
    """How a call runs: the tile width, the K splits (dense GEMM; > 1: float32 partials summed in the
    kernel by each tile's last split), the A rows each stage loads, the CTAs sharing B by multicast
    (1 or 2), for forced plans only the ring's depth (0: the default rule; else that many stages, D
    from registers unless ``store_all``, and a 64-row A slot when ``box_m`` <= 64,
    ``Bf16Config.compact_a``), and ``store_all`` (1: D staged a buffer per box,
    ``Bf16Config.store_all``, where D takes TMA stores and the tile holds 3+ boxes), and the tile's
    rows ``block_m`` (64: one consumer warpgroup, the dense GEMM only, ``box_m`` at most 64 and no
    pairs; GEMV_BLOCK_M: no tiles, the stream over B at m <= 4, whose other fields are unused), and ``k_merge``
    (64-k blocks per stage, ``Bf16Config.k_merge``; ``stages`` then counts merged stages; forced plans only).
    :func:`plan` sets ``cluster_m`` and ``store_all`` only by its short-K rule."""

    block_n: int
    splits: int = 1
    box_m: int = BLOCK_M
    cluster_m: int = 1
    stages: int = 0
    store_all: int = 0
    block_m: int = BLOCK_M
    k_merge: int = 1

    def __post_init__(self):
        if (self.block_n not in BLOCK_NS or not 1 <= self.splits <= MAX_SPLITS or self.box_m not in BOX_MS
                or self.cluster_m not in (1, 2) or not (self.stages == 0 or 2 <= self.stages <= MAX_RING_STAGES)
                or self.store_all not in (0, 1) or self.block_m not in BLOCK_MS + (GEMV_BLOCK_M,)
                or (self.block_m == 64 and (self.box_m > 64 or self.cluster_m != 1))
                or not 1 <= self.k_merge <= MAX_K_MERGE or (self.k_merge > 1 and self.cluster_m != 1)):
            raise ValueError(f"bf16_gemm: a plan takes block_n in {BLOCK_NS[0]}..{BLOCK_NS[-1]} (steps of 16), "
                             f"1..{MAX_SPLITS} splits, box_m in {BOX_MS}, cluster_m 1 or 2, stages 0 or "
                             f"2..{MAX_RING_STAGES}, store_all 0 or 1 and block_m 128, or 64 with box_m at most 64 "
                             f"and cluster_m 1, or {GEMV_BLOCK_M} (the stream over B), k_merge 1..{MAX_K_MERGE} "
                             f"(cluster_m 1); got {self}.")


# the cost model's machine (an H200; only ratios between candidates matter)
_FLOPS_PER_SM_US = 818e6 / 132  # dense BF16 wgmma, FLOP per microsecond per SM
_SM_BYTES_US = 95e3            # the bytes TMA lands in one SM's shared memory per microsecond, alone
_L2_BYTES_US = 52.6e6          # every active CTA's loads slow each CTA's by their sum over this
_LATENCY_US = 2.0              # a stage's round trip: the ring's bytes in flight per this bound a CTA's rate
_HBM_BYTES_US = 4.0e6
_STORE_BYTES_US = 46e3         # one CTA's tile of D stored (the consumers wait), bytes per microsecond
_ADD_BYTES_US = 15.5e3         # and added to D's previous value (D read from HBM first)
_TAIL_BYTES_US = 16e3          # the columns past a staged tile's last whole box, stored from registers besides
_SPLIT_US = 0.5                # split K: the counter's round trip and the last CTA's barriers
_PARTIAL_BYTES_US = 12e3       # one SM's float32 partial stores and loads (not TMA), as measured at 128 x 2112 x 7168
MAX_SPLIT_M_BLOCKS = 2
"""K splits only up to this many m-blocks (wider, measured slower than the unsplit plan)."""


def _costs(m: int, n: int, k: int, m_blocks: int, num_sms: int, block_n: int, splits: int, box_m: int,
           cluster_m: int = 1, out_f32: bool = False, accumulate: bool = False, block_m: int = BLOCK_M) -> tuple:
    """(predicted microseconds, the same without the HBM floor): see :func:`plan_cost`."""
    k_blocks = ceil_div(max(1, k), BLOCK_K)
    if block_m != BLOCK_M:  # m_blocks counts 128-row blocks: a 64-row tile halves the last one only if m fits
        m_blocks = ceil_div(max(1, m), block_m)
    tiles = ceil_div(max(1, m_blocks), cluster_m) * cluster_m * ceil_div(max(1, n), block_n) * splits
    sms = num_sms if cluster_m == 1 else num_sms - 2  # pairs may leave an SM of an odd GPC idle
    active = min(tiles, sms)
    rows = 64 if box_m <= 64 else BLOCK_M
    stage = (box_m + block_n) * BLOCK_K * 2  # what lands in this CTA's shared memory, multicast or not
    mma = 2 * rows * block_n * BLOCK_K / _FLOPS_PER_SM_US
    deep = splits > 1 or (block_n <= DEEP_MAX_BLOCK_N and not accumulate)  # D from registers (plan_stages)
    ring = deep_stages(block_n, block_m) if deep else stages_for(block_n, block_m=block_m)
    feed = max(stage / _SM_BYTES_US + stage * active / _L2_BYTES_US, _LATENCY_US / ring)
    out = min(block_m, max(1, m)) * block_n * (4 if out_f32 else 2)  # one tile of D
    epilogue = out / _STORE_BYTES_US + (out / _ADD_BYTES_US if accumulate else 0.0)
    box_cols = (STORE_BOX_F32 if out_f32 else STORE_BOX)[0]
    if not deep and (out_f32 or not accumulate):  # a staged store: its column tail waits
        epilogue += min(block_m, max(1, m)) * (block_n % box_cols) * (4 if out_f32 else 2) / _TAIL_BYTES_US
    if splits > 1:  # only the last split of a tile stores D
        epilogue = 0.0
    cost = ceil_div(tiles, sms) * (ceil_div(k_blocks, splits) * max(mma, feed) + epilogue)
    tail = 0.0
    if splits > 1:  # every split stores its partial, the last of a tile loads them all: after the k loop
        live = min(block_m, ceil_div(max(1, m), 16) * 16)
        tail = _SPLIT_US + (1 + splits) * live * block_n * 4 / _PARTIAL_BYTES_US + out / _STORE_BYTES_US
    # the HBM floor bounds the k loops' streaming; the split sum follows it
    return max(cost, 2 * k * (m + n) / _HBM_BYTES_US) + tail, cost + tail


def plan_cost(m: int, n: int, k: int, m_blocks: int, num_sms: int, block_n: int, splits: int = 1,
              box_m: int = BLOCK_M, cluster_m: int = 1, out_f32: bool = False, accumulate: bool = False,
              block_m: int = BLOCK_M) -> float:
    """Predicted microseconds: waves of CTAs times each CTA's k blocks at the slower of its wgmma and
    its feed (the bytes landing in its shared memory at one SM's rate, slowed in proportion to the
    active CTAs; or the ring's bytes per round trip), plus each tile's epilogue (its D stored, and
    added to D's previous value when accumulating; a staged store's columns past its last whole box
    cost extra, as measured at 240 wide against 256), no less than the HBM reads; splits add the
    partials' stores and the last split's loads after that floor (the sum follows the k loops).
    ``block_m`` 64: 64-row tiles (``m_blocks`` is then recounted from m), 64 rows of wgmma per k
    block and the deeper ring their smaller stages allow. B multicast to pairs saves nothing here (measured
    no faster): it only costs the SMs a pair cannot use."""
    return _costs(m, n, k, m_blocks, num_sms, block_n, splits, box_m, cluster_m, out_f32, accumulate, block_m)[0]


def legacy_plan(m_blocks: int, n: int, num_sms: int) -> Bf16Plan:
    """The earlier rule: :func:`select_block_n`'s width, no split, whole A boxes."""
    return Bf16Plan(select_block_n(m_blocks, n, num_sms))


PLAN_ROWS64 = False
"""Whether :func:`plan` weighs 64-row tiles by default (``bf16_plan`` passes it as ``rows64``). Off: the model
predicts them at the pace of a kernel whose wgmmas ptxas no longer serializes, not yet timed; forced plans
(``block_m`` 64) reach them meanwhile."""

PAIRED_MAX_K_BLOCKS = 24
"""Longest K (in BLOCK_K blocks) of the unsplit 256-wide bf16 plan that :func:`plan` runs as CTA
pairs sharing B with each store box in its own buffer (docs/performance.md has the timings)."""
FEW_COLUMNS_MAX_N = 256
"""At most this many columns, a dense K-major GEMM whose 128-row plan is unsplit, narrower than 128 and
fits one wave takes 64-row tiles 128 wide when they fit one wave too (:func:`plan`): each row of A, the
large operand there, then reaches half as many CTAs through L2 (docs/performance.md has the timings)."""
MERGED_RING = (32, 6, 3)
"""(block_n, stages, k_merge) of the merged-ring plan :func:`plan` takes at small m: 64-row tiles 32 wide,
6 stages of 3 64-k blocks each (DeepGEMM's ring at these shapes; docs/performance.md has the timings)."""
MERGED_RING_MIN_K_BLOCKS = 24
"""The merged ring only over K of at least this many 64-k blocks (its 18 blocks in flight filled)."""
HYSTERESIS = 0.98
"""The legacy plan stays unless the model predicts the best plan this much faster (its shapes sit at
parity with DeepGEMM)."""


@functools.lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, m_blocks: int, num_sms: int, major_a: str = "k", major_b: str = "k",
         dense: bool = True, out_f32: bool = False, accumulate: bool = False, rows64: bool = False) -> Bf16Plan:
    """The cheapest :func:`plan_cost` over the tile widths (multiples of 16; of 64 for an MN-major b)
    and, for the dense GEMM (``dense``) with ``rows64``, 64-row tiles (the only ones at m <= 64, where a 128-row
    tile's second warpgroup would idle), K splits and a short A box at tiny m (B multicast to CTA
    pairs, each store box its own buffer, only for short K over many 256-wide tiles:
    :data:`PAIRED_MAX_K_BLOCKS`; elsewhere measured no faster). Splits change a row's summation order with m, so an
    MN-major b (``bf16_gemm_nn``, which SGLang's batch-invariant matmul calls) is never split, nor
    more than MAX_SPLIT_M_BLOCKS m-blocks. The legacy plan stays unless the model predicts the best
    one :data:`HYSTERESIS` faster (its shapes are measured at parity). ``out_f32`` / ``accumulate``:
    D's kind, for the epilogue's cost. ``rows64``: weigh 64-row tiles at all (:data:`PLAN_ROWS64`; else
    128-row tiles only). Cached: a call's plan costs no model evaluation after the first."""
    old = legacy_plan(m_blocks, n, num_sms)
    best, best_cost = old, _costs(m, n, k, m_blocks, num_sms, old.block_n, 1, BLOCK_M, 1, out_f32, accumulate)
    legacy_cost = best_cost[0]
    k_blocks = ceil_div(max(1, k), BLOCK_K)
    box = BLOCK_M
    if dense and m <= 64:
        box = next(b for b in BOX_MS if b >= m)
        box = 64 if major_a == "mn" else box
    # the dense GEMM may take 64-row tiles (one consumer warpgroup): twice the tiles, so that small-m
    # and few-column problems fill the SMs without K splits; at m <= 64 they replace the idle warpgroup
    shapes = [(BLOCK_M, box)] if not (dense and rows64) else [(64, min(box, 64))] + ([(BLOCK_M, box)] if m > 64 else [])
    for block_n in BLOCK_NS:
        if major_b == "mn" and block_n % 64:
            continue
        for block_m, box_m in shapes:
            rows = max(1, m_blocks) if block_m == BLOCK_M else ceil_div(max(1, m), block_m)
            tiles = rows * ceil_div(max(1, n), block_n)
            max_splits = 1
            if dense and major_b == "k" and m_blocks <= MAX_SPLIT_M_BLOCKS:  # every split 4+ k blocks, CTAs <= SMs
                max_splits = max(1, min(MAX_SPLITS, k_blocks // 4, num_sms // tiles))
            for splits in range(1, max_splits + 1):
                if (splits - 1) * ceil_div(k_blocks, splits) >= k_blocks:
                    continue  # the last split would be empty
                cost = _costs(m, n, k, m_blocks, num_sms, block_n, splits, box_m, 1, out_f32, accumulate, block_m)
                if cost < best_cost:  # ties on the HBM floor: the less loaded plan
                    best, best_cost = Bf16Plan(block_n, splits, box_m, block_m=block_m), cost
    best = best if best_cost[0] < HYSTERESIS * legacy_cost else old
    rows64_tiles = ceil_div(max(1, m), 64) * ceil_div(max(1, n), 128)
    if (dense and major_a == "k" and major_b == "k" and n <= FEW_COLUMNS_MAX_N and best.block_m == BLOCK_M
            and best.splits == 1 and best.box_m == BLOCK_M and best.block_n < 128
            and max(1, m_blocks) * ceil_div(n, best.block_n) <= rows64_tiles <= num_sms):
        # few columns over a long A: 64 x 128 tiles read each A row into ceil(n / 128) CTAs, not ceil(n / block_n)
        best = Bf16Plan(min(128, ceil_div(n, 16) * 16), 1, 64, block_m=64)
    ring_n, ring_stages, ring_merge = MERGED_RING
    if (dense and major_a == "k" and major_b == "k" and not out_f32 and not accumulate and m <= 2 * 64
            and k_blocks >= MERGED_RING_MIN_K_BLOCKS
            and 0.9 * num_sms <= ceil_div(max(1, m), 64) * ceil_div(n, ring_n) <= num_sms):
        # small m, long K, one wave of narrow 64-row tiles: each stage's sync (full wait, commit, release)
        # costs as much as its wgmmas, so stages of several 64-k blocks (measured at parity with DeepGEMM)
        best = Bf16Plan(ring_n, 1, min(box, 64), 1, ring_stages, 0, 64, ring_merge)
    if (dense and major_b == "k" and not out_f32 and not accumulate and best.block_n == 256 and best.splits == 1
            and k_blocks <= PAIRED_MAX_K_BLOCKS and max(1, m_blocks) * ceil_div(n, 256) >= 4 * num_sms):
        # short K over many wide tiles: the epilogue is a large share, so B shared by CTA pairs and
        # every store box its own buffer (one wait per tile), as measured faster there
        best = Bf16Plan(256, 1, BLOCK_M, 2, 0, 1)
    return best


GEMV_ENTRY = "bf16_gemv"
"""The m <= 4 stream over B (``csrc/entry/bf16_gemv.cu``): a warp per column of D, no tiles."""
GEMV_SYMBOL = "deep_tile_bf16_gemv"
GEMV_BLOCK_M = 4
"""``Bf16Plan.block_m`` 4 names the stream over B: m <= 4, K-major a and b, k a multiple of 8 (forced plans only)."""
GEMV_WARPS = 8
GEMV_THREADS = 32 * GEMV_WARPS
GEMV_ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""(a, b, d, m, n, k, lda, ldb, ldd), strides in elements."""


def gemv_defines(m: int, out_f32: bool, accumulate: bool) -> dict:
    """The stream's instance for ``m`` <= 4 rows (1, 2 or 4 accumulators per lane)."""
    if not 1 <= m <= GEMV_BLOCK_M:
        raise ValueError(f"bf16_gemm: the stream over B takes m <= {GEMV_BLOCK_M}, got m={m}.")
    return {"DT_GEMV_ROWS": 1 if m == 1 else 2 if m == 2 else 4, "DT_GEMV_OUT_F32": int(out_f32),
            "DT_GEMV_ACCUMULATE": int(accumulate), "DT_GEMV_THREADS": GEMV_THREADS}


def gemv_grid(n: int) -> int:
    """A warp per column of D."""
    return max(1, ceil_div(n, GEMV_WARPS))


def batched_cost(groups: int, m: int, n: int, k: int, num_sms: int, block_n: int, box_m: int = BLOCK_M,
                 block_m: int = BLOCK_M, floor: bool = True) -> float:
    """Predicted microseconds of the batched GEMM: waves of (batch, m-block, n-block) tiles, each CTA's
    k blocks at the slower of its wgmma and its feed (:func:`plan_cost`'s terms, the deep ring: D leaves
    from registers), plus the tile's bf16 D stored; with ``floor``, no less than every batch's A, B and D
    over HBM."""
    k_blocks = ceil_div(max(1, k), BLOCK_K)
    tiles = max(1, groups) * ceil_div(max(1, m), block_m) * ceil_div(max(1, n), block_n)
    active = min(tiles, num_sms)
    rows = min(block_m, box_m)
    stage = (box_m + block_n) * BLOCK_K * 2
    mma = 2 * rows * block_n * BLOCK_K / _FLOPS_PER_SM_US
    feed = max(stage / _SM_BYTES_US + stage * active / _L2_BYTES_US, _LATENCY_US / deep_stages(block_n, block_m))
    epilogue = min(block_m, max(1, m)) * block_n * 2 / _STORE_BYTES_US
    cost = ceil_div(tiles, num_sms) * (k_blocks * max(mma, feed) + epilogue)
    return max(cost, 2 * max(1, groups) * (k * (m + n) + m * n) / _HBM_BYTES_US) if floor else cost


@functools.lru_cache(maxsize=1024)
def batched_plan(groups: int, m: int, n: int, k: int, num_sms: int, major_b: str = "k") -> Bf16Plan:
    """The batched GEMM's tile: at m <= 64 a 64-row tile (one consumer warpgroup) loading the shortest A
    box that holds m (16 / 32 / 64 rows; TMA's out-of-bounds fill costs what real rows do), else 128-row
    tiles; the width (multiples of 16, of 64 for an MN-major b) of the fewest :func:`batched_cost`
    microseconds, no wider than n needs; ties on the HBM floor go to the less loaded tile (unfloored cost)."""
    if m <= 64:
        block_m, box_m = 64, next(b for b in BOX_MS if b >= m)
    else:
        block_m, box_m = BLOCK_M, BLOCK_M
    best, best_cost = None, None
    step = 64 if major_b == "mn" else 16
    widest = min(BLOCK_NS[-1], ceil_div(max(1, n), step) * step)
    for block_n in reversed(BLOCK_NS):
        if block_n % step or block_n > widest:
            continue
        cost = (batched_cost(groups, m, n, k, num_sms, block_n, box_m, block_m),
                batched_cost(groups, m, n, k, num_sms, block_n, box_m, block_m, floor=False))
        if best_cost is None or cost < best_cost:
            best, best_cost = Bf16Plan(block_n, 1, box_m, block_m=block_m), cost
    return best


def split_workspace_floats(tiles: int, splits: int, block_n: int, block_m: int = BLOCK_M) -> int:
    """The split-K workspace in floats: one ``block_m`` x ``block_n`` float32 partial per output tile and split."""
    return tiles * splits * block_m * block_n


def grid(tiles: int, num_sms: int) -> int:
    """Persistent CTAs: one per SM, no more than the tiles (at least one)."""
    return max(1, min(tiles, num_sms))
