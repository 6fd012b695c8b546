// Where a swap-AB kernel's accumulators sit in its output tile: the one place that says it, for the
// promotion (mainloop/operands.cuh) and both stores (store_tile_swapped, write_partial).
//
// Under swap-AB (Cfg::kSwapAB) each 64 weight rows of the tile are one m64 x kSwapN WGMMA's D, so
// a thread's accumulators are kBlockN / 64 WGMMA fragments back to back (ptx/wgmma_fp8.cuh's
// layout, its rows and columns read as weight rows and tokens). Four coordinates name one:
// the weight block mb < kBlockN / 64, the token block j < kSwapN / 8, the half h < 2 (8 weight
// rows apart) and the token q < 2 (neighbours); accumulator index(mb, j, h, q) of thread (warp w
// of its warpgroup, lane l) is D^T's weight row weight_row(mb, h, w, l) of the tile (an output
// column) and its token column token(j, q, l) (an output row).
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile {

template <class Cfg>
struct SwapFragment {
  static constexpr int kBlocks = Cfg::kBlockN / 64;  // weight blocks (mb)
  static constexpr int kTokenBlocks = Cfg::kSwapN / 8;  // token blocks (j)
  // Token columns of one thread, two per token block: the a_scale values the promotion holds.
  static constexpr int kTokenSlots = 2 * kTokenBlocks;

  static constexpr DT_DEVICE int index(int mb, int j, int h, int q) { return Cfg::kSwapN / 2 * mb + 4 * j + 2 * h + q; }
  static DT_DEVICE int weight_row(int mb, int h, int warp_in_wg, int lane) {
    return mb * 64 + warp_in_wg * 16 + lane / 4 + 8 * h;
  }
  static DT_DEVICE int token(int j, int q, int lane) { return 8 * j + 2 * (lane % 4) + q; }
  /// Which of this thread's kTokenSlots token columns token(j, q, lane) is.
  static constexpr DT_DEVICE int token_slot(int j, int q) { return 2 * j + q; }

  /// f(mb, j, h, q) for every accumulator of the thread, in index order (unrolled).
  template <class F>
  static DT_DEVICE void for_each(F&& f) {
#pragma unroll
    for (int mb = 0; mb < kBlocks; ++mb) {
#pragma unroll
      for (int j = 0; j < kTokenBlocks; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int q = 0; q < 2; ++q) f(mb, j, h, q);
        }
      }
    }
  }
};

}  // namespace deep_tile
