// JIT entry for the FP8 casting kernels (deep_tile/casts/quant_kernels.py sets DT_IN_DTYPE).
#include "deep_tile/kernels/cast_fp8.cuh"

/// x [m, k] contiguous -> q [m, k] e4m3, scales [m, ceil(k/128)]; grid covers m*ceil(k/128) warps.
extern "C" __global__ void __launch_bounds__(256) deep_tile_per_token_cast(const deep_tile::InputT* __restrict__ x,
                                                                          deep_tile::u8* __restrict__ q,
                                                                          float* __restrict__ scales, int m, int k) {
  deep_tile::per_token_cast(x, q, scales, m, k);
}

/// w [n, k] contiguous -> q [n, k] e4m3, scales [ceil(n/128), ceil(k/128)]; grid (ceil(k/128), ceil(n/128)).
extern "C" __global__ void __launch_bounds__(256) deep_tile_per_block_cast(const deep_tile::InputT* __restrict__ x,
                                                                          deep_tile::u8* __restrict__ q,
                                                                          float* __restrict__ scales, int n, int k) {
  deep_tile::per_block_cast(x, q, scales, n, k);
}
