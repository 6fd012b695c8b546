// The 1D2D family: A scaled per row and 128-wide K block, B per 128x128 weight block (b_scale
// [ceil(N / 128), K / 128] per expert). One family for the dense kind and every M-grouped kind
// (contiguous, offsets, psum, masked: the scheduler hands out each tile's group), with swap-AB for
// small M, split-K, the output variants and the masked kind's completion signals.
//
// What the shared kernel body (fp8_gemm_sm90.cuh) asks of a family: the producer's per-tile and
// per-stage scale work, the tile's k-blocks, and the consumers' k-loop of one tile.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/fp8_gemm_config.cuh"
#include "deep_tile/mainloop/b_scale_sources.cuh"
#include "deep_tile/mainloop/run_tile_mainloop.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/mainloop/two_buffer_k_loop.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The 1D2D family's configuration: the parameters it uses (fp8_gemm_params.cuh's groups), 11.
template <class Shape, class Cluster, class Pipeline, class FixedK, class Out, ProblemKind kProblemKind, int kSplitK,
          bool kAScaleRowMajor, bool kRasterAlongM, bool kEvictFirstB, int kSwapN>
struct Fp8Gemm1D2DConfig
    : Fp8GemmConfig<Shape, Cluster, Pipeline, FixedK, Out, kProblemKind, kSplitK, kAScaleRowMajor, kRasterAlongM,
                    kEvictFirstB, kSwapN, /*kBScale1D=*/false> {
  DT_STATIC_ASSERT(!Out::kStaged, "the staged epilogue is the 1D1D family's (K-grouped)");
};

/// The 1D2D family's side of the kernel body, for a Fp8Gemm1D2DConfig (or probes' overrides of one).
template <class Cfg_>
struct Fp8Gemm1D2D {
  using Cfg = Cfg_;
  DT_STATIC_ASSERT(!Cfg::kBScale1D, "the 1D2D family takes DT_B_SCALE_1D 0");

  /// A tile's scales beyond the stages': its b_scale rows (copied into the stages with
  /// kBScaleStaged, else read by the consumers' k-loop).
  using TileScales = TileBScaleRows;

  /// The tile's k-blocks: this CTA's range (split-K: its share).
  DT_DEVICE static KBlocks k_blocks(const Scheduler<Cfg>&, const Tile<Cfg>&, const WorkRange& work) {
    return {work.kb_begin, work.kb_end};
  }

  /// Before the stage's expected bytes are armed: k-block kb's b_scale values copied into it.
  DT_DEVICE static void before_stage_loads(const SharedStorage<Cfg>& smem, int stage, u64* full,
                                           const TileBScaleRows& rows, int kb) {
    if constexpr (Cfg::kBScaleStaged) stage_b_scales(smem.b_scale + stage * 2, full, rows, kb);
  }

  /// After the stage's operand loads: nothing more.
  DT_DEVICE static void after_stage_loads(const SharedStorage<Cfg>&, const PipelineState<Cfg::kNumStages>&, u64*,
                                          const Tile<Cfg>&, const Scheduler<Cfg>&, int, int, int,
                                          const TmaDescriptor*, const TmaDescriptor*) {}

  /// Every tile runs the CTA's k-blocks (WorkRange), and every tile the scheduler hands out has work.
  struct NoKRange {};
  DT_DEVICE static NoKRange tile_k_range(const Scheduler<Cfg>&, const Tile<Cfg>&) { return {}; }
  static constexpr bool kSkipsEmptyTiles = false;

  /// The consumers' k-loop of one tile into `result`; the tile's k-blocks as the store needs them
  /// (0: none needed).
  DT_DEVICE static int run_tile(const ConsumerContext<Cfg>& ctx, const Tile<Cfg>& tile, const WorkRange& work,
                                const TileBScaleRows& b_rows, NoKRange,
                                PipelineState<Cfg::kNumStages>& issue_state,
                                PipelineState<Cfg::kNumStages>& release_state,
                                float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile]) {
    const RunTileMainloop<Cfg, Cfg::kLoopSetsResult> mainloop{
        ctx,           issue_state, release_state,   result, b_rows.row0, b_rows.row1,
        work.kb_begin, work.kb_end, tile.peer_alive, /*tile_k_blocks (K-grouped only)=*/0};
    dispatch_first_blocks<Cfg>(b_rows.first_blocks, mainloop);
    return 0;
  }
};

}  // namespace deep_tile
