// The K-grouped kind's k-loop of one tile (MoE weight gradients): the tile's group owns a K range
// that need not start or end on a 128-wide K block, so its partial first and last k-blocks have
// the other groups' columns zeroed in the stage before they run (run_masked_k_block).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/mainloop/run_tile_mainloop.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// Named barrier of the consumer warpgroups around a K-grouped stage's zeroing (1 and 2: the
/// epilogue's per-warpgroup barriers; 3: split-K's; 4-7: the signalling masked kernel's hand-off).
constexpr u32 kKMaskBarrier = 8;

/// The bytes kept of the 4 at K columns b0.. of a stage row: those in [lo, hi), as a mask.
DT_DEVICE u32 k_keep_mask(int b0, int lo, int hi) {
  u32 mask = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) mask |= (b0 + i >= lo && b0 + i < hi) ? 0xffu << (8 * i) : 0u;
  return mask;
}

/// Zero the K columns outside [lo, hi) of the `rows` 128-byte rows (128B-swizzled: chunk c of row
/// r at chunk c ^ (r % 8)) of one operand's stage, rows shared among the consumer threads.
template <class Cfg>
DT_DEVICE void zero_k_columns(u8* stage, int rows, int lo, int hi, int thread) {
#pragma unroll 1
  for (int r = thread; r < rows; r += Cfg::kNumMathThreads) {
#pragma unroll
    for (int c = 0; c < Cfg::kBlockK / 16; ++c) {
      const int b0 = 16 * c;
      if (b0 >= lo && b0 + 16 <= hi) continue;  // all kept
      uint4* chunk = reinterpret_cast<uint4*>(stage + r * Cfg::kBlockK + ((c ^ (r % 8)) << 4));
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (b0 + 16 > lo && b0 < hi) {  // some kept
        v = *chunk;
        v.x &= k_keep_mask(b0, lo, hi), v.y &= k_keep_mask(b0 + 4, lo, hi);
        v.z &= k_keep_mask(b0 + 8, lo, hi), v.w &= k_keep_mask(b0 + 12, lo, hi);
      }
      *chunk = v;
    }
  }
}

/// kKGrouped: one k-block of which only columns [lo, hi) belong to the tile's group (its first or
/// last; the others are the neighbouring groups' tokens, or past K): wait for the stage, zero the
/// other columns of A and B there (both: a NaN in a neighbour's tokens must not reach this group
/// through 0 * NaN), make the writes visible to the tensor cores (async proxy), then run it.
template <class Cfg>
DT_DEVICE void run_masked_k_block(const ConsumerContext<Cfg>& ctx, PipelineState<Cfg::kNumStages>& issue_state,
                                  PipelineState<Cfg::kNumStages>& release_state,
                                  float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int kb, int lo, int hi,
                                  bool peer_alive, int tile_k_blocks) {
  const int stage = issue_state.index;
  ptx::mbarrier_wait(&ctx.smem.full[stage], issue_state.full_parity());
  const int thread = ctx.wg * 128 + ctx.warp_in_wg * 32 + ctx.lane;
  zero_k_columns<Cfg>(ctx.smem.a + stage * Cfg::kTileABytes, Cfg::kBlockM, lo, hi, thread);
  zero_k_columns<Cfg>(ctx.smem.b + stage * Cfg::kTileBBytes, Cfg::kBlockN, lo, hi, thread);
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(kKMaskBarrier, Cfg::kNumMathThreads);
  const RunTileMainloop<Cfg> step{ctx,    issue_state, release_state, result,    nullptr,
                                  nullptr, kb,          kb + 1,        peer_alive, tile_k_blocks};
  step(IntConstant<Cfg::kBlockN / 8>{});
}

/// kKGrouped: a tile's k-loop over its group's K range: a partial first and last k-block masked
/// (run_masked_k_block), the whole ones between them in one run.
/// NOTES: the masked blocks run apart from the whole ones, so the k-loop of the whole ones has no
/// branch of its own (ptxas serialises WGMMAs across data-dependent branches, TileMainloop).
template <class Cfg>
DT_DEVICE void run_k_grouped_tile(const ConsumerContext<Cfg>& ctx, PipelineState<Cfg::kNumStages>& issue_state,
                                  PipelineState<Cfg::kNumStages>& release_state,
                                  float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], const KRange& range,
                                  bool peer_alive) {
  if (range.kb_begin >= range.kb_end) return;
  const int tile_k_blocks = range.kb_end - range.kb_begin;
  const int first_whole = range.kb_begin + (range.lo > 0 ? 1 : 0);
  const int end_whole = range.kb_end - (range.hi < Cfg::kBlockK ? 1 : 0);
  if (range.lo > 0) {
    run_masked_k_block<Cfg>(ctx, issue_state, release_state, result, range.kb_begin, range.lo,
                            tile_k_blocks == 1 ? range.hi : Cfg::kBlockK, peer_alive, tile_k_blocks);
  }
  if (first_whole < end_whole) {
    const RunTileMainloop<Cfg> whole{ctx,         issue_state, release_state, result,       nullptr,
                                     nullptr,     first_whole, end_whole,     peer_alive,   tile_k_blocks};
    whole(IntConstant<Cfg::kBlockN / 8>{});
  }
  if (range.hi < Cfg::kBlockK && range.kb_end - 1 >= first_whole) {
    run_masked_k_block<Cfg>(ctx, issue_state, release_state, result, range.kb_end - 1, 0, range.hi, peer_alive,
                            tile_k_blocks);
  }
}

}  // namespace deep_tile
