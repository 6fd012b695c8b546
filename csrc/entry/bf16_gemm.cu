// JIT entry for the BF16 GEMMs. deep_tile/kernels/bf16_gemm.py (this kernel's contract) renders
// the DT_BF16_* macros; DT_BF16_SMEM_BYTES and DT_BF16_THREADS are what the host believes, checked here.
#include "deep_tile/kernels/bf16_gemm.cuh"

#if !defined(DT_BF16_MAJOR_A) || !defined(DT_BF16_MAJOR_B) || !defined(DT_BF16_BLOCK_N) || !defined(DT_BF16_STAGES) || \
    !defined(DT_BF16_OUT_F32) || !defined(DT_BF16_ACCUMULATE) || !defined(DT_BF16_GEMM_TYPE) ||                      \
    !defined(DT_BF16_TMA_STORE) || !defined(DT_BF16_BOX_M) || !defined(DT_BF16_CLUSTER_M) ||                          \
    !defined(DT_BF16_STORE_ALL) || !defined(DT_BF16_COMPACT_A) || !defined(DT_BF16_BLOCK_M) ||                        \
    !defined(DT_BF16_K_MERGE) || !defined(DT_BF16_SMEM_BYTES) || !defined(DT_BF16_THREADS)
#error "the DT_BF16_* macros are set by deep_tile.kernels.bf16_gemm"
#endif

using Bf16Cfg = deep_tile::Bf16GemmConfig<DT_BF16_MAJOR_A, DT_BF16_MAJOR_B, DT_BF16_BLOCK_N, DT_BF16_STAGES,
                                          DT_BF16_OUT_F32, DT_BF16_ACCUMULATE, DT_BF16_GEMM_TYPE,
                                          DT_BF16_TMA_STORE, DT_BF16_BOX_M,
                                          DT_BF16_CLUSTER_M, DT_BF16_STORE_ALL,
                                          DT_BF16_COMPACT_A, DT_BF16_BLOCK_M, DT_BF16_K_MERGE>;
static_assert(Bf16Cfg::kSmemBytes == DT_BF16_SMEM_BYTES, "DT_BF16_SMEM_BYTES disagrees with the kernel's shared memory");
static_assert(Bf16Cfg::kThreads == DT_BF16_THREADS, "DT_BF16_THREADS disagrees with the kernel's block");

/// Persistent grid (at most one CTA per SM), DT_BF16_THREADS threads, DT_BF16_SMEM_BYTES dynamic shared memory.
extern "C" __global__ void __launch_bounds__(DT_BF16_THREADS, 1)
    deep_tile_bf16_gemm(const __grid_constant__ deep_tile::TmaDescriptor tmap_a,
                        const __grid_constant__ deep_tile::TmaDescriptor tmap_b,
                        const __grid_constant__ deep_tile::TmaDescriptor tmap_d, void* __restrict__ d,
                        const int* __restrict__ layout, int m, int n, int k, int ldd, int num_groups,
                        float* __restrict__ workspace, unsigned* __restrict__ counters, int group_ldd) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  deep_tile::bf16_gemm<Bf16Cfg>(&tmap_a, &tmap_b, &tmap_d, d, layout, m, n, k, ldd, num_groups, workspace, counters,
                                group_ldd);
#endif
}
