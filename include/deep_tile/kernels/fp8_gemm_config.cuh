// Compile-time configuration of the FP8 GEMM kernel, with every derived size in one place.
// Mirrors deep_tile/select/config.py (KernelConfig): keep the shared-memory formula identical.
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile {

template <int kBlockM_, int kBlockN_, int kNumStages_, int kNumMulticast_, bool kMulticastOnA_>
struct Fp8GemmConfig {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 128;  // one scale group along K
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kNumMulticast = kNumMulticast_;
  static constexpr bool kMulticastA = kNumMulticast_ == 2 && kMulticastOnA_;
  static constexpr bool kMulticastB = kNumMulticast_ == 2 && !kMulticastOnA_;

  // Threads: consumer warpgroups first, the producer warpgroup last.
  static constexpr int kNumMathWarpgroups = kBlockM == 64 ? 1 : 2;
  static constexpr int kWgM = kBlockM / kNumMathWarpgroups;  // rows per consumer warpgroup
  static constexpr int kNumSlabs = kWgM / 64;                 // m64 WGMMAs per consumer per k-slice
  static constexpr int kNumMathThreads = 128 * kNumMathWarpgroups;
  static constexpr int kNumMathWarps = kNumMathThreads / 32;
  static constexpr int kNumThreads = kNumMathThreads + 128;
  static constexpr int kProducerRegisters = 40;
  // Launch allots 168 x 384 registers; the producer gives back 128 each: 128*40 + 256*232.
  static constexpr int kConsumerRegisters = 232;

  // Shared memory (bytes): D staging, then A, B and a_scale stages, then the barriers.
  static constexpr int kSmemDBytes = align_up(kBlockM * kBlockN * 2, 1024);
  static constexpr int kTileABytes = kBlockM * kBlockK;
  static constexpr int kTileBBytes = kBlockN * kBlockK;
  static constexpr int kTileAScaleBytes = kBlockM * 4;
  static constexpr int kStageTxBytes = kTileABytes + kTileBBytes + kTileAScaleBytes;
  static constexpr int kSmemBytes = kSmemDBytes + kNumStages * kStageTxBytes + kNumStages * 16;

  // Epilogue: D is stored in atoms of kStoreSwizzleBytes-wide rows (the TMA swizzle span).
  static constexpr int kStoreSwizzleBytes = kBlockN % 64 == 0 ? 128 : (kBlockN % 32 == 0 ? 64 : 32);
  static constexpr int kAtomCols = kStoreSwizzleBytes / 2;
  static constexpr int kNumAtoms = kBlockN / kAtomCols;

  DT_STATIC_ASSERT(kBlockM == 64 || kBlockM == 128 || kBlockM == 256, "DT_BLOCK_M must be 64, 128 or 256");
  DT_STATIC_ASSERT(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256,
                   "DT_BLOCK_N must be a multiple of 16 in [16, 256]");
  DT_STATIC_ASSERT(kBlockN <= 128 || kBlockN - gcd(kBlockN, 128) <= 128,
                   "DT_BLOCK_N > 128 must be 144, 160, 192 or 256 (a tile spans at most two b_scale blocks)");
  // Measured with ptxas 13.0 (tools/check_kernels.sh): larger tiles spill accumulators.
  DT_STATIC_ASSERT(kBlockN <= (kBlockM == 64 ? 144 : kBlockM == 128 ? 160 : 64),
                   "DT_BLOCK_N exceeds the register budget: at most 144 (block_m 64), 160 (128), 64 (256)");
  DT_STATIC_ASSERT(kNumStages >= 2 && kNumStages <= 16, "DT_NUM_STAGES must be in [2, 16]");
  DT_STATIC_ASSERT(kNumMulticast == 1 || kNumMulticast == 2, "DT_NUM_MULTICAST must be 1 or 2");
  DT_STATIC_ASSERT(kSmemBytes <= 232448, "shared memory exceeds the sm_90 limit of 232448 bytes");
};

}  // namespace deep_tile
