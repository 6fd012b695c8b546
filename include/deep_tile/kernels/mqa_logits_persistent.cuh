// The lightning indexer's logits with persistent CTAs over wide query blocks (the "persistent"
// design of deep_tile/kernels/mqa_logits.py; semantics as mqa_logits.cuh).
//
// One CTA per SM walks work items (a query block of 256 / H rows and a share of its kv blocks) in a
// snake order, heaviest query blocks first, so causal ranges end together. A producer warp
// publishes each item through one of three q stages (the rows' ranges, weights and the q tile of 256
// columns, the next item's loading during the current one) and streams the kv blocks of 128 rows
// with their scales through a TMA ring. Four math warpgroups share every kv block: warpgroup w
// takes kv rows 64 (w % 2) .. + 64 against query columns 128 (w / 2) .. + 128 (one m64n128k32
// wgmma chain), so each kv byte brought from L2 serves 256 columns instead of 128.
//
// kLean (the "persistent_lean" design) changes only the epilogue, to the same values bit for bit:
// weights in quad order read as float4s, a quad reduce-scatter of the head sums (each lane ends
// with whole sums of its own row and kv row, none computed twice) and one branch-free range test
// and store per logit against per-lane bounds set once per item.
//
// kRegWeights (the "persistent_regs" design, with kLean) keeps the same logits and moves each
// thread's 32 weights of an item from shared memory into registers (the 16 float2 loads per kv
// block gone): the producer becomes a warpgroup that gives registers back (setmaxnreg) so the math
// warpgroups can hold 112 each (a fifth warp per SM sub-partition caps a uniform count at 96).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/mqa_logits_epilogue.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

constexpr int kMqaPersistStages = 6;   // kv blocks in flight
constexpr int kMqaPersistQStages = 3;  // the next items' q tiles load during the current one (short causal items)
constexpr int kMqaPersistBlockKV = 128;
constexpr int kMqaPersistCols = 256;  // query rows x heads of an item: two wgmma N halves
constexpr int kMqaPersistMathThreads = 512;
constexpr int kMqaPersistThreads = kMqaPersistMathThreads + 32;  // + the producer warp
constexpr int kMqaPersistMaxRows = kMqaPersistCols / 32;         // query rows of an item at H = 32
constexpr int kMqaPersistRegsThreads = kMqaPersistMathThreads + 128;  // kRegWeights: a producer warpgroup
constexpr int kMqaPersistRegsMath = 112;      // registers of a math thread after setmaxnreg (as DeepGEMM's)
constexpr int kMqaPersistRegsProducer = 32;   // 512 x 112 + 128 x 32 = 640 x 96: the launch's registers

/// An item as the producer publishes it: the rows' kv span and this item's block share, and each
/// row's start as given and clamped end (the compressed columns count from the raw start).
struct MqaPersistInfo {
  int lo, hi, begin, end;
  int raw_start[kMqaPersistMaxRows];
  int row_end[kMqaPersistMaxRows];
};

/// Dynamic shared memory of one CTA (tiles 1024-byte aligned: the 128B swizzle's period).
struct alignas(1024) MqaPersistSmem {
  u8 q[kMqaPersistQStages][kMqaPersistCols * 128];
  u8 kv[kMqaPersistStages][kMqaPersistBlockKV * 128];
  float scales[kMqaPersistStages][kMqaPersistBlockKV];
  float weights[kMqaPersistQStages][kMqaPersistCols];  // column c: query row c / H, head c % H
  MqaPersistInfo info[kMqaPersistQStages];
  u64 q_full[kMqaPersistQStages];
  u64 q_empty[kMqaPersistQStages];
  u64 full[kMqaPersistStages];
  u64 empty[kMqaPersistStages];
};

/// The item of this CTA's k-th turn, or -1 past the last: turn k covers items [k P, (k + 1) P) of P
/// CTAs, walked forwards on even turns and backwards on odd ones, counting from the last item.
DT_DEVICE int mqa_persist_item(int k, int num_items) {
  const int ctas = static_cast<int>(gridDim.x), cta = static_cast<int>(blockIdx.x);
  const int t = k * ctas + ((k & 1) ? ctas - 1 - cta : cta);
  return t < num_items ? num_items - 1 - t : -1;
}

template <int kNumHeads, bool kLean = false, bool kRegWeights = false>
DT_DEVICE void mqa_logits_persistent(const TmaDescriptor* q_map, const TmaDescriptor* kv_map,
                                     const TmaDescriptor* scale_map, const float* __restrict__ weights,
                                     int weights_stride, const int* __restrict__ ks, const int* __restrict__ ke,
                                     float* __restrict__ logits, int seq_len, int seq_len_kv, int stride_logits,
                                     int clean, int compressed_cols, int splits) {
  static_assert(128 % kNumHeads == 0 && kNumHeads % 8 == 0, "whole query rows per wgmma N half");
  constexpr int kQRows = kMqaPersistCols / kNumHeads;  // of an item
  constexpr int kHalfRows = kQRows / 2;                // of one wgmma N half
  static_assert(kQRows <= kMqaPersistMaxRows, "MqaPersistInfo holds the rows");
  static_assert(kLean || !kRegWeights, "register weights come with the lean epilogue");
  extern __shared__ __align__(1024) u8 mqa_persist_smem[];
  MqaPersistSmem& smem = *reinterpret_cast<MqaPersistSmem*>(mqa_persist_smem);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int num_items = ceil_div(seq_len, kQRows) * splits;
  if (tid == 0) {
    for (int s = 0; s < kMqaPersistQStages; ++s) {
      ptx::mbarrier_init(&smem.q_full[s], 32);  // every producer lane publishes its own writes
      ptx::mbarrier_init(&smem.q_empty[s], kMqaPersistMathThreads);
    }
    for (int s = 0; s < kMqaPersistStages; ++s) {
      ptx::mbarrier_init(&smem.full[s], 1);
      ptx::mbarrier_init(&smem.empty[s], kMqaPersistMathThreads);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write q, kv, weights or the ranges
  ptx::launch_dependents();

  if (kRegWeights ? warp >= kMqaPersistMathThreads / 32 : warp == kMqaPersistMathThreads / 32) {  // the producer
    if constexpr (kRegWeights) {  // every warp of the warpgroup executes its setmaxnreg
      ptx::setmaxnreg_dec<kMqaPersistRegsProducer>();
      if (warp > kMqaPersistMathThreads / 32) return;  // one producer warp does the work
    }
    PipelineState<kMqaPersistQStages> q_state;
    PipelineState<kMqaPersistStages> kv_state;
    for (int k = 0;; ++k, q_state.advance()) {
      const int item = mqa_persist_item(k, num_items);
      if (item < 0) break;
      const int i0 = (item / splits) * kQRows, split = item % splits;
      if constexpr (kRegWeights) {  // the q stage from the turn: the producer's 32 registers hold the rest
        q_state.index = k % kMqaPersistQStages;
        q_state.phase = static_cast<u32>(k / kMqaPersistQStages) & 1u;
      }
      ptx::mbarrier_wait(&smem.q_empty[q_state.index], q_state.empty_parity());
      MqaPersistInfo& info = smem.info[q_state.index];
      int lo = seq_len_kv, hi = 0;
      if (lane < kQRows) {
        const int i = i0 + lane;
        const int raw = i < seq_len ? __ldg(ks + i) : 0;
        const int end = i < seq_len ? min_int(__ldg(ke + i), seq_len_kv) : 0;
        const int s = min_int(max_int(raw, 0), seq_len_kv), e = max_int(end, 0);
        if (s < e) lo = s, hi = e;
        info.raw_start[lane] = raw;
        info.row_end[lane] = end;
      }
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        lo = min_int(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
        hi = max_int(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
      }
#pragma unroll
      for (int c = lane; c < kMqaPersistCols; c += 32) {
        const int i = i0 + c / kNumHeads;
        smem.weights[q_state.index][c] =
            i < seq_len ? __ldg(weights + static_cast<long long>(i) * weights_stride + c % kNumHeads) : 0.0f;
      }
      int begin = 0, end = 0;
      if (lo < hi) {
        lo &= ~3;  // the scales' box starts on a 16-byte boundary (TMA traps on another start)
        const int blocks = ceil_div(hi - lo, kMqaPersistBlockKV);
        const int per = ceil_div(blocks, splits);
        begin = min_int(blocks, split * per);
        end = min_int(blocks, begin + per);
      } else {
        lo = hi = 0;
      }
      if (lane == 0) info.lo = lo, info.hi = hi, info.begin = begin, info.end = end;
      u64* q_full = &smem.q_full[q_state.index];
      if (lane == 0 && begin < end) {
        ptx::mbarrier_arrive_expect_tx(q_full, kMqaPersistCols * 128);
        ptx::tma_load_2d(smem.q[q_state.index], q_map, q_full, 0, i0 * kNumHeads);  // rows past seq_len * H: zeros
      } else {
        ptx::mbarrier_arrive(q_full);  // releases this lane's info and weights
      }
      for (int b = begin; b < end; ++b, kv_state.advance()) {
        ptx::mbarrier_wait(&smem.empty[kv_state.index], kv_state.empty_parity());
        if (lane == 0) {
          u64* full = &smem.full[kv_state.index];
          ptx::mbarrier_arrive_expect_tx(full, kMqaPersistBlockKV * 128 + kMqaPersistBlockKV * 4);
          const int kv_begin = lo + b * kMqaPersistBlockKV;  // rows past seq_len_kv: zeros
          ptx::tma_load_2d(smem.kv[kv_state.index], kv_map, full, 0, kv_begin);
          ptx::tma_load_2d(smem.scales[kv_state.index], scale_map, full, kv_begin, 0);
        }
        __syncwarp();
      }
    }
    return;
  }

  // only the math warpgroups reach this point: ptxas allocates the code below with their registers
  if constexpr (kRegWeights) ptx::setmaxnreg_inc<kMqaPersistRegsMath>();
  // the math warpgroups: this thread's columns (of its N half) are 8 n + 2 (lane % 4) + {0, 1}, n < 16;
  // its kv rows are 16 warp + lane / 4 and 8 below, of its warpgroup's 64
  const int group = warp >> 2, warp_in_group = warp & 3;
  const int kv_half = group & 1, q_half = group >> 1;
  const int row_in_block = kv_half * 64 + warp_in_group * 16 + (lane >> 2);
  const float neg_inf = -__int_as_float(0x7f800000);
  PipelineState<kMqaPersistQStages> q_state;
  PipelineState<kMqaPersistStages> kv_state;
  for (int k = 0;; ++k, q_state.advance()) {
    const int item = mqa_persist_item(k, num_items);
    if (item < 0) break;
    const int i0 = (item / splits) * kQRows, split = item % splits;
    if constexpr (kLean) {  // the q stage from the turn: two fewer registers live across the blocks
      q_state.index = k % kMqaPersistQStages;
      q_state.phase = static_cast<u32>(k / kMqaPersistQStages) & 1u;
    }
    ptx::mbarrier_wait(&smem.q_full[q_state.index], q_state.full_parity());
    const MqaPersistInfo& info = smem.info[q_state.index];
    const int lo = info.lo, hi = info.hi, begin = info.begin, end = info.end;
    if constexpr (kLean) {
      // after the reduce-scatter lane q of a quad holds row q % 2 of its N half at kv row s = q / 2
      // (H = 64), or row q at both kv rows (H = 32)
      constexpr int kSums = kHalfRows / 2;  // whole sums per lane
      const int my_row = q_half * kHalfRows + (kHalfRows == 2 ? (lane & 1) : (lane & 3));
      const int my_s = kHalfRows == 2 ? (lane >> 1) & 1 : 0;
      const int i = i0 + my_row;
      const int raw = info.raw_start[my_row], row_end = info.row_end[my_row];
      // logit j is inside its row's stored range iff row_lo <= j < row_lo + width (compressed: also
      // j - raw < compressed_cols); past seq_len the producer gave the row an empty range
      const int row_lo = max_int(raw, 0);
      long long row_hi = row_end;
      const long long compressed_end = static_cast<long long>(raw) + compressed_cols;
      if (compressed_cols > 0 && compressed_end < row_hi) row_hi = compressed_end;
      const int width = row_hi > row_lo ? static_cast<int>(row_hi - row_lo) : 0;
      const bool neg_fill = clean && compressed_cols == 0 && i < seq_len;
      const int col_shift = compressed_cols > 0 ? raw : 0;  // j below counts output columns: kv row - col_shift
      const int col_lo = row_lo - col_shift;
      const float* half_weights = smem.weights[q_state.index] + q_half * 128;
      const u32 q_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.q[q_state.index] + q_half * 128 * 128));
      const int j_lane = lo + row_in_block + 8 * my_s - col_shift;
      // kRegWeights: the weight pair of columns 8 n + 2 (lane % 4), n < 16, read once per item
      float* const row_out = logits + static_cast<long long>(i) * stride_logits;
      float2 weight_regs[kRegWeights ? 16 : 1];
      if constexpr (kRegWeights) {
#pragma unroll
        for (int n = 0; n < 16; ++n)
          weight_regs[n] = *reinterpret_cast<const float2*>(half_weights + 8 * n + 2 * (lane & 3));
      }

      for (int b = begin; b < end; ++b, kv_state.advance()) {
        ptx::mbarrier_wait(&smem.full[kv_state.index], kv_state.full_parity());
        float scale[kSums];
#pragma unroll
        for (int t = 0; t < kSums; ++t) scale[t] = smem.scales[kv_state.index][row_in_block + 8 * (my_s + t)];
        const u32 kv_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.kv[kv_state.index] + kv_half * 64 * 128));
        float acc[ptx::WgmmaFp8<128>::kNumAccum];
        mqa_tile_mma<128>(kv_desc_lo, q_desc_lo, acc);
        ptx::mbarrier_arrive(&smem.empty[kv_state.index]);  // its wgmmas and scale reads are done

        float v0[kHalfRows], v1[kHalfRows];
        mqa_head_partial_sums<128, kNumHeads>(
            acc, lane,
            [&](int col) {
              if constexpr (kRegWeights) return weight_regs[col >> 3];  // col = 8 n + 2 (lane % 4)
              else return *reinterpret_cast<const float2*>(half_weights + col);
            },
            v0, v1);
        float x[2 * kHalfRows], y[kHalfRows], z[kSums];  // x[2 r + s]: row r at kv row s
#pragma unroll
        for (int r = 0; r < kHalfRows; ++r) x[2 * r] = v0[r], x[2 * r + 1] = v1[r];
        mqa_quad_halve<2 * kHalfRows, 1>(x, y, lane & 1, 1);                   // keeps rows r % 2 == q % 2
        mqa_quad_halve<kHalfRows, kHalfRows == 2 ? 0 : 1>(y, z, lane & 2, 2);  // H 64: kv row; H 32: row / 2
#pragma unroll
        for (int t = 0; t < kSums; ++t) {
          const int j = j_lane + b * kMqaPersistBlockKV + 8 * t;
          const bool inside = static_cast<u32>(j - col_lo) < static_cast<u32>(width);
          if (inside || (neg_fill && j < seq_len_kv)) {
            if constexpr (kRegWeights) row_out[j] = inside ? z[t] * scale[t] : neg_inf;  // one register pair less live
            else logits[static_cast<long long>(i) * stride_logits + j] = inside ? z[t] * scale[t] : neg_inf;
          }
        }
      }
    } else {
      int raw_start[kHalfRows], row_end[kHalfRows];
#pragma unroll
      for (int r = 0; r < kHalfRows; ++r) {
        raw_start[r] = info.raw_start[q_half * kHalfRows + r];
        row_end[r] = info.row_end[q_half * kHalfRows + r];
      }
      const float* half_weights = smem.weights[q_state.index] + q_half * 128;
      const u32 q_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.q[q_state.index] + q_half * 128 * 128));
      const int i_half = i0 + q_half * kHalfRows;

      for (int b = begin; b < end; ++b, kv_state.advance()) {
        ptx::mbarrier_wait(&smem.full[kv_state.index], kv_state.full_parity());
        const float scale0 = smem.scales[kv_state.index][row_in_block];
        const float scale1 = smem.scales[kv_state.index][row_in_block + 8];
        const u32 kv_desc_lo = ptx::sw128_lo(ptx::smem_addr(smem.kv[kv_state.index] + kv_half * 64 * 128));
        float acc[ptx::WgmmaFp8<128>::kNumAccum];
        mqa_tile_mma<128>(kv_desc_lo, q_desc_lo, acc);
        ptx::mbarrier_arrive(&smem.empty[kv_state.index]);  // its wgmmas and scale reads are done

        float v0[kHalfRows], v1[kHalfRows];
        mqa_head_sums<128, kNumHeads>(
            acc, lane, [&](int col) { return *reinterpret_cast<const float2*>(half_weights + col); }, v0, v1);
        const int j0 = lo + b * kMqaPersistBlockKV + row_in_block;
#pragma unroll
        for (int r = 0; r < kHalfRows; ++r) {
          if ((lane & 3) != (r & 3) || i_half + r >= seq_len) continue;  // lane q of each quad stores rows q, q + 4
          float* out_row = logits + static_cast<long long>(i_half + r) * stride_logits;
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const int j = j0 + 8 * s;
            const float value = s == 0 ? v0[r] * scale0 : v1[r] * scale1;
            if (j < seq_len_kv) mqa_store_logit(out_row, j, value, raw_start[r], row_end[r], clean, compressed_cols);
          }
        }
      }
    }
    ptx::mbarrier_arrive(&smem.q_empty[q_state.index]);  // q tile, weights and info read

    // -inf in the columns no item of these rows visits: before lo and past the last block, this item
    // taking every splits-th group of four columns (lo and the visited end are multiples of four,
    // the rows 1024-byte aligned)
    if (clean && compressed_cols == 0) {
      const int visited_end = lo + ceil_div(hi - lo, kMqaPersistBlockKV) * kMqaPersistBlockKV;
      const float4 neg_inf4 = make_float4(neg_inf, neg_inf, neg_inf, neg_inf);
      for (int r = 0; r < kQRows; ++r) {
        if (i0 + r >= seq_len) break;
        float* out_row = logits + static_cast<long long>(i0 + r) * stride_logits;
        for (int c = 4 * (split * kMqaPersistMathThreads + tid); c < seq_len_kv;
             c += 4 * splits * kMqaPersistMathThreads) {
          if (c >= lo && c < visited_end) continue;
          if (c + 4 <= seq_len_kv) {
            *reinterpret_cast<float4*>(out_row + c) = neg_inf4;
          } else {
            for (int e = c; e < seq_len_kv; ++e) out_row[e] = neg_inf;
          }
        }
      }
    }
  }
}

}  // namespace deep_tile
