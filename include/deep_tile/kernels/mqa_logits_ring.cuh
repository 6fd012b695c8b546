// The lightning indexer's logits with the query block fixed and kv streamed (the "ring" design of
// deep_tile/kernels/mqa_logits.py; semantics as mqa_logits.cuh).
//
// A CTA takes 128 / H query rows (their heads are the wgmma's N = 128 side) and a share of the kv
// blocks of 128 rows that meet those rows' ranges. A producer warp loads the q tile once and the
// kv blocks (with their scales) through a TMA ring of kMqaRingStages stages; two math warpgroups,
// 64 kv rows each, run m64n128k32 wgmmas over head_dim 128 on each block, then take relu, the
// weights (staged once per CTA) and the head sums, and scale by the kv row's scale. Two CTAs fit on
// an SM (registers and shared memory), so one's start and end overlap the other's blocks.
// The warpgroups meet only at the ring's barriers, so one's epilogue overlaps the other's MMAs.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/mqa_logits_epilogue.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

constexpr int kMqaRingStages = 4;                        // kv blocks in flight
constexpr int kMqaRingBlockKV = 128;                     // kv rows per block: 64 per math warpgroup
constexpr int kMqaRingMathThreads = 256;
constexpr int kMqaRingThreads = kMqaRingMathThreads + 32;  // + the producer warp
constexpr int kMqaRingN = 128;                           // query rows x heads of a CTA: the wgmma's N

/// Dynamic shared memory of one CTA (tiles 1024-byte aligned: the 128B swizzle's period).
struct alignas(1024) MqaRingSmem {
  u8 q[kMqaRingN * 128];
  u8 kv[kMqaRingStages][kMqaRingBlockKV * 128];
  float scales[kMqaRingStages][kMqaRingBlockKV];
  float weights[kMqaRingN];  // column c: query row c / H, head c % H
  u64 full[kMqaRingStages];
  u64 empty[kMqaRingStages];
  u64 q_full;
};

/// The kv blocks [begin, end) of this CTA: the blocks of 128 rows from `lo` (the query rows'
/// smallest start, rounded down to a multiple of 4) that cover up to `hi` (their largest end),
/// split evenly over gridDim.y.
struct MqaRingWork {
  int lo, hi, begin, end;
};

template <int kNumHeads>
DT_DEVICE MqaRingWork mqa_ring_work(const int* __restrict__ ks, const int* __restrict__ ke, int i0, int seq_len,
                                    int seq_len_kv) {
  constexpr int kQRows = kMqaRingN / kNumHeads;
  int lo = seq_len_kv, hi = 0;
#pragma unroll
  for (int r = 0; r < kQRows; ++r) {
    if (i0 + r >= seq_len) break;
    const int s = min_int(max_int(__ldg(ks + i0 + r), 0), seq_len_kv);
    const int e = min_int(max_int(__ldg(ke + i0 + r), 0), seq_len_kv);
    if (s < e) lo = min_int(lo, s), hi = max_int(hi, e);
  }
  if (lo >= hi) return MqaRingWork{0, 0, 0, 0};
  lo &= ~3;  // the scales' box starts on a 16-byte boundary (TMA traps on another start)
  const int blocks = ceil_div(hi - lo, kMqaRingBlockKV);
  const int per = ceil_div(blocks, static_cast<int>(gridDim.y));
  const int begin = min_int(blocks, static_cast<int>(blockIdx.y) * per);
  return MqaRingWork{lo, hi, begin, min_int(blocks, begin + per)};
}

template <int kNumHeads>
DT_DEVICE void mqa_logits_ring(const TmaDescriptor* q_map, const TmaDescriptor* kv_map,
                               const TmaDescriptor* scale_map, const float* __restrict__ weights, int weights_stride,
                               const int* __restrict__ ks, const int* __restrict__ ke, float* __restrict__ logits,
                               int seq_len, int seq_len_kv, int stride_logits, int clean, int compressed_cols) {
  static_assert(kMqaRingN % kNumHeads == 0 && kNumHeads % 8 == 0, "whole query rows per CTA");
  constexpr int kQRows = kMqaRingN / kNumHeads;
  using Mma = ptx::WgmmaFp8<kMqaRingN>;
  extern __shared__ __align__(1024) u8 mqa_ring_smem[];
  MqaRingSmem& smem = *reinterpret_cast<MqaRingSmem*>(mqa_ring_smem);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int i0 = blockIdx.x * kQRows;
  if (tid == 0) {
    for (int s = 0; s < kMqaRingStages; ++s) {
      ptx::mbarrier_init(&smem.full[s], 1);
      ptx::mbarrier_init(&smem.empty[s], kMqaRingMathThreads);
    }
    ptx::mbarrier_init(&smem.q_full, 1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write q, kv, weights or the ranges
  ptx::launch_dependents();
  const MqaRingWork work = mqa_ring_work<kNumHeads>(ks, ke, i0, seq_len, seq_len_kv);

  if (warp == kMqaRingMathThreads / 32) {  // the producer warp: one lane issues every load
    if (lane != 0 || work.begin >= work.end) return;
    ptx::mbarrier_arrive_expect_tx(&smem.q_full, kMqaRingN * 128);
    ptx::tma_load_2d(smem.q, q_map, &smem.q_full, 0, i0 * kNumHeads);  // rows past seq_len * H: zeros
    PipelineState<kMqaRingStages> state;
    for (int b = work.begin; b < work.end; ++b, state.advance()) {
      ptx::mbarrier_wait(&smem.empty[state.index], state.empty_parity());
      u64* full = &smem.full[state.index];
      ptx::mbarrier_arrive_expect_tx(full, kMqaRingBlockKV * 128 + kMqaRingBlockKV * 4);
      const int kv_begin = work.lo + b * kMqaRingBlockKV;  // rows past seq_len_kv: zeros
      ptx::tma_load_2d(smem.kv[state.index], kv_map, full, 0, kv_begin);
      ptx::tma_load_2d(smem.scales[state.index], scale_map, full, kv_begin, 0);
    }
    return;
  }

  // the math warpgroups: this thread's columns are 8 n + 2 (lane % 4) + {0, 1}, n < 16; its kv rows
  // are 16 warp + lane / 4 and 8 below, of its warpgroup's 64
  const int group = warp >> 2, warp_in_group = warp & 3;
  if (tid < kMqaRingN) {
    const int i = i0 + tid / kNumHeads;
    smem.weights[tid] = i < seq_len ? __ldg(weights + static_cast<long long>(i) * weights_stride + tid % kNumHeads)
                                    : 0.0f;
  }
  ptx::named_barrier_sync(1, kMqaRingMathThreads);  // the weights are staged (the producer warp is not waited for)
  int raw_start[kQRows], end[kQRows];  // the row's start as given (the compressed columns count from it)
#pragma unroll
  for (int r = 0; r < kQRows; ++r) {
    const int i = i0 + r;
    raw_start[r] = i < seq_len ? __ldg(ks + i) : 0;
    end[r] = i < seq_len ? min_int(__ldg(ke + i), seq_len_kv) : 0;
  }
  const float neg_inf = -__int_as_float(0x7f800000);
  const int row_in_block = group * 64 + warp_in_group * 16 + (lane >> 2);
  const u32 q_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.q));

  if (work.begin < work.end) ptx::mbarrier_wait(&smem.q_full, 0);
  PipelineState<kMqaRingStages> state;
  for (int b = work.begin; b < work.end; ++b, state.advance()) {
    ptx::mbarrier_wait(&smem.full[state.index], state.full_parity());
    const float scale0 = smem.scales[state.index][row_in_block];
    const float scale1 = smem.scales[state.index][row_in_block + 8];
    const u32 kv_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.kv[state.index] + group * 64 * 128));
    float acc[Mma::kNumAccum];
    mqa_tile_mma<kMqaRingN>(kv_desc_lo, q_desc_lo, acc);
    ptx::mbarrier_arrive(&smem.empty[state.index]);  // its wgmmas and scale reads are done

    float v0[kQRows], v1[kQRows];
    mqa_head_sums<kMqaRingN, kNumHeads>(
        acc, lane, [&](int col) { return *reinterpret_cast<const float2*>(smem.weights + col); }, v0, v1);
    const int j0 = work.lo + b * kMqaRingBlockKV + row_in_block;
#pragma unroll
    for (int r = 0; r < kQRows; ++r) {
      if ((lane & 3) != (r & 3) || i0 + r >= seq_len) continue;  // lane q of each quad stores rows q, q + 4, ...
      float* out_row = logits + static_cast<long long>(i0 + r) * stride_logits;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int j = j0 + 8 * s;
        const float value = s == 0 ? v0[r] * scale0 : v1[r] * scale1;
        if (j < seq_len_kv) mqa_store_logit(out_row, j, value, raw_start[r], end[r], clean, compressed_cols);
      }
    }
  }

  // -inf in the columns no CTA of these rows visits: before the first block and past the last one,
  // this CTA taking every gridDim.y-th column of them
  if (clean && compressed_cols == 0) {
    const int visited_end = work.lo + ceil_div(work.hi - work.lo, kMqaRingBlockKV) * kMqaRingBlockKV;
    for (int r = 0; r < kQRows; ++r) {
      if (i0 + r >= seq_len) break;
      float* out_row = logits + static_cast<long long>(i0 + r) * stride_logits;
      for (int c = static_cast<int>(blockIdx.y) * kMqaRingMathThreads + tid; c < seq_len_kv;
           c += static_cast<int>(gridDim.y) * kMqaRingMathThreads) {
        if (c < work.lo || c >= visited_end) out_row[c] = neg_inf;
      }
    }
  }
}

}  // namespace deep_tile
