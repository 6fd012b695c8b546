// JIT entry for the FP8 GEMM. deep_tile/kernels/fp8_gemm.py (the owner of this kernel's contract)
// renders the DT_* macros from a KernelConfig; the contract macros (DT_SMEM_BYTES, DT_MIN_STAGES,
// DT_MAX_STAGES, DT_STORE_SWIZZLE, DT_SCALE_GROUP, DT_NUM_THREADS) are what the host believes about
// this kernel, checked here against what the kernel derives.
#include "deep_tile/kernels/fp8_gemm_1d1d.cuh"
#include "deep_tile/kernels/fp8_gemm_1d2d.cuh"
#include "deep_tile/kernels/fp8_gemm_sm90.cuh"

#if !defined(DT_BLOCK_M) || !defined(DT_BLOCK_N) || !defined(DT_NUM_STAGES) || !defined(DT_NUM_MULTICAST) || \
    !defined(DT_MULTICAST_ON_A) || !defined(DT_SPLIT_K) || !defined(DT_ACCUM_BUFFERS) || !defined(DT_WGMMA_N) || \
    !defined(DT_A_SCALE_ROW_MAJOR) || !defined(DT_RASTER_ALONG_M) || !defined(DT_EVICT_FIRST_B) || !defined(DT_K_UNROLL) || \
    !defined(DT_PROBLEM_KIND) || !defined(DT_SWAP_N) || !defined(DT_OUT_KIND) || !defined(DT_C_KIND) || \
    !defined(DT_B_SCALE_1D)
#error "DT_BLOCK_M, DT_BLOCK_N, DT_NUM_STAGES, DT_NUM_MULTICAST, DT_MULTICAST_ON_A, DT_SPLIT_K, DT_ACCUM_BUFFERS, DT_WGMMA_N, DT_A_SCALE_ROW_MAJOR, DT_RASTER_ALONG_M, DT_EVICT_FIRST_B, DT_K_UNROLL, DT_PROBLEM_KIND, DT_SWAP_N, DT_OUT_KIND, DT_C_KIND and DT_B_SCALE_1D are set by deep_tile.kernels.fp8_gemm"
#endif
#if !defined(DT_SMEM_BYTES) || !defined(DT_MIN_STAGES) || !defined(DT_MAX_STAGES) || !defined(DT_STORE_SWIZZLE) || \
    !defined(DT_SCALE_GROUP) || !defined(DT_NUM_THREADS)
#error "the contract macros DT_SMEM_BYTES, DT_MIN_STAGES, DT_MAX_STAGES, DT_STORE_SWIZZLE, DT_SCALE_GROUP and DT_NUM_THREADS are set by deep_tile.kernels.fp8_gemm"
#endif

// DT_SIGNAL (optional, 0 when absent): the masked kernel with completion signals, its own symbol
// (1: each raised right after its tile's store, 2: at the warpgroup's next store; Fp8GemmConfig::kSignal).
#ifndef DT_SIGNAL
#define DT_SIGNAL 0
#endif
// DT_STAGED_EPILOGUE (optional, 0 when absent): the K-grouped kind's FP32 D loaded, added to and
// stored by a storer thread through shared memory (Fp8GemmConfig::kStagedEpilogue); the
// kernel's parameters are unchanged (D's tensor map is tma_d).
#ifndef DT_STAGED_EPILOGUE
#define DT_STAGED_EPILOGUE 0
#endif
// DT_STATIC_K_BLOCKS (optional, 0 when absent): the problem's K blocks, fixed at compile time
// (Fp8GemmConfig::kStaticKBlocks), and DT_STATIC_K_UNROLL (1 when absent) the K blocks per
// unrolled body of that k-loop; the kernel's parameters are unchanged.
#ifndef DT_STATIC_K_BLOCKS
#define DT_STATIC_K_BLOCKS 0
#endif
#ifndef DT_STATIC_K_UNROLL
#define DT_STATIC_K_UNROLL 1
#endif
// DT_STATIC_RING (optional, 0 when absent): with K fixed at a multiple of the stages, the stage
// ring as immediates (Fp8GemmConfig::kStaticRing); the kernel's parameters are unchanged.
#ifndef DT_STATIC_RING
#define DT_STATIC_RING 0
#endif

// DT_HEAD_STRIDED (optional, 0 when absent): the masked kind reading A and its row-major scales and
// writing D through [rows, G * cols] views of fp8_einsum's tensors (HeadStridedConfig); the
// kernel's parameters are unchanged, m is the rows of one group (max_m).
#ifndef DT_HEAD_STRIDED
#define DT_HEAD_STRIDED 0
#endif

// The parameters in fp8_gemm_params.cuh's groups, then the family's configuration (DT_B_SCALE_1D).
using Shape = deep_tile::TileShape<DT_BLOCK_M, DT_BLOCK_N, DT_WGMMA_N>;
using Cluster = deep_tile::Multicast<DT_NUM_MULTICAST, DT_MULTICAST_ON_A != 0>;
using Pipeline = deep_tile::KLoop<DT_NUM_STAGES, DT_ACCUM_BUFFERS, DT_K_UNROLL>;
using FixedK = deep_tile::StaticK<DT_STATIC_K_BLOCKS, DT_STATIC_K_UNROLL, DT_STATIC_RING != 0>;
using Out = deep_tile::Output<DT_OUT_KIND, DT_C_KIND, DT_SIGNAL, DT_STAGED_EPILOGUE != 0>;
constexpr auto kKind = static_cast<deep_tile::ProblemKind>(DT_PROBLEM_KIND);
#if DT_B_SCALE_1D
static_assert(DT_SWAP_N == 0 && DT_SIGNAL == 0,
              "DT_B_SCALE_1D (1D1D) needs the dense or the K-grouped kind without swap-AB (DT_SWAP_N 0) or DT_SIGNAL");
using ProductCfg = deep_tile::Fp8Gemm1D1DConfig<Shape, Cluster, Pipeline, FixedK, Out, kKind, DT_SPLIT_K,
                                                DT_A_SCALE_ROW_MAJOR != 0, DT_RASTER_ALONG_M != 0,
                                                DT_EVICT_FIRST_B != 0>;
#else
static_assert(DT_STAGED_EPILOGUE == 0 && DT_PROBLEM_KIND != 4 && DT_PROBLEM_KIND != 6,
              "DT_STAGED_EPILOGUE and the K-grouped kinds (DT_PROBLEM_KIND 4 and 6) need DT_B_SCALE_1D");
using ProductCfg = deep_tile::Fp8Gemm1D2DConfig<Shape, Cluster, Pipeline, FixedK, Out, kKind, DT_SPLIT_K,
                                                DT_A_SCALE_ROW_MAJOR != 0, DT_RASTER_ALONG_M != 0,
                                                DT_EVICT_FIRST_B != 0, DT_SWAP_N>;
#endif
// A build with extra defines (probes, tools) may change tuned choices; the library's builds never do.
#ifdef DT_PROBE_OVERRIDES
#include "deep_tile/probes/overrides.cuh"
using TunedCfg = deep_tile::probes::ProbeOverrides<ProductCfg>;
#else
using TunedCfg = ProductCfg;
#endif
#if DT_HEAD_STRIDED
using Cfg = deep_tile::HeadStridedConfig<TunedCfg>;
#else
using Cfg = TunedCfg;
#endif
// The kernel family: how B is scaled (1D1D: per row, the weight gradients; 1D2D: per 128x128 block).
#if DT_B_SCALE_1D
using Family = deep_tile::Fp8Gemm1D1D<Cfg>;
#else
using Family = deep_tile::Fp8Gemm1D2D<Cfg>;
#endif

static_assert(DT_SMEM_BYTES == Cfg::kSmemBytes,
              "contract: DT_SMEM_BYTES (deep_tile.kernels.fp8_gemm.smem_bytes) differs from Fp8GemmConfig::kSmemBytes");
static_assert(DT_MIN_STAGES == Cfg::kMinStages && DT_MAX_STAGES == Cfg::kMaxStages,
              "contract: DT_MIN_STAGES / DT_MAX_STAGES differ from Fp8GemmConfig::kMinStages / kMaxStages");
static_assert(DT_STORE_SWIZZLE == Cfg::kStoreSwizzleBytes,
              "contract: DT_STORE_SWIZZLE (the D tensor map's swizzle) differs from Fp8GemmConfig::kStoreSwizzleBytes");
static_assert(DT_SCALE_GROUP == deep_tile::kScaleGroup,
              "contract: DT_SCALE_GROUP (deep_tile.common.SCALE_GROUP) differs from deep_tile::kScaleGroup");
static_assert(DT_NUM_THREADS == Cfg::kNumThreads,
              "contract: DT_NUM_THREADS (the launch's block size) differs from Fp8GemmConfig::kNumThreads");

static_assert(DT_PROBLEM_KIND >= 0 && DT_PROBLEM_KIND <= 6,
              "DT_PROBLEM_KIND must be a deep_tile::ProblemKind (0 dense, 1 contiguous, 2 masked, 3 offsets, 4 K-grouped, "
              "5 psum, 6 K-grouped in DeepGEMM's NT layout)");

// The output variants (DT_OUT_KIND != 0 or DT_C_KIND != 0: FP32 D, or D = C + A.B^T) take two
// more parameters, C and its row pitch (elements; deep_tile/kernels/fp8_gemm.py C_ARGUMENTS),
// and store through `d` (which C may be: not __restrict__ there). The default variant's parameter
// list is unchanged. The K-grouped kind always stores so (bf16 without C too).
#if DT_OUT_KIND != 0 || DT_C_KIND != 0 || DT_PROBLEM_KIND == 4 || DT_PROBLEM_KIND == 6
#define DT_D_RESTRICT
#define DT_C_PARAMS , const deep_tile::u8* c, int ldc
#define DT_C_VALUES c, ldc
#else
#define DT_D_RESTRICT __restrict__
#define DT_C_PARAMS
#define DT_C_VALUES nullptr, 0
#endif
// The 1D1D variant (DT_B_SCALE_1D) takes b_scale's tensor map last (deep_tile/kernels/fp8_gemm.py
// B_SCALE_1D_ARGUMENTS).
#if DT_B_SCALE_1D
#define DT_B1D_PARAMS , const __grid_constant__ deep_tile::TmaDescriptor tma_b_scale
#define DT_B1D_VALUES , &tma_b_scale
#else
#define DT_B1D_PARAMS
#define DT_B1D_VALUES
#endif
// The K-grouped kind in DeepGEMM's NT layout (DT_PROBLEM_KIND 6) takes the table of its groups'
// maps of A and B last (deep_tile/kernels/fp8_gemm.py K_GROUPED_BLOCKS_ARGUMENTS); tma_a and
// tma_b are the templates the table was made from.
#if DT_PROBLEM_KIND == 6
#define DT_MAPS_PARAMS , const deep_tile::TmaDescriptor* __restrict__ group_maps
#define DT_MAPS_VALUES , nullptr, group_maps
#else
#define DT_MAPS_PARAMS
#define DT_MAPS_VALUES
#endif

// NOTES: the bound of 384 threads (not Cfg::kNumThreads) fixes the register count at entry to 168
// for every config, so setmaxnreg.dec 40 / .inc 232 are valid for 256- and 384-thread blocks.
#if DT_PROBLEM_KIND == 0
extern "C" __global__ void __launch_bounds__(384, 1)
    deep_tile_fp8_gemm_sm90(const __grid_constant__ deep_tile::TmaDescriptor tma_a,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_b,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_a_scale,
                            const __grid_constant__ deep_tile::TmaDescriptor tma_d, const float* __restrict__ b_scale,
                            deep_tile::u8* DT_D_RESTRICT d, int ldd, int m, int n, int k, int raster_width DT_C_PARAMS DT_B1D_PARAMS) {
  deep_tile::fp8_gemm_sm90<Family>(tma_a, tma_b, tma_a_scale, tma_d, b_scale, d, ldd, m, n, k, raster_width,
                                deep_tile::GroupArgs{nullptr, 1, 0}, DT_C_VALUES DT_B1D_VALUES);
}
#elif DT_SIGNAL
// The masked kind with completion signals (deep_tile/kernels/fp8_gemm.py SIGNAL_ARGUMENTS): the
// grouped parameters, then the int32 counters, one per (expert, DT_BLOCK_M / warpgroups rows).
extern "C" __global__ void __launch_bounds__(384, 1)
    deep_tile_fp8_gemm_masked_signal_sm90(const __grid_constant__ deep_tile::TmaDescriptor tma_a,
                                          const __grid_constant__ deep_tile::TmaDescriptor tma_b,
                                          const __grid_constant__ deep_tile::TmaDescriptor tma_a_scale,
                                          const __grid_constant__ deep_tile::TmaDescriptor tma_d,
                                          const float* __restrict__ b_scale, deep_tile::u8* __restrict__ d, int ldd,
                                          int m, int n, int k, int raster_width, const int* __restrict__ group_info,
                                          int num_groups, int group_rows, int* __restrict__ signal) {
  deep_tile::fp8_gemm_sm90<Family>(tma_a, tma_b, tma_a_scale, tma_d, b_scale, d, ldd, m, n, k, raster_width,
                                deep_tile::GroupArgs{group_info, num_groups, group_rows}, nullptr, 0, nullptr, signal);
}
#else
// The grouped kinds (deep_tile/kernels/fp8_gemm.py GROUPED_ARGUMENTS): the dense parameters, then
// the kind's int32 array (m_indices, masked_m, offsets or the K-grouped kind's sizes), the expert
// count and max_m (masked); C's, and the 1D1D b_scale map (the K-grouped kind).
extern "C" __global__ void __launch_bounds__(384, 1)
    deep_tile_fp8_gemm_grouped_sm90(const __grid_constant__ deep_tile::TmaDescriptor tma_a,
                                    const __grid_constant__ deep_tile::TmaDescriptor tma_b,
                                    const __grid_constant__ deep_tile::TmaDescriptor tma_a_scale,
                                    const __grid_constant__ deep_tile::TmaDescriptor tma_d,
                                    const float* __restrict__ b_scale, deep_tile::u8* DT_D_RESTRICT d, int ldd, int m,
                                    int n, int k, int raster_width, const int* __restrict__ group_info,
                                    int num_groups, int group_rows DT_C_PARAMS DT_B1D_PARAMS DT_MAPS_PARAMS) {
  deep_tile::fp8_gemm_sm90<Family>(tma_a, tma_b, tma_a_scale, tma_d, b_scale, d, ldd, m, n, k, raster_width,
                                deep_tile::GroupArgs{group_info, num_groups, group_rows},
                                DT_C_VALUES DT_B1D_VALUES DT_MAPS_VALUES);
}
#endif
