// The promotion step of the k-loop (TileMainloop::finish), once a sub-tile's WGMMAs completed: hand
// the stage back after the k-block's last sub-tile and add the scaled accumulators into the FP32
// result. One policy type per scaling, chosen at compile time (TileMainloop::Promotion):
//   RowScaledPromotion     1D2D: a_scale per row times b_scale per 128x128 weight block
//   ColumnScaledPromotion  1D1D (Cfg::kBScale1D): a_scale per row times b_scale per column, read
//                          from the k-block's b_scale slot, optionally partly formed under the WGMMAs
// `loop` is the TileMainloop whose registers and pipeline states they use.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/mainloop/operands.cuh"
#include "deep_tile/mainloop/stage_release.cuh"

namespace deep_tile {

template <class Cfg>
struct RowScaledPromotion {
  template <int, int, class Loop>
  DT_DEVICE static void at_issue(Loop&) {}
  template <class Loop>
  DT_DEVICE static void prescale(Loop&) {}

  template <int kSub, int kBuf, bool kAssign, class Loop>
  DT_DEVICE static void finish(Loop& loop) {
    if constexpr (kSub == Loop::kLast) {
      if constexpr (Cfg::kOneRingState) {
        release_stage<Cfg>(&loop.ctx.smem.empty[loop.issued_stage], loop.ctx.lane, loop.peer_alive, loop.ctx.rank);
      } else {
        loop.release_next();
      }
    }
    Loop::Operands::template promote<kSub, kBuf, kAssign, Loop::kFirstBlocks>(loop);
  }
};

/// The 1D1D one-buffer k-loop's b_scale values and scale products of its first kGroups 4-float
/// groups, formed while the WGMMAs run (Fp8GemmConfig::kPreScaleGroups); nothing without.
template <int kGroups>
struct PreScaled {
  float2 b[kGroups];
  float scale[kGroups][4];
};
template <>
struct PreScaled<0> {};

template <class Cfg>
struct ColumnScaledPromotion {
  static constexpr int kPreScale = Cfg::kPreScaleGroups;

  /// This thread's b_scale columns of column part kPart in the k-block's slot.
  template <int kPart, int kBuf, class Loop>
  DT_DEVICE static const float* b_columns(const Loop& loop) {
    const int slot = Cfg::kBScaleSlotAtIssue ? loop.bscale.slot[kBuf] : b_scale_slot<Cfg>(loop.release_state);
    return loop.ctx.smem.b_scale + slot * Cfg::kBScalePitch + kPart * Cfg::kWgmmaN + 2 * (loop.ctx.lane % 4);
  }

  /// At issue, before the WGMMAs: the slot taken from the issue state (Cfg::kBScaleSlotAtIssue), and
  /// the b_scale values of the first kPreScale groups (one-buffer k-loop: the release state is
  /// this k-block's).
  template <int kSub, int kBuf, class Loop>
  DT_DEVICE static void at_issue(Loop& loop) {
    if constexpr (Cfg::kBScaleSlotAtIssue) loop.bscale.slot[kBuf] = b_scale_slot<Cfg>(loop.issue_state);
    if constexpr (kPreScale > 0) {
      const float* cols = b_columns<kSub % Cfg::kNumNParts, 0>(loop);
#pragma unroll
      for (int j = 0; j < kPreScale; ++j) loop.pre.b[j] = *reinterpret_cast<const float2*>(cols + 8 * j);
    }
  }

  /// Between a sub-tile's issue and its wait: the first kPreScale groups' scale products.
  /// NOTES: ptxas sinks products used only after the wait below it, onto the serial chain from
  /// the wait to the next issue (76 of 80 FMULs at 128x160). A branch that uses them (taken
  /// only for a NaN a_scale, to no effect) keeps them above the wait; the LDS of their b_scale
  /// values, issued before the WGMMAs, have landed by then, so nothing stalls there.
  template <class Loop>
  DT_DEVICE static void prescale(Loop& loop) {
    if constexpr (kPreScale > 0) {
      auto& pre = loop.pre;
      const auto& row_scale = loop.row_scale;
#pragma unroll
      for (int j = 0; j < kPreScale; ++j) {
        const float2 b = pre.b[j];
        pre.scale[j][0] = row_scale[0][0] * b.x;
        pre.scale[j][1] = row_scale[0][0] * b.y;
        pre.scale[j][2] = row_scale[0][1] * b.x;
        pre.scale[j][3] = row_scale[0][1] * b.y;
      }
      if (row_scale[0][0] != row_scale[0][0]) {
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kPreScale; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) sum += pre.scale[j][q];
        asm volatile("nanosleep.u32 %0;" ::"r"(__float_as_uint(sum) & 1u));
      }
    }
  }

  /// Columns 8j + 2 (lane % 4) + {0, 1} of this part scale by their own b_scale, read from the
  /// k-block's slot, after the stage went back (Loop::kEarlyRelease, only with the ring) or before.
  template <int kSub, int kBuf, bool kAssign, class Loop>
  DT_DEVICE static void finish(Loop& loop) {
    constexpr int kPart = kSub % Cfg::kNumNParts;
    constexpr bool kReleases = kSub == Loop::kLast;
    const float* cols = b_columns<kPart, kBuf>(loop);
    if constexpr (Loop::kEarlyRelease && kReleases) loop.release_next();
    if constexpr (kPreScale > 0) {
#pragma unroll
      for (int j = 0; j < kPreScale; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          promote_into<kAssign>(loop.result[kSub][4 * j + q], loop.pre.scale[j][q] * loop.acc[kBuf][4 * j + q]);
        }
      }
    }
    const auto& row_scale = loop.row_scale[kBuf];
    const auto& acc = loop.acc[kBuf];
#pragma unroll
    for (int j = kPreScale; j < Loop::kAcc / 4; ++j) {
      const float2 b = *reinterpret_cast<const float2*>(cols + 8 * j);
      promote_into<kAssign>(loop.result[kSub][4 * j + 0], (row_scale[0] * b.x) * acc[4 * j + 0]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 1], (row_scale[0] * b.y) * acc[4 * j + 1]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 2], (row_scale[1] * b.x) * acc[4 * j + 2]);
      promote_into<kAssign>(loop.result[kSub][4 * j + 3], (row_scale[1] * b.y) * acc[4 * j + 3]);
    }
    if constexpr (!Loop::kEarlyRelease && kReleases) loop.release_next();
  }
};

}  // namespace deep_tile
