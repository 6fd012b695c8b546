// A tile's k-loop called with its b_scale straddle point as a compile-time value: RunTileMainloop
// binds a tile's arguments, dispatch_first_blocks picks the template instance for the run-time
// straddle point (1D2D), and the 1D1D early release is chosen per tile here.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/mainloop/tile_mainloop.cuh"

namespace deep_tile {

/// Compile-time int, for dispatching a run-time value onto template instances.
template <int kValue>
struct IntConstant {
  static constexpr int value = kValue;
};

/// Call `fn(IntConstant<first_blocks>)` for the run-time `first_blocks`, one of the values a tile
/// of this config can have: multiples of gcd(block_n, 128) / 8 up to 128 / 8, or block_n / 8 when
/// the whole tile uses one b_scale row.
template <class Cfg, int kCandidate = gcd(Cfg::kBlockN, 128) / 8, class Fn>
DT_DEVICE void dispatch_first_blocks(int first_blocks, const Fn& fn) {
  constexpr int kAll = Cfg::kBlockN / 8;
  if constexpr (128 % Cfg::kBlockN == 0 || kCandidate > 128 / 8 || kCandidate >= kAll) {
    fn(IntConstant<kAll>{});
  } else {
    if (first_blocks == kCandidate) {
      fn(IntConstant<kCandidate>{});
    } else {
      dispatch_first_blocks<Cfg, kCandidate + gcd(Cfg::kBlockN, 128) / 8>(first_blocks, fn);
    }
  }
}

/// TileMainloop bound to one tile's arguments, callable with the straddle point as a constant;
/// kInitResult: the k-loop sets `result` (TileMainloop::run), else adds to it.
/// NOTES: a functor rather than a lambda: NVRTC 13.0 treats an unannotated lambda in device code
/// as a host function and refuses it in JIT mode.
template <class Cfg, bool kInitResult = false>
struct RunTileMainloop {
  const ConsumerContext<Cfg>& ctx;
  PipelineState<Cfg::kNumStages>& issue_state;
  PipelineState<Cfg::kNumStages>& release_state;
  float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile];
  const float* b_scale_row0;
  const float* b_scale_row1;
  int kb_begin, kb_end;
  bool peer_alive;
  int tile_k_blocks;  // the whole tile's k-blocks (this run may be a part): the early release's choice

  template <int kFirstBlocks>
  DT_DEVICE void operator()(IntConstant<kFirstBlocks>) const {
    constexpr int kMax = Cfg::kEarlyReleaseMaxKBlocks;
    if constexpr (kMax == Cfg::kEarlyReleaseNever || kMax == Cfg::kEarlyReleaseAlways) {
      run<kFirstBlocks, kMax == Cfg::kEarlyReleaseAlways>();
    } else if (tile_k_blocks <= kMax) {
      run<kFirstBlocks, true>();
    } else {
      run<kFirstBlocks, false>();
    }
  }

  template <int kFirstBlocks, bool kEarlyRelease>
  DT_DEVICE void run() const {
    using Loop = TileMainloop<Cfg, kFirstBlocks, kEarlyRelease>;
    Loop loop{ctx, issue_state, release_state, result,
              BScaleFor<Cfg, Loop::kTwoRows>(b_scale_row0, b_scale_row1, kb_begin, kb_end), peer_alive};
    loop.template run<kInitResult>(kb_begin, kb_end);
  }
};

}  // namespace deep_tile
