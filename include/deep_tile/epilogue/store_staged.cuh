// The staged epilogue of the K-grouped kind's FP32 D (Cfg::kStagedEpilogue): a storer, one thread
// of the producer warpgroup, moves D between global and shared memory while the consumer
// warpgroups compute, so that D's reads and writes overlap the next tile's k-loop.
//
// Per tile of the CTA and consumer warpgroup wg whose 64-row slab has rows (both sides skip the
// tiles the consumers skip, and a slab past the tile's rows):
//
//   storer:    [staging wg read out by the unit] load C's slab (D itself, in place) by TMA into
//              staging wg, completing `ready[wg]` (without C, or a reducing tile: arrive on it,
//              the staging is free)
//   consumers: k-loop ... wait `ready[wg]`, add their sums into the staging (write them, without
//              C or reducing), fence, arrive `staged[wg]`
//   storer:    wait `staged[wg]`, store staging wg to D by TMA (a reducing tile: add it to D, the
//              TMA unit's reduce-add)
//
// A tile accumulated in place reduces when it has at least Cfg::kStagedReduceMinKBlocks k-blocks
// (staged_reduces; both sides decide from the tile's K range).
//
// The storer loads the next tile's C once the unit has read the previous stores out of the
// stagings, right after the consumers handed them over, so the loads have the whole next k-loop
// to land. D is the [G * m, n] FP32 map of the groups' outputs; with m % 64 == 0 (the host's
// rule, deep_tile/kernels/fp8_gemm.py staged_epilogue_allowed) no 64-row box reaches the next group.
//
// NOTES: over the K-grouped set the rule's 128x128 tile beats the direct store in geomean, though not
// on every shape: it loses with many groups of ~1k tokens.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/epilogue/store_direct.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The staged epilogue's barriers (SharedStorage::epilogue): per consumer warpgroup `ready` (the
/// storer's arrive, with C's bytes) and `staged` (every thread of the warpgroup arrives).
template <class Cfg>
struct StagedBarriers {
  u64* base;
  DT_DEVICE u64* ready(int wg) const { return base + wg; }
  DT_DEVICE u64* staged(int wg) const { return base + Cfg::kNumMathWarpgroups + wg; }

  DT_DEVICE void init() const {
#pragma unroll
    for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
      ptx::mbarrier_init(ready(wg), 1);
      ptx::mbarrier_init(staged(wg), 128);
    }
  }
};

/// Whether consumer warpgroup `wg`'s 64-row slab of the tile starting at row m0 has rows (below
/// m_end); both sides skip a slab that has none.
DT_DEVICE bool staged_slab_has_rows(int m0, int m_end, int wg) { return m0 + wg * 64 < m_end; }

/// Whether a tile of `k_blocks` k-blocks accumulated in place (Cfg::kCKind == 3) is added to D by
/// the TMA unit's reduce-add instead of C loaded, added to and stored (Cfg::kStagedReduceMinKBlocks).
template <class Cfg>
DT_DEVICE bool staged_reduces(int k_blocks) {
  return Cfg::kCKind == 3 && k_blocks >= Cfg::kStagedReduceMinKBlocks;
}

/// The bytes of C one slab's loads bring: one box of 64 rows x kF32AtomCols floats per atom
/// that starts inside D's columns (a box partly past n is zero-filled and counts whole).
template <class Cfg>
DT_DEVICE u32 staged_slab_bytes(int n0, int n) {
  constexpr int kAtoms = Cfg::kWgmmaN / Cfg::kF32AtomCols;
  const int atoms = min_int(kAtoms, ceil_div(n - n0, Cfg::kF32AtomCols));
  return static_cast<u32>(atoms * 64 * Cfg::kF32AtomCols * 4);
}

/// The storer's loop (one thread): for every tile of this CTA the consumers store, each
/// warpgroup's slab as the header says. `staging` is the start of the stagings (SharedStorage::d,
/// 64 x kWgmmaN floats per warpgroup), `tma_d` D's [G * m, n] map.
template <class Cfg>
DT_DEVICE void storer_loop(u8* staging, const StagedBarriers<Cfg>& bars, const TmaDescriptor* tma_d,
                           const Scheduler<Cfg>& sched) {
  constexpr int kAtoms = Cfg::kWgmmaN / Cfg::kF32AtomCols;
  constexpr int kAtomBytes = 64 * Cfg::kF32AtomCols * 4;
  constexpr int kSlabBytes = 64 * Cfg::kWgmmaN * 4;
  u32 staged_phase = 0;  // bit wg: the parity of warpgroup wg's next `staged` phase
  const WorkRange work = sched.work();
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = sched.tile(index);
    if (!sched.has_work(tile)) continue;
    // as consumer_loop: an empty group accumulated in place leaves D[g] as it is
    bool reduce = false;
    if constexpr (Cfg::kCKind == 3) {
      const KRange range = sched.k_range(tile);
      if (range.kb_begin >= range.kb_end) continue;
      reduce = staged_reduces<Cfg>(range.kb_end - range.kb_begin);
    }
    const int d_row0 = tile.expert * sched.m + tile.m0;  // the tile's rows of D[g] in the [G * m, n] map
    // The unit has read every earlier store out of the stagings.
    ptx::tma_store_wait_read<0>();
#pragma unroll
    for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
      if (!staged_slab_has_rows(tile.m0, tile.m_end, wg)) continue;
      if (Cfg::kCKind == 3 && !reduce) {
        ptx::mbarrier_arrive_expect_tx(bars.ready(wg), staged_slab_bytes<Cfg>(tile.n0, sched.n));
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) {
          const int col0 = tile.n0 + atom * Cfg::kF32AtomCols;
          if (col0 < sched.n) {
            ptx::tma_load_2d(staging + wg * kSlabBytes + atom * kAtomBytes, tma_d, bars.ready(wg), col0,
                             d_row0 + wg * 64);
          }
        }
      } else {
        ptx::mbarrier_arrive(bars.ready(wg));
      }
    }
#pragma unroll
    for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
      if (!staged_slab_has_rows(tile.m0, tile.m_end, wg)) continue;
      ptx::mbarrier_wait(bars.staged(wg), (staged_phase >> wg) & 1u);
      staged_phase ^= 1u << wg;
#pragma unroll
      for (int atom = 0; atom < kAtoms; ++atom) {
        const int col0 = tile.n0 + atom * Cfg::kF32AtomCols;
        if (col0 < sched.n) {
          u8* const src = staging + wg * kSlabBytes + atom * kAtomBytes;
          if (reduce) {
            ptx::tma_reduce_add_2d(tma_d, src, col0, d_row0 + wg * 64);
          } else {
            ptx::tma_store_2d(tma_d, src, col0, d_row0 + wg * 64);
          }
        }
      }
      ptx::tma_store_commit();
    }
  }
  ptx::tma_store_wait_all();
}

/// This thread's sums (`result[0]`) into its slots of the staging: added to the C there (kAddC)
/// or written.
template <class Cfg, bool kAddC>
DT_DEVICE void sums_to_staging(const F32StagingSlots<Cfg>& slots, const float* r) {
  // kPairs column pairs of a row loaded together, then added and stored (each load and store is
  // an ordered asm statement: one at a time, every store would wait for its load).
  constexpr int kPairs = largest_divisor_at_most(Cfg::kAccumPerSubtile / 4, 8);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j0 = 0; j0 < Cfg::kAccumPerSubtile / 4; j0 += kPairs) {
      float2 c[kPairs];
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        c[j] = kAddC ? ptx::load_shared_f32x2_at(slots.at(h, j0 + j)) : make_float2(0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        ptx::store_shared_f32x2_at(slots.at(h, j0 + j), r[4 * (j0 + j) + 2 * h] + c[j].x,
                                   r[4 * (j0 + j) + 2 * h + 1] + c[j].y);
      }
    }
  }
}

/// The consumers' side (every thread of warpgroup `wg`), after a tile's k-loop of `k_blocks`
/// k-blocks: wait until the storer has filled the warpgroup's staging with C (or freed it), add
/// this thread's sums (`result[0]`, the warpgroup's one sub-tile) there (write them, without C or
/// when the tile reduces: staged_reduces), and hand it to the storer. Nothing when the
/// warpgroup's slab lies past the tile's rows (m0: the tile's first row, m_end: the end of its
/// rows); `ready_phase` is this warpgroup's parity of `ready`.
template <class Cfg>
DT_DEVICE void add_to_staging(u8* smem_d, const StagedBarriers<Cfg>& bars,
                              const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                              int thread_in_wg, int m0, int m_end, int k_blocks, u32& ready_phase) {
  if (!staged_slab_has_rows(m0, m_end, wg)) return;
  const F32StagingSlots<Cfg> slots(smem_d + wg * 64 * Cfg::kWgmmaN * 4, thread_in_wg);
  ptx::mbarrier_wait(bars.ready(wg), ready_phase);
  ready_phase ^= 1u;
  if (Cfg::kCKind == 3 && !staged_reduces<Cfg>(k_blocks)) {
    sums_to_staging<Cfg, true>(slots, result[0]);
  } else {
    sums_to_staging<Cfg, false>(slots, result[0]);
  }
  // This thread's writes, for the unit's read of the staging after the storer's wait.
  ptx::fence_proxy_async_shared();
  ptx::mbarrier_arrive(bars.staged(wg));
}

}  // namespace deep_tile
