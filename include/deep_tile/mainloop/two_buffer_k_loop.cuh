// The k-loop of two accumulator buffers (Cfg::kNumAccumBuffers == 2, small tiles): the WGMMAs of
// the next step are issued before this one is promoted (wgmma.wait_group 1), so the tensor cores
// and the promotion overlap inside one warpgroup. `loop` is the TileMainloop of the tile.
// NOTES: ptxas tracks which accumulators an in-flight WGMMA group writes only within straight
// code: across a loop back-edge, or a branch choosing between wait_group 1 and 0, it injects
// waits and serialises every WGMMA (C7514/C7517). So the overlapped form runs in bodies of
// kUnroll k-blocks that start and end with nothing in flight, after the remainder k-blocks run
// serially.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

/// A tile's FP32 sums set to zero, before k-loop runs that add to them.
template <class Cfg>
DT_DEVICE void zero_result(float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile]) {
#pragma unroll
  for (int s = 0; s < Cfg::kNumSubtiles; ++s)
#pragma unroll
    for (int i = 0; i < Cfg::kAccumPerSubtile; ++i) result[s][i] = 0.0f;
}

template <class Cfg>
struct TwoBufferKLoop {
  /// Issue step kT of a fully unrolled run of kSteps (k-block, sub-tile) steps, then promote
  /// step kT - 1 while step kT runs; after the last step, drain.
  template <int kT, int kSteps, class Loop>
  DT_DEVICE static void overlapped_steps(Loop& loop, int kb) {
    constexpr int kPrev = kT - 1;
    if constexpr (kT < kSteps) {
      loop.template issue<kT % Cfg::kNumSubtiles, kT % 2>(kb + kT / Cfg::kNumSubtiles);
      ptx::wgmma_wait_group<1>();
    } else {
      ptx::wgmma_wait_group<0>();
    }
    loop.template finish<kPrev % Cfg::kNumSubtiles, kPrev % 2>();
    if constexpr (kPrev % Cfg::kNumSubtiles == Loop::kLast) loop.bscale.pop(kb + kPrev / Cfg::kNumSubtiles);
    if constexpr (kT < kSteps) overlapped_steps<kT + 1, kSteps>(loop, kb);
  }

  /// kInitResult: the k-loop sets the result (zeroed first) instead of adding to the caller's.
  template <bool kInitResult, class Loop>
  DT_DEVICE static void run(Loop& loop, int kb_begin, int kb_end) {
    if constexpr (kInitResult) zero_result<Cfg>(loop.result);
    constexpr int kUnroll = Cfg::kNumSubtiles == 1 ? 4 : 2;
    const int body_begin = kb_begin + (kb_end - kb_begin) % kUnroll;
    for (int kb = kb_begin; kb < body_begin; ++kb) {
      // The remainder runs with buffer 0 alone.
      loop.template issue<0, 0>(kb);
      ptx::wgmma_wait_group<0>();
      loop.template finish<0, 0>();
      if constexpr (Cfg::kNumSubtiles == 2) {
        loop.template issue<1, 1>(kb);
        ptx::wgmma_wait_group<0>();
        loop.template finish<1, 1>();
      }
      loop.bscale.pop(kb);
    }
    for (int kb = body_begin; kb < kb_end; kb += kUnroll) {
      loop.template issue<0, 0>(kb);
      overlapped_steps<1, kUnroll * Cfg::kNumSubtiles>(loop, kb);
    }
  }
};

}  // namespace deep_tile
