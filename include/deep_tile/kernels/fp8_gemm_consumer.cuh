// The consumers of the FP8 GEMM: each consumer warpgroup walks this CTA's tiles, runs the family's
// k-loop of each into its FP32 result and hands the result to the config's store.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/debug/trace.cuh"
#include "deep_tile/epilogue/completion_signals.cuh"
#include "deep_tile/epilogue/tile_store.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/mainloop/stage_release.cuh"
#include "deep_tile/mainloop/two_buffer_k_loop.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The consumers' tile `index`: from the slot of its first stage once that stage is full
/// (Cfg::kTileSlots: the producer decoded it, and the k-loop's own wait for the stage then passes
/// at once), else decoded here.
/// NOTES: decoding the psum kind's tile() between two k-loops made it slower than the dense kind on the
/// same tiles; the slot moves that work to the producer, off the consumers' path.
template <class Cfg, class Ahead>
DT_DEVICE Tile<Cfg> tile_of(const ConsumerContext<Cfg>& ctx, const Scheduler<Cfg>& sched, int index, const Ahead& ahead,
                            const PipelineState<Cfg::kNumStages>& first_stage) {
  if constexpr (Cfg::kTileSlots) {
    ptx::mbarrier_wait(&ctx.smem.full[first_stage.index], first_stage.full_parity());
    return TileSlot::read<Cfg>(ctx.smem.tile_slot(first_stage.index), ctx.lane, own_release_lane<Cfg>(ctx.rank));
  } else {
    return sched.tile(index, ahead);
  }
}

/// Runs every tile of this CTA; the persistent kernel stores each, the split-K kernel leaves its
/// one tile's partial in `result` for the cluster reduction.
template <class Family, class Cfg = typename Family::Cfg>
DT_DEVICE void consumer_loop(const SharedStorage<Cfg>& smem, const TmaDescriptor* tma_d, const float* b_scale,
                             const Scheduler<Cfg>& sched, float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile],
                             u8* d, int ldd, const u8* c, int ldc) {
  // NOTES: broadcast so ptxas knows the warpgroup index is warp-uniform and keeps the WGMMA
  // descriptors derived from it in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int thread_in_wg = threadIdx.x % 128;
  const ConsumerContext<Cfg> ctx{
      smem,
      // Descriptor words of stage 0; every other (stage, slab, part, k-slice) is a byte offset away.
      ptx::sw128_lo(ptx::smem_addr(smem.a + wg * Cfg::kWgM * Cfg::kBlockK)),
      ptx::sw128_lo(ptx::smem_addr(smem.b)),
      wg, thread_in_wg / 32, static_cast<int>(threadIdx.x % 32),
      Cfg::kNumMulticast == 2 ? ptx::cluster_cta_rank() : 0u};
  const WorkRange work = sched.work();
  const int n = sched.n, num_k_blocks = sched.num_k_blocks;
  PipelineState<Cfg::kNumStages> issue_state, release_state;
  TileStoreFor<Cfg> store;

  // NOTES: a grouped kind's tile() may read global memory (the contiguous kind's m_indices): loaded one
  // tile ahead, those loads fly during this tile's k-loop instead of stalling the next tile's start.
  auto ahead = sched.load_ahead(work.first);
  if constexpr (trace::kEnabled) {
    if (threadIdx.x == 0 && work.first < sched.num_tiles) {
      ptx::mbarrier_wait(&smem.full[0], 0);  // the first stage's data (the k-loop waits for it next)
      trace::stamp<trace::kFirstData>();
    }
  }
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = tile_of<Cfg>(ctx, sched, index, ahead, issue_state);
    ahead = sched.load_ahead(index + work.step);
    if (!sched.has_work(tile)) continue;
    // Grouped kinds: this thread's row of its warpgroup's slab, and what decides whether it is
    // stored (row_tag: loaded before the k-loop, judged after it).
    const int row = tile.m0 + wg * Cfg::kWgM + thread_in_wg;
    int row_tag = 0;
    if constexpr (Cfg::kGrouped) row_tag = sched.row_tag(row);
    using TileScales = typename Family::TileScales;
    const TileScales tile_scales = TileScales::template of<Cfg>(b_scale, tile.expert, tile.n0, n, num_k_blocks);
    // With Cfg::kLoopSetsResult (the contiguous, offsets and psum kinds) the tile's one k-loop run
    // sets the result; otherwise the runs add to it from zero (the K-grouped kind's up to three,
    // run_k_grouped_tile; a split-K rank's share, which may be empty).
    if constexpr (!Cfg::kLoopSetsResult) zero_result<Cfg>(result);
    const auto tile_k = Family::tile_k_range(sched, tile);
    if constexpr (Family::kSkipsEmptyTiles) {
      if (tile_k.kb_begin >= tile_k.kb_end) continue;  // nothing to run or store
    }
    const int tile_k_blocks =
        Family::run_tile(ctx, tile, work, tile_scales, tile_k, issue_state, release_state, result);
    bool row_real = false;
    if constexpr (Cfg::kGrouped) row_real = thread_in_wg < Cfg::kWgM && sched.row_is_real(tile, row, row_tag);
    // NOTES: built per tile: held across the k-loop, it changed the staged epilogue's register allocation.
    const StoreArgs<Cfg> out{smem.d, smem.epilogue, tma_d, d, ldd, c, ldc, sched.m, n, wg, thread_in_wg};
    store.store(out, result, tile, row_real, index == work.first, tile_k_blocks);
  }
  trace::stamp_if<trace::kLoopDone>(threadIdx.x == 0);
  store.finish(thread_in_wg);
  SignalsFor<Cfg>::after_last_tile(sched, wg, thread_in_wg);
}

}  // namespace deep_tile
