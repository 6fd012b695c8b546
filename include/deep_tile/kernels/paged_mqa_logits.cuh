// The lightning indexer's paged (decode) logits (DeepSeek-V3.2; DeepGEMM's fp8_paged_mqa_logits)
// on FP8 tensor cores, and the schedule kernel that splits the work over the SMs.
//
//   logits[b * next_n + t, p] = kv_scale[p] * sum_h weights[b * next_n + t, h] * relu(q[b, t, h] . kv[p])
// for p < context_lens[b, t], where kv row p of sequence b is row p % 64 of cache block
// block_table[b, p / 64]; the fused cache block holds 64 rows of 128 e4m3 bytes, then their 64
// float32 scales. Columns at or past a row's length are not written (the clean kernel fills them).
//
// Work unit: (sequence b, split s) = kv rows [256 s, 256 s + 256), four cache blocks. The schedule
// (paged_mqa_logits_schedule) gives SM slot i the units from its entry i to its entry i + 1 in
// (b, s) order; the logits kernel runs four 128-thread CTAs per slot, CTA g taking block 4 s + g
// of each unit, so the four blocks of a unit stream on different CTAs (the slot's split of
// DeepGEMM's four math warpgroups, without their shared barriers). A CTA is one warpgroup: per
// block one m64nNk32 wgmma chain (M: the 64 kv rows, N = next_n * H: the q rows of all next_n
// tokens, K: head_dim 128) into N / 2 accumulators, then relu, weights and the head sums of each
// token in registers (in-thread, then over a row quad) and the kv row's scale.
//
// Operands stream into a ring of S = paged_stages(N, design) stages (kv block + scales,
// 128B-swizzled for the wgmma), up to S - 1 blocks ahead of the one being multiplied; a
// sequence's q rows and weights go into one of paged_q_slots(N, design) slots when the sequence
// changes. A block is issued only when its stage's previous block was consumed and, if it starts
// a sequence, when that sequence's slot is free (fewer than kQSlots sequences from the one in use
// to it): short sequences may hold the copies back. With one q slot (N 128 at four CTAs per SM) a
// sequence's first block is issued only once the previous sequence is done, then waited for (its
// q rows, weights and first blocks asked of L2 while the producer waits). One barrier per block:
// past it every thread is done with the previous block, whose stage (and maybe q slot) the next
// copies then fill.
// Designs (paged_q_slots / paged_stages): kPagedFourCtas and kPagedTwoSlots copy with 16-byte
// cp.async (one commit group per block, every thread), no tensor map to build per call;
// kPagedFourCtas issues them while the block's wgmmas run, and for N >= 64 splits a block's
// wgmmas into two chains of N / 2 columns so the head sums of the first run under the second
// (paged_block). kPagedTma (paged_mqa_logits_tma; the host's default, kPagedFourCtas its fallback
// for caches off the TMA's rows) is kPagedFourCtas loading by TMA, one thread per block, an
// mbarrier per stage; kPagedTmaOneChain is kPagedTma with one wgmma chain per block; kPagedTmaLean
// is kPagedTmaOneChain with fewer instructions per block (paged_block_lean, PagedFastWalk);
// kPagedTmaLoader (paged_mqa_logits_loader) is kPagedTmaLean's block fed by a loader warp;
// kPagedTmaLoaderWg (the same body) runs a slot's four such CTAs as one, the weights in registers.
// Block-table entries outside [0, num_kv_blocks) read as zero rows (logits 0, never out of bounds).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/mqa_logits_epilogue.cuh"
#include "deep_tile/kernels/mqa_logits_wgmma.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/cp_async.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

constexpr int kPagedHeadDim = 128;
constexpr int kPagedBlockKV = 64;                                  // kv rows per cache block: the wgmma's M
constexpr int kPagedSplitBlocks = 4;                               // cache blocks per work unit (CTAs per SM slot)
constexpr int kPagedSplitKV = kPagedBlockKV * kPagedSplitBlocks;   // kv rows per work unit
constexpr int kPagedThreads = 128;                                 // one warpgroup per CTA
constexpr int kPagedScheduleThreads = 1024;                        // the schedule kernel's one CTA
constexpr int kPagedBlockBytes = kPagedBlockKV * kPagedHeadDim;    // e4m3 bytes of one block (its scales follow)

/// Kernel designs (a template argument, one symbol each; the host picks by name):
/// kPagedFourCtas (the TMA designs' cp.async fallback): four CTAs per SM for every N. N 128 keeps
///   one q slot and four stages, so a slot's four CTAs share the SM's tensor cores (one CTA's
///   epilogue under the others' wgmmas) with 12 blocks in flight per SM; the weights live in
///   registers per sequence.
/// kPagedTwoSlots (the earlier design, kept to time against): two q slots everywhere, N 128 with
///   eight stages and two CTAs per SM; weights read from shared memory per block.
/// kPagedTma: kPagedFourCtas' geometry, the operands by TMA (one thread issues a block, an
///   mbarrier per stage says it landed) instead of every thread's cp.async; needs cache blocks a
///   multiple of 128 bytes apart (the kv rows are a 2-D tensor of 128-byte rows).
constexpr int kPagedFourCtas = 0;
constexpr int kPagedTwoSlots = 1;
constexpr int kPagedTma = 2;
/// kPagedTmaOneChain: kPagedTma with a block's wgmmas in one chain of N columns (the kv tile read
///   once from shared memory, not once per chunk) and the weights in registers for every N.
constexpr int kPagedTmaOneChain = 3;
/// kPagedTmaLean: kPagedTmaOneChain's geometry, rings and overlap with a leaner block (the same
///   logits bit for bit): the head sums reduce-scattered over the row quad so each lane stores one
///   logit through a pointer and bound set once per sequence (paged_block_lean), and both walks
///   step inside a sequence by one compare (PagedFastWalk) instead of the cursor's full settle.
constexpr int kPagedTmaLean = 4;
/// kPagedTmaLoader: kPagedTmaLean's rings, block and epilogue with the copies moved off the math
///   warps: a CTA is the math warpgroup plus a loader warp (one thread of it walks the schedule and
///   issues every TMA; N 128 reads its weights from shared memory, as four CTAs of 160 threads leave
///   96 registers a thread, the accumulators 64 of them), a stage is released by
///   its own mbarrier right after the block's wgmmas complete (not at the next block's CTA barrier),
///   and the loader hands each block's sequence, kv row, flags and row lengths to the math warps
///   with the stage, so they walk nothing (paged_mqa_logits_loader).
constexpr int kPagedTmaLoader = 5;
constexpr int kPagedLoaderThreads = kPagedThreads + 32;  // the math warpgroup, then the loader warp
/// kPagedTmaLoaderWg: kPagedTmaLoader's four CTAs of a slot as one CTA per SM (DeepGEMM's shape):
///   four groups, each a math warpgroup with its own rings fed by its own loader thread (lane 0 of
///   warp g of a fifth, loader warpgroup), that warpgroup giving its registers to the math warpgroups
///   (setmaxnreg: 112 and 32 a thread; ptxas honours a region's setmaxnreg only up to the launch's
///   registers, 96 at one CTA of 640 threads, 64 at four of 256), so every N keeps its weights in
///   registers (N 128 no longer reads them from shared memory per block), and a sequence's q slot
///   freed once its last block's wgmmas completed (the head sums need only registers). Its waits are
///   untimed in the watchdog build too (the timer's registers spill N 128 at 112).
constexpr int kPagedTmaLoaderWg = 6;
constexpr int kPagedLoaderWgGroups = kPagedSplitBlocks;                                  // math warpgroups per CTA
constexpr int kPagedLoaderWgThreads = (kPagedLoaderWgGroups + 1) * kPagedThreads;  // then the loader warpgroup
constexpr int kPagedLoaderWgMathRegs = 112;   // 512 x 112 + 128 x 32 = 640 x 96: the launch's registers
constexpr int kPagedLoaderWgLoaderRegs = 32;  // N 128's accumulators and weights spill at 104

/// Whether `design` hands blocks over from a loader (records, empty and q-slot mbarriers).
__host__ __device__ constexpr bool paged_has_loader(int design) {
  return design == kPagedTmaLoader || design == kPagedTmaLoaderWg;
}

/// Whether `design` loads by TMA (an mbarrier per stage).
__host__ __device__ constexpr bool paged_is_tma(int design) {
  return design == kPagedTma || design == kPagedTmaOneChain || design == kPagedTmaLean || paged_has_loader(design);
}

/// Shared bytes per stage past the block and its scales: the full mbarrier, and for kPagedTmaLoader
/// its empty mbarrier and the block's 16-byte record (PagedLoaderRecord).
__host__ __device__ constexpr int paged_stage_extra_bytes(int design) {
  return paged_has_loader(design) ? 8 + 8 + 16 : paged_is_tma(design) ? 8 : 0;
}

/// q slots per CTA for N = next_n * H q rows: two (a sequence's q rows arrive while the previous
/// sequence's last blocks are multiplied) unless that keeps four CTAs off the SM (N 128, kPagedFourCtas).
__host__ __device__ constexpr int paged_q_slots(int n, int design) {
  return design != kPagedTwoSlots && n > 64 ? 1 : 2;
}

/// Ring stages (blocks in flight per CTA, the one in use included) for N q rows: the loader designs
/// two (eight blocks per SM: more in flight measured slower, the SMs' shares of the HBM less even,
/// the last SM later); the others as many as fit with four CTAs on one SM (N 32: 5, N 64: 4, N 128 with
/// one q slot: 4); kPagedTwoSlots' N 128, which fits only 2 CTAs per SM, as many as fit two (8).
__host__ __device__ constexpr int paged_stages(int n, int design) {
  return paged_has_loader(design) ? 2 : n <= 32 ? 5 : n <= 64 ? 4 : design != kPagedTwoSlots ? 4 : 8;
}

/// kPagedTmaLoaderWg: bytes between the groups' rings, a kPagedTmaLoader CTA's layout rounded up to
/// the 128B swizzle's period so each group's rings start on it as a CTA's do.
__host__ __device__ constexpr int paged_group_stride(int n) {
  return (paged_q_slots(n, kPagedTmaLoader) * (n * kPagedHeadDim + n * 4 + 8) +
          paged_stages(n, kPagedTmaLoader) * (kPagedBlockBytes + kPagedBlockKV * 4 + paged_stage_extra_bytes(kPagedTmaLoader)) +
          1023) / 1024 * 1024;
}

/// Dynamic shared memory of the logits kernel for N = next_n * H q rows (1024 bytes of slack
/// align the rings to the 128B swizzle's period).
__host__ __device__ constexpr int paged_mqa_logits_smem_bytes(int n, int design) {
  return design == kPagedTmaLoaderWg ? 1024 + kPagedLoaderWgGroups * paged_group_stride(n)
         : 1024 + paged_q_slots(n, design) * (n * kPagedHeadDim + n * 4 + (paged_has_loader(design) ? 8 : 0)) +
               paged_stages(n, design) * (kPagedBlockBytes + kPagedBlockKV * 4 + paged_stage_extra_bytes(design));
}

/// The logits CTA's rings in dynamic shared memory from its first 1024-byte boundary (the 128B
/// swizzle's period): kQSlots q tiles of kN rows of 128 bytes, kStages kv blocks, their kStages x 64
/// scales, kQSlots x kN weights; end() is past them (the TMA designs' mbarriers).
template <int kN, int kStages, int kQSlots>
struct PagedRings {
  static constexpr int kQBytes = kN * kPagedHeadDim;
  u8* q_ring;
  u8* kv_ring;
  float* scale_ring;
  float* weight_ring;

  DT_DEVICE explicit PagedRings(u8* smem_raw) {
    q_ring = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
    kv_ring = q_ring + kQSlots * kQBytes;
    scale_ring = reinterpret_cast<float*>(kv_ring + kStages * kPagedBlockBytes);
    weight_ring = scale_ring + kStages * kPagedBlockKV;
  }
  DT_DEVICE u8* q(int slot) const { return q_ring + slot * kQBytes; }
  DT_DEVICE u8* kv(int stage) const { return kv_ring + stage * kPagedBlockBytes; }
  DT_DEVICE float* scales(int stage) const { return scale_ring + stage * kPagedBlockKV; }
  DT_DEVICE float* weights(int slot) const { return weight_ring + slot * kN; }
  DT_DEVICE u64* end() const { return reinterpret_cast<u64*>(weight_ring + kQSlots * kN); }
};

/// Wait until at most `ahead` (clamped to [0, N]) of this thread's newest cp.async groups are in flight.
template <int N>
DT_DEVICE void cp_async_wait_at_most(int ahead) {
  if constexpr (N == 0) {
    ptx::cp_async_wait_group<0>();
  } else {
    if (ahead >= N) {
      ptx::cp_async_wait_group<N>();
    } else {
      cp_async_wait_at_most<N - 1>(ahead);
    }
  }
}

/// The longest context of sequence b over its next_n tokens (negative lengths count as 0).
DT_DEVICE int paged_context_extent(const int* __restrict__ context_lens, int b, int next_n) {
  int extent = 0;
  for (int t = 0; t < next_n; ++t) extent = max_int(extent, context_lens[b * next_n + t]);
  return extent;
}

/// Work units of a sequence whose longest context is `extent` rows: the schedule and the logits
/// kernel count them with this one function, so the logits kernel walks the schedule's units.
DT_DEVICE int paged_units(int extent) { return (extent + kPagedSplitKV - 1) / kPagedSplitKV; }

/// Schedule: one CTA of kPagedScheduleThreads. schedule[2 i], schedule[2 i + 1] = the (sequence,
/// split) where SM slot i starts, for i <= num_slots; slot i ends where slot i + 1 starts, and
/// entry num_slots is (batch, 0). Slot i starts at unit floor(i * total / num_slots) of the
/// units in (b, s) order: the slots' unit counts differ by at most one.
DT_DEVICE void paged_mqa_logits_schedule(const int* __restrict__ context_lens, int batch, int next_n,
                                         int num_slots, int* __restrict__ schedule) {
  __shared__ int warp_sums[kPagedScheduleThreads / 32];
  ptx::grid_dependency_wait();  // the stream predecessor may write context_lens
  ptx::launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per_thread = (batch + kPagedScheduleThreads - 1) / kPagedScheduleThreads;
  const int b_begin = min_int(batch, tid * per_thread), b_end = min_int(batch, b_begin + per_thread);
  int mine = 0;
  for (int b = b_begin; b < b_end; ++b) mine += paged_units(paged_context_extent(context_lens, b, next_n));
  // exclusive scan of `mine` over the CTA: within each warp, then over the warps' sums
  int inclusive = mine;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < kPagedScheduleThreads / 32; ++w) {
    before += w < warp ? warp_sums[w] : 0;
    total += warp_sums[w];
  }
  int prefix = before + inclusive - mine;
  if (total == 0) {  // nothing to do: every slot starts (and ends) at the end marker
    for (int i = tid; i <= num_slots; i += kPagedScheduleThreads) schedule[2 * i] = batch, schedule[2 * i + 1] = 0;
    return;
  }
  // slot i starts inside sequence b when prefix_b <= floor(i * total / n) < prefix_b + units_b,
  // i.e. for i in [ceil(prefix_b * n / total), ceil((prefix_b + units_b) * n / total))
  const long long n = num_slots, all = total;
  for (int b = b_begin; b < b_end; ++b) {
    const int units = paged_units(paged_context_extent(context_lens, b, next_n));
    const long long lo = (prefix * n + all - 1) / all, hi = ((prefix + units) * n + all - 1) / all;
    for (long long i = lo; i < hi; ++i) {
      schedule[2 * i] = b;
      schedule[2 * i + 1] = static_cast<int>(i * all / n) - prefix;
    }
    prefix += units;
  }
  if (tid == 0) schedule[2 * num_slots] = batch, schedule[2 * num_slots + 1] = 0;
}

/// The columns each of sequence b's kNextN logits rows gets: its context length, cut at max_context_len.
template <int kNextN>
DT_DEVICE void paged_row_lens(const int* __restrict__ context_lens, int b, int max_context_len, int (&lens)[kNextN]) {
#pragma unroll
  for (int t = 0; t < kNextN; ++t) lens[t] = min_int(context_lens[b * kNextN + t], max_context_len);
}

/// A CTA's walk over its slot's units, stopping only at those whose block `group` holds kv rows;
/// every thread of the CTA holds the same cursor (the loads it makes are broadcasts).
struct PagedCursor {
  int b, s, end_b, end_s;
  int units;   // work units of sequence b
  int blocks;  // cache blocks of sequence b that are read (its rows, clamped to the table and the logits)
  int group;   // which block of a unit this CTA takes

  DT_DEVICE bool has() const { return b < end_b || (b == end_b && s < end_s); }
  DT_DEVICE int block() const { return s * kPagedSplitBlocks + group; }
  /// The cache block of block() in the block table; -1 past the walk's end.
  DT_DEVICE int table_entry(const int* __restrict__ block_table, int block_table_stride) const {
    return has() ? block_table[static_cast<long long>(b) * block_table_stride + block()] : -1;
  }

  DT_DEVICE void load(const int* __restrict__ context_lens, int next_n, int max_blocks, int max_context_len) {
    const int extent = paged_context_extent(context_lens, b, next_n);
    units = paged_units(extent);
    blocks = min_int(min_int(extent, max_context_len) + kPagedBlockKV - 1, kPagedBlockKV * max_blocks) / kPagedBlockKV;
  }

  /// Move forward to the first unit at or after the current one whose block `group` is read.
  DT_DEVICE void settle(const int* __restrict__ context_lens, int next_n, int max_blocks, int max_context_len) {
    while (has()) {
      if (s >= units) {
        ++b, s = 0;
        if (has()) load(context_lens, next_n, max_blocks, max_context_len);
      } else if (block() >= blocks) {
        ++s;
      } else {
        break;
      }
    }
  }

  /// Move past the current unit to the next one whose block `group` is read.
  DT_DEVICE void next(const int* __restrict__ context_lens, int next_n, int max_blocks, int max_context_len) {
    ++s;
    settle(context_lens, next_n, max_blocks, max_context_len);
  }
};

/// The cursor of CTA `group` of SM slot `slot` at its first unit with a block of its own, walking
/// to the slot's end in the schedule (or `batch`: a larger batch's schedule stops at this one's end).
DT_DEVICE PagedCursor paged_slot_start(const int* __restrict__ schedule, int slot, int group, int batch,
                                       const int* __restrict__ context_lens, int next_n, int max_blocks,
                                       int max_context_len) {
  PagedCursor start;
  start.b = schedule[2 * slot], start.s = schedule[2 * slot + 1];
  start.end_b = schedule[2 * slot + 2], start.end_s = schedule[2 * slot + 3];
  if (start.end_b >= batch) start.end_b = batch, start.end_s = 0;
  start.group = group, start.units = 0, start.blocks = 0;
  if (start.has()) start.load(context_lens, next_n, max_blocks, max_context_len);
  start.settle(context_lens, next_n, max_blocks, max_context_len);
  return start;
}

/// A PagedCursor's walk with a fast step: `limit` bounds the splits that PagedCursor::next reaches
/// by ++s alone (inside the sequence's units, its blocks of this group and the slot's end), so a
/// step inside a sequence is one compare; at the bound the full next() runs and sets a new one.
struct PagedFastWalk {
  int limit;

  DT_DEVICE static int bound(const PagedCursor& c) {
    if (!c.has()) return 0;  // past the end b may have moved on without units / blocks reloaded
    const int group_splits = c.blocks > c.group ? (c.blocks - c.group + kPagedSplitBlocks - 1) / kPagedSplitBlocks : 0;
    const int bound = min_int(c.units, group_splits);
    return c.b == c.end_b ? min_int(bound, c.end_s) : bound;
  }
  DT_DEVICE explicit PagedFastWalk(const PagedCursor& c) : limit(bound(c)) {}
  /// PagedCursor::next, by ++s while the next split stays below the bound.
  DT_DEVICE void next(PagedCursor& c, const int* __restrict__ context_lens, int next_n, int max_blocks,
                      int max_context_len) {
    if (c.s + 1 < limit) {
      ++c.s;
    } else {
      c.next(context_lens, next_n, max_blocks, max_context_len);
      limit = bound(c);
    }
  }
};

/// Whether the producer (at `producer`, the last q rows it issued those of sequence producer_b,
/// number producer_q_seq) may issue its next block, number `issued`, now: its stage is free (it is
/// at most `last`) and, if it starts a sequence, so is that sequence's q slot (consumer_q_seq: the
/// sequence in use; sequence numbers count the walk's sequence changes).
template <int kQSlots>
DT_DEVICE bool paged_can_issue(const PagedCursor& producer, int producer_b, int producer_q_seq, int issued, int last,
                               int consumer_q_seq) {
  const int seq = producer_q_seq + (producer.b != producer_b ? 1 : 0);
  return producer.has() && issued <= last && seq - consumer_q_seq < kQSlots;
}

/// With one q slot the producer waits at the next sequence's first block for the slot: once per such
/// sequence, ask L2 for its q rows and weights (prefetch_sequence(b), thread 0) and for this CTA's
/// first kStages - 1 blocks of it (prefetch_block(table entry), a thread each) meanwhile, so the
/// late issue finds them there. prefetched_b: the last sequence asked for.
template <int kStages, typename PrefetchSequence, typename PrefetchBlock>
DT_DEVICE void paged_prefetch_waiting_sequence(const PagedCursor& producer, int producer_b, int& prefetched_b, int tid,
                                               const int* __restrict__ block_table, int block_table_stride,
                                               PrefetchSequence&& prefetch_sequence, PrefetchBlock&& prefetch_block) {
  if (producer.has() && producer.b != producer_b && producer.b != prefetched_b) {
    prefetched_b = producer.b;
    if (tid == 0) prefetch_sequence(producer.b);
    const int block = producer.block() + tid * kPagedSplitBlocks;  // this CTA's blocks of the sequence
    if (tid < kStages - 1 && block < producer.blocks)
      prefetch_block(block_table[static_cast<long long>(producer.b) * block_table_stride + block]);
  }
}

/// Adds one wgmma chunk's share of the head sums: relu(acc) * weight over the chunk's columns
/// [kColBase, kColBase + 2 kNumAccum), per token (v0: row r0, v1: row r1; two partial sums each,
/// half the dependent FMA chain). w: this thread's kN / 4 weights in registers (column
/// 8g + 2 (lane % 4) + {0, 1} at 2g, 2g + 1), or with kWeightsInSmem the sequence's kN weights.
template <int kNextN, int kNumHeads, bool kWeightsInSmem, int kColBase, int kNumAccum>
DT_DEVICE void paged_head_sums(const float (&acc)[kNumAccum], const float* w, int lane, float (&v0)[kNextN][2],
                               float (&v1)[kNextN][2]) {
#pragma unroll
  for (int n = 0; n < kNumAccum / 4; ++n) {
    const int g = kColBase / 8 + n;     // the 8-column group
    const int t = (8 * g) / kNumHeads;  // its token
    const int col = kWeightsInSmem ? 8 * g + 2 * (lane & 3) : 2 * g;
    const float w0 = w[col], w1 = w[col + 1];
    float& a0 = v0[t][g & 1];
    float& a1 = v1[t][g & 1];
    a0 = fmaf(fmaxf(acc[4 * n], 0.0f), w0, fmaf(fmaxf(acc[4 * n + 1], 0.0f), w1, a0));
    a1 = fmaf(fmaxf(acc[4 * n + 2], 0.0f), w0, fmaf(fmaxf(acc[4 * n + 3], 0.0f), w1, a1));
  }
}

/// The head sums over the row quad, times the kv rows' scales, stored inside the tokens' lengths
/// (rows p0 and p0 + 8 of sequence b).
template <int kNextN>
DT_DEVICE void paged_store_rows(const float (&v0)[kNextN][2], const float (&v1)[kNextN][2], float scale0, float scale1,
                                const int (&lens)[kNextN], float* __restrict__ logits, int stride_logits, int b,
                                int p0, int lane) {
#pragma unroll
  for (int t = 0; t < kNextN; ++t) {
    float s0 = v0[t][0] + v0[t][1], s1 = v1[t][0] + v1[t][1];
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {  // the quad's four lanes hold the other heads
      s0 += __shfl_xor_sync(0xffffffffu, s0, offset);
      s1 += __shfl_xor_sync(0xffffffffu, s1, offset);
    }
    if ((lane & 3) == 0) {  // one lane of each quad stores its two kv rows
      float* out_row = logits + static_cast<long long>(b * kNextN + t) * stride_logits;
      if (p0 < lens[t]) out_row[p0] = s0 * scale0;
      if (p0 + 8 < lens[t]) out_row[p0 + 8] = s1 * scale1;
    }
  }
}

/// The weights paged_block reads for a block of the sequence whose kN weights lie at `slot_weights`:
/// with kInRegisters this thread's kN / 4 of them in `wreg` (columns 8n + 2 (lane % 4) + {0, 1} at
/// 2n, 2n + 1: its accumulators' columns), loaded as the sequence starts rather than per block.
template <int kN, bool kInRegisters>
DT_DEVICE const float* paged_block_weights(const float* slot_weights, bool new_sequence, int lane,
                                           float (&wreg)[kInRegisters ? kN / 4 : 1]) {
  if constexpr (kInRegisters) {
    if (new_sequence) {
#pragma unroll
      for (int n = 0; n < kN / 8; ++n) {
        const float2 pair = *reinterpret_cast<const float2*>(slot_weights + 8 * n + 2 * (lane & 3));
        wreg[2 * n] = pair.x, wreg[2 * n + 1] = pair.y;
      }
    }
    return wreg;
  } else {
    return slot_weights;
  }
}

/// Issues one wgmma chain, acc := kv tile (64 rows at descriptor word kv_desc_lo) . q rows (kN at
/// q_desc_lo) over head_dim 128, as one commit group; the caller fences acc and waits.
template <int kN>
DT_DEVICE void paged_wgmma_chain(u32 kv_desc_lo, u32 q_desc_lo, float (&acc)[ptx::WgmmaFp8<kN>::kNumAccum]) {
#pragma unroll
  for (int k = 0; k < kPagedHeadDim / 32; ++k)  // k32 steps: 32 bytes along the swizzled row each
    ptx::WgmmaFp8<kN>::mma(ptx::sw128_desc(kv_desc_lo + k * 2), ptx::sw128_desc(q_desc_lo + k * 2), acc, k > 0);
  ptx::wgmma_commit_group();
}

/// A whole block's wgmmas as one chain: acc fenced, the warp converged (the wgmmas are .aligned),
/// the chain issued as one commit group; the caller waits.
template <int kN>
DT_DEVICE void paged_issue_one_chain(u32 kv_desc_lo, u32 q_desc_lo, float (&acc)[ptx::WgmmaFp8<kN>::kNumAccum]) {
#pragma unroll
  for (int a = 0; a < ptx::WgmmaFp8<kN>::kNumAccum; ++a) ptx::fence_operand(acc[a]);
  __syncwarp();
  ptx::wgmma_fence();
  paged_wgmma_chain<kN>(kv_desc_lo, q_desc_lo, acc);
}

/// One block's wgmmas and epilogue, the N columns in kChunks chains of N / kChunks (one commit
/// group each) so the head sums of a chunk run while the next chunk's wgmmas do; `between` runs
/// after the wgmmas are issued (the next copies), before the first wait. kv_desc_lo / q_desc_lo:
/// sw128_lo of the block's stage and of the q slot (N rows of 128 bytes, 1024-byte aligned).
template <int kNextN, int kNumHeads, int kChunks, bool kWeightsInSmem, typename Between>
DT_DEVICE void paged_block(u32 kv_desc_lo, u32 q_desc_lo, const float* w, const float* scales, int r0,
                           const int (&lens)[kNextN], float* __restrict__ logits, int stride_logits, int b, int p0,
                           int lane, Between&& between) {
  constexpr int kN = kNextN * kNumHeads;
  constexpr int kChunkN = kN / kChunks;
  static_assert(kChunks == 1 || kChunks == 2, "one or two chunks");
  static_assert(kChunkN % 16 == 0 && kChunkN % 8 == 0, "a chunk is whole 8-column groups of a wgmma N");
  using Mma = ptx::WgmmaFp8<kChunkN>;
  constexpr u32 kChunkDesc = kChunkN * kPagedHeadDim / 16;  // a chunk's q rows in descriptor units
  float acc0[Mma::kNumAccum], acc1[kChunks == 2 ? Mma::kNumAccum : 1];
#pragma unroll
  for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc0[a]);
  if constexpr (kChunks == 2) {
#pragma unroll
    for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc1[a]);
  }
  __syncwarp();  // the wgmmas are .aligned: the whole warp issues them together
  ptx::wgmma_fence();
  paged_wgmma_chain<kChunkN>(kv_desc_lo, q_desc_lo, acc0);
  if constexpr (kChunks == 2) paged_wgmma_chain<kChunkN>(kv_desc_lo, q_desc_lo + kChunkDesc, acc1);
  between();
  const float scale0 = scales[r0], scale1 = scales[r0 + 8];
  float v0[kNextN][2], v1[kNextN][2];
#pragma unroll
  for (int t = 0; t < kNextN; ++t) v0[t][0] = v0[t][1] = v1[t][0] = v1[t][1] = 0.0f;
  if constexpr (kChunks == 2) {
    ptx::wgmma_wait_group<1>();  // the first chunk's wgmmas are done, the second's may run on
#pragma unroll
    for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc0[a]);
    paged_head_sums<kNextN, kNumHeads, kWeightsInSmem, 0>(acc0, w, lane, v0, v1);
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc1[a]);
    paged_head_sums<kNextN, kNumHeads, kWeightsInSmem, kChunkN>(acc1, w, lane, v0, v1);
  } else {
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc0[a]);
    paged_head_sums<kNextN, kNumHeads, kWeightsInSmem, 0>(acc0, w, lane, v0, v1);
  }
  paged_store_rows<kNextN>(v0, v1, scale0, scale1, lens, logits, stride_logits, b, p0, lane);
}

/// `v` as a value the compiler cannot recompute: set once before the block loop, it stays in a
/// register instead of being rebuilt from the thread index and the shared window every block.
DT_DEVICE u32 paged_opaque(u32 v) {
  asm volatile("" : "+r"(v));
  return v;
}

/// The logit a lane of paged_block_lean stores for each block of a sequence: of token
/// paged_lean_token(lane) at kv row r0 + 8 paged_lean_half(lane) (after the quad reduce-scatter).
/// With one token lanes q and q ^ 2 hold the same sum: only q < 2 store.
template <int kNextN>
DT_DEVICE int paged_lean_token(int lane) { return kNextN == 2 ? lane & 1 : 0; }
template <int kNextN>
DT_DEVICE int paged_lean_half(int lane) { return kNextN == 2 ? (lane >> 1) & 1 : lane & 1; }

/// kPagedTmaLean's block: paged_block's single chain and head sums, then a quad reduce-scatter of
/// the (token, row) sums (the butterfly's pairs in the same order: the same bits) and one store per
/// lane: `out` + block_base when block_base < `bound` (out, bound: this lane's logits row at its kv
/// row, the row's length less that row, set per sequence; bound <= 0 for a lane that never stores).
/// scale_addr: the shared address of this lane's kv row scale in the block's stage. `released` runs
/// once the wgmmas completed, before the head sums (kPagedTmaLoader frees the stage there).
template <int kNextN, int kNumHeads, bool kWeightsInSmem = false, typename Between, typename Released>
DT_DEVICE void paged_block_lean(u32 kv_desc_lo, u32 q_desc_lo, const float* w, u32 scale_addr, float* out,
                                int bound, int block_base, int lane, Between&& between, Released&& released) {
  constexpr int kN = kNextN * kNumHeads;
  static_assert(kNextN == 1 || kNextN == 2, "the reduce-scatter takes one or two tokens");
  using Mma = ptx::WgmmaFp8<kN>;
  float acc[Mma::kNumAccum];
  paged_issue_one_chain<kN>(kv_desc_lo, q_desc_lo, acc);
  between();
  float lane_scale;  // after the stage's barrier wait and before the next block's barrier, as the wgmmas
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(lane_scale) : "r"(scale_addr) : "memory");
  float v0[kNextN][2], v1[kNextN][2];
#pragma unroll
  for (int t = 0; t < kNextN; ++t) v0[t][0] = v0[t][1] = v1[t][0] = v1[t][1] = 0.0f;
  ptx::wgmma_wait_group<0>();
#pragma unroll
  for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc[a]);
  released();
  if constexpr (kWeightsInSmem) {  // paged_head_sums' FMAs in its order, a column pair per 8-byte load
#pragma unroll
    for (int g = 0; g < Mma::kNumAccum / 4; ++g) {
      const int t = (8 * g) / kNumHeads;
      const float2 pair = *reinterpret_cast<const float2*>(w + 8 * g + 2 * (lane & 3));
      v0[t][g & 1] = fmaf(fmaxf(acc[4 * g], 0.0f), pair.x, fmaf(fmaxf(acc[4 * g + 1], 0.0f), pair.y, v0[t][g & 1]));
      v1[t][g & 1] = fmaf(fmaxf(acc[4 * g + 2], 0.0f), pair.x, fmaf(fmaxf(acc[4 * g + 3], 0.0f), pair.y, v1[t][g & 1]));
    }
  } else {
    paged_head_sums<kNextN, kNumHeads, false, 0>(acc, w, lane, v0, v1);
  }
  float x[2 * kNextN];  // x[2 t + h]: token t at kv row r0 + 8 h, this lane's columns
#pragma unroll
  for (int t = 0; t < kNextN; ++t) x[2 * t] = v0[t][0] + v0[t][1], x[2 * t + 1] = v1[t][0] + v1[t][1];
  float z;
  if constexpr (kNextN == 2) {
    float y[2], zz[1];
    mqa_quad_halve<4, 1>(x, y, (lane & 1) != 0, 1);   // lane bit 0: the token
    mqa_quad_halve<2, 0>(y, zz, (lane & 2) != 0, 2);  // lane bit 1: the kv row
    z = zz[0];
  } else {
    float y[1];
    mqa_quad_halve<2, 0>(x, y, (lane & 1) != 0, 1);  // lane bit 0: the kv row
    z = y[0] + __shfl_xor_sync(0xffffffffu, y[0], 2);
  }
  if (block_base < bound) out[block_base] = z * lane_scale;
}

/// Logits kernel body: grid 4 * num_slots CTAs of kPagedThreads, dynamic shared memory
/// paged_mqa_logits_smem_bytes(kNextN * kNumHeads, kDesign). kv_block_stride: bytes between cache blocks;
/// block_table_stride: ints between table rows of max_blocks entries; logits rows of stride_logits floats;
/// batch: the sequences (the schedule's units past them are not read).
template <int kNextN, int kNumHeads, int kDesign>
DT_DEVICE void paged_mqa_logits(const u8* __restrict__ q, const u8* __restrict__ kv_cache, int kv_block_stride,
                                int num_kv_blocks, const float* __restrict__ weights,
                                const int* __restrict__ context_lens, const int* __restrict__ block_table,
                                int block_table_stride, int max_blocks, const int* __restrict__ schedule,
                                float* __restrict__ logits, int stride_logits, int max_context_len, int batch) {
  constexpr int kN = kNextN * kNumHeads;  // q rows of one sequence: the wgmma's N
  static_assert(kNumHeads % 8 == 0 && kN % 16 == 0 && kN <= 256, "whole 8-column groups per token");
  constexpr int kStages = paged_stages(kN, kDesign);
  constexpr int kQSlots = paged_q_slots(kN, kDesign);
  constexpr bool kWeightsInRegisters = kDesign == kPagedFourCtas && kN <= 64;  // N 128: registers go to the accumulators
  constexpr bool kIssueUnderMma = kDesign == kPagedFourCtas;  // the copies' address work hides under the wgmmas
  constexpr int kChunks = kN >= 64 ? 2 : 1;  // N 32 is memory-bound; wider N splits its wgmmas in two
  static_assert(kStages >= 2, "a block in use and at least one in flight");
  constexpr int kQBytes = kN * kPagedHeadDim;
  extern __shared__ u8 smem_raw[];
  const PagedRings<kN, kStages, kQSlots> rings(smem_raw);

  ptx::grid_dependency_wait();  // the stream predecessor may write any input
  ptx::launch_dependents();

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int slot = blockIdx.x / kPagedSplitBlocks, group = blockIdx.x % kPagedSplitBlocks;
  const PagedCursor start = paged_slot_start(schedule, slot, group, batch, context_lens, kNextN, max_blocks,
                                             max_context_len);
  PagedCursor producer = start, consumer = start;

  // the producer: block `issued` of the CTA's walk goes into stage issued % kStages, a new
  // sequence's q rows and weights into slot (its sequence number) % kQSlots
  int producer_entry = producer.table_entry(block_table, block_table_stride);
  int issued = 0;
  int producer_q_seq = -1, producer_b = -1;  // sequence numbers count the walk's sequence changes
  const auto can_issue = [&](int last, int consumer_q_seq) {
    return paged_can_issue<kQSlots>(producer, producer_b, producer_q_seq, issued, last, consumer_q_seq);
  };
  const auto issue = [&]() {
    const int stage = issued % kStages;
    const bool valid = producer_entry >= 0 && producer_entry < num_kv_blocks;
    const u8* src = kv_cache + static_cast<long long>(valid ? producer_entry : 0) * kv_block_stride;
    const u32 bytes = valid ? 16u : 0u;
    u8* kv_dst = rings.kv(stage);
#pragma unroll
    for (int u = 0; u < kPagedBlockBytes / 16 / kPagedThreads; ++u) {
      const int c = tid + u * kPagedThreads;
      ptx::cp_async_16_zfill(kv_dst + sw128_offset(c >> 3, c & 7), src + c * 16, bytes);
    }
    if (tid < kPagedBlockKV * 4 / 16)
      ptx::cp_async_16_zfill(rings.scales(stage) + tid * 4, src + kPagedBlockBytes + tid * 16, bytes);
    if (producer.b != producer_b) {
      producer_b = producer.b, ++producer_q_seq;
      const int q_slot = producer_q_seq % kQSlots;
      const u8* q_src = q + static_cast<long long>(producer.b) * kQBytes;
      u8* q_dst = rings.q(q_slot);
#pragma unroll
      for (int u = 0; u < kQBytes / 16 / kPagedThreads; ++u) {
        const int c = tid + u * kPagedThreads;
        ptx::cp_async_16_zfill(q_dst + sw128_offset(c >> 3, c & 7), q_src + c * 16, 16u);
      }
      if (tid < kN / 4)
        ptx::cp_async_16_zfill(rings.weights(q_slot) + tid * 4,
                               weights + static_cast<long long>(producer.b) * kN + tid * 4, 16u);
    }
    ptx::cp_async_commit_group();  // one group per block: groups and blocks are counted alike
    ++issued;
    producer.next(context_lens, kNextN, max_blocks, max_context_len);
    // read one block ahead: its latency hides behind this block
    producer_entry = producer.table_entry(block_table, block_table_stride);
  };

  while (can_issue(kStages - 2, 0)) issue();  // the first sequence is number 0, its slot free

  // this thread's two kv rows of a block in the accumulator layout
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
  int consumer_q_seq = -1, consumer_b = -1;
  int prefetched_b = -1;  // with one q slot: the last sequence whose first blocks were asked of L2
  int lens[kNextN];
  // with kWeightsInRegisters: this thread's weights of the sequence in use, columns 8n + 2 (lane % 4) + {0, 1}
  float wreg[kWeightsInRegisters ? kN / 4 : 1];
  for (int iter = 0; consumer.has(); ++iter) {
    // with two q slots block iter was issued by now: at the last iteration's issue its sequence was
    // at most one past the one in use then, and every block before it no further; with one slot a
    // block that starts a sequence is issued only below, once the previous sequence is done
    cp_async_wait_at_most<kStages - 2>(issued - 1 - iter);  // this thread's copies of block iter landed
    ptx::fence_proxy_async_shared();          // ... and are visible to the wgmma's proxy
    __syncthreads();  // ... and so are every other thread's; and all are done with block iter - 1
    const bool new_sequence = consumer.b != consumer_b;
    if (new_sequence) {
      consumer_b = consumer.b, ++consumer_q_seq;
      paged_row_lens<kNextN>(context_lens, consumer.b, max_context_len, lens);
    }
    const bool late = issued <= iter;  // the same in every thread: only with one q slot
    // stages of blocks before iter are free: the copies go out here, or (kIssueUnderMma) once the
    // wgmmas of block iter run, which read neither their stage nor (one slot: no q copy then;
    // two: the other one) their q slot
    if (!kIssueUnderMma || late) {
      while (can_issue(iter + kStages - 1, consumer_q_seq)) issue();
    }
    if (kQSlots == 1 && late) {  // block iter (and its q rows) was issued just now: wait for it
      cp_async_wait_at_most<kStages - 1>(issued - 1 - iter);  // up to kStages - 1 issued after block iter
      ptx::fence_proxy_async_shared();
      __syncthreads();
    }
    const int stage = iter % kStages;
    const int q_slot = consumer_q_seq % kQSlots;
    const float* w = paged_block_weights<kN, kWeightsInRegisters>(rings.weights(q_slot), new_sequence, lane, wreg);

    const u32 kv_desc_lo = ptx::sw128_lo(ptx::smem_addr(rings.kv(stage)));
    const u32 q_desc_lo = ptx::sw128_lo(ptx::smem_addr(rings.q(q_slot)));
    if constexpr (kDesign == kPagedFourCtas) {
      // while the wgmmas run: the next copies (stages of blocks before iter are free; the wgmmas
      // read neither those stages nor (one slot: no q copy now; two: the other one) another q slot)
      const auto between = [&]() {
        while (can_issue(iter + kStages - 1, consumer_q_seq)) issue();  // a no-op after a late issue
        if constexpr (kQSlots == 1) {
          paged_prefetch_waiting_sequence<kStages>(
              producer, producer_b, prefetched_b, tid, block_table, block_table_stride,
              [&](int b) {
                ptx::bulk_prefetch_l2(q + static_cast<long long>(b) * kQBytes, kQBytes);
                ptx::bulk_prefetch_l2(weights + static_cast<long long>(b) * kN, kN * 4);
              },
              [&](int entry) {
                if (entry >= 0 && entry < num_kv_blocks)
                  ptx::bulk_prefetch_l2(kv_cache + static_cast<long long>(entry) * kv_block_stride,
                                        kPagedBlockBytes + kPagedBlockKV * 4);
              });
        }
      };
      paged_block<kNextN, kNumHeads, kChunks, !kWeightsInRegisters>(
          kv_desc_lo, q_desc_lo, w, rings.scales(stage), r0, lens,
          logits, stride_logits, consumer.b, consumer.block() * kPagedBlockKV + r0, lane, between);
    } else {  // kPagedTwoSlots: the earlier block, one wgmma chain and one FMA chain per row
      using Mma = ptx::WgmmaFp8<kN>;
      float acc[Mma::kNumAccum];
      paged_issue_one_chain<kN>(kv_desc_lo, q_desc_lo, acc);
      const float scale0 = rings.scales(stage)[r0], scale1 = rings.scales(stage)[r1];
      ptx::wgmma_wait_group<0>();
#pragma unroll
      for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc[a]);
      float v0[kNextN], v1[kNextN];
#pragma unroll
      for (int t = 0; t < kNextN; ++t) v0[t] = v1[t] = 0.0f;
#pragma unroll
      for (int n = 0; n < kN / 8; ++n) {
        const int t = (8 * n) / kNumHeads;  // the token of columns 8n..8n+7
        const int col = 8 * n + 2 * (lane & 3);
        const float w0 = w[col], w1 = w[col + 1];
        v0[t] = fmaf(fmaxf(acc[4 * n], 0.0f), w0, fmaf(fmaxf(acc[4 * n + 1], 0.0f), w1, v0[t]));
        v1[t] = fmaf(fmaxf(acc[4 * n + 2], 0.0f), w0, fmaf(fmaxf(acc[4 * n + 3], 0.0f), w1, v1[t]));
      }
#pragma unroll
      for (int t = 0; t < kNextN; ++t) {
#pragma unroll
        for (int offset = 1; offset < 4; offset <<= 1) {  // the quad's four lanes hold the other heads
          v0[t] += __shfl_xor_sync(0xffffffffu, v0[t], offset);
          v1[t] += __shfl_xor_sync(0xffffffffu, v1[t], offset);
        }
      }
      if ((lane & 3) == 0) {  // one lane of each quad stores its two kv rows
        const int p0 = consumer.block() * kPagedBlockKV + r0, p1 = p0 + 8;
#pragma unroll
        for (int t = 0; t < kNextN; ++t) {
          float* out_row = logits + static_cast<long long>(consumer.b * kNextN + t) * stride_logits;
          if (p0 < lens[t]) out_row[p0] = v0[t] * scale0;
          if (p1 < lens[t]) out_row[p1] = v1[t] * scale1;
        }
      }
    }
    consumer.next(context_lens, kNextN, max_blocks, max_context_len);
  }
  ptx::cp_async_wait_group<0>();  // no copy may land after the CTA exits
}

/// Logits kernel body of the kPagedTma design: kPagedFourCtas' walk, rings and overlap, with
/// operands by TMA. grid 4 * num_slots CTAs of kPagedThreads, dynamic shared memory
/// paged_mqa_logits_smem_bytes(kNextN * kNumHeads, kPagedTma). Tensor maps (uint8 unless said):
/// tmap_kv the cache as rows of 128 bytes, box 128 x 64, 128B swizzle (cache block e starts at row
/// e * rows_per_block, its scales 64 rows later); tmap_scales the same rows, box 128 x 2, no
/// swizzle; tmap_q [batch * N rows, 128], box 128 x N, 128B swizzle; tmap_w float32 [batch, N],
/// box N x 1. Entries outside [0, num_kv_blocks) load a box wholly before row 0: zeros.
template <int kNextN, int kNumHeads, int kDesign>
DT_DEVICE void paged_mqa_logits_tma(const TmaDescriptor* tmap_kv, const TmaDescriptor* tmap_scales,
                                    const TmaDescriptor* tmap_q, const TmaDescriptor* tmap_w, int rows_per_block,
                                    int num_kv_blocks, const int* __restrict__ context_lens,
                                    const int* __restrict__ block_table, int block_table_stride, int max_blocks,
                                    const int* __restrict__ schedule, float* __restrict__ logits, int stride_logits,
                                    int max_context_len, int batch) {
  constexpr int kN = kNextN * kNumHeads;
  static_assert(kNumHeads % 8 == 0 && kN % 16 == 0 && kN <= 128, "whole 8-column groups per token; a TMA box <= 256 rows");
  static_assert(paged_is_tma(kDesign), "a TMA design");
  constexpr int kStages = paged_stages(kN, kDesign);
  constexpr int kQSlots = paged_q_slots(kN, kDesign);
  static_assert(kStages >= 2, "a block in use and at least one in flight");
  constexpr bool kLean = kDesign == kPagedTmaLean;
  constexpr bool kOneChain = kDesign == kPagedTmaOneChain || kLean;
  constexpr bool kWeightsInRegisters = kOneChain || kN <= 64;  // kPagedTma's N 128: registers go to two chains
  constexpr int kChunks = !kOneChain && kN >= 64 ? 2 : 1;       // N 32 is memory-bound; one chain reads the kv tile once
  constexpr int kQBytes = kN * kPagedHeadDim;
  constexpr u32 kBlockTx = kPagedBlockBytes + kPagedBlockKV * 4;  // a block's rows and scales
  constexpr u32 kSequenceTx = kQBytes + kN * 4;                    // a sequence's q rows and weights
  extern __shared__ u8 smem_raw[];
  const PagedRings<kN, kStages, kQSlots> rings(smem_raw);
  u64* full = rings.end();  // kStages: the stage's block (and q) landed

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) {
    ptx::tma_prefetch_descriptor(tmap_kv);
    ptx::tma_prefetch_descriptor(tmap_scales);
    ptx::tma_prefetch_descriptor(tmap_q);
    ptx::tma_prefetch_descriptor(tmap_w);
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&full[s], 1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write any input
  ptx::launch_dependents();

  const int slot = blockIdx.x / kPagedSplitBlocks, group = blockIdx.x % kPagedSplitBlocks;
  const PagedCursor start = paged_slot_start(schedule, slot, group, batch, context_lens, kNextN, max_blocks,
                                             max_context_len);
  PagedCursor producer = start, consumer = start;
  PagedFastWalk producer_walk(producer), consumer_walk(consumer);  // kLean's steps
  // kLean: a settled cursor has a unit iff s is below its walk's bound (one compare, not has())
  const auto producer_has = [&]() { return kLean ? producer.s < producer_walk.limit : producer.has(); };

  // the tensor-map row of a table entry's block; outside the cache: a box wholly before row 0
  const auto block_row = [&](int entry) {
    return entry >= 0 && entry < num_kv_blocks ? entry * rows_per_block : -2 * kPagedBlockKV;
  };
  const auto table_entry = [&]() {
    if constexpr (kLean) {
      return producer_has() ? block_table[static_cast<long long>(producer.b) * block_table_stride + producer.block()]
                            : -1;
    } else {
      return producer.table_entry(block_table, block_table_stride);
    }
  };
  int producer_entry = table_entry();
  int issued = 0;
  int producer_q_seq = -1, producer_b = -1;
  const auto can_issue = [&](int last, int consumer_q_seq) {
    if constexpr (kLean) {  // paged_can_issue with the walk's has
      const int seq = producer_q_seq + (producer.b != producer_b ? 1 : 0);
      return issued <= last && producer_has() && seq - consumer_q_seq < kQSlots;
    } else {
      return paged_can_issue<kQSlots>(producer, producer_b, producer_q_seq, issued, last, consumer_q_seq);
    }
  };
  // block `issued` into stage issued % kStages (and a new sequence's q rows and weights into slot
  // (its sequence number) % kQSlots), all on the stage's barrier; thread 0 issues, all count
  const u32 issuer = kLean ? paged_opaque(tid == 0 ? 1u : 0u) : 0u;  // kLean: not re-read per block
  const auto issue = [&]() {
    const int stage = issued % kStages;
    const bool new_sequence = producer.b != producer_b;
    if (new_sequence) producer_b = producer.b, ++producer_q_seq;
    if (kLean ? issuer != 0u : tid == 0) {
      const int row = block_row(producer_entry);
      ptx::mbarrier_arrive_expect_tx(&full[stage], kBlockTx + (new_sequence ? kSequenceTx : 0u));
      ptx::tma_load_2d(rings.kv(stage), tmap_kv, &full[stage], 0, row);
      ptx::tma_load_2d(rings.scales(stage), tmap_scales, &full[stage], 0, row + kPagedBlockKV);
      if (new_sequence) {
        const int q_slot = producer_q_seq % kQSlots;
        ptx::tma_load_2d(rings.q(q_slot), tmap_q, &full[stage], 0, producer.b * kN);
        ptx::tma_load_2d(rings.weights(q_slot), tmap_w, &full[stage], 0, producer.b);
      }
    }
    ++issued;
    if constexpr (kLean) {
      producer_walk.next(producer, context_lens, kNextN, max_blocks, max_context_len);
    } else {
      producer.next(context_lens, kNextN, max_blocks, max_context_len);
    }
    // read one block ahead: its latency hides behind this block
    producer_entry = table_entry();
  };

  while (can_issue(kStages - 2, 0)) issue();  // the first sequence is number 0, its slot free

  const int r0 = warp * 16 + (lane >> 2);  // this thread's kv rows of a block: r0, r0 + 8
  int consumer_q_seq = -1, consumer_b = -1;
  int prefetched_b = -1;  // with one q slot: the last sequence whose first blocks were asked of L2
  int lens[kNextN];
  float wreg[kWeightsInRegisters ? kN / 4 : 1];  // this thread's weights: columns 8n + 2 (lane % 4) + {0, 1}
  // kLean: this lane's logit of each block (paged_block_lean): its kv row, and per sequence its row's
  // pointer at that kv row and the row's length less it
  const int lean_row = r0 + 8 * paged_lean_half<kNextN>(lane);
  float* lean_out = logits;
  int lean_bound = 0;
  // kLean: the rings' descriptor words and this lane's scale at stage and q slot 0, a constant step
  // each further on (sw128_lo is linear in the address), not rebuilt from the window per block
  const u32 kv_desc_base = ptx::sw128_lo(ptx::smem_addr(rings.kv(0)));
  const u32 q_desc_base = ptx::sw128_lo(ptx::smem_addr(rings.q(0)));
  const u32 lean_scale = kLean ? paged_opaque(ptx::smem_addr(rings.scales(0) + lean_row)) : 0u;
  for (int iter = 0; kLean ? consumer.s < consumer_walk.limit : consumer.has(); ++iter) {
    const int stage = iter % kStages;
    const u32 parity = static_cast<u32>(iter / kStages) & 1u;
    // with two q slots block iter was issued by now (see paged_mqa_logits); with one, a block
    // that starts a sequence is issued below, once every thread is done with the previous one
    const bool late = issued <= iter;  // the same in every thread
    if (!late) ptx::mbarrier_wait(&full[stage], parity);
    __syncthreads();  // every thread is done with block iter - 1: its stage (and q slot) may be refilled
    const bool new_sequence = consumer.b != consumer_b;
    if (new_sequence) {
      consumer_b = consumer.b, ++consumer_q_seq;
      if constexpr (kLean) {
        const int row = consumer.b * kNextN + paged_lean_token<kNextN>(lane);
        const bool stores = kNextN == 2 || (lane & 2) == 0;  // one token: lanes q and q ^ 2 hold one sum
        lean_out = logits + static_cast<long long>(row) * stride_logits + lean_row;
        lean_bound = stores ? min_int(context_lens[row], max_context_len) - lean_row : 0;
      } else {
        paged_row_lens<kNextN>(context_lens, consumer.b, max_context_len, lens);
      }
    }
    if (late) {
      while (can_issue(iter + kStages - 1, consumer_q_seq)) issue();
      ptx::mbarrier_wait(&full[stage], parity);
    }
    const int q_slot = consumer_q_seq % kQSlots;
    const float* w = paged_block_weights<kN, kWeightsInRegisters>(rings.weights(q_slot), new_sequence, lane, wreg);

    const u32 kv_desc_lo = kLean ? kv_desc_base + static_cast<u32>(stage) * (kPagedBlockBytes / 16)
                                 : ptx::sw128_lo(ptx::smem_addr(rings.kv(stage)));
    const u32 q_desc_lo = kLean ? q_desc_base + static_cast<u32>(q_slot) * (kQBytes / 16)
                                : ptx::sw128_lo(ptx::smem_addr(rings.q(q_slot)));
    // while the wgmmas run: the next copies (stages of blocks before iter are free; the wgmmas read
    // neither those stages nor (one slot: no q copy now; two: the other one) another q slot)
    const auto between = [&]() {
      while (can_issue(iter + kStages - 1, consumer_q_seq)) issue();
      // kLean: the common case (the producer inside the sequence it issued last) by one compare
      if (kQSlots == 1 && (!kLean || producer.b != producer_b)) {
        paged_prefetch_waiting_sequence<kStages>(
            producer, producer_b, prefetched_b, tid, block_table, block_table_stride,
            [&](int b) {
              ptx::tma_prefetch_2d_l2(tmap_q, 0, b * kN);
              ptx::tma_prefetch_2d_l2(tmap_w, 0, b);
            },
            [&](int entry) {
              const int row = block_row(entry);
              if (row >= 0) {
                ptx::tma_prefetch_2d_l2(tmap_kv, 0, row);
                ptx::tma_prefetch_2d_l2(tmap_scales, 0, row + kPagedBlockKV);
              }
            });
      }
    };
    if constexpr (kLean) {
      paged_block_lean<kNextN, kNumHeads>(kv_desc_lo, q_desc_lo, w, lean_scale + stage * kPagedBlockKV * 4, lean_out,
                                          lean_bound, consumer.block() * kPagedBlockKV, lane, between, []() {});
      consumer_walk.next(consumer, context_lens, kNextN, max_blocks, max_context_len);
    } else {
      paged_block<kNextN, kNumHeads, kChunks, !kWeightsInRegisters>(
          kv_desc_lo, q_desc_lo, w, rings.scales(stage), r0, lens, logits,
          stride_logits, consumer.b, consumer.block() * kPagedBlockKV + r0, lane, between);
      consumer.next(context_lens, kNextN, max_blocks, max_context_len);
    }
  }
}

/// What kPagedTmaLoader's loader hands the math warps with a stage: the block's sequence (-1: the
/// walk ended), its first kv row times 4 plus flags (bit 0: it starts the sequence, bit 1: it ends
/// it in this CTA's walk) and the sequence's logits rows' lengths (cut at max_context_len).
struct alignas(16) PagedLoaderRecord {
  int b;
  int row_flags;
  int len[2];
};

/// mbarrier_wait that calls `poll` between failed tries (the watchdog build traps as mbarrier_wait does;
/// not kTimed: never, the timer's registers spared).
template <bool kTimed = true, typename Poll>
DT_DEVICE void paged_wait_polling(u64* bar, u32 parity, Poll&& poll) {
  const u32 addr = ptx::smem_addr(bar);
  if constexpr (!kTimed) {
    while (!ptx::mbarrier_try_wait(addr, parity)) poll();
    return;
  }
#if DT_WATCHDOG
  u32 polls = 0;
  u64 start = 0;
  while (!ptx::mbarrier_try_wait(addr, parity)) {
    poll();
    if ((++polls & 1023u) == 0) {
      const u64 now = ptx::global_timer_ns();
      if (start == 0) {
        start = now;
      } else if (now - start > ptx::kWaitTimeoutNs) {
        asm volatile("trap;");
      }
    }
  }
#else
  while (!ptx::mbarrier_try_wait(addr, parity)) poll();
#endif
}

/// Logits kernel body of kPagedTmaLoader: grid 4 * num_slots CTAs of kPagedLoaderThreads, dynamic
/// shared memory paged_mqa_logits_smem_bytes(kNextN * kNumHeads, kPagedTmaLoader), the tensor maps
/// and arguments of paged_mqa_logits_tma. Warpgroup 0 multiplies (paged_block_lean); lane 0 of
/// warp 4 (the loader) walks the CTA's units and issues block i into stage i % kStages once
/// the math warps released its previous block (empty[stage]: 128 arrivals after the wgmmas), with
/// the block's record; a sequence's q rows and weights go to q slot (its number) % kQSlots on the
/// full barrier of its first block, once the sequence before in that slot ended (q_empty[slot]:
/// 128 arrivals after its last block's head sums). The q copy may wait there while the loader issues
/// the next blocks' rows (it polls q_empty while it waits for a stage), so the kv stream does not
/// drain at a sequence change with one q slot. kDesign kPagedTmaLoaderWg: kPagedLoaderWgThreads, the
/// loader warp the first of a warpgroup that gives its registers to the math warpgroup (the weights in
/// registers for every N), q_empty[slot] arrived once the sequence's last block's wgmmas completed.
/// mbarrier_wait, or (kUntimed) the same without the watchdog build's timer (kPagedTmaLoaderWg: the timer's
/// registers spill its N 128).
template <bool kUntimed>
DT_DEVICE void paged_loader_wait(u64* bar, u32 parity) {
  if constexpr (kUntimed) {
    paged_wait_polling<false>(bar, parity, []() {});
  } else {
    ptx::mbarrier_wait(bar, parity);
  }
}

template <int kNextN, int kNumHeads, int kDesign = kPagedTmaLoader>
DT_DEVICE void paged_mqa_logits_loader(const TmaDescriptor* tmap_kv, const TmaDescriptor* tmap_scales,
                                       const TmaDescriptor* tmap_q, const TmaDescriptor* tmap_w, int rows_per_block,
                                       int num_kv_blocks, const int* __restrict__ context_lens,
                                       const int* __restrict__ block_table, int block_table_stride, int max_blocks,
                                       const int* __restrict__ schedule, float* __restrict__ logits,
                                       int stride_logits, int max_context_len, int batch) {
  static_assert(paged_has_loader(kDesign), "a loader design");
  constexpr bool kWg = kDesign == kPagedTmaLoaderWg;
  constexpr int kN = kNextN * kNumHeads;
  static_assert(kNumHeads % 8 == 0 && kN % 16 == 0 && kN <= 128, "whole 8-column groups per token; a TMA box <= 256 rows");
  static_assert(kNextN == 1 || kNextN == 2, "a record holds two lengths");
  constexpr int kStages = paged_stages(kN, kDesign);
  constexpr int kQSlots = paged_q_slots(kN, kDesign);
  static_assert(kStages >= 2, "a block in use and at least one in flight");
  constexpr int kQBytes = kN * kPagedHeadDim;
  constexpr u32 kBlockTx = kPagedBlockBytes + kPagedBlockKV * 4;  // a block's rows and scales
  constexpr u32 kSequenceTx = kQBytes + kN * 4;                    // a sequence's q rows and weights
  constexpr int kGroups = kWg ? kPagedLoaderWgGroups : 1;  // math warpgroups (and loader threads) per CTA
  constexpr int kMathThreads = kGroups * kPagedThreads;
  // the warp index through a shuffle: uniform, so the role branch is not rebuilt per thread
  const int tid = threadIdx.x, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31;
  // kWg: a math warpgroup's group, or the group of loader warp kMathThreads / 32 + g
  const int group_in_cta = kWg ? (warp < kMathThreads / 32 ? warp / 4 : warp - kMathThreads / 32) : 0;
  extern __shared__ u8 smem_raw[];
  const PagedRings<kN, kStages, kQSlots> rings(kWg ? smem_raw + group_in_cta * paged_group_stride(kN) : smem_raw);
  // rings.end() is 128-byte aligned (the rings are multiples of 128 bytes): the records first (16-byte loads)
  PagedLoaderRecord* records = reinterpret_cast<PagedLoaderRecord*>(rings.end());
  u64* full = reinterpret_cast<u64*>(records + kStages);  // kStages: the stage's block (and q) landed, its record written
  u64* empty = full + kStages;     // kStages: the math warps' wgmmas of the stage's block completed
  u64* q_empty = empty + kStages;  // kQSlots: the head sums of the slot's sequence's last block done

  const bool loader_thread = kWg ? tid >= kMathThreads && group_in_cta < kGroups && lane == 0 : tid == kPagedThreads;
  if (loader_thread) {
    ptx::tma_prefetch_descriptor(tmap_kv);
    ptx::tma_prefetch_descriptor(tmap_scales);
    ptx::tma_prefetch_descriptor(tmap_q);
    ptx::tma_prefetch_descriptor(tmap_w);
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&full[s], 1), ptx::mbarrier_init(&empty[s], kPagedThreads);
    for (int s = 0; s < kQSlots; ++s) ptx::mbarrier_init(&q_empty[s], kPagedThreads);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write any input
  ptx::launch_dependents();

  if (warp >= kMathThreads / 32) {  // the loader warp: one thread walks and issues
    if constexpr (kWg) ptx::setmaxnreg_dec<kPagedLoaderWgLoaderRegs>();  // every warp of the warpgroup
    if (!loader_thread) return;
    const int slot = kWg ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x / kPagedSplitBlocks);
    const int group = kWg ? group_in_cta : static_cast<int>(blockIdx.x % kPagedSplitBlocks);
    PagedCursor c = paged_slot_start(schedule, slot, group, batch, context_lens, kNextN, max_blocks, max_context_len);
    PagedFastWalk walk(c);
    int iter = 0, seq = -1, prev_b = -1;
    int lens[2] = {0, 0};  // the sequence's logits rows' lengths, read once per sequence
    // the newest sequence's q copy while it waits for its slot: slot, the parity that frees it, stage, sequence
    bool pending = false;
    int pending_slot = 0, pending_stage = 0, pending_b = 0;
    u32 pending_parity = 0;
    const auto issue_q = [&]() {
      ptx::tma_load_2d(rings.q(pending_slot), tmap_q, &full[pending_stage], 0, pending_b * kN);
      ptx::tma_load_2d(rings.weights(pending_slot), tmap_w, &full[pending_stage], 0, pending_b);
      pending = false;
    };
    const auto poll_q = [&]() {
      if (pending && ptx::mbarrier_try_wait(ptx::smem_addr(&q_empty[pending_slot]), pending_parity)) issue_q();
    };
    while (c.s < walk.limit) {
      const int b = c.b, block = c.block();
      const int entry = block_table[static_cast<long long>(b) * block_table_stride + block];
      walk.next(c, context_lens, kNextN, max_blocks, max_context_len);
      const bool last = !(c.s < walk.limit) || c.b != b;  // the CTA's last block of sequence b
      const bool new_sequence = b != prev_b;
      const int stage = iter % kStages;
      paged_wait_polling<!kWg>(&empty[stage], (static_cast<u32>(iter / kStages) & 1u) ^ 1u, poll_q);
      if (new_sequence) {
        if (pending) {  // a sequence shorter than the ring: its q copy goes first
          paged_loader_wait<kWg>(&q_empty[pending_slot], pending_parity);
          issue_q();
        }
        ++seq, prev_b = b;
        pending = true, pending_slot = seq % kQSlots, pending_stage = stage, pending_b = b;
        pending_parity = (static_cast<u32>(seq / kQSlots) & 1u) ^ 1u;
        ptx::tma_prefetch_2d_l2(tmap_q, 0, b * kN);  // toward L2 while its slot may still be in use
        ptx::tma_prefetch_2d_l2(tmap_w, 0, b);
#pragma unroll
        for (int t = 0; t < kNextN; ++t) lens[t] = min_int(context_lens[b * kNextN + t], max_context_len);
      }
      PagedLoaderRecord& record = records[stage];
      record.b = b;
      record.row_flags = (block * kPagedBlockKV) * 4 + (new_sequence ? 1 : 0) + (last ? 2 : 0);
      record.len[0] = lens[0], record.len[1] = lens[1];
      const int row = entry >= 0 && entry < num_kv_blocks ? entry * rows_per_block : -2 * kPagedBlockKV;
      ptx::mbarrier_arrive_expect_tx(&full[stage], kBlockTx + (new_sequence ? kSequenceTx : 0u));
      ptx::tma_load_2d(rings.kv(stage), tmap_kv, &full[stage], 0, row);
      ptx::tma_load_2d(rings.scales(stage), tmap_scales, &full[stage], 0, row + kPagedBlockKV);
      poll_q();
      ++iter;
    }
    if (pending) {
      paged_loader_wait<kWg>(&q_empty[pending_slot], pending_parity);
      issue_q();
    }
    const int stage = iter % kStages;  // the end record, once the stage's last block is released
    paged_loader_wait<kWg>(&empty[stage], (static_cast<u32>(iter / kStages) & 1u) ^ 1u);
    records[stage].b = -1;
    ptx::mbarrier_arrive(&full[stage]);
    return;
  }

  // four CTAs of 160 threads: 96 registers a thread; N 128's 64 accumulators leave no room for its weights
  // (kWg: 112, the loader warpgroup's registers, hold them)
  constexpr bool kWeightsInRegisters = kWg || kN <= 64;
  if constexpr (kWg) ptx::setmaxnreg_inc<kPagedLoaderWgMathRegs>();
  const int r0 = (kWg ? warp % 4 : warp) * 16 + (lane >> 2);  // this thread's kv rows of a block: r0, r0 + 8
  const int lean_row = r0 + 8 * paged_lean_half<kNextN>(lane);  // the one it stores
  const int token = paged_lean_token<kNextN>(lane);
  const bool stores = kNextN == 2 || (lane & 2) == 0;  // one token: lanes q and q ^ 2 hold one sum
  float* out = logits;
  int bound = 0;
  float wreg[kWeightsInRegisters ? kN / 4 : 1];  // this thread's weights: columns 8n + 2 (lane % 4) + {0, 1}
  const u32 kv_desc_base = ptx::sw128_lo(ptx::smem_addr(rings.kv(0)));
  const u32 q_desc_base = ptx::sw128_lo(ptx::smem_addr(rings.q(0)));
  const u32 scale_base = paged_opaque(ptx::smem_addr(rings.scales(0) + lean_row));
  const u32 record_base = ptx::smem_addr(records);
  int q_seq = -1;
  for (int iter = 0;; ++iter) {
    const int stage = iter % kStages;
    paged_loader_wait<kWg>(&full[stage], static_cast<u32>(iter / kStages) & 1u);  // kWg: untimed (112 registers)
    int b, row_flags, len0, len1;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b), "=r"(row_flags), "=r"(len0), "=r"(len1)
                 : "r"(record_base + stage * static_cast<u32>(sizeof(PagedLoaderRecord)))
                 : "memory");
    if (b < 0) break;
    if (row_flags & 1) {  // a new sequence: its q slot, weights, this lane's logits row and bound
      ++q_seq;
      const int len = kNextN == 2 && token == 1 ? len1 : len0;
      out = logits + static_cast<long long>(b * kNextN + token) * stride_logits + lean_row;
      bound = stores ? len - lean_row : 0;
      if constexpr (kWeightsInRegisters) paged_block_weights<kN, true>(rings.weights(q_seq % kQSlots), true, lane, wreg);
    }
    const int q_slot = q_seq % kQSlots;
    const u32 kv_desc_lo = kv_desc_base + static_cast<u32>(stage) * (kPagedBlockBytes / 16);
    const u32 q_desc_lo = q_desc_base + static_cast<u32>(q_slot) * (kQBytes / 16);
    const float* w = kWeightsInRegisters ? static_cast<const float*>(wreg) : rings.weights(q_slot);
    paged_block_lean<kNextN, kNumHeads, !kWeightsInRegisters>(
        kv_desc_lo, q_desc_lo, w, scale_base + stage * kPagedBlockKV * 4, out, bound, row_flags >> 2, lane,
        []() {}, [&]() {
          ptx::mbarrier_arrive(&empty[stage]);
          if (kWg && (row_flags & 2)) ptx::mbarrier_arrive(&q_empty[q_slot]);  // the weights are in registers
        });
    // the q slot after the head sums: N 128 reads its weights there
    if (!kWg && (row_flags & 2)) ptx::mbarrier_arrive(&q_empty[q_slot]);
  }
}

/// Clean kernel body: grid-stride over the rows; row r gets -inf in columns
/// [clamp(context_lens[r], 0, len_limit), max_context_len) (len_limit <= max_context_len: the
/// rows the block table holds, past which the logits kernel computes nothing).
DT_DEVICE void paged_mqa_logits_clean(const int* __restrict__ context_lens, float* __restrict__ logits, int rows,
                                      int stride_logits, int max_context_len, int len_limit) {
  ptx::grid_dependency_wait();  // the logits kernel before this one writes the rows
  ptx::launch_dependents();
  const float neg_inf = -__int_as_float(0x7f800000);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int begin = min_int(max_int(context_lens[r], 0), len_limit);
    float* row = logits + static_cast<long long>(r) * stride_logits;
    for (int p = begin + threadIdx.x; p < max_context_len; p += blockDim.x) row[p] = neg_inf;
  }
}

}  // namespace deep_tile
