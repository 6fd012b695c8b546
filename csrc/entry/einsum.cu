// JIT entry for the einsum kernels (deep_tile/einsum.py launches them; DT_EINSUM_STAGES from
// deep_tile/kernels/einsum.py).
#include "deep_tile/kernels/bmk_bnk_mn.cuh"

/// 'bmk,bnk->mn': grid tiles * ceil(s * k / 64 / split), 288 threads, BmkSmem::kBytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(deep_tile::kBmkThreads, 1) deep_tile_einsum_bmk_bnk_mn(
    const __grid_constant__ deep_tile::TmaDescriptor map_a, const __grid_constant__ deep_tile::TmaDescriptor map_b,
    float* __restrict__ d, int num_batches, int m, int n, int k, int split) {
  deep_tile::bmk_bnk_mn(&map_a, &map_b, d, num_batches, m, n, k, split);
}
