"""The lightning indexer's logits kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/mqa_logits.cu`` computes DeepGEMM's ``fp8_mqa_logits`` (no defines),
``logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(q[i, h] . kv[j])`` for ``j`` in
``[ks[i], ke[i])``, writing ``-inf`` elsewhere when asked, in two designs with one symbol per head
count each:

- ``"cuda_core"`` (include/deep_tile/kernels/mqa_logits.cuh): float32 dot products on CUDA cores,
  128 kv rows and 256 threads per CTA;
- ``"wgmma"`` (include/deep_tile/kernels/mqa_logits_wgmma.cuh): FP8 m64n128k32 wgmmas, 128 kv rows
  and two warpgroups (64 rows each) per CTA, ``128 / H`` query rows per step;
- ``"ring"`` (include/deep_tile/kernels/mqa_logits_ring.cuh): the same wgmmas with ``128 / H`` query
  rows fixed per CTA and their kv blocks streamed through a TMA ring (tensor maps, dynamic shared
  memory), the blocks of each query block split over ``grid[1]`` CTAs (:func:`ring_splits`);
- ``"persistent"`` (include/deep_tile/kernels/mqa_logits_persistent.cuh): one CTA per SM walking
  items of ``256 / H`` query rows (two wgmma N halves) by a share of their kv blocks
  (:func:`persistent_splits`), heaviest first in a snake order, four math warpgroups sharing each
  streamed kv block and the next item's q tile loading during the current one;
- ``"persistent_lean"``: the persistent design with a leaner epilogue (the same logits bit for bit:
  a quad reduce-scatter of the head sums, each lane then storing whole sums with one branch-free
  range test each; fewer SASS instructions per kv block, tools/mqa_sass.py);
- ``"persistent_regs"``: persistent_lean with each thread's weights of an item in registers instead of
  read from shared memory at every kv block (the same bits; 640 threads: a producer warpgroup lowers
  its registers by setmaxnreg so the math warpgroups get 112 each); the default.

:data:`DESIGN` is the one :func:`deep_tile.fp8_mqa_logits` launches (read at each call; the tests
and the benchmark set it to run the other). Pure Python.
"""
from __future__ import annotations

from functools import lru_cache

from deep_tile.common import align_up, ceil_div

__all__ = ["ENTRY", "HEAD_DIM", "HEADS", "DESIGNS", "DESIGN", "BLOCK_KV", "BLOCK_THREADS", "WGMMA_N",
           "MAX_ROWS_PER_CTA", "CTAS_PER_SM_TARGET", "MAX_GRID_Y", "ARGUMENT_KINDS", "RING_ARGUMENT_KINDS",
           "RING_SMEM_BYTES", "RING_CTAS_PER_SM", "RING_MIN_BLOCKS_PER_CTA", "PERSISTENT_COLS",
           "PERSISTENT_SMEM_BYTES", "PERSISTENT_ARGUMENT_KINDS", "PERSISTENT_DESIGNS", "PERSISTENT_ITEM_OVERHEAD",
           "PERSISTENT_SPLITS", "symbol", "rows_step",
           "rows_per_cta", "ring_splits", "persistent_splits", "grid"]

ENTRY = "mqa_logits"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
HEAD_DIM = 128
"""The one head dimension the kernels take."""
HEADS = (32, 64)
"""Head counts with a kernel symbol (DeepGEMM's SM90 kernel takes the same two)."""
DESIGNS = ("cuda_core", "wgmma", "ring", "persistent", "persistent_lean", "persistent_regs")
"""The kernel designs (module doc)."""
DESIGN = "persistent_regs"
"""The design :func:`deep_tile.fp8_mqa_logits` launches: the persistent one with the lean epilogue and
the weights in registers (half the L2 traffic per FLOP of the ring, no causal tail, fewer
instructions per kv block; docs/design.md §3.3); the TMA designs fall back to ``"wgmma"`` when
``kv_scale`` is not 16-byte aligned."""
BLOCK_KV = {"cuda_core": 128, "wgmma": 128, "ring": 128, "persistent": 128, "persistent_lean": 128,
            "persistent_regs": 128}
"""kv rows per CTA (``kMqaBlockKV``, ``kMqaWgmmaBlockKV``: the grid's x dimension covers
``seq_len_kv``) or per streamed block (``kMqaRingBlockKV``)."""
BLOCK_THREADS = {"cuda_core": 256, "wgmma": 256, "ring": 288, "persistent": 544, "persistent_lean": 544,
                 "persistent_regs": 640}
"""Threads per CTA (``kMqaThreads``: two per kv row; ``kMqaWgmmaThreads``: two warpgroups;
``kMqaRingThreads``: two math warpgroups and the producer warp; ``kMqaPersistThreads``: four
math warpgroups and the producer warp; ``kMqaPersistRegsThreads``: four math warpgroups and a producer
warpgroup that hands its registers to them)."""
WGMMA_N = 128
"""Query rows x heads per wgmma step (``kMqaWgmmaN``): a step takes ``WGMMA_N / H`` query rows."""
MAX_ROWS_PER_CTA = 16
"""The most query rows one CTA takes (before the grid-limit rule): more reuse of its kv rows, less
balance under causal ranges."""
CTAS_PER_SM_TARGET = 8
"""CTAs per SM the query split aims for before it stops splitting (a full wave several times over)."""
MAX_GRID_Y = 65535
"""The CUDA limit on a grid's y dimension (query-row blocks)."""
ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "ptr", "i32", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the parameters (both designs): (q, kv,
kv_scales, weights, weights_stride, ks, ke, logits, seq_len, seq_len_kv, stride_logits,
rows_per_cta, clean, compressed_cols)."""
RING_ARGUMENT_KINDS = ("tensormap", "tensormap", "tensormap", "ptr", "i32", "ptr", "ptr", "ptr", "i32", "i32", "i32",
                       "i32", "i32")
"""The ring design's parameters: (q map, kv map, kv_scales map, weights, weights_stride, ks, ke,
logits, seq_len, seq_len_kv, stride_logits, clean, compressed_cols)."""
RING_SMEM_BYTES = 84992
"""Dynamic shared memory of a ring CTA: ``sizeof(MqaRingSmem)`` (the entry file asserts it)."""
RING_CTAS_PER_SM = 2
"""Ring CTAs resident per SM (registers and shared memory): the kv split aims at two waves of them."""
RING_MIN_BLOCKS_PER_CTA = 4
"""The fewest kv blocks a ring CTA is split down to (its q tile and start-up paid over them)."""
PERSISTENT_COLS = 256
"""Query rows x heads of a persistent item (``kMqaPersistCols``): ``256 / H`` query rows."""
PERSISTENT_SMEM_BYTES = 203776
"""Dynamic shared memory of a persistent CTA: ``sizeof(MqaPersistSmem)`` (the entry file asserts it)."""
PERSISTENT_ARGUMENT_KINDS = RING_ARGUMENT_KINDS + ("i32",)
"""The persistent design's parameters: the ring's, then the kv splits per query block."""
PERSISTENT_DESIGNS = ("persistent", "persistent_lean", "persistent_regs")
"""The designs of the persistent kernel (one launch, geometry and arguments; they differ in the epilogue)."""
PERSISTENT_ITEM_OVERHEAD = 2
"""An item's fixed cost in kv blocks (its ranges, first block's latency, -inf fill) for the split choice."""
PERSISTENT_SPLITS = None
"""kv splits per query block forced on the persistent designs when set (the benchmark's ``--alt``
timings); None: :func:`persistent_splits` chooses."""


def _design(design) -> str:
    design = DESIGN if design is None else design
    if design not in DESIGNS:
        raise ValueError(f"mqa_logits: unknown design {design!r}; the designs are {DESIGNS}.")
    return design


def symbol(num_heads: int, design: str | None = None) -> str:
    """The kernel of ``num_heads`` heads (one of :data:`HEADS`) in ``design`` (default :data:`DESIGN`)."""
    design = _design(design)
    if num_heads not in HEADS:
        raise ValueError(f"mqa_logits: no kernel for {num_heads} heads; the kernels take {HEADS}.")
    return f"deep_tile_mqa_logits_{'' if design == 'cuda_core' else design + '_'}h{num_heads}"


def rows_step(num_heads: int, design: str | None = None) -> int:
    """Query rows a CTA takes at a time: ``rows_per_cta`` is a multiple of it."""
    design = _design(design)
    if design in PERSISTENT_DESIGNS:
        return PERSISTENT_COLS // num_heads
    return 1 if design == "cuda_core" else WGMMA_N // num_heads


def rows_per_cta(seq_len: int, seq_len_kv: int, num_sms: int, num_heads: int = 64, design: str | None = None) -> int:
    """Query rows per CTA: split the rows until the grid has about CTAS_PER_SM_TARGET CTAs per SM,
    at most MAX_ROWS_PER_CTA rows each, a multiple of :func:`rows_step`, and few enough blocks for
    the grid's y limit."""
    design = _design(design)
    step = rows_step(num_heads, design)
    if design == "ring" or design in PERSISTENT_DESIGNS:  # one block of query rows per CTA (per item)
        return step
    kv_blocks = max(1, ceil_div(seq_len_kv, BLOCK_KV[design]))
    row_blocks = ceil_div(CTAS_PER_SM_TARGET * max(1, num_sms), kv_blocks)
    rows = max(1, min(MAX_ROWS_PER_CTA, ceil_div(max(1, seq_len), row_blocks)))
    rows = max(rows, ceil_div(seq_len, MAX_GRID_Y))  # the grid's y dimension stops at 65535
    return align_up(rows, step)


def ring_splits(seq_len: int, seq_len_kv: int, num_sms: int, num_heads: int = 64) -> int:
    """CTAs sharing one ring query block's kv blocks: enough CTAs for two waves of RING_CTAS_PER_SM
    per SM, each with at least RING_MIN_BLOCKS_PER_CTA blocks (of the whole kv: the ranges are on
    the device), at most MAX_GRID_Y."""
    q_blocks = max(1, ceil_div(seq_len, WGMMA_N // num_heads))
    kv_blocks = max(1, ceil_div(seq_len_kv, BLOCK_KV["ring"]))
    want = ceil_div(2 * RING_CTAS_PER_SM * max(1, num_sms), q_blocks)
    return max(1, min(want, kv_blocks // RING_MIN_BLOCKS_PER_CTA, MAX_GRID_Y))


@lru_cache(maxsize=256)
def persistent_splits(seq_len: int, seq_len_kv: int, num_sms: int, num_heads: int = 64) -> int:
    """kv splits per persistent query block: the count whose items (query blocks x splits) over
    ``num_sms`` CTAs give the fewest kv blocks (plus PERSISTENT_ITEM_OVERHEAD per item) on the
    busiest CTA, taking the kv of every row whole (the ranges are on the device); ties: fewer splits."""
    q_blocks = max(1, ceil_div(seq_len, PERSISTENT_COLS // num_heads))
    kv_blocks = max(1, ceil_div(seq_len_kv, BLOCK_KV["persistent"]))
    sms = max(1, num_sms)
    best, best_cost = 1, None
    for splits in range(1, min(kv_blocks, MAX_GRID_Y) + 1):
        cost = ceil_div(q_blocks * splits, sms) * (ceil_div(kv_blocks, splits) + PERSISTENT_ITEM_OVERHEAD)
        if best_cost is None or cost < best_cost:
            best, best_cost = splits, cost
        if q_blocks * splits >= 64 * sms:  # more splits only add turns
            break
    return best


def grid(seq_len: int, seq_len_kv: int, rows: int, design: str | None = None, splits: int = 1,
         num_sms: int = 0) -> tuple:
    """(x, y, z): kv blocks by query-row blocks of ``rows`` (at least one each); the ring design:
    query-row blocks by ``splits``; the persistent design: one CTA per SM (``num_sms``), at most one
    per item (query-row blocks times ``splits``)."""
    design = _design(design)
    if design in PERSISTENT_DESIGNS:
        items = max(1, ceil_div(seq_len, rows)) * max(1, splits)
        return (max(1, min(items, num_sms)), 1, 1)
    if design == "ring":
        return (max(1, ceil_div(seq_len, rows)), max(1, splits), 1)
    return (max(1, ceil_div(seq_len_kv, BLOCK_KV[design])), max(1, ceil_div(seq_len, rows)), 1)
