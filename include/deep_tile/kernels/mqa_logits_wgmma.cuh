// The lightning indexer's logits on FP8 tensor cores (the "wgmma" design of
// deep_tile/kernels/mqa_logits.py; semantics as mqa_logits.cuh): two warpgroups per CTA, 64 kv rows each.
//
// The CTA stages its kv rows once, 128B-swizzled, each warpgroup's 64 as its m64 A operand; per
// step it stages (once for both warpgroups: half the L2 traffic of one-warpgroup CTAs) the
// q rows of 128 / H query rows (128 rows of 128 bytes: heads are the N side, N = 128) and their
// weights, issues four m64n128k32 wgmmas over head_dim 128, then per kv row takes relu, weights
// and sums the heads of each query row (in-thread, then over the four lanes of a row quad) and
// scales by the kv row's scale. The next step's q rows are loaded into registers while this one
// computes. Operands are written with ordinary stores (no TMA: the tiles are
// small and loaded once or once per step), made visible to the tensor cores by a proxy fence.
// Steps whose query rows all miss the kv block skip the MMA (uniform across the CTA).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/mqa_logits_epilogue.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

constexpr int kMqaWgmmaGroups = 2;                          // warpgroups per CTA, sharing the q tile
constexpr int kMqaWgmmaBlockKV = 64 * kMqaWgmmaGroups;      // kv rows per CTA: the wgmma's M per warpgroup
constexpr int kMqaWgmmaThreads = 128 * kMqaWgmmaGroups;
constexpr int kMqaWgmmaN = 128;        // query rows x heads per step: the wgmma's N

/// Shared memory of one CTA: both tiles 1024-byte aligned (the 128B swizzle's period).
struct alignas(1024) MqaWgmmaSmem {
  u8 kv[kMqaWgmmaBlockKV * 128];
  u8 q[kMqaWgmmaN * 128];
  float weights[kMqaWgmmaN];
};

/// Byte offset of 16-byte chunk `chunk` of row `row` in a K-major tile of 128-byte rows, 128B-swizzled.
DT_DEVICE int sw128_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

template <int kNumHeads>
DT_DEVICE void mqa_logits_wgmma(const u8* __restrict__ q, const u8* __restrict__ kv,
                                const float* __restrict__ kv_scales, const float* __restrict__ weights,
                                int weights_stride, const int* __restrict__ ks, const int* __restrict__ ke,
                                float* __restrict__ logits, int seq_len, int seq_len_kv, int stride_logits,
                                int rows_per_cta, int clean, int compressed_cols) {
  static_assert(kMqaWgmmaN % kNumHeads == 0 && kNumHeads % 8 == 0, "whole query rows per step");
  constexpr int kQRows = kMqaWgmmaN / kNumHeads;  // query rows per step
  using Mma = ptx::WgmmaFp8<kMqaWgmmaN>;
  __shared__ MqaWgmmaSmem smem;

  ptx::grid_dependency_wait();  // the stream predecessor may write q, kv, weights or the ranges
  ptx::launch_dependents();

  const int tid = threadIdx.x;
  const int group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int kv_begin = blockIdx.x * kMqaWgmmaBlockKV;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int c = tid; c < kMqaWgmmaBlockKV * 8; c += kMqaWgmmaThreads) {
    const int r = c >> 3, chunk = c & 7;
    const bool valid = kv_begin + r < seq_len_kv;
    const uint4* row = reinterpret_cast<const uint4*>(kv + static_cast<long long>(kv_begin + r) * 128);
    const uint4 v = valid ? row[chunk] : zero;
    *reinterpret_cast<uint4*>(smem.kv + sw128_offset(r, chunk)) = v;
  }
  // this thread's two kv rows in the accumulator layout: 16 * warp + lane / 4 of its warpgroup's 64, and 8 below
  const int j0 = kv_begin + group * 64 + warp * 16 + (lane >> 2), j1 = j0 + 8;
  const float scale0 = j0 < seq_len_kv ? kv_scales[j0] : 0.0f;
  const float scale1 = j1 < seq_len_kv ? kv_scales[j1] : 0.0f;
  const u32 kv_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.kv + group * 64 * 128));
  const u32 q_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.q));

  // the q rows of one step, this thread's four 16-byte chunks of the 128-row tile (zero past seq_len)
  constexpr int kQChunks = kMqaWgmmaN * 8 / kMqaWgmmaThreads;
  uint4 q_regs[kQChunks];
  int q_regs_step = -1;  // the step whose q rows q_regs holds (prefetched during the previous step)
  const auto load_q = [&](int base) {
    const uint4* src = reinterpret_cast<const uint4*>(q + static_cast<long long>(base) * kNumHeads * 128);
#pragma unroll
    for (int u = 0; u < kQChunks; ++u) {
      const int c = tid + u * kMqaWgmmaThreads;
      q_regs[u] = base + (c >> 3) / kNumHeads < seq_len ? src[c] : zero;
    }
    q_regs_step = base;
  };

  const float neg_inf = -__int_as_float(0x7f800000);
  const int row_begin = blockIdx.y * rows_per_cta;
  const int row_end = min_int(seq_len, row_begin + rows_per_cta);
  for (int i0 = row_begin; i0 < row_end; i0 += kQRows) {
    int raw_start[kQRows], start[kQRows], end[kQRows];
    bool any = false;
#pragma unroll
    for (int r = 0; r < kQRows; ++r) {
      const int i = i0 + r;
      raw_start[r] = i < row_end ? ks[i] : 0;
      start[r] = max_int(raw_start[r], 0);
      end[r] = i < row_end ? min_int(ke[i], seq_len_kv) : 0;
      any |= start[r] < end[r] && end[r] > kv_begin && start[r] < kv_begin + kMqaWgmmaBlockKV;
    }
    if (!any) {  // uniform: every thread read the same ranges
      if (clean && compressed_cols == 0 && tid < kMqaWgmmaBlockKV && kv_begin + tid < seq_len_kv) {
#pragma unroll
        for (int r = 0; r < kQRows; ++r)
          if (i0 + r < row_end) logits[static_cast<long long>(i0 + r) * stride_logits + kv_begin + tid] = neg_inf;
      }
      continue;
    }
    if (q_regs_step != i0) load_q(i0);  // not prefetched: the first step, or one after skipped steps
    __syncthreads();  // the previous step's wgmmas (waited for) and weight reads are done
#pragma unroll
    for (int u = 0; u < kQChunks; ++u) {
      const int c = tid + u * kMqaWgmmaThreads;
      *reinterpret_cast<uint4*>(smem.q + sw128_offset(c >> 3, c & 7)) = q_regs[u];
    }
    if (tid < kMqaWgmmaN) {
      const int i = i0 + tid / kNumHeads;
      smem.weights[tid] = i < seq_len ? weights[static_cast<long long>(i) * weights_stride + tid % kNumHeads] : 0.0f;
    }
    ptx::fence_proxy_async_shared();  // the stores above (and the kv tile's) reach the tensor cores' proxy
    __syncthreads();
    if (i0 + kQRows < row_end) load_q(i0 + kQRows);  // the next step's q arrives during this one's math

    float acc[Mma::kNumAccum];
    __syncwarp();  // the wgmmas are .aligned: the whole warp issues them together
    mqa_tile_mma<kMqaWgmmaN>(kv_desc_lo, q_desc_lo, acc);

    float v0[kQRows], v1[kQRows];
    mqa_head_sums<kMqaWgmmaN, kNumHeads>(
        acc, lane, [&](int col) { return make_float2(smem.weights[col], smem.weights[col + 1]); }, v0, v1);
    if ((lane & 3) == 0) {  // one lane of each quad stores its two kv rows
#pragma unroll
      for (int r = 0; r < kQRows; ++r) {
        const int i = i0 + r;
        if (i >= row_end) break;
        float* out_row = logits + static_cast<long long>(i) * stride_logits;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const int j = s == 0 ? j0 : j1;
          const float value = s == 0 ? v0[r] * scale0 : v1[r] * scale1;
          if (j < seq_len_kv) mqa_store_logit(out_row, j, value, raw_start[r], end[r], clean, compressed_cols);
        }
      }
    }
  }
}

}  // namespace deep_tile
