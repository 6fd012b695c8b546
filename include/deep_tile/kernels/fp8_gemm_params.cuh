// The FP8 GEMM's compile-time parameters in groups, so that a family's configuration
// (fp8_gemm_1d2d.cuh, fp8_gemm_1d1d.cuh) names a few of them instead of a long positional list.
#pragma once

namespace deep_tile {

/// The CTA tile, kBlockM x kBlockN, each consumer warpgroup's WGMMA chains kWgmmaN wide.
template <int kBlockM_, int kBlockN_, int kWgmmaN_>
struct TileShape {
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kWgmmaN = kWgmmaN_;
};

/// Clusters of kNumMulticast (1 or 2) CTAs, the pair loading the tile of A (kOnA) or of B they share.
template <int kNumMulticast_, bool kOnA_>
struct Multicast {
  static constexpr int kNumMulticast = kNumMulticast_;
  static constexpr bool kOnA = kOnA_;
};

/// The stage ring and the k-loop's form: stages, accumulator buffers, k-blocks per unrolled body.
template <int kNumStages_, int kNumAccumBuffers_, int kKUnroll_>
struct KLoop {
  static constexpr int kNumStages = kNumStages_, kNumAccumBuffers = kNumAccumBuffers_, kKUnroll = kKUnroll_;
};

/// K fixed at compile time: its K blocks (0: K is a run-time value), the k-blocks per unrolled
/// body of that loop, and the stage ring as immediates.
template <int kBlocks_ = 0, int kUnroll_ = 1, bool kRing_ = false>
struct StaticK {
  static constexpr int kBlocks = kBlocks_, kUnroll = kUnroll_;
  static constexpr bool kRing = kRing_;
};

/// The epilogue: D in bf16 (kOutKind 0) or FP32 (1), C (kCKind 0: none, 1: bf16, 2: FP32, 3: D
/// itself), the masked kind's completion signals (kSignal 0: off, 1: by the storing thread, 2: by
/// the producer's signal warp) and the K-grouped kind's staged epilogue (kStaged).
template <int kOutKind_ = 0, int kCKind_ = 0, int kSignal_ = 0, bool kStaged_ = false>
struct Output {
  static constexpr int kOutKind = kOutKind_, kCKind = kCKind_, kSignal = kSignal_;
  static constexpr bool kStaged = kStaged_;
};

}  // namespace deep_tile
