// The lightning indexer's logits (DeepSeek-V3.2; DeepGEMM's fp8_mqa_logits), on CUDA cores:
//   logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(sum_d q[i, h, d] * kv[j, d])
// for j in [ks[i], ke[i]) (clamped to [0, seq_len_kv)); q e4m3 [seq_len, H, 128], kv e4m3
// [seq_len_kv, 128], kv_scale, weights float32. The kv scale multiplies the head sum, as
// DeepGEMM's SM90 kernel applies it. Columns outside the range get -inf when `clean` is set and
// are left untouched otherwise; with `compressed_cols` > 0 the row is stored from column 0
// (logits[i, j - ks[i]]) and nothing else is written (DeepGEMM's max_seqlen_k mode).
//
// One CTA: 128 kv rows, two threads per row (each holds half of the row, 64 dims, as float32 in
// registers for the CTA's life) and `rows_per_cta` query rows. Per query row the CTA stages q[i]
// as float32 in shared memory (all lanes of a quarter-warp read one address: broadcasts) and each thread
// forms its half of the row's H dot products in float32, four heads at a time; one shuffle joins
// the halves before the relu. Query rows whose range misses the CTA's kv block skip the math
// (the branch is uniform across the CTA, so the barriers stay matched).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

namespace deep_tile {

constexpr int kMqaHeadDim = 128;
constexpr int kMqaBlockKV = 128;                     // kv rows per CTA
constexpr int kMqaThreads = 2 * kMqaBlockKV;          // two threads per kv row
constexpr int kMqaHalfDim = kMqaHeadDim / 2;          // dims per thread
constexpr int kMqaHeadGroup = 4;  // heads accumulated together: eight spill at nvcc ptxas's 128 registers

/// Four e4m3 bytes (byte 0 first) -> four floats, exactly (e4m3 fits in f16).
DT_DEVICE void e4m3x4_to_float(u32 word, float* out) {
  u32 lo, hi;
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi) : "r"(word));
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}"
      : "=f"(out[0]), "=f"(out[1]) : "r"(lo));
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}"
      : "=f"(out[2]), "=f"(out[3]) : "r"(hi));
}

/// 16 e4m3 bytes -> 16 floats.
DT_DEVICE void e4m3x16_to_float(const uint4& raw, float* out) {
  e4m3x4_to_float(raw.x, out);
  e4m3x4_to_float(raw.y, out + 4);
  e4m3x4_to_float(raw.z, out + 8);
  e4m3x4_to_float(raw.w, out + 12);
}

template <int kNumHeads>
DT_DEVICE void mqa_logits(const u8* __restrict__ q, const u8* __restrict__ kv, const float* __restrict__ kv_scales,
                          const float* __restrict__ weights, int weights_stride, const int* __restrict__ ks,
                          const int* __restrict__ ke, float* __restrict__ logits, int seq_len, int seq_len_kv,
                          int stride_logits, int rows_per_cta, int clean, int compressed_cols) {
  static_assert(kNumHeads % kMqaHeadGroup == 0, "heads come in whole groups");
  constexpr int kQVectors = kNumHeads * kMqaHeadDim / 16;   // 16-byte vectors of one q row
  __shared__ __align__(16) float q_smem[kNumHeads * kMqaHeadDim];
  __shared__ float w_smem[kNumHeads];

  ptx::grid_dependency_wait();  // the stream predecessor may write q, kv, weights or the ranges
  ptx::launch_dependents();

  const int tid = threadIdx.x;
  // lanes 0-15 of a warp hold the first halves of 16 kv rows, lanes 16-31 the second halves: each
  // quarter-warp then reads one q address per 16-byte load (a broadcast, no bank conflict)
  const int half = (tid >> 4) & 1;
  const int kv_begin = blockIdx.x * kMqaBlockKV;
  const int j = kv_begin + (tid >> 5) * 16 + (tid & 15);
  const bool has_row = j < seq_len_kv;
  float k[kMqaHalfDim];
  float kv_scale = 0.0f;
  if (has_row) {
    const u8* row = kv + static_cast<long long>(j) * kMqaHeadDim + half * kMqaHalfDim;
    const uint4* src = reinterpret_cast<const uint4*>(row);
#pragma unroll
    for (int v = 0; v < kMqaHalfDim / 16; ++v) e4m3x16_to_float(src[v], k + 16 * v);
    kv_scale = kv_scales[j];
  } else {
#pragma unroll
    for (int d = 0; d < kMqaHalfDim; ++d) k[d] = 0.0f;
  }

  const float neg_inf = -__int_as_float(0x7f800000);
  const bool writer = has_row && half == 0;
  const int row_begin = blockIdx.y * rows_per_cta;
  const int row_end = min_int(seq_len, row_begin + rows_per_cta);
  for (int i = row_begin; i < row_end; ++i) {
    const int raw_start = ks[i];
    const int start = max_int(raw_start, 0), end = min_int(ke[i], seq_len_kv);
    float* out_row = logits + static_cast<long long>(i) * stride_logits;
    // uniform across the CTA: every thread reads the same ks[i], ke[i]
    if (start >= end || end <= kv_begin || start >= kv_begin + kMqaBlockKV) {
      if (clean && writer && compressed_cols == 0) out_row[j] = neg_inf;
      continue;
    }
    __syncthreads();  // the previous row's q and weights are no longer read
    const uint4* q_src = reinterpret_cast<const uint4*>(q + static_cast<long long>(i) * kNumHeads * kMqaHeadDim);
#pragma unroll
    for (int v = tid; v < kQVectors; v += kMqaThreads) {
      float f[16];
      e4m3x16_to_float(q_src[v], f);
#pragma unroll
      for (int w = 0; w < 4; ++w)
        *reinterpret_cast<float4*>(q_smem + v * 16 + w * 4) =
            make_float4(f[4 * w], f[4 * w + 1], f[4 * w + 2], f[4 * w + 3]);
    }
    if (tid < kNumHeads) w_smem[tid] = weights[static_cast<long long>(i) * weights_stride + tid];
    __syncthreads();

    float logit = 0.0f;
#pragma unroll 1
    for (int g = 0; g < kNumHeads; g += kMqaHeadGroup) {
      float acc[kMqaHeadGroup];
#pragma unroll
      for (int h = 0; h < kMqaHeadGroup; ++h) acc[h] = 0.0f;
      const float* q_group = q_smem + g * kMqaHeadDim + half * kMqaHalfDim;
#pragma unroll
      for (int d = 0; d < kMqaHalfDim; d += 4) {
#pragma unroll
        for (int h = 0; h < kMqaHeadGroup; ++h) {
          const float4 qv = *reinterpret_cast<const float4*>(q_group + h * kMqaHeadDim + d);
          acc[h] = fmaf(k[d], qv.x, acc[h]);
          acc[h] = fmaf(k[d + 1], qv.y, acc[h]);
          acc[h] = fmaf(k[d + 2], qv.z, acc[h]);
          acc[h] = fmaf(k[d + 3], qv.w, acc[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kMqaHeadGroup; ++h) {
        const float dot = acc[h] + __shfl_xor_sync(0xffffffffu, acc[h], 16);  // join the two halves
        logit = fmaf(fmaxf(dot, 0.0f), w_smem[g + h], logit);
      }
    }
    logit *= kv_scale;
    if (!writer) continue;
    const bool inside = start <= j && j < end;
    if (compressed_cols > 0) {
      const int col = j - raw_start;  // DeepGEMM's compressed column: offset from the row's start
      if (inside && col < compressed_cols) out_row[col] = logit;
    } else if (inside) {
      out_row[j] = logit;
    } else if (clean) {
      out_row[j] = neg_inf;
    }
  }
}

}  // namespace deep_tile
