// JIT entry for the MoE layout kernels, the K-grouped GEMM's map table and the byte transposition of its TN
// form (deep_tile/gemm/moe_layout.py and deep_tile/gemm/launch.py launch them; no defines).
#include "deep_tile/kernels/fp8_transpose.cuh"
#include "deep_tile/kernels/k_grouped_maps.cuh"
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

/// The K-grouped GEMM's per-group tensor maps of DeepGEMM's NT layout (maps [2 G], 128 bytes each,
/// 64-byte aligned); one CTA of kKGroupedMapsThreads threads, G <= that.
extern "C" __global__ void __launch_bounds__(deep_tile::kKGroupedMapsThreads) deep_tile_k_grouped_maps(
    const __grid_constant__ deep_tile::TmaDescriptor tmpl_a, const __grid_constant__ deep_tile::TmaDescriptor tmpl_b,
    const deep_tile::u8* a, const deep_tile::u8* b, const int* __restrict__ sizes, int num_groups, int k, int m, int n,
    deep_tile::TmaDescriptor* __restrict__ maps) {
  deep_tile::write_k_grouped_maps(tmpl_a, tmpl_b, a, b, sizes, num_groups, k, m, n, maps);
}

/// src0 [rows, cols0] -> dst0 [cols0, rows] and src1 [rows, cols1] -> dst1 [cols1, rows] (bytes; cols1 0: none);
/// one CTA per 128x128 tile, op0's tiles first.
extern "C" __global__ void __launch_bounds__(deep_tile::kTransposeThreads) deep_tile_transpose_bytes(
    const deep_tile::u8* __restrict__ src0, deep_tile::u8* __restrict__ dst0, int cols0,
    const deep_tile::u8* __restrict__ src1, deep_tile::u8* __restrict__ dst1, int cols1, int rows) {
  deep_tile::transpose_bytes({src0, dst0, cols0}, {src1, dst1, cols1}, rows);
}
