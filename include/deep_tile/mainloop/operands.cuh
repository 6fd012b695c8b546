// The two ways a consumer warpgroup multiplies a stage, as policy types of the k-loop
// (TileMainloop::Operands):
//   PlainOperands    A's rows (64-row slabs) times B's columns; a thread holds two rows' a_scale
//   SwappedOperands  swap-AB (Cfg::kSwapAB): each 64-row block of the B (weight) stage is the 64-row
//                    operand and the first kSwapN rows of the A stage the N side, so the accumulators
//                    hold D^T (weight rows x tokens) and the promotion scales columns by a_scale.
// Each says which a_scale values a thread reads, which WGMMAs it issues and how a 1D2D promotion
// scales its accumulators; `loop` is the TileMainloop whose registers they use.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/swap_fragment.cuh"
#include "deep_tile/mainloop/shared_storage.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

/// `r += v`, or with kAssign (a tile's first promotion, TileMainloop::run) `r = v`.
template <bool kAssign>
DT_DEVICE void promote_into(float& r, float v) {
  if constexpr (kAssign) {
    r = v;
  } else {
    r += v;
  }
}

template <class Cfg>
struct PlainOperands {
  using Wgmma = ptx::WgmmaFp8<Cfg::kWgmmaN>;
  static constexpr int kRowScales = 2;  // a_scale of this thread's two rows

  /// This thread's first row in slab kSlab of the tile (its second is 8 rows further).
  template <int kSlab>
  DT_DEVICE static int scale_row(const ConsumerContext<Cfg>& ctx) {
    return ctx.wg * Cfg::kWgM + kSlab * 64 + ctx.warp_in_wg * 16 + ctx.lane / 4;
  }

  /// Read the rows' a_scale values (`a_scale` points at the first row's) before the stage can be released.
  template <int kBuf, class Loop>
  DT_DEVICE static void read_row_scales(Loop& loop, const float* a_scale, int) {
    loop.row_scale[kBuf][0] = a_scale[0];
    loop.row_scale[kBuf][1] = a_scale[8 * Cfg::kAScaleCols];
  }

  /// The WGMMA chain of one sub-tile: descriptor words a_lo / b_lo of its A slab and B part.
  DT_DEVICE static void mma(u32 a_lo, u32 b_lo, float* acc) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
      // k-slice kk of a 128B-swizzled K-major tile starts 32 bytes further along the row.
      Wgmma::mma(ptx::sw128_desc(a_lo + kk * 2), ptx::sw128_desc(b_lo + kk * 2), acc, kk > 0);
    }
  }

  /// 1D2D promotion: 8-column blocks below kFirstBlocks scale by b_scale row 0, the rest by row 1.
  template <int kSub, int kBuf, bool kAssign, int kFirstBlocks, class Loop>
  DT_DEVICE static void promote(Loop& loop) {
    constexpr int kPart = kSub % Cfg::kNumNParts;
    const float lo0 = loop.row_scale[kBuf][0] * loop.bscale.now0, hi0 = loop.row_scale[kBuf][1] * loop.bscale.now0;
    const float lo1 = loop.row_scale[kBuf][0] * loop.bscale.now1, hi1 = loop.row_scale[kBuf][1] * loop.bscale.now1;
#pragma unroll
    for (int j = 0; j < Loop::kAcc / 4; ++j) {
      const bool first = kPart * (Cfg::kWgmmaN / 8) + j < kFirstBlocks;
      const float scale_lo = first ? lo0 : lo1, scale_hi = first ? hi0 : hi1;
      promote_into<kAssign>(loop.result[kSub][4 * j + 0], scale_lo * loop.acc[kBuf][4 * j + 0]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 1], scale_lo * loop.acc[kBuf][4 * j + 1]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 2], scale_hi * loop.acc[kBuf][4 * j + 2]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 3], scale_hi * loop.acc[kBuf][4 * j + 3]);
    }
  }
};

template <class Cfg>
struct SwappedOperands {
  using Frag = SwapFragment<Cfg>;
  static constexpr int kRowScales = Frag::kTokenSlots;  // a_scale of this thread's token columns

  /// This thread's first token column.
  template <int>
  DT_DEVICE static int scale_row(const ConsumerContext<Cfg>& ctx) {
    return Frag::token(0, 0, ctx.lane);
  }

  template <int kBuf, class Loop>
  DT_DEVICE static void read_row_scales(Loop& loop, const float* a_scale, int row) {
#pragma unroll
    for (int j = 0; j < Frag::kTokenBlocks; ++j) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // a_scale points at token(0, 0, lane)'s row
        loop.row_scale[kBuf][Frag::token_slot(j, q)] =
            a_scale[(Frag::token(j, q, loop.ctx.lane) - row) * Cfg::kAScaleCols];
      }
    }
  }

  /// Weight rows [64 mb, 64 mb + 64) times the A stage's first kSwapN rows into accumulator
  /// floats [mb * kSwapN / 2, ...).
  DT_DEVICE static void mma(u32 a_lo, u32 b_lo, float* acc) {
#pragma unroll
    for (int mb = 0; mb < Cfg::kBlockN / 64; ++mb) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
        ptx::WgmmaFp8<Cfg::kSwapN>::mma(ptx::sw128_desc(b_lo + mb * 64 * Cfg::kBlockK / 16 + kk * 2),
                                        ptx::sw128_desc(a_lo + kk * 2), acc + mb * (Cfg::kSwapN / 2), kk > 0);
      }
    }
  }

  /// Each accumulator scales by its token's a_scale and its 64-row weight block's b_scale (row 1
  /// of the tile's b_scale from the straddle point on; kFirstBlocks counts 8-column blocks).
  template <int kSub, int kBuf, bool kAssign, int kFirstBlocks, class Loop>
  DT_DEVICE static void promote(Loop& loop) {
    Frag::for_each([&](int mb, int j, int h, int q) {
      const float b = mb * 8 < kFirstBlocks ? loop.bscale.now0 : loop.bscale.now1;
      const int i = Frag::index(mb, j, h, q);
      promote_into<kAssign>(loop.result[kSub][i], (loop.row_scale[kBuf][Frag::token_slot(j, q)] * b) * loop.acc[kBuf][i]);
    });
  }
};

}  // namespace deep_tile
