// JIT entry for the hyper-connection pre-norm GEMM (deep_tile/hyper_connection.py launches it;
// DT_HC_STAGES, DT_HC_MATH_GROUPS and DT_HC_CTAS_PER_SM from deep_tile/kernels/hc_prenorm.py).
#include "deep_tile/kernels/hc_prenorm.cuh"

#define DT_HC_PRENORM_ENTRY(n)                                                                              \
  extern "C" __global__ void __launch_bounds__(deep_tile::kHcThreads, deep_tile::kHcCtasPerSm)             \
      deep_tile_hc_prenorm_gemm_n##n(const __grid_constant__ deep_tile::TmaDescriptor map_a,                 \
                                     const __grid_constant__ deep_tile::TmaDescriptor map_b,                 \
                                     float* __restrict__ d, float* __restrict__ sqr_sum, int m,              \
                                     int num_k_blocks, int num_splits, int d_row_stride, int d_split_stride, \
                                     int sub_splits) {                                                       \
    deep_tile::hc_prenorm_gemm<n>(&map_a, &map_b, d, sqr_sum, m, num_k_blocks, num_splits, d_row_stride,   \
                                  d_split_stride, sub_splits);                                               \
  }

/// Persistent: grid min(work items, kHcCtasPerSm * SMs), kHcThreads threads, HcSmem<N>::kBytes of
/// dynamic shared memory; one symbol per N.
DT_HC_PRENORM_ENTRY(8)
DT_HC_PRENORM_ENTRY(16)
DT_HC_PRENORM_ENTRY(24)
DT_HC_PRENORM_ENTRY(32)

/// The partials' sum: grid-stride over groups * (m * n + m) outputs, kHcReduceThreads threads, no shared memory.
extern "C" __global__ void __launch_bounds__(deep_tile::kHcReduceThreads) deep_tile_hc_prenorm_reduce(
    const float* __restrict__ work_d, const float* __restrict__ work_s, float* __restrict__ d,
    float* __restrict__ sqr_sum, int m, int n, int splits, int d_row_stride, int groups, int d_split_stride) {
  deep_tile::hc_prenorm_reduce(work_d, work_s, d, sqr_sum, m, n, splits, d_row_stride, groups, d_split_stride);
}
