// JIT entry for the FP8 GEMM: deep_tile/select/config.py sets the DT_* macros
// (KernelConfig.defines()) and the kernel gets a stable, unmangled name.
#include "deep_tile/kernels/fp8_gemm_sm90.cuh"

#if !defined(DT_BLOCK_M) || !defined(DT_BLOCK_N) || !defined(DT_NUM_STAGES) || !defined(DT_NUM_MULTICAST) || \
    !defined(DT_MULTICAST_ON_A)
#error "DT_BLOCK_M, DT_BLOCK_N, DT_NUM_STAGES, DT_NUM_MULTICAST, DT_MULTICAST_ON_A are set by deep_tile.select"
#endif

using Cfg = deep_tile::Fp8GemmConfig<DT_BLOCK_M, DT_BLOCK_N, DT_NUM_STAGES, DT_NUM_MULTICAST, DT_MULTICAST_ON_A != 0>;

// NOTES: the bound of 384 threads (not Cfg::kNumThreads) fixes the register count at entry to 168
// for every config, so setmaxnreg.dec 40 / .inc 232 are valid for 256- and 384-thread blocks.
extern "C" __global__ void __launch_bounds__(384, 1)
    deep_tile_fp8_gemm_sm90(const __grid_constant__ deep_tile::TmaDescriptor tma_a,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_b,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_a_scale,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_d, const float* __restrict__ b_scale,
                            int m, int n, int k, int group_size) {
  deep_tile::fp8_gemm_sm90<Cfg>(tma_a, tma_b, tma_a_scale, tma_d, b_scale, m, n, k, group_size);
}
