// JIT entry for the lightning indexer's logits (deep_tile/attention.py launches them; no defines).
#include "deep_tile/kernels/mqa_logits.cuh"

#define DT_MQA_LOGITS_ENTRY(heads)                                                                                 \
  extern "C" __global__ void __launch_bounds__(deep_tile::kMqaThreads) deep_tile_mqa_logits_h##heads(            \
      const deep_tile::u8* __restrict__ q, const deep_tile::u8* __restrict__ kv,                                   \
      const float* __restrict__ kv_scales, const float* __restrict__ weights, int weights_stride,                  \
      const int* __restrict__ ks, const int* __restrict__ ke, float* __restrict__ logits, int seq_len,             \
      int seq_len_kv, int stride_logits, int rows_per_cta, int clean, int compressed_cols) {                       \
    deep_tile::mqa_logits<heads>(q, kv, kv_scales, weights, weights_stride, ks, ke, logits, seq_len, seq_len_kv,  \
                                 stride_logits, rows_per_cta, clean, compressed_cols);                            \
  }

/// grid (ceil(seq_len_kv / 128), ceil(seq_len / rows_per_cta)), 256 threads; one symbol per head count.
DT_MQA_LOGITS_ENTRY(32)
DT_MQA_LOGITS_ENTRY(64)
