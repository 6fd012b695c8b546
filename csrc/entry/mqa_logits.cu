// JIT entry for the lightning indexer's logits (deep_tile/attention.py launches them; no defines).
#include "deep_tile/kernels/mqa_logits.cuh"
#include "deep_tile/kernels/mqa_logits_wgmma.cuh"

#define DT_MQA_LOGITS_ENTRY(design, function, threads, heads)                                                      \
  extern "C" __global__ void __launch_bounds__(threads) deep_tile_mqa_logits_##design##h##heads(                 \
      const deep_tile::u8* __restrict__ q, const deep_tile::u8* __restrict__ kv,                                   \
      const float* __restrict__ kv_scales, const float* __restrict__ weights, int weights_stride,                  \
      const int* __restrict__ ks, const int* __restrict__ ke, float* __restrict__ logits, int seq_len,             \
      int seq_len_kv, int stride_logits, int rows_per_cta, int clean, int compressed_cols) {                       \
    deep_tile::function<heads>(q, kv, kv_scales, weights, weights_stride, ks, ke, logits, seq_len, seq_len_kv,  \
                                 stride_logits, rows_per_cta, clean, compressed_cols);                            \
  }

/// CUDA cores: grid (ceil(seq_len_kv / 128), ceil(seq_len / rows_per_cta)), 256 threads; one symbol per head count.
DT_MQA_LOGITS_ENTRY(, mqa_logits, deep_tile::kMqaThreads, 32)
DT_MQA_LOGITS_ENTRY(, mqa_logits, deep_tile::kMqaThreads, 64)
/// FP8 wgmma: grid (ceil(seq_len_kv / 128), ceil(seq_len / rows_per_cta)), 256 threads;
/// rows_per_cta a multiple of 128 / H.
DT_MQA_LOGITS_ENTRY(wgmma_, mqa_logits_wgmma, deep_tile::kMqaWgmmaThreads, 32)
DT_MQA_LOGITS_ENTRY(wgmma_, mqa_logits_wgmma, deep_tile::kMqaWgmmaThreads, 64)

#include "deep_tile/kernels/mqa_logits_ring.cuh"

// deep_tile/kernels/mqa_logits.py RING_SMEM_BYTES is this size (checked by tests/test_mqa_logits.py)
static_assert(sizeof(deep_tile::MqaRingSmem) == 84992, "MqaRingSmem changed: update RING_SMEM_BYTES");

#define DT_MQA_LOGITS_RING_ENTRY(heads)                                                                          \
  extern "C" __global__ void __launch_bounds__(deep_tile::kMqaRingThreads, 2) deep_tile_mqa_logits_ring_h##heads( \
      const __grid_constant__ deep_tile::TmaDescriptor q_map, const __grid_constant__ deep_tile::TmaDescriptor kv_map, \
      const __grid_constant__ deep_tile::TmaDescriptor scale_map, const float* __restrict__ weights,              \
      int weights_stride, const int* __restrict__ ks, const int* __restrict__ ke, float* __restrict__ logits,     \
      int seq_len, int seq_len_kv, int stride_logits, int clean, int compressed_cols) {                           \
    deep_tile::mqa_logits_ring<heads>(&q_map, &kv_map, &scale_map, weights, weights_stride, ks, ke, logits,      \
                                      seq_len, seq_len_kv, stride_logits, clean, compressed_cols);               \
  }

/// q fixed, kv streamed: grid (ceil(seq_len / (128 / H)), kv splits), 288 threads, RING_SMEM_BYTES of
/// dynamic shared memory; q, kv and kv_scales through tensor maps (deep_tile/attention.py builds them).
DT_MQA_LOGITS_RING_ENTRY(32)
DT_MQA_LOGITS_RING_ENTRY(64)

#include "deep_tile/kernels/mqa_logits_persistent.cuh"

// deep_tile/kernels/mqa_logits.py PERSISTENT_SMEM_BYTES is this size (checked by tests/test_mqa_logits.py)
static_assert(sizeof(deep_tile::MqaPersistSmem) == 203776, "MqaPersistSmem changed: update PERSISTENT_SMEM_BYTES");

#define DT_MQA_LOGITS_PERSISTENT_ENTRY(design, heads, lean, regs, threads)                                       \
  extern "C" __global__ void __launch_bounds__(threads, 1)                                                       \
      deep_tile_mqa_logits_##design##_h##heads(                                                                  \
          const __grid_constant__ deep_tile::TmaDescriptor q_map,                                                \
          const __grid_constant__ deep_tile::TmaDescriptor kv_map,                                               \
          const __grid_constant__ deep_tile::TmaDescriptor scale_map, const float* __restrict__ weights,          \
          int weights_stride, const int* __restrict__ ks, const int* __restrict__ ke,                             \
          float* __restrict__ logits, int seq_len, int seq_len_kv, int stride_logits, int clean,                  \
          int compressed_cols, int splits) {                                                                      \
    deep_tile::mqa_logits_persistent<heads, lean, regs>(&q_map, &kv_map, &scale_map, weights, weights_stride, ks, ke, logits, \
                                            seq_len, seq_len_kv, stride_logits, clean, compressed_cols, splits);  \
  }

/// Persistent CTAs over items (query blocks of 256 / H rows by kv splits): grid (min(items, SMs)),
/// 544 threads, PERSISTENT_SMEM_BYTES of dynamic shared memory; q tile boxes of 256 rows.
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent, 32, false, false, deep_tile::kMqaPersistThreads)
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent, 64, false, false, deep_tile::kMqaPersistThreads)
/// The same launch with the lean epilogue (mqa_logits_persistent.cuh kLean).
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent_lean, 32, true, false, deep_tile::kMqaPersistThreads)
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent_lean, 64, true, false, deep_tile::kMqaPersistThreads)
/// The lean epilogue with the weights in registers: 640 threads (mqa_logits_persistent.cuh kRegWeights).
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent_regs, 32, true, true, deep_tile::kMqaPersistRegsThreads)
DT_MQA_LOGITS_PERSISTENT_ENTRY(persistent_regs, 64, true, true, deep_tile::kMqaPersistRegsThreads)
