// JIT entry for the BF16 GEMM at m <= 4 streamed over B. deep_tile/kernels/bf16_gemm.py (GEMV_*)
// renders the DT_GEMV_* macros; DT_GEMV_THREADS is what the host believes, checked here.
#include "deep_tile/kernels/bf16_gemv.cuh"

#if !defined(DT_GEMV_ROWS) || !defined(DT_GEMV_OUT_F32) || !defined(DT_GEMV_ACCUMULATE) || !defined(DT_GEMV_THREADS)
#error "the DT_GEMV_* macros are set by deep_tile.kernels.bf16_gemm"
#endif

using GemvCfg = deep_tile::Bf16GemvConfig<DT_GEMV_ROWS, DT_GEMV_OUT_F32, DT_GEMV_ACCUMULATE>;
static_assert(GemvCfg::kThreads == DT_GEMV_THREADS, "DT_GEMV_THREADS disagrees with the kernel's block");

/// ceil(n / warps per block) blocks of DT_GEMV_THREADS threads, no shared memory.
extern "C" __global__ void __launch_bounds__(DT_GEMV_THREADS)
    deep_tile_bf16_gemv(const deep_tile::u16* __restrict__ a, const deep_tile::u16* __restrict__ b,
                        void* __restrict__ d, int m, int n, int k, int lda, int ldb, int ldd) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  deep_tile::bf16_gemv<GemvCfg>(a, b, d, m, n, k, lda, ldb, ldd);
#endif
}
