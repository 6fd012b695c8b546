// The kernel body of the FP8 GEMM families with DeepSeek-V3 fine-grained scaling for sm_90a:
//   D[M, N] (bf16) = (A[M, K] * a_scale[M, K/128]) @ (B[N, K] * b_scale)^T
// or, in the output variants of Fp8GemmConfig (kOutKind, kCKind), D in FP32 and/or D = C + that.
// The family (fp8_gemm_1d2d.cuh, fp8_gemm_1d1d.cuh) says how B is scaled, which k-blocks a tile
// runs and how its k-loop is called; the store (epilogue/tile_store.cuh) and the completion signals
// (epilogue/completion_signals.cuh) are policy types of the config.
//
// One producer warpgroup (one thread issues TMA into a ring of shared-memory stages;
// fp8_gemm_producer.cuh) and one or two consumer warpgroups (WGMMA from shared memory, FP32
// promotion of each 128-wide K block with its scales; mainloop/). Two kinds of launch share this body:
//   - persistent (kSplitK == 1): each CTA walks tiles of a raster order and stores each through
//     shared memory and TMA; optionally clusters of 2 CTAs multicast the shared A or B tile;
//   - split-K (kSplitK > 1): one tile per cluster of kSplitK CTAs, each CTA a range of K blocks,
//     the FP32 partials reduced in rank order through distributed shared memory.
// Which tiles, their origins and real rows, and the multicast pairing come from the tile
// scheduler of the problem's kind (scheduler/tile_scheduler.cuh); this body knows no more of them.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/debug/trace.cuh"
#include "deep_tile/epilogue/completion_signals.cuh"
#include "deep_tile/epilogue/splitk_reduce.cuh"
#include "deep_tile/epilogue/tile_store.cuh"
#include "deep_tile/kernels/fp8_gemm_config.cuh"
#include "deep_tile/kernels/fp8_gemm_consumer.cuh"
#include "deep_tile/kernels/fp8_gemm_producer.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The kernel body; csrc/entry/fp8_gemm_sm90.cu wraps it in an extern "C" __global__ symbol.
/// `d`/`ldd` (the output and its row pitch in elements) serve the split-K epilogue and the
/// grouped kinds' partial tiles; the persistent one stores through `tma_d`. `group` describes a
/// grouped problem (Cfg::kProblemKind; unused when dense). The direct-store variants
/// (Cfg::kDirectStore: FP32 D and/or C) store through `d` only, adding C (`c`, row pitch `ldc`
/// elements, possibly `d` itself) when Cfg::kCKind says there is one.
/// `signal`: the completion counters of the signalling masked kernel (Cfg::kSignal; unused otherwise).
/// `group_maps`: the per-group maps of A and B of the K-grouped kind in DeepGEMM's NT layout
/// (Cfg::kKGroupedBlocks: 2 per group, kernels/k_grouped_maps.cuh; unused otherwise).
template <class Family, class Cfg = typename Family::Cfg>
DT_DEVICE void fp8_gemm_sm90(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b, const TmaDescriptor& tma_a_scale,
                             const TmaDescriptor& tma_d, const float* b_scale, u8* d, int ldd, int m, int n, int k,
                             int raster_width, const GroupArgs& group = GroupArgs{nullptr, 1, 0},
                             const u8* c = nullptr, int ldc = 0, const TmaDescriptor* tma_b_scale = nullptr,
                             int* signal = nullptr, const TmaDescriptor* group_maps = nullptr) {
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
    if constexpr (TileStoreFor<Cfg>::kPrefetchTmaD) ptx::tma_prefetch_descriptor(&tma_d);
#pragma unroll
    for (int s = 0; s < Cfg::kNumStages; ++s) {
      // The producer's arrive (with the stage's TMA bytes), and with kBScaleStaged its b_scale copies'.
      ptx::mbarrier_init(&smem.full[s], Cfg::kBScaleStaged ? 2 : 1);
      ptx::mbarrier_init(&smem.empty[s], Cfg::kNumMathWarps * Cfg::kReleasesPerWarp * Cfg::kNumMulticast);
    }
    TileStoreFor<Cfg>::init_barriers(smem.epilogue);
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
        SignalsFor<Cfg>::publish(smem.group_table, signal, group.group_rows, threadIdx.x % 32);
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
      producer_loop<Family>(smem, &tma_a, &tma_b, &tma_a_scale, b_scale, sched, tma_b_scale, &tma_d, group_maps);
      trace::stamp<trace::kLastIssue>();
      // Every load of this CTA is issued: the dependent grid may start its own set-up on the SMs
      // this grid leaves free (its wait still waits for this grid to complete).
      // NOTES: in decode chains, triggering right after the wait instead was no faster, and never
      // triggering (the dependent starts when this grid completes) was as slow as no PDL at all.
      ptx::launch_dependents();
    } else {  // the producer warpgroup's other warps: a role of the signals or of the store, if any
      SignalsFor<Cfg>::run_signal_warp(sched, signal, group.group_rows);
      TileStoreFor<Cfg>::run_producer_role(smem.d, smem.epilogue, &tma_d, sched);
    }
    if constexpr (Cfg::kSplitK > 1) {
      ptx::cluster_sync();
      ptx::cluster_sync_relaxed();
    }
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegisters>();
    consumer_loop<Family>(smem, &tma_d, b_scale, sched, result, d, ldd, c, ldc);
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
