// FP8 GEMM with DeepSeek-V3 fine-grained scaling for sm_90a:
//   D[M, N] (bf16) = (A[M, K] * a_scale[M, K/128]) @ (B[N, K] * b_scale[N/128, K/128])^T
// or, in the output variants of Fp8GemmConfig (kOutKind, kCKind), D in FP32 and/or D = C + that.
//
// One producer warpgroup (one thread issues TMA into a ring of shared-memory stages) and one or
// two consumer warpgroups (WGMMA from shared memory, FP32 promotion of each 128-wide K block with
// its scales; fp8_gemm_mainloop.cuh). Two kinds of launch share this body:
//   - persistent (kSplitK == 1): each CTA walks tiles of a raster order and stores each through
//     shared memory and TMA; optionally clusters of 2 CTAs multicast the shared A or B tile;
//   - split-K (kSplitK > 1): one tile per cluster of kSplitK CTAs, each CTA a range of K blocks,
//     the FP32 partials reduced in rank order through distributed shared memory.
// Which tiles, their origins and real rows, and the multicast pairing come from the tile
// scheduler of the problem's kind (scheduler/tile_scheduler.cuh); this body knows no more of them.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/debug/trace.cuh"
#include "deep_tile/epilogue/splitk_reduce.cuh"
#include "deep_tile/epilogue/store_bf16.cuh"
#include "deep_tile/epilogue/store_direct.cuh"
#include "deep_tile/epilogue/store_staged.cuh"
#include "deep_tile/kernels/fp8_gemm_config.cuh"
#include "deep_tile/kernels/fp8_gemm_mainloop.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"
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

template <class Cfg>
DT_DEVICE void producer_loop(const SharedStorage<Cfg>& smem, const TmaDescriptor* tma_a, const TmaDescriptor* tma_b,
                             const TmaDescriptor* tma_a_scale, const float* b_scale, const Scheduler<Cfg>& sched,
                             const TmaDescriptor* tma_b_scale, const TmaDescriptor* tma_d) {
  const u32 rank = Cfg::kNumMulticast == 2 ? ptx::cluster_cta_rank() : 0;
  const u32 stage_tx_bytes = sched.stage_tx_bytes();
  const WorkRange work = sched.work();
  // Under kEvictFirstB the weight stream (B) recycles its own L2 lines instead of evicting others,
  // and A, which every tile of the wave re-reads, stays (a_scale loads stay plain). When it pays
  // (measured): deep_tile/select/selector.py streams_b.
  const u64 policy_a = Cfg::kEvictFirstB ? ptx::l2_policy_evict_last() : 0;
  const u64 policy_b = Cfg::kEvictFirstB ? ptx::l2_policy_evict_first() : 0;
  PipelineState<Cfg::kNumStages> state;
  auto ahead = sched.load_ahead(work.first);
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = sched.tile(index, ahead);
    ahead = sched.load_ahead(index + work.step);
    if (!sched.has_work(tile)) continue;
    // B stacks one [n, k] matrix per expert (the K-grouped kind's groups share one B)
    const int b_row0 = Cfg::kKGrouped ? tile.n0 : tile.expert * sched.n + tile.n0;
    const TileBScaleRows b_rows = TileBScaleRows::of<Cfg>(b_scale, tile.expert, tile.n0, sched.n, sched.num_k_blocks);
    int kb_begin = work.kb_begin, kb_end = work.kb_end;
    if constexpr (Cfg::kKGrouped) {  // the tile's group's k-blocks
      const KRange range = sched.k_range(tile);
      kb_begin = range.kb_begin, kb_end = range.kb_end;
    }
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      ptx::mbarrier_wait(&smem.empty[state.index], state.empty_parity());
      if constexpr (Cfg::kTileSlots) {
        if (kb == kb_begin) TileSlot::write<Cfg>(smem.tile_slot(state.index), tile);
      }
      u64* full = &smem.full[state.index];
      if constexpr (Cfg::kBScaleStaged) stage_b_scales(smem.b_scale + state.index * 2, full, b_rows, kb);
      // NOTES: the byte count is the same for every stage of a launch (Scheduler::stage_tx_bytes);
      // a multicast half from the peer completes on this barrier too.
      ptx::mbarrier_arrive_expect_tx(full, stage_tx_bytes);
      const int k0 = kb * Cfg::kBlockK;
      load_operand<Cfg::kMulticastA, Cfg::kBlockM, Cfg::kEvictFirstB>(
          smem.a + state.index * Cfg::kTileABytes, tma_a, full, k0, tile.m0, tile.multicast, rank, policy_a);
      load_operand<Cfg::kMulticastB, Cfg::kBlockN, Cfg::kEvictFirstB>(
          smem.b + state.index * Cfg::kTileBBytes, tma_b, full, k0, b_row0, tile.multicast, rank, policy_b);
      float* a_scale = smem.a_scale + state.index * Cfg::kBlockM * Cfg::kAScaleCols;
      if constexpr (Cfg::kAScaleRowMajor) {
        ptx::tma_load_2d(a_scale, tma_a_scale, full, kb & ~3, tile.m0);  // [block_m][4 K blocks]
      } else {
        // [block_m] of K block kb (the masked kind's map has a row per expert and K block)
        ptx::tma_load_2d(a_scale, tma_a_scale, full, sched.a_scale_row(tile), sched.a_scale_kb0(tile) + kb);
      }
      if constexpr (Cfg::kBScale1D) {  // [block_n] of K block kb
        ptx::tma_load_2d(smem.b_scale + b_scale_slot<Cfg>(state) * Cfg::kBScalePitch, tma_b_scale, full, tile.n0, kb);
      }
      if constexpr (Cfg::kPrefetchDMaxKBlocks > 0) {  // the reduce-add's D, asked of L2 ahead
        const bool ahead = kb == max_int(kb_begin, kb_end - 1 - Cfg::kPrefetchDAhead);
        if (ahead && kb_end - kb_begin <= Cfg::kPrefetchDMaxKBlocks) {
#pragma unroll
          for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
            prefetch_d_first_subtile<Cfg>(tma_d, wg, tile.m0, tile.n0, tile.m_end, sched.n);
          }
        }
      }
      state.advance();
    }
  }
}

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
template <class Cfg>
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
  u32 ready_phase = 0;  // kStagedEpilogue: this warpgroup's parity of its staging's `ready` barrier

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
    const int n0 = tile.n0;
    // Grouped kinds: this thread's row of its warpgroup's slab, and what decides whether it is
    // stored (row_tag: loaded before the k-loop, judged after it).
    const int row = tile.m0 + wg * Cfg::kWgM + thread_in_wg;
    int row_tag = 0;
    if constexpr (Cfg::kGrouped) row_tag = sched.row_tag(row);

    const TileBScaleRows b_rows = TileBScaleRows::of<Cfg>(b_scale, tile.expert, n0, n, num_k_blocks);

    // With Cfg::kLoopSetsResult (the contiguous, offsets and psum kinds) the tile's one k-loop run
    // sets the result; otherwise the runs add to it from zero (the K-grouped kind's up to three,
    // run_k_grouped_tile; a split-K rank's share, which may be empty).
    if constexpr (!Cfg::kLoopSetsResult) zero_result<Cfg>(result);

    int tile_k_blocks = 0;  // kKGrouped: this tile's k-blocks (its group's K range)
    if constexpr (Cfg::kKGrouped) {
      const KRange range = sched.k_range(tile);
      tile_k_blocks = range.kb_end - range.kb_begin;
      // An empty group accumulated in place leaves D[g] as it is: nothing to store.
      if (Cfg::kCKind == 3 && range.kb_begin >= range.kb_end) continue;
      run_k_grouped_tile<Cfg>(ctx, issue_state, release_state, result, range, tile.peer_alive);
    } else {
      const RunTileMainloop<Cfg, Cfg::kLoopSetsResult> mainloop{
          ctx,           issue_state, release_state,   result, b_rows.row0, b_rows.row1,
          work.kb_begin, work.kb_end, tile.peer_alive, /*tile_k_blocks (K-grouped only)=*/0};
      if constexpr (Cfg::kBScale1D) {
        mainloop(IntConstant<Cfg::kBlockN / 8>{});  // no b_scale rows to straddle
      } else {
        dispatch_first_blocks<Cfg>(b_rows.first_blocks, mainloop);
      }
    }

    if constexpr (Cfg::kSplitK == 1) {
      bool row_real = false;
      if constexpr (Cfg::kGrouped) row_real = thread_in_wg < Cfg::kWgM && sched.row_is_real(tile, row, row_tag);
      if constexpr (Cfg::kTmaF32Store) {
        store_tile_f32_tma<Cfg>(smem.d, tma_d, result, wg, thread_in_wg, tile.m0, n0, tile.m_end, n);
      } else if constexpr (Cfg::kStagedEpilogue) {
        add_to_staging<Cfg>(smem.d, StagedBarriers<Cfg>{smem.epilogue}, result, wg, thread_in_wg, tile.m0, tile.m_end,
                            tile_k_blocks, ready_phase);
      } else if constexpr (Cfg::kKGrouped) {  // into D[g] (and from C[g]): rows g * m on
        const long long rows_before = static_cast<long long>(tile.expert) * sched.m;
        store_tile_direct<Cfg>(result, wg, thread_in_wg, tile.m0, n0, tile.m_end, n, row_real,
                               d + rows_before * ldd * (Cfg::kOutKind == 1 ? 4 : 2), ldd,
                               c + rows_before * ldc * (Cfg::kCType == 2 ? 4 : 2), ldc);
      } else if constexpr (Cfg::kDirectStore && Cfg::kSwapAB) {
        store_tile_swapped_direct<Cfg>(result, thread_in_wg, tile.m0, n0, tile.m_end, n, d, ldd, c, ldc);
      } else if constexpr (Cfg::kDirectStore) {
        store_tile_direct<Cfg>(result, wg, thread_in_wg, tile.m0, n0, tile.m_end, n, row_real, d, ldd, c, ldc);
      } else if constexpr (Cfg::kSwapAB) {
        store_tile_swapped<Cfg>(result, thread_in_wg, tile.m0, n0, tile.m_end, n, d, ldd);
      } else if constexpr (Cfg::kSignal == 2) {
        store_tile_bf16<Cfg>(smem.d, tma_d, result, wg, thread_in_wg, tile.m0, n0, tile.m_end, n, row_real, d, ldd,
                             index == work.first ? -1 : 0);
      } else {
        store_tile_bf16<Cfg>(smem.d, tma_d, result, wg, thread_in_wg, tile.m0, n0, tile.m_end, n, row_real, d, ldd);
      }
    }
  }
  trace::stamp_if<trace::kLoopDone>(threadIdx.x == 0);
  if constexpr (Cfg::kSplitK == 1 && (!Cfg::kDirectStore || Cfg::kTmaF32Store)) {
    if (thread_in_wg == 0) ptx::tma_store_wait_all();
  }
  if constexpr (Cfg::kSignal == 2) {
    if (work.first < sched.num_tiles) {
      ptx::named_barrier_sync(1 + wg, 128);  // the last tile's direct stores, before the hand-off
      SignalHandOff::pass(wg, thread_in_wg);
    }
    SignalHandOff::finish(wg);
  }
}

/// Cfg::kSignal == 2: the signal warp (one warp of the producer warpgroup) raises the counter of each
/// consumer warpgroup's slab of each of this CTA's tiles, in the consumers' order, as each is
/// handed off (SignalHandOff); a slab with no real row is handed off and not raised.
template <class Cfg>
DT_DEVICE void signal_loop(const Scheduler<Cfg>& sched, int* counters, int group_rows, int lane) {
  using HandOff = SignalHandOff;
#pragma unroll
  for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) ptx::named_barrier_arrive(HandOff::kDone + wg, HandOff::kThreads);
  const WorkRange work = sched.work();
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = sched.tile(index);
    if (!sched.has_work(tile)) continue;
#pragma unroll
    for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
      ptx::named_barrier_sync(HandOff::kReady + wg, HandOff::kThreads);
      const int row0 = tile.m0 + wg * Cfg::kWgM;
      if (lane == 0 && row0 < tile.m_end) SignalCounters::raise_at<Cfg::kWgM>(counters, group_rows, row0);
      __syncwarp();
      ptx::named_barrier_arrive(HandOff::kDone + wg, HandOff::kThreads);
    }
  }
}

/// The kernel body; csrc/entry/fp8_gemm_sm90.cu wraps it in an extern "C" __global__ symbol.
/// `d`/`ldd` (the output and its row pitch in elements) serve the split-K epilogue and the
/// grouped kinds' partial tiles; the persistent one stores through `tma_d`. `group` describes a
/// grouped problem (Cfg::kProblemKind; unused when dense). The direct-store variants
/// (Cfg::kDirectStore: FP32 D and/or C) store through `d` only, adding C (`c`, row pitch `ldc`
/// elements, possibly `d` itself) when Cfg::kCKind says there is one.
/// `signal`: the completion counters of the signalling masked kernel (Cfg::kSignal; unused otherwise).
template <class Cfg>
DT_DEVICE void fp8_gemm_sm90(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b, const TmaDescriptor& tma_a_scale,
                             const TmaDescriptor& tma_d, const float* b_scale, u8* d, int ldd, int m, int n, int k,
                             int raster_width, const GroupArgs& group = GroupArgs{nullptr, 1, 0},
                             const u8* c = nullptr, int ldc = 0, const TmaDescriptor* tma_b_scale = nullptr,
                             int* signal = nullptr) {
  extern __shared__ __align__(1024) u8 dynamic_smem[];
  const SharedStorage<Cfg> smem(dynamic_smem);
  Scheduler<Cfg> sched(m, n, k, raster_width, group, smem.group_table);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == Cfg::kNumMathThreads) {
    trace::stamp<trace::kEntry>();
    ptx::tma_prefetch_descriptor(&tma_a);
    ptx::tma_prefetch_descriptor(&tma_b);
    ptx::tma_prefetch_descriptor(&tma_a_scale);
    if constexpr (Cfg::kBScale1D) ptx::tma_prefetch_descriptor(tma_b_scale);
    if constexpr (Cfg::kSplitK == 1 && (!Cfg::kDirectStore || Cfg::kTmaF32Store || Cfg::kStagedEpilogue)) {
      ptx::tma_prefetch_descriptor(&tma_d);
    }
#pragma unroll
    for (int s = 0; s < Cfg::kNumStages; ++s) {
      // The producer's arrive (with the stage's TMA bytes), and with kBScaleStaged its b_scale copies'.
      ptx::mbarrier_init(&smem.full[s], Cfg::kBScaleStaged ? 2 : 1);
      ptx::mbarrier_init(&smem.empty[s], Cfg::kNumMathWarps * Cfg::kReleasesPerWarp * Cfg::kNumMulticast);
    }
    if constexpr (Cfg::kStagedEpilogue) StagedBarriers<Cfg>{smem.epilogue}.init();
    ptx::fence_barrier_init();
    ptx::fence_proxy_async_shared();
    prefetch_first_weights<Cfg>(&tma_b, sched);
  }
  // NOTES (programmatic dependent launch): the stream predecessor may still run, and may write
  // anything this kernel reads (A, the scales, B, the group metadata) or read what it writes (D):
  // every thread waits here, after the set-up that touches no global memory (tensor maps, the
  // barriers, the scheduler's arithmetic, L2 prefetches) and before its first global access.
  ptx::grid_dependency_wait();
  trace::stamp_if<trace::kWaited>(threadIdx.x == Cfg::kNumMathThreads);
  if constexpr (has_group_table(Cfg::kProblemKind)) {
    // The producer warpgroup's second warp builds the expert table while the first inits barriers.
    if (threadIdx.x / 32 == Cfg::kNumMathWarps + 1) {
      if constexpr (Cfg::kKGrouped) {
        GroupTable(smem.group_table).build_k_ranges(group, k, threadIdx.x % 32);
      } else {
        GroupTable(smem.group_table).build<Cfg::kProblemKind, Cfg::kBlockM>(group, m, threadIdx.x % 32);
        // NOTES: mode 2's signal warp takes the counters from the kernel parameter instead: published
        // here, they made ptxas move the consumers' WGMMA descriptors out of uniform registers (slower).
        if constexpr (Cfg::kSignal == 1) {
          if (threadIdx.x % 32 == 0) SignalCounters::publish(smem.group_table, signal, group.group_rows);
        }
      }
    }
  }
  // Barriers (and the expert table) must be initialised everywhere before any local, remote or
  // TMA use.
  if constexpr (Cfg::kNumMulticast == 2) {
    ptx::cluster_sync();
  } else {
    __syncthreads();
  }
  if constexpr (has_group_table(Cfg::kProblemKind)) sched.read_table();

  // NOTES (split-K): every thread of both roles takes part in both cluster barriers (they count
  // all threads): the first publishes the partials cluster-wide, the second keeps each CTA's
  // shared memory alive until its peers have read it (relaxed: the reads have returned, their
  // values were summed and stored, before a thread arrives). Each role passes them in its own
  // branch: after the branches merge, ptxas holds the code to the producer's register count, and
  // the reduction spilled there.
  float result[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile];  // FP32 sums of the scaled partial sums
  if (wg == Cfg::kNumMathWarpgroups) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x == Cfg::kNumMathThreads) {
      producer_loop<Cfg>(smem, &tma_a, &tma_b, &tma_a_scale, b_scale, sched, tma_b_scale, &tma_d);
      trace::stamp<trace::kLastIssue>();
      // Every load of this CTA is issued: the dependent grid may start its own set-up on the SMs
      // this grid leaves free (its wait still waits for this grid to complete).
      // NOTES: in decode chains, triggering right after the wait instead was no faster, and never
      // triggering (the dependent starts when this grid completes) was as slow as no PDL at all.
      ptx::launch_dependents();
    } else if constexpr (Cfg::kSignal == 2) {
      if (threadIdx.x / 32 == Cfg::kNumMathWarps + 2) signal_loop<Cfg>(sched, signal, group.group_rows, threadIdx.x % 32);
    } else if constexpr (Cfg::kStagedEpilogue) {
      // The third warp's first lane (the second warp builds the group table before the first barrier).
      if (threadIdx.x == Cfg::kNumMathThreads + 64) storer_loop<Cfg>(smem.d, StagedBarriers<Cfg>{smem.epilogue}, &tma_d, sched);
    }
    if constexpr (Cfg::kSplitK > 1) {
      ptx::cluster_sync();
      ptx::cluster_sync_relaxed();
    }
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegisters>();
    consumer_loop<Cfg>(smem, &tma_d, b_scale, sched, result, d, ldd, c, ldc);
    if constexpr (Cfg::kSplitK > 1) {
      // Every consumer WGMMA has read its last stage before the partial overwrites the stages
      // (named barrier 3: 1 and 2 belong to the persistent epilogue's warpgroups).
      ptx::named_barrier_sync(3, Cfg::kNumMathThreads);
      ptx::fence_proxy_async_shared();
      write_partial<Cfg>(smem.partial(), result, wg, threadIdx.x % 128);
      // NOTES: the release at cluster scope compiles to MEMBAR.ALL.GPU, most of the barrier's cost; a
      // CTA-scope fence before a relaxed arrive is cheaper but not enough for the PTX memory model.
      // Partials sent through the async proxy (st.async / cp.async.bulk) avoid it, but did not shorten
      // the decode chain (docs/performance.md, 'What was tried and did not pay').
      ptx::cluster_sync();
      trace::stamp_if<trace::kPublished>(threadIdx.x == 0);
      const int index = sched.first_tile();  // the cluster's one tile
      if (index < sched.num_tiles) {
        const Tile<Cfg> tile = sched.tile(index);
        reduce_partials_and_store<Cfg>(smem.partial(), d, ldd, tile.m0, tile.n0, tile.m_end, sched.n,
                                       ptx::cluster_cta_rank(), threadIdx.x, c, ldc);
      }
      ptx::cluster_sync_relaxed();
    }
  }
  // NOTES: with multicast a CTA must not exit while its peer may still arrive on its barriers.
  if constexpr (Cfg::kNumMulticast == 2) ptx::cluster_sync();
  if constexpr (trace::kEnabled) {
    __syncthreads();
    if (threadIdx.x == 0) trace::stamp<trace::kEnd>();
  }
}

}  // namespace deep_tile
