// JIT entry for the einsum kernels (deep_tile/einsum.py launches them; DT_EINSUM_STAGES from
// deep_tile/kernels/einsum.py).
#include "deep_tile/kernels/bmk_bnk_mn.cuh"
#include "deep_tile/kernels/head_major.cuh"

/// 'bmk,bnk->mn': grid tiles * ceil(s * k / 64 / split), 288 threads, BmkSmem::kBytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(deep_tile::kBmkThreads, 1) deep_tile_einsum_bmk_bnk_mn(
    const __grid_constant__ deep_tile::TmaDescriptor map_a, const __grid_constant__ deep_tile::TmaDescriptor map_b,
    float* __restrict__ d, int num_batches, int m, int n, int k, int split) {
  deep_tile::bmk_bnk_mn(&map_a, &map_b, d, num_batches, m, n, k, split);
}

/// fp8_einsum's head-major copies: grid-stride over the chunks, kHeadMajorThreads threads.
extern "C" __global__ void __launch_bounds__(deep_tile::kHeadMajorThreads) deep_tile_einsum_head_major(
    const void* src0, void* dst0, int chunks0, int b_stride0, int h_stride0, const void* src1, void* dst1,
    int chunks1, int b_stride1, int h_stride1, const void* src2, void* dst2, int chunks2, int b_stride2,
    int h_stride2, int b, int h) {
  const deep_tile::HeadMajorOperand ops[3] = {
      {static_cast<const uint4*>(src0), static_cast<uint4*>(dst0), chunks0, b_stride0, h_stride0},
      {static_cast<const uint4*>(src1), static_cast<uint4*>(dst1), chunks1, b_stride1, h_stride1},
      {static_cast<const uint4*>(src2), static_cast<uint4*>(dst2), chunks2, b_stride2, h_stride2}};
  deep_tile::head_major_copy(ops, b, h);
}
