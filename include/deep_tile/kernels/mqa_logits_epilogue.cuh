// The pieces the FP8 wgmma designs of the indexer logits share (mqa_logits_wgmma.cuh,
// mqa_logits_ring.cuh, mqa_logits_persistent.cuh): one warpgroup's m64n128k32 MMAs of its 64 kv rows
// against 128 query-row heads, the per-row relu-weight-head sums of the accumulators, and the store
// of one logit; for the persistent design's lean epilogue also a quad reduce-scatter step.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

/// acc := kv tile (64 rows, 128B-swizzled at descriptor word `kv_desc_lo`) . q tile (N rows at
/// `q_desc_lo`) over head_dim 128 = four k32 steps, waited for.
template <int kN>
DT_DEVICE void mqa_tile_mma(u32 kv_desc_lo, u32 q_desc_lo, float (&acc)[ptx::WgmmaFp8<kN>::kNumAccum]) {
  using Mma = ptx::WgmmaFp8<kN>;
#pragma unroll
  for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc[a]);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)  // 32 bytes along the swizzled row each
    Mma::mma(ptx::sw128_desc(kv_desc_lo + k * 2), ptx::sw128_desc(q_desc_lo + k * 2), acc, k > 0);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
#pragma unroll
  for (int a = 0; a < Mma::kNumAccum; ++a) ptx::fence_operand(acc[a]);
}

/// v0[r], v1[r]: this lane's part (its columns) of the sum over query row r's heads of relu(acc) *
/// weight for this thread's two kv rows. `weight_pair(c)` gives the weights of columns c and c + 1
/// (c even).
template <int kN, int kNumHeads, class WeightPair>
DT_DEVICE void mqa_head_partial_sums(const float (&acc)[ptx::WgmmaFp8<kN>::kNumAccum], int lane,
                                     const WeightPair& weight_pair, float (&v0)[kN / kNumHeads],
                                     float (&v1)[kN / kNumHeads]) {
  constexpr int kQRows = kN / kNumHeads;
#pragma unroll
  for (int r = 0; r < kQRows; ++r) v0[r] = v1[r] = 0.0f;
#pragma unroll
  for (int n = 0; n < kN / 8; ++n) {
    const int r = (8 * n) / kNumHeads;  // the query row of columns 8n..8n+7
    const float2 w = weight_pair(8 * n + 2 * (lane & 3));
    v0[r] = fmaf(fmaxf(acc[4 * n], 0.0f), w.x, fmaf(fmaxf(acc[4 * n + 1], 0.0f), w.y, v0[r]));
    v1[r] = fmaf(fmaxf(acc[4 * n + 2], 0.0f), w.x, fmaf(fmaxf(acc[4 * n + 3], 0.0f), w.y, v1[r]));
  }
}

/// v0[r], v1[r]: mqa_head_partial_sums summed over the row quad's four lanes (every lane of a quad
/// ends with the sums).
template <int kN, int kNumHeads, class WeightPair>
DT_DEVICE void mqa_head_sums(const float (&acc)[ptx::WgmmaFp8<kN>::kNumAccum], int lane, const WeightPair& weight_pair,
                             float (&v0)[kN / kNumHeads], float (&v1)[kN / kNumHeads]) {
  constexpr int kQRows = kN / kNumHeads;
  mqa_head_partial_sums<kN, kNumHeads>(acc, lane, weight_pair, v0, v1);
#pragma unroll
  for (int r = 0; r < kQRows; ++r) {
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {  // the quad's four lanes hold the other heads
      v0[r] += __shfl_xor_sync(0xffffffffu, v0[r], offset);
      v1[r] += __shfl_xor_sync(0xffffffffu, v1[r], offset);
    }
  }
}

/// One step of a quad reduce-scatter: y[t] := x[lo] + x[hi] of this lane and its partner `offset`
/// lanes away, lo and hi the indices with bit kBit 0 and 1 (t's bits spread around it); the lane with
/// `upper` keeps the hi sums. x + partner's x in that order on the keeping lane: the same sums as
/// mqa_head_sums' own + shuffled (float addition commutes).
template <int kM, int kBit>
DT_DEVICE void mqa_quad_halve(const float (&x)[kM], float (&y)[kM / 2], bool upper, int offset) {
#pragma unroll
  for (int t = 0; t < kM / 2; ++t) {
    const int lo = ((t >> kBit) << (kBit + 1)) | (t & ((1 << kBit) - 1)), hi = lo | (1 << kBit);
    const float keep = upper ? x[hi] : x[lo], give = upper ? x[lo] : x[hi];
    y[t] = keep + __shfl_xor_sync(0xffffffffu, give, offset);
  }
}

/// Logit `value` of kv row j (< seq_len_kv) into `out_row`: at j inside the row's range [max(raw_start,
/// 0), end), at DeepGEMM's compressed column j - raw_start (below compressed_cols) when
/// compressed_cols > 0, else -inf outside the range with `clean`.
DT_DEVICE void mqa_store_logit(float* out_row, int j, float value, int raw_start, int end, int clean,
                               int compressed_cols) {
  const bool inside = max_int(raw_start, 0) <= j && j < end;
  if (compressed_cols > 0) {
    const int col = j - raw_start;
    if (inside && col < compressed_cols) out_row[col] = value;
  } else if (inside) {
    out_row[j] = value;
  } else if (clean) {
    out_row[j] = -__int_as_float(0x7f800000);
  }
}

}  // namespace deep_tile
