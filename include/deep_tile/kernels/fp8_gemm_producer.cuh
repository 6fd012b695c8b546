// The producer of the FP8 GEMM: one thread of the producer warpgroup issues the TMA loads of every
// stage (A, B, a_scale, and the family's scales) into the ring of shared-memory stages.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// One TMA load of `desc`'s box at (c0, c1) into this CTA or, with kMulticast, into the same
/// offset of both CTAs of the pair; plain, or with the L2 policy `policy` (kHinted).
template <bool kHinted, bool kMulticast = false>
DT_DEVICE void load_box(u8* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1, u64 policy) {
  if constexpr (kMulticast && kHinted) {
    ptx::tma_load_2d_multicast_hinted(dst, desc, bar, c0, c1, 0b11, policy);
  } else if constexpr (kMulticast) {
    ptx::tma_load_2d_multicast(dst, desc, bar, c0, c1, 0b11);
  } else if constexpr (kHinted) {
    ptx::tma_load_2d_hinted(dst, desc, bar, c0, c1, policy);
  } else {
    ptx::tma_load_2d(dst, desc, bar, c0, c1);
  }
}

/// Load one operand tile of `rows` rows; a multicast operand is loaded as two halves, each CTA
/// multicasting its own half to both when the pair shares it, else one CTA loading both halves.
template <bool kSplit, int kRows, bool kHinted>
DT_DEVICE void load_operand(u8* dst, const TmaDescriptor* desc, u64* bar, int k0, int row0, bool multicast,
                            u32 rank, u64 policy) {
  if constexpr (!kSplit) {
    load_box<kHinted>(dst, desc, bar, k0, row0, policy);
  } else {
    constexpr int kHalfRows = kRows / 2;
    if (multicast) {
      load_box<kHinted, true>(dst + rank * kHalfRows * 128, desc, bar, k0, row0 + rank * kHalfRows, policy);
    } else {
      load_box<kHinted>(dst, desc, bar, k0, row0, policy);
      load_box<kHinted>(dst + kHalfRows * 128, desc, bar, k0, row0 + kHalfRows, policy);
    }
  }
}

/// Before the grid-dependency wait: ask L2 for the weight (B) boxes of the first
/// Cfg::kL2PrefetchKBlocks k-blocks of this CTA's first tile (both halves of a multicast operand).
template <class Cfg>
DT_DEVICE void prefetch_first_weights(const TmaDescriptor* tma_b, const Scheduler<Cfg>& sched) {
  if constexpr (Cfg::kL2PrefetchKBlocks > 0) {
    const WorkRange work = sched.work();
    if (work.first >= sched.num_tiles) return;
    const int n0 = sched.tile(work.first).n0;
    const int kb_end = min_int(work.kb_end, work.kb_begin + Cfg::kL2PrefetchKBlocks);
    for (int kb = work.kb_begin; kb < kb_end; ++kb) {
      ptx::tma_prefetch_2d_l2(tma_b, kb * Cfg::kBlockK, n0);
      if constexpr (Cfg::kMulticastB) ptx::tma_prefetch_2d_l2(tma_b, kb * Cfg::kBlockK, n0 + Cfg::kBlockN / 2);
    }
  }
}

/// The producer thread's loop: for every k-block of every tile of this CTA, wait for the stage to
/// be free, arm its full barrier with the stage's bytes and issue its TMA loads (the family adds
/// its scale loads before and after the operands). `group_maps`: kKGroupedBlocks' per-group maps
/// of A and B (kernels/k_grouped_maps.cuh), used instead of tma_a and tma_b.
template <class Family, class Cfg = typename Family::Cfg>
DT_DEVICE void producer_loop(const SharedStorage<Cfg>& smem, const TmaDescriptor* tma_a, const TmaDescriptor* tma_b,
                             const TmaDescriptor* tma_a_scale, const float* b_scale, const Scheduler<Cfg>& sched,
                             const TmaDescriptor* tma_b_scale, const TmaDescriptor* tma_d,
                             const TmaDescriptor* group_maps = nullptr) {
  const u32 rank = Cfg::kNumMulticast == 2 ? ptx::cluster_cta_rank() : 0;
  const u32 stage_tx_bytes = sched.stage_tx_bytes();
  const WorkRange work = sched.work();
  // Under kEvictFirstB the weight stream (B) recycles its own L2 lines instead of evicting others,
  // and A, which every tile of the wave re-reads, stays (a_scale loads stay plain). When it pays
  // (measured): deep_tile/select/selector.py streams_b.
  const u64 policy_a = Cfg::kEvictFirstB ? ptx::l2_policy_evict_last() : 0;
  const u64 policy_b = Cfg::kEvictFirstB ? ptx::l2_policy_evict_first() : 0;
  PipelineState<Cfg::kNumStages> state;
  int acquired_group = -1;  // kKGroupedBlocks: the group whose maps this thread acquired last
  auto ahead = sched.load_ahead(work.first);
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = sched.tile(index, ahead);
    ahead = sched.load_ahead(index + work.step);
    if (!sched.has_work(tile)) continue;
    // B stacks one [n, k] matrix per expert (the K-grouped kind's groups share one B)
    const int b_row0 = Cfg::kKGrouped ? tile.n0 : tile.expert * sched.n + tile.n0;
    using TileScales = typename Family::TileScales;
    const TileScales tile_scales = TileScales::template of<Cfg>(b_scale, tile.expert, tile.n0, sched.n, sched.num_k_blocks);
    const KBlocks k_blocks = Family::k_blocks(sched, tile, work);
    const int kb_begin = k_blocks.begin, kb_end = k_blocks.end;
    const TmaDescriptor* map_a = tma_a;
    const TmaDescriptor* map_b = tma_b;
    int k_origin = 0;  // the K coordinate of the maps' column 0
    if constexpr (Cfg::kKGroupedBlocks) {
      map_a = group_maps + 2 * tile.expert;
      map_b = map_a + 1;
      k_origin = sched.k_origin(tile);
      // the maps were written by the stream predecessor through the generic proxy (tensormap.replace)
      if (tile.expert != acquired_group && kb_begin < kb_end) {
        ptx::tensormap_acquire(map_a);
        ptx::tensormap_acquire(map_b);
        acquired_group = tile.expert;
      }
    }
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      ptx::mbarrier_wait(&smem.empty[state.index], state.empty_parity());
      if constexpr (Cfg::kTileSlots) {
        if (kb == kb_begin) TileSlot::write<Cfg>(smem.tile_slot(state.index), tile);
      }
      u64* full = &smem.full[state.index];
      Family::before_stage_loads(smem, state.index, full, tile_scales, kb);
      // NOTES: the byte count is the same for every stage of a launch (Scheduler::stage_tx_bytes);
      // a multicast half from the peer completes on this barrier too.
      ptx::mbarrier_arrive_expect_tx(full, stage_tx_bytes);
      const int k0 = kb * Cfg::kBlockK;
      if constexpr (Cfg::kHeadStrided) {
        // group e's rows are rows m0 - e * m of A's [m, G * K] view, from column e * K (K whole blocks)
        const int row0 = tile.m0 - tile.expert * sched.m;
        load_operand<Cfg::kMulticastA, Cfg::kBlockM, Cfg::kEvictFirstB>(
            smem.a + state.index * Cfg::kTileABytes, map_a, full, tile.expert * sched.num_k_blocks * Cfg::kBlockK + k0,
            row0, tile.multicast, rank, policy_a);
      } else {
        // kKGroupedBlocks: a group's first k-block may start before its block (negative, zero-filled)
        load_operand<Cfg::kMulticastA, Cfg::kBlockM, Cfg::kEvictFirstB>(
            smem.a + state.index * Cfg::kTileABytes, map_a, full, k0 - k_origin, tile.m0, tile.multicast, rank,
            policy_a);
      }
      load_operand<Cfg::kMulticastB, Cfg::kBlockN, Cfg::kEvictFirstB>(
          smem.b + state.index * Cfg::kTileBBytes, map_b, full, k0 - k_origin, b_row0, tile.multicast, rank, policy_b);
      float* a_scale = smem.a_scale + state.index * Cfg::kBlockM * Cfg::kAScaleCols;
      if constexpr (Cfg::kHeadStrided) {  // the [m, G * K blocks] view: group e's scales from column e * K blocks
        ptx::tma_load_2d(a_scale, tma_a_scale, full, tile.expert * sched.num_k_blocks + (kb & ~3),
                         tile.m0 - tile.expert * sched.m);
      } else if constexpr (Cfg::kAScaleRowMajor) {
        ptx::tma_load_2d(a_scale, tma_a_scale, full, kb & ~3, tile.m0);  // [block_m][4 K blocks]
      } else {
        // [block_m] of K block kb (the masked kind's map has a row per expert and K block)
        ptx::tma_load_2d(a_scale, tma_a_scale, full, sched.a_scale_row(tile), sched.a_scale_kb0(tile) + kb);
      }
      Family::after_stage_loads(smem, state, full, tile, sched, kb, kb_begin, kb_end, tma_b_scale, tma_d);
      state.advance();
    }
  }
}

}  // namespace deep_tile
