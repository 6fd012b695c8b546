// JIT entry for the lightning indexer's paged logits (deep_tile/paged_attention.py launches them; no defines):
// each logits kernel in seven designs, kPagedFourCtas under the plain name, the others with a suffix
// (_two_slots, _tma, _tma_one_chain, _tma_lean, _tma_loader, _tma_loader_wg).
#include "deep_tile/kernels/paged_mqa_logits.cuh"

/// The schedule: one CTA of kPagedScheduleThreads; schedule int32 [num_slots + 1, 2].
extern "C" __global__ void __launch_bounds__(deep_tile::kPagedScheduleThreads) deep_tile_paged_mqa_logits_schedule(
    const int* __restrict__ context_lens, int batch, int next_n, int num_slots, int* __restrict__ schedule) {
  deep_tile::paged_mqa_logits_schedule(context_lens, batch, next_n, num_slots, schedule);
}

#define DT_PAGED_MQA_LOGITS_ENTRY(next_n, heads, design, suffix)                                                     \
  extern "C" __global__ void __launch_bounds__(deep_tile::kPagedThreads, 4)                                      \
      deep_tile_paged_mqa_logits_n##next_n##_h##heads##suffix(                                                      \
          const deep_tile::u8* __restrict__ q, const deep_tile::u8* __restrict__ kv_cache, int kv_block_stride,    \
          int num_kv_blocks, const float* __restrict__ weights, const int* __restrict__ context_lens,              \
          const int* __restrict__ block_table, int block_table_stride, int max_blocks,                              \
          const int* __restrict__ schedule, float* __restrict__ logits, int stride_logits, int max_context_len,    \
          int batch) {                                                                                             \
    deep_tile::paged_mqa_logits<next_n, heads, design>(q, kv_cache, kv_block_stride, num_kv_blocks, weights,       \
                                                       context_lens, block_table, block_table_stride, max_blocks,  \
                                                       schedule, logits, stride_logits, max_context_len, batch);   \
  }

/// The logits: 4 CTAs of 128 threads per schedule slot, paged_mqa_logits_smem_bytes(next_n * heads, design) bytes each.
DT_PAGED_MQA_LOGITS_ENTRY(1, 32, deep_tile::kPagedFourCtas, )
DT_PAGED_MQA_LOGITS_ENTRY(1, 64, deep_tile::kPagedFourCtas, )
DT_PAGED_MQA_LOGITS_ENTRY(2, 32, deep_tile::kPagedFourCtas, )
DT_PAGED_MQA_LOGITS_ENTRY(2, 64, deep_tile::kPagedFourCtas, )
DT_PAGED_MQA_LOGITS_ENTRY(1, 32, deep_tile::kPagedTwoSlots, _two_slots)
DT_PAGED_MQA_LOGITS_ENTRY(1, 64, deep_tile::kPagedTwoSlots, _two_slots)
DT_PAGED_MQA_LOGITS_ENTRY(2, 32, deep_tile::kPagedTwoSlots, _two_slots)
DT_PAGED_MQA_LOGITS_ENTRY(2, 64, deep_tile::kPagedTwoSlots, _two_slots)

/// A logits entry taking the four tensor maps: `threads` per CTA (four CTAs per SM), its body the
/// device function named by the trailing arguments (a template-id, commas and all).
#define DT_PAGED_MQA_LOGITS_MAPS_ENTRY_CTAS(next_n, heads, threads, ctas, suffix, ...)                         \
  extern "C" __global__ void __launch_bounds__(threads, ctas)                                                    \
      deep_tile_paged_mqa_logits_n##next_n##_h##heads##suffix(                                                      \
          const __grid_constant__ deep_tile::TmaDescriptor tmap_kv,                                                 \
          const __grid_constant__ deep_tile::TmaDescriptor tmap_scales,                                             \
          const __grid_constant__ deep_tile::TmaDescriptor tmap_q, const __grid_constant__ deep_tile::TmaDescriptor tmap_w, \
          int rows_per_block, int num_kv_blocks, const int* __restrict__ context_lens,                             \
          const int* __restrict__ block_table, int block_table_stride, int max_blocks,                              \
          const int* __restrict__ schedule, float* __restrict__ logits, int stride_logits, int max_context_len,    \
          int batch) {                                                                                             \
    __VA_ARGS__(&tmap_kv, &tmap_scales, &tmap_q, &tmap_w, rows_per_block, num_kv_blocks, context_lens, block_table, \
                block_table_stride, max_blocks, schedule, logits, stride_logits, max_context_len, batch);          \
  }
#define DT_PAGED_MQA_LOGITS_MAPS_ENTRY(next_n, heads, threads, suffix, ...) \
  DT_PAGED_MQA_LOGITS_MAPS_ENTRY_CTAS(next_n, heads, threads, 4, suffix, __VA_ARGS__)
#define DT_PAGED_MQA_LOGITS_TMA_ENTRY(next_n, heads, design, suffix) \
  DT_PAGED_MQA_LOGITS_MAPS_ENTRY(next_n, heads, deep_tile::kPagedThreads, suffix,  \
                                 deep_tile::paged_mqa_logits_tma<next_n, heads, design>)

/// The kPagedTma design: operands by TMA through four tensor maps (paged_mqa_logits_tma).
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 32, deep_tile::kPagedTma, _tma)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 64, deep_tile::kPagedTma, _tma)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 32, deep_tile::kPagedTma, _tma)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 64, deep_tile::kPagedTma, _tma)
/// kPagedTmaOneChain: one wgmma chain per block, the weights in registers.
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 32, deep_tile::kPagedTmaOneChain, _tma_one_chain)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 64, deep_tile::kPagedTmaOneChain, _tma_one_chain)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 32, deep_tile::kPagedTmaOneChain, _tma_one_chain)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 64, deep_tile::kPagedTmaOneChain, _tma_one_chain)
/// kPagedTmaLean: kPagedTmaOneChain with a leaner block (one store per lane, a fast walk).
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 32, deep_tile::kPagedTmaLean, _tma_lean)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(1, 64, deep_tile::kPagedTmaLean, _tma_lean)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 32, deep_tile::kPagedTmaLean, _tma_lean)
DT_PAGED_MQA_LOGITS_TMA_ENTRY(2, 64, deep_tile::kPagedTmaLean, _tma_lean)

#define DT_PAGED_MQA_LOGITS_LOADER_ENTRY(next_n, heads)                                           \
  DT_PAGED_MQA_LOGITS_MAPS_ENTRY(next_n, heads, deep_tile::kPagedLoaderThreads, _tma_loader, \
                                 deep_tile::paged_mqa_logits_loader<next_n, heads>)

/// kPagedTmaLoader: kPagedTmaLean's block with a loader warpgroup (160 threads per CTA, paged_mqa_logits_loader).
DT_PAGED_MQA_LOGITS_LOADER_ENTRY(1, 32)
DT_PAGED_MQA_LOGITS_LOADER_ENTRY(1, 64)
DT_PAGED_MQA_LOGITS_LOADER_ENTRY(2, 32)
DT_PAGED_MQA_LOGITS_LOADER_ENTRY(2, 64)

#define DT_PAGED_MQA_LOGITS_LOADER_WG_ENTRY(next_n, heads)                                             \
  DT_PAGED_MQA_LOGITS_MAPS_ENTRY_CTAS(next_n, heads, deep_tile::kPagedLoaderWgThreads, 1, _tma_loader_wg, \
                                      deep_tile::paged_mqa_logits_loader<next_n, heads, deep_tile::kPagedTmaLoaderWg>)

/// kPagedTmaLoaderWg: one CTA per slot of four math warpgroups and a loader warpgroup (640 threads, 96
/// registers at launch, 112 for the math warpgroups after setmaxnreg): the weights in registers for every N.
DT_PAGED_MQA_LOGITS_LOADER_WG_ENTRY(1, 32)
DT_PAGED_MQA_LOGITS_LOADER_WG_ENTRY(1, 64)
DT_PAGED_MQA_LOGITS_LOADER_WG_ENTRY(2, 32)
DT_PAGED_MQA_LOGITS_LOADER_WG_ENTRY(2, 64)

/// The clean pass: any grid, any block; -inf past each row's length (cut at len_limit).
extern "C" __global__ void deep_tile_paged_mqa_logits_clean(const int* __restrict__ context_lens,
                                                            float* __restrict__ logits, int rows, int stride_logits,
                                                            int max_context_len, int len_limit) {
  deep_tile::paged_mqa_logits_clean(context_lens, logits, rows, stride_logits, max_context_len, len_limit);
}
