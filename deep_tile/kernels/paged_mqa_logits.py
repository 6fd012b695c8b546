"""The lightning indexer's paged logits kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/paged_mqa_logits.cu`` (include/deep_tile/kernels/paged_mqa_logits.cuh, no defines)
holds three kernels:

- the schedule (``deep_tile_paged_mqa_logits_schedule``, one CTA): splits the work units,
  (sequence ``b``, kv rows ``[256 s, 256 s + 256)``), evenly over ``num_slots`` SM slots and writes
  int32 ``[num_slots + 1, 2]``: slot ``i`` starts at unit ``(schedule[i, 0], schedule[i, 1])``
  and ends where slot ``i + 1`` starts; the last row is ``(batch, 0)``;
- the logits (``deep_tile_paged_mqa_logits_n<next_n>_h<H>`` for ``four_ctas``, and
  ``..._<design>`` for the other designs, :data:`DESIGNS`): :data:`CTAS_PER_SLOT` CTAs of one
  warpgroup per slot, CTA ``g`` taking cache block ``4 s + g`` of each of its slot's units,
  FP8 m64nNk32 wgmmas with ``N = next_n * H``, operands streamed by TMA (``four_ctas``,
  ``two_slots``: by 16-byte cp.async; ``tma_loader``: by a fifth, loader warp; ``tma_loader_wg``:
  by a loader warpgroup, :func:`threads`);
- the clean pass (``deep_tile_paged_mqa_logits_clean``): ``-inf`` past each row's length.

Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "HEAD_DIM", "HEADS", "NEXT_N", "BLOCK_KV", "SPLIT_KV", "CTAS_PER_SLOT", "THREADS", "LOADER_THREADS",
           "LOADER_WG_THREADS", "LOADER_DESIGNS",
           "DESIGNS", "STAGES", "threads",
           "Q_SLOTS", "FALLBACK", "TMA_DESIGNS", "TMA_ROW_BYTES", "SCHEDULE_THREADS", "CLEAN_THREADS", "SCHEDULE_SYMBOL", "CLEAN_SYMBOL",
           "SCHEDULE_ARGUMENT_KINDS", "LOGITS_ARGUMENT_KINDS", "TMA_LOGITS_ARGUMENT_KINDS", "CLEAN_ARGUMENT_KINDS",
           "symbol", "smem_bytes", "grid", "units", "clean_grid", "pick_design", "blocks_per_slot",
           "LONG_BLOCKS_PER_SLOT"]

ENTRY = "paged_mqa_logits"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
HEAD_DIM = 128
"""The one head dimension the kernels take (``kPagedHeadDim``)."""
HEADS = (32, 64)
"""Head counts with a kernel symbol (DeepGEMM's SM90 kernel takes the same two)."""
NEXT_N = (1, 2)
"""Tokens per sequence with a kernel symbol (DeepGEMM's SM90 kernel takes the same two)."""
BLOCK_KV = 64
"""kv rows per cache block (``kPagedBlockKV``): the wgmma's M."""
SPLIT_KV = 256
"""kv rows per work unit (``kPagedSplitKV``): four cache blocks."""
CTAS_PER_SLOT = 4
"""CTAs per schedule slot (``kPagedSplitBlocks``): one per cache block of a unit."""
THREADS = 128
"""Threads per logits CTA (``kPagedThreads``): one warpgroup."""
LOADER_THREADS = 160
"""Threads per ``tma_loader`` CTA (``kPagedLoaderThreads``): the math warpgroup and a loader warp."""
LOADER_WG_THREADS = 640
"""Threads per ``tma_loader_wg`` CTA (``kPagedLoaderWgThreads``): four math warpgroups and a loader warpgroup."""
DESIGNS = ("tma_loader", "tma_lean", "tma_one_chain", "tma", "four_ctas", "two_slots", "tma_loader_wg")
"""The logits kernel's designs (``kPagedTmaLoader``, ``kPagedTmaLean``, ``kPagedTmaOneChain``, ``kPagedTma``, ``kPagedFourCtas``,
``kPagedTwoSlots``), the default first: ``four_ctas`` keeps four CTAs per SM for every
``next_n * H`` (N 128 with one q slot) and issues the next copies (16-byte cp.async by every
thread) under each block's wgmmas; ``tma`` is ``four_ctas`` with the operands by TMA (one thread
issues, an mbarrier per stage), for caches whose blocks lie a multiple of :data:`TMA_ROW_BYTES`
apart (others run :data:`FALLBACK`); ``two_slots`` is the earlier design (two q slots everywhere,
N 128 at two CTAs per SM), kept to time against; ``tma_one_chain`` is ``tma`` with a block's
wgmmas in one chain (not two of N / 2 for N >= 64) and the weights in registers for every N;
``tma_lean`` (``kPagedTmaLean``) is ``tma_one_chain`` with fewer instructions per block and
the same logits bit for bit: the head sums reduce-scattered over the row quad (one store per lane
through a pointer and bound set per sequence) and the walks stepping inside a sequence by one
compare. ``tma_loader`` (``kPagedTmaLoader``, the default) is ``tma_lean``'s block (the same logits bit
for bit) with the copies off the math warps: :data:`LOADER_THREADS` per CTA, the fifth warp a
loader (one thread walks the schedule and issues every TMA; N 128 reads its weights from shared
memory: 96 registers a thread at four CTAs per SM), each stage freed by an mbarrier as soon as its block's wgmmas completed, each
block's sequence, kv row and row lengths handed over in shared memory with it, and a sequence's q
copy waiting for its slot without holding the next blocks' copies back. ``tma_loader_wg``
(``kPagedTmaLoaderWg``, :func:`pick_design`'s at N 128 and for long calls) is ``tma_loader``'s four CTAs of a slot as one CTA
of :data:`LOADER_WG_THREADS` (DeepGEMM's shape): four math warpgroups, each with its own rings and
loader thread (lane 0 of a warp of the fifth, loader warpgroup), the loader warpgroup giving its
registers to the math warpgroups (setmaxnreg: 32 and 112 a thread), so N 128 keeps its weights in
registers as DeepGEMM does (no 8-byte shared loads per block beside the wgmmas' operand reads), and
a sequence's q slot freed once its last block's wgmmas completed rather than after its head sums.
Its waits are untimed in the watchdog build (the timer's registers spill N 128)."""
LONG_BLOCKS_PER_SLOT = 1024
"""Cache blocks per SM slot (at most: the batch's sequences times the blocks of ``max_context_len``,
over the slots) from which :func:`pick_design` takes ``tma_loader_wg`` at every N: measured 0.2-1.2%
faster than ``tma_loader`` at DeepGEMM's long test shapes (about 2,600 and 5,100 blocks per slot) and
up to 1.6% slower at its short ones (about 320), its one CTA of 640 threads per SM dearer to start."""


def blocks_per_slot(batch: int, max_context_len: int, max_blocks: int, num_slots: int) -> int:
    """The most cache blocks a call gives an SM slot, from what the host knows without reading the
    lengths: every sequence at ``max_context_len`` rows (or the block table's ``max_blocks``), over
    ``num_slots`` slots; :func:`pick_design`'s measure of a long call."""
    blocks = min(-(-max_context_len // BLOCK_KV), max_blocks)
    return batch * blocks // max(num_slots, 1)


def pick_design(next_n: int, num_heads: int, slot_blocks: int = 0) -> str:
    """The design a call runs when it names none: ``tma_loader_wg`` at N = next_n * H = 128 (its weights in
    registers: measured faster than ``tma_loader``'s shared-memory weights on every DeepGEMM test shape at
    two stages, docs/performance.md) and from :data:`LONG_BLOCKS_PER_SLOT` blocks per SM slot
    (``slot_blocks``: :func:`blocks_per_slot` of the call), else the default (``DESIGNS[0]``)."""
    long_call = slot_blocks >= LONG_BLOCKS_PER_SLOT
    return "tma_loader_wg" if next_n * num_heads == 128 or long_call else DESIGNS[0]


FALLBACK = "four_ctas"
"""The design a TMA design runs as when the cache's blocks are off :data:`TMA_ROW_BYTES` rows
(or the cache is empty): its kernel keeps the plain symbol."""
TMA_DESIGNS = ("tma", "tma_one_chain", "tma_lean", "tma_loader", "tma_loader_wg")
"""The designs that load by TMA (an mbarrier per stage, tensor maps as arguments)."""
LOADER_DESIGNS = ("tma_loader", "tma_loader_wg")
"""The designs with a loader (``paged_has_loader``): records, empty and q-slot mbarriers in shared memory."""
STAGES = {"four_ctas": {32: 5, 64: 4, 128: 4}, "two_slots": {32: 5, 64: 4, 128: 8}, "tma": {32: 5, 64: 4, 128: 4},
          "tma_one_chain": {32: 5, 64: 4, 128: 4}, "tma_lean": {32: 5, 64: 4, 128: 4},
          "tma_loader": {32: 2, 64: 2, 128: 2}, "tma_loader_wg": {32: 2, 64: 2, 128: 2}}
"""Ring stages per CTA by design and ``next_n * H`` (``paged_stages``): the blocks in flight, the
one in use included. The loader designs: two, eight blocks (68 KB) per SM (three to five measured
slower: the SMs' shares of the HBM less even, the last one later; docs/performance.md); the
others as many as fit with the design's CTAs per SM (four, or two for ``two_slots``' N 128): 12
to 16 blocks (100-135 KB) per SM, more than the HBM's bandwidth-latency product asks of each SM."""
Q_SLOTS = {"four_ctas": {32: 2, 64: 2, 128: 1}, "two_slots": {32: 2, 64: 2, 128: 2}, "tma": {32: 2, 64: 2, 128: 1},
           "tma_one_chain": {32: 2, 64: 2, 128: 1}, "tma_lean": {32: 2, 64: 2, 128: 1},
           "tma_loader": {32: 2, 64: 2, 128: 1}, "tma_loader_wg": {32: 2, 64: 2, 128: 1}}
"""q slots per CTA by design and ``next_n * H`` (``paged_q_slots``): a sequence's q rows and weights each."""
TMA_ROW_BYTES = 128
"""The ``tma`` design reads the cache as rows of this many bytes (a kv row; a block's scales are
two more rows): cache blocks must start on such a row."""
SCHEDULE_THREADS = 1024
"""Threads of the schedule's one CTA (``kPagedScheduleThreads``)."""
CLEAN_THREADS = 256
"""Threads per CTA of the clean pass (any count works)."""
SCHEDULE_SYMBOL = "deep_tile_paged_mqa_logits_schedule"
"""The schedule kernel."""
CLEAN_SYMBOL = "deep_tile_paged_mqa_logits_clean"
"""The clean pass."""
SCHEDULE_ARGUMENT_KINDS = ("ptr", "i32", "i32", "i32", "ptr")
"""The schedule's parameters: (context_lens, batch, next_n, num_slots, schedule)."""
LOGITS_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32", "ptr", "ptr", "ptr", "i32", "i32", "ptr", "ptr", "i32", "i32",
                         "i32")
"""The logits kernel's parameters: (q, kv_cache, kv_block_stride in bytes, num_kv_blocks, weights,
context_lens, block_table, block_table_stride, max_blocks, schedule, logits, stride_logits,
max_context_len, batch)."""
TMA_LOGITS_ARGUMENT_KINDS = ("tensormap", "tensormap", "tensormap", "tensormap", "i32", "i32", "ptr", "ptr", "i32",
                             "i32", "ptr", "ptr", "i32", "i32", "i32")
"""The TMA designs' logits kernels' parameters: (tensor maps of the kv rows, of their scales, of
q, of the weights; rows_per_block: the cache block stride in 128-byte rows, num_kv_blocks,
context_lens, block_table, block_table_stride, max_blocks, schedule, logits, stride_logits,
max_context_len, batch); the maps as ``deep_tile.paged_attention`` encodes them."""
CLEAN_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32", "i32", "i32")
"""The clean pass's parameters: (context_lens, logits, rows, stride_logits, max_context_len,
len_limit: lengths are cut there, the rows the block table holds)."""


def _check_design(design: str) -> None:
    if design not in DESIGNS:
        raise ValueError(f"paged_mqa_logits: no design {design!r}; the designs are {DESIGNS}.")


def symbol(next_n: int, num_heads: int, design: str = DESIGNS[0]) -> str:
    """The logits kernel for ``next_n`` tokens (one of :data:`NEXT_N`) of ``num_heads`` heads (one
    of :data:`HEADS`) in ``design`` (one of :data:`DESIGNS`)."""
    if next_n not in NEXT_N or num_heads not in HEADS:
        raise ValueError(f"paged_mqa_logits: no kernel for next_n={next_n}, {num_heads} heads; "
                         f"the kernels take next_n in {NEXT_N} and heads in {HEADS}.")
    _check_design(design)
    suffix = "" if design == FALLBACK else f"_{design}"
    return f"deep_tile_paged_mqa_logits_n{next_n}_h{num_heads}{suffix}"


def smem_bytes(next_n: int, num_heads: int, design: str = DESIGNS[0]) -> int:
    """Dynamic shared memory of a logits CTA (``paged_mqa_logits_smem_bytes``): per q slot the q
    rows (``next_n * H`` x 128 bytes) and their weights, per stage a cache block (64 x 128 bytes)
    and its 64 scales, and 1024 bytes to align the rings; ``tma_loader_wg``: four ``tma_loader``
    layouts (without the slack) each rounded up to 1024 bytes (``paged_group_stride``), and the slack."""
    _check_design(design)
    n = next_n * num_heads
    if design == "tma_loader_wg":
        one = smem_bytes(next_n, num_heads, "tma_loader") - 1024
        return 1024 + CTAS_PER_SLOT * (-(-one // 1024) * 1024)
    # per stage: a full mbarrier (TMA designs); the loader designs add an empty one and a 16-byte
    # record, and an mbarrier per q slot
    loader = design in LOADER_DESIGNS
    barrier = 32 if loader else 8 if design in TMA_DESIGNS else 0
    return 1024 + Q_SLOTS[design][n] * (n * HEAD_DIM + n * 4 + (8 if loader else 0)) + STAGES[design][n] * (
        BLOCK_KV * HEAD_DIM + BLOCK_KV * 4 + barrier)


def threads(design: str = DESIGNS[0]) -> int:
    """Threads per logits CTA of ``design``: :data:`LOADER_THREADS` for ``tma_loader``,
    :data:`LOADER_WG_THREADS` for ``tma_loader_wg``, else :data:`THREADS`."""
    _check_design(design)
    return {"tma_loader": LOADER_THREADS, "tma_loader_wg": LOADER_WG_THREADS}.get(design, THREADS)


def grid(num_slots: int, design: str = DESIGNS[0]) -> tuple:
    """(x, y, z) of the logits kernel: :data:`CTAS_PER_SLOT` CTAs per schedule slot (``tma_loader_wg``:
    one CTA per slot, its four math warpgroups the four CTAs' work)."""
    _check_design(design)
    return (num_slots if design == "tma_loader_wg" else CTAS_PER_SLOT * num_slots, 1, 1)


def units(context_len: int) -> int:
    """Work units of a sequence whose longest context is ``context_len`` rows (``paged_units``)."""
    return ceil_div(max(0, context_len), SPLIT_KV)


def clean_grid(rows: int, num_sms: int) -> tuple:
    """(x, y, z) of the clean pass: one CTA per row, at most eight per SM (it strides over the rest)."""
    return (max(1, min(rows, 8 * max(1, num_sms))), 1, 1)
