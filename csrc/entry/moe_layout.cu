// JIT entry for the MoE layout kernels (deep_tile/gemm/moe_layout.py launches them; no defines).
#include "deep_tile/kernels/moe_layout.cuh"

/// expert_ends [G] (DeepGEMM's psum layout) -> m_indices [m]; grid covers m threads.
extern "C" __global__ void __launch_bounds__(256) deep_tile_psum_to_m_indices(const int* __restrict__ ends,
                                                                             int* __restrict__ m_indices,
                                                                             int num_groups, int m, int alignment) {
  deep_tile::psum_to_m_indices(ends, m_indices, num_groups, m, alignment);
}

/// The completion flags of a masked GEMM's real row blocks; grid covers num_groups * blocks_per_group threads.
extern "C" __global__ void __launch_bounds__(256) deep_tile_raise_signals(int* __restrict__ signal,
                                                                         const int* __restrict__ masked_m,
                                                                         int num_groups, int blocks_per_group,
                                                                         int max_m, int block_m, int threshold) {
  deep_tile::raise_signals(signal, masked_m, num_groups, blocks_per_group, max_m, block_m, threshold);
}
