// The 1D1D family (weight gradients): A and B both scaled per row and 128-wide K block, b_scale
// [N, K / 128] loaded by TMA into each stage beside a_scale, FP32 accumulation (D in FP32, usually
// accumulated in place). The dense kind and the K-grouped kind (MoE weight gradients: each group
// its own K range, the scheduler hands out the group), with the staged epilogue for the latter.
//
// What the shared kernel body (fp8_gemm_sm90.cuh) asks of a family: see fp8_gemm_1d2d.cuh.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/fp8_gemm_config.cuh"
#include "deep_tile/epilogue/store_direct.cuh"
#include "deep_tile/mainloop/k_grouped_tile.cuh"
#include "deep_tile/mainloop/run_tile_mainloop.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/mainloop/stage_release.cuh"
#include "deep_tile/mainloop/two_buffer_k_loop.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The 1D1D family's configuration: the parameters it uses (fp8_gemm_params.cuh's groups), 10.
template <class Shape, class Cluster, class Pipeline, class FixedK, class Out, ProblemKind kProblemKind, int kSplitK,
          bool kAScaleRowMajor, bool kRasterAlongM, bool kEvictFirstB>
struct Fp8Gemm1D1DConfig
    : Fp8GemmConfig<Shape, Cluster, Pipeline, FixedK, Out, kProblemKind, kSplitK, kAScaleRowMajor, kRasterAlongM,
                    kEvictFirstB, /*kSwapN=*/0, /*kBScale1D=*/true> {
  DT_STATIC_ASSERT(Out::kSignal == 0, "completion signals are the 1D2D family's (masked kind)");
};

/// The 1D1D family's side of the kernel body, for a Fp8Gemm1D1DConfig (or probes' overrides of one).
template <class Cfg_>
struct Fp8Gemm1D1D {
  using Cfg = Cfg_;
  DT_STATIC_ASSERT(Cfg::kBScale1D, "the 1D1D family takes DT_B_SCALE_1D 1");

  /// The producer needs nothing of a tile's scales beyond its columns (tile.n0).
  struct NoTileScales {
    template <class>
    DT_DEVICE static NoTileScales of(const float*, int, int, int, int) { return {}; }
  };
  using TileScales = NoTileScales;

  /// The tile's k-blocks: this CTA's range, or the K-grouped tile's group's.
  DT_DEVICE static KBlocks k_blocks(const Scheduler<Cfg>& sched, const Tile<Cfg>& tile, const WorkRange& work) {
    if constexpr (Cfg::kKGrouped) {
      const KRange range = sched.k_range(tile);
      return {range.kb_begin, range.kb_end};
    } else {
      return {work.kb_begin, work.kb_end};
    }
  }

  /// Before the stage's expected bytes are armed: nothing (b_scale arrives by TMA with the stage).
  DT_DEVICE static void before_stage_loads(const SharedStorage<Cfg>&, int, u64*, NoTileScales, int) {}

  /// After the stage's operand loads: its kBlockN b_scale values of K block kb, and (the
  /// reduce-add, Cfg::kPrefetchDMaxKBlocks) D's first sub-tiles asked of L2 ahead of the epilogue.
  DT_DEVICE static void after_stage_loads(const SharedStorage<Cfg>& smem, const PipelineState<Cfg::kNumStages>& state,
                                          u64* full, const Tile<Cfg>& tile, const Scheduler<Cfg>& sched, const int& kb,
                                          const int& kb_begin, const int& kb_end, const TmaDescriptor* tma_b_scale,
                                          const TmaDescriptor* tma_d) {
    ptx::tma_load_2d(smem.b_scale + b_scale_slot<Cfg>(state) * Cfg::kBScalePitch, tma_b_scale, full, tile.n0, kb);
    if constexpr (Cfg::kPrefetchDMaxKBlocks > 0) {
      const bool ahead = kb == max_int(kb_begin, kb_end - 1 - Cfg::kPrefetchDAhead);
      if (ahead && kb_end - kb_begin <= Cfg::kPrefetchDMaxKBlocks) {
#pragma unroll
        for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
          prefetch_d_first_subtile<Cfg>(tma_d, wg, tile.m0, tile.n0, tile.m_end, sched.n);
        }
      }
    }
  }

  /// The K-grouped tile's K range (its group's; read once per tile), nothing for the dense kind.
  struct NoKRange {};
  using TileKRange = typename If<Cfg::kKGrouped, KRange, NoKRange>::type;
  DT_DEVICE static TileKRange tile_k_range(const Scheduler<Cfg>& sched, const Tile<Cfg>& tile) {
    if constexpr (Cfg::kKGrouped) {
      return sched.k_range(tile);
    } else {
      return {};
    }
  }

  /// A K-grouped empty group accumulated in place leaves D[g] as it is: nothing to run or store.
  static constexpr bool kSkipsEmptyTiles = Cfg::kKGrouped && Cfg::kCKind == 3;

  /// The consumers' k-loop of one tile into `result`; the tile's k-blocks (the staged epilogue's choice).
  DT_DEVICE static int run_tile(const ConsumerContext<Cfg>& ctx, const Tile<Cfg>& tile, const WorkRange& work,
                                NoTileScales, const TileKRange& range, PipelineState<Cfg::kNumStages>& issue_state,
                                PipelineState<Cfg::kNumStages>& release_state,
                                float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile]) {
    if constexpr (Cfg::kKGrouped) {
      run_k_grouped_tile<Cfg>(ctx, issue_state, release_state, result, range, tile.peer_alive);
      return range.kb_end - range.kb_begin;
    } else {
      const RunTileMainloop<Cfg, Cfg::kLoopSetsResult> mainloop{
          ctx,           issue_state, release_state,   result, nullptr, nullptr,
          work.kb_begin, work.kb_end, tile.peer_alive, /*tile_k_blocks (K-grouped only)=*/0};
      mainloop(IntConstant<Cfg::kBlockN / 8>{});  // no b_scale rows to straddle
      return 0;
    }
  }
};

}  // namespace deep_tile
