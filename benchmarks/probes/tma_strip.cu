// A probe for benchmarks/probes/chain_floor.py (--tma-strips): the GEMM's stream of B through TMA without
// the GEMM. CTA c owns rows [c * BOX_ROWS, (c + 1) * BOX_ROWS) of an N x K byte matrix (a 2-D
// tensor map with 128 x BOX_ROWS boxes, 128B swizzle, as deep_tile's B map) and one thread walks
// them through K, one box per 128-byte column, TMA_DEPTH boxes in flight in a ring of shared-memory
// slots, each slot's full barrier re-armed as soon as its box has landed: what one producer thread
// and TMA deliver when nothing else waits. Nothing reads the boxes. One warp per CTA.
// SMALL_BOXES > 0 adds that many one-row boxes (`small`, 128 x 1, no swizzle: rows 0, 1, ... of the
// same matrix) to each slot, as deep_tile's A and a_scale boxes sit beside B at M = 1: what each
// extra box costs the stream (RESULTS.md, 2026-11-24 'The k-loop's cost per k-block, and swap-AB for
// M <= 16').
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"

#ifndef TMA_DEPTH
#define TMA_DEPTH 13
#endif
#ifndef BOX_ROWS
#define BOX_ROWS 64
#endif
#ifndef SMALL_BOXES
#define SMALL_BOXES 0
#endif

using namespace deep_tile;

extern "C" __global__ void __launch_bounds__(32) deep_tile_tma_strip(const __grid_constant__ TmaDescriptor desc,
                                                                    int k_blocks,
                                                                    const __grid_constant__ TmaDescriptor small) {
  extern __shared__ __align__(1024) u8 slots[];
  __shared__ __align__(128) u8 small_slots[TMA_DEPTH][SMALL_BOXES > 0 ? SMALL_BOXES : 1][128];
  __shared__ u64 full[TMA_DEPTH];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < TMA_DEPTH; ++i) ptx::mbarrier_init(&full[i], 1);
  ptx::fence_barrier_init();
  const int row0 = blockIdx.x * BOX_ROWS;
  constexpr u32 kBoxBytes = 128 * BOX_ROWS;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int slot = kb % TMA_DEPTH;
    if (kb >= TMA_DEPTH) ptx::mbarrier_wait(&full[slot], ((kb / TMA_DEPTH) - 1) & 1);
    ptx::mbarrier_arrive_expect_tx(&full[slot], kBoxBytes + SMALL_BOXES * 128);
    for (int s = 0; s < SMALL_BOXES; ++s) ptx::tma_load_2d(small_slots[slot][s], &small, &full[slot], kb * 128, s);
    ptx::tma_load_2d(slots + slot * kBoxBytes, &desc, &full[slot], kb * 128, row0);
  }
  for (int kb = k_blocks > TMA_DEPTH ? k_blocks - TMA_DEPTH : 0; kb < k_blocks; ++kb)
    ptx::mbarrier_wait(&full[kb % TMA_DEPTH], (kb / TMA_DEPTH) & 1);
}
