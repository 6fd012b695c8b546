// The consumer k-loop of the FP8 GEMM: per 128-wide K block and per sub-tile (64-row slab x
// column part) of a consumer warpgroup, WGMMA into a reused accumulator, hand the stage back, and
// promote the partial sum into the FP32 result with its scales.
//
//   issue(t):  [wait for the stage] read the a_scale rows, WGMMA chain into accumulator buffer t % B
//   finish(t): [release the stage]  result[sub] += a_scale(row) * b_scale * accumulator
//
// TileMainloop holds a tile's k-loop registers and the two steps; its policy types, chosen at
// compile time from the config, say the rest: Operands (operands.cuh: plain or swap-AB),
// Promotion (promotion.cuh: 1D2D or 1D1D scaling) and Schedule (one_buffer_k_loop.cuh or
// two_buffer_k_loop.cuh: how the steps follow one another).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/mainloop/b_scale_sources.cuh"
#include "deep_tile/mainloop/one_buffer_k_loop.cuh"
#include "deep_tile/mainloop/operands.cuh"
#include "deep_tile/mainloop/promotion.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/mainloop/stage_release.cuh"
#include "deep_tile/mainloop/two_buffer_k_loop.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

/// One tile's k-loop over k-blocks [kb_begin, kb_end). 8-column blocks jg < kFirstBlocks of the
/// tile use b_scale row 0, the rest row 1. kEarlyRelease (1D1D): each stage goes back before the
/// promotion reads its b_scale columns (Fp8GemmConfig::kEarlyReleaseMaxKBlocks).
/// NOTES: the straddle point is a template argument: as a run-time value it cost a select per 8
/// columns in the promotion (128x144 / 128x160 tiles ran at 0.80 / 0.87 of 128x128).
template <class Cfg, int kFirstBlocks_, bool kEarlyRelease_ = false>
struct TileMainloop {
  using Operands = typename If<Cfg::kSwapAB, SwappedOperands<Cfg>, PlainOperands<Cfg>>::type;
  using Promotion = typename If<Cfg::kBScale1D, ColumnScaledPromotion<Cfg>, RowScaledPromotion<Cfg>>::type;
  using Schedule = typename If<Cfg::kNumAccumBuffers == 1, OneBufferKLoop<Cfg>, TwoBufferKLoop<Cfg>>::type;
  static constexpr int kFirstBlocks = kFirstBlocks_;
  static constexpr bool kEarlyRelease = kEarlyRelease_;
  static constexpr int kAcc = Cfg::kAccumPerSubtile;
  static constexpr bool kTwoRows = kFirstBlocks < Cfg::kBlockN / 8;
  static constexpr int kLast = Cfg::kNumSubtiles - 1;

  const ConsumerContext<Cfg>& ctx;
  PipelineState<Cfg::kNumStages>& issue_state;    // next stage to wait for and read
  PipelineState<Cfg::kNumStages>& release_state;  // next stage to hand back
  float (&result)[Cfg::kNumSubtiles][kAcc];
  BScaleFor<Cfg, kTwoRows> bscale;
  bool peer_alive;
  float acc[Cfg::kNumAccumBuffers][kAcc];
  // a_scale of this thread's two rows, or under swap-AB of its token columns (SwapFragment's
  // token slots).
  float row_scale[Cfg::kNumAccumBuffers][Operands::kRowScales];
  // Cfg::kOneRingState: the stage of the k-block in flight, handed back after its last sub-tile
  // (the release state is set from the issue state once the k-loop is done). Nothing without: an
  // unused int member changed the register allocation of other kernels (64x64 two-buffer).
  struct NoStage {};
  typename If<Cfg::kOneRingState, int, NoStage>::type issued_stage{};
  // Cfg::kStaticRing: with K fixed at a multiple of the stages (Cfg::kStaticKBlocks), every tile
  // starts at stage 0, so the schedule walks the ring in passes of straight code whose stage,
  // barrier, a_scale and descriptor offsets are immediates (DeepGEMM's loop at these shapes).
  // NOTES: against K as a run-time value it paid for 128x64 on both chips; 128x96 was mixed, 256x64 and
  // 128x128 even, and 128x160 slower than with K fixed alone. Which picks use it: selector.static_ring_for.
  static constexpr bool kStaticRing = Cfg::kStaticRing;
  // kStaticRing: the descriptor bases taken again (as warp-uniform values) at each pass, so ptxas
  // forms each stage's descriptors in the pass instead of holding all of them in registers.
  struct PassDesc {
    u32 a = 0, b = 0;
  };
  typename If<kStaticRing, PassDesc, NoStage>::type pass_desc{};
  DT_DEVICE void refresh_pass_desc() {
    if constexpr (kStaticRing) {
      u32 a = ctx.desc_a0, b = ctx.desc_b0;
      asm volatile("shfl.sync.idx.b32 %0, %0, 0, 0x1f, 0xffffffff;" : "+r"(a));
      asm volatile("shfl.sync.idx.b32 %0, %0, 0, 0x1f, 0xffffffff;" : "+r"(b));
      pass_desc.a = a, pass_desc.b = b;
    }
  }
  // Scale products formed while the WGMMAs run (Cfg::kPreScaleGroups; 1D1D, one buffer).
  PreScaled<Cfg::kPreScaleGroups> pre;

  template <int kBuf>
  DT_DEVICE void fence_accumulator() {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[kBuf][i]);
  }

  /// Hand the release state's stage back and move the state on.
  DT_DEVICE void release_next() {
    release_stage<Cfg>(&ctx.smem.empty[release_state.index], ctx.lane, peer_alive, ctx.rank);
    release_state.advance();
  }

  /// Wait for the stage (first sub-tile of k-block `kb`), read the a_scale rows, issue the WGMMAs.
  template <int kSub, int kBuf>
  DT_DEVICE void issue(int kb) {
    constexpr int kSlab = kSub / Cfg::kNumNParts, kPart = kSub % Cfg::kNumNParts;
    const int stage = issue_state.index;
    if constexpr (kSub == 0) ptx::mbarrier_wait(&ctx.smem.full[stage], issue_state.full_parity());
    if constexpr (Cfg::kOneRingState && kSub == 0) issued_stage = stage;
    // The two rows of this thread in the slab (swap-AB: its token columns); read before the stage
    // can be released.
    const int row = Operands::template scale_row<kSlab>(ctx);
    const float* a_scale = ctx.smem.a_scale + (stage * Cfg::kBlockM + row) * Cfg::kAScaleCols +
                           (Cfg::kAScaleRowMajor ? (kb & 3) : 0);
    Operands::template read_row_scales<kBuf>(*this, a_scale, row);
    if constexpr (kSub == 0) bscale.read_stage(ctx.smem.b_scale + stage * 2);
    Promotion::template at_issue<kSub, kBuf>(*this);
    fence_accumulator<kBuf>();
    ptx::wgmma_fence();
    // Descriptor words advance by bytes / 16: one 32-bit add per WGMMA operand (the run-time
    // stage part once per sub-tile, the rest constants).
    u32 desc_a0 = ctx.desc_a0, desc_b0 = ctx.desc_b0;
    if constexpr (kStaticRing) desc_a0 = pass_desc.a, desc_b0 = pass_desc.b;
    const u32 a_lo = desc_a0 + stage * (Cfg::kTileABytes / 16) + kSlab * 64 * Cfg::kBlockK / 16;
    const u32 b_lo = desc_b0 + stage * (Cfg::kTileBBytes / 16) + kPart * Cfg::kWgmmaN * Cfg::kBlockK / 16;
    Operands::mma(a_lo, b_lo, acc[kBuf]);
    ptx::wgmma_commit_group();
    if constexpr (kSub == kLast) issue_state.advance();
  }

  /// After the WGMMAs of this sub-tile completed: release the stage (last sub-tile of the
  /// k-block) and promote (kAssign: the tile's first k-block, whose promotion writes the result).
  template <int kSub, int kBuf, bool kAssign = false>
  DT_DEVICE void finish() {
    fence_accumulator<kBuf>();
    Promotion::template finish<kSub, kBuf, kAssign>(*this);
  }

  /// The tile's k-loop; kInitResult: it sets the result instead of adding to the caller's.
  template <bool kInitResult>
  DT_DEVICE void run(int kb_begin, int kb_end) {
    Schedule::template run<kInitResult>(*this, kb_begin, kb_end);
  }
};

}  // namespace deep_tile
