// The BF16 GEMM at m <= 4 as a stream over B (deep_tile/kernels/bf16_gemm.py's GEMV_* contract):
//
//   D[i, c] (+)= sum_k A[i, k] * B[c, k]      (i < m <= kRows, float32 accumulation, bf16 or float32 D)
//
// There the GEMM reads B once and does almost no math, so its time is B's bytes over HBM's rate; the
// TMA kernel's 128-byte box rows at k-strided addresses and its ring reach about half that rate.
// Here each warp owns one column c of D and reads B's row c front to back (K-major, 16-byte
// loads that bypass L1: 512 contiguous bytes per warp and load), kUnroll loads in flight per lane;
// A's m rows (K-major, small) are read through L1, where every warp of the SM finds them. Each lane
// sums its k chunks in order, then the warp sums its lanes by a butterfly: the same bits every
// call. k must be a multiple of 8 (whole 16-byte chunks; the host checks it).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/warpgroup.cuh"

namespace deep_tile {

/// kRows: 1, 2 or 4 (m <= kRows); kOutF32: D is float32 (else bf16); kAccumulate: D += (the host put c in D).
template <int kRows_, int kOutF32_, int kAccumulate_>
struct Bf16GemvConfig {
  static constexpr int kRows = kRows_;
  static constexpr bool kOutF32 = kOutF32_ != 0, kAccumulate = kAccumulate_ != 0;
  static constexpr int kWarps = 8, kThreads = 32 * kWarps;  // a column of D per warp
  static constexpr int kUnroll = 8;                         // 16-byte B loads in flight per lane (4 KiB a warp)
  DT_STATIC_ASSERT(kRows_ == 1 || kRows_ == 2 || kRows_ == 4, "kRows: 1, 2 or 4");
};

/// 16 bytes of B past L1 (each is read once).
DT_DEVICE uint4 bf16_gemv_load_stream(const u16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// Ask L1 for the line holding `p` (no register, no wait): A's chunks of a batch, fetched beside its B loads.
DT_DEVICE void bf16_gemv_prefetch_l1(const u16* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/// acc += the dot product of two 8-bf16 vectors, in element order.
DT_DEVICE void bf16_gemv_dot8(const uint4& a, const uint4& b, float& acc) {
  const u32 wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(wa[i] << 16), __uint_as_float(wb[i] << 16), acc);
    acc = fmaf(__uint_as_float(wa[i] & 0xFFFF0000u), __uint_as_float(wb[i] & 0xFFFF0000u), acc);
  }
}

template <class Cfg>
DT_DEVICE void bf16_gemv(const u16* __restrict__ a, const u16* __restrict__ b, void* __restrict__ d, int m, int n,
                         int k, int lda, int ldb, int ldd) {
  ptx::grid_dependency_wait();  // the stream predecessor may write A, B or D
  ptx::launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * Cfg::kWarps + warp;
  if (col >= n) return;
  const u16* row = b + static_cast<long long>(col) * ldb;
  float acc[Cfg::kRows];
#pragma unroll
  for (int i = 0; i < Cfg::kRows; ++i) acc[i] = 0.0f;
  const int chunks = k / 8;  // 16-byte chunks of a row; lane l takes chunks l, l + 32, ...
  for (int c = lane; c < chunks; c += 32 * Cfg::kUnroll) {
    // a batch of up to kUnroll loads in flight (the last batch guarded), then their products in order
    uint4 vb[Cfg::kUnroll];
#pragma unroll
    for (int u = 0; u < Cfg::kUnroll; ++u)
      if (c + 32 * u < chunks) vb[u] = bf16_gemv_load_stream(row + 8 * (c + 32 * u));
    // the products below read A one chunk at a time between branches (no hoisting): without this each
    // was an L2 round trip after the last, with none of this warp's B loads in flight meanwhile
#pragma unroll
    for (int u = 0; u < Cfg::kUnroll; ++u) {
#pragma unroll
      for (int i = 0; i < Cfg::kRows; ++i)
        if (c + 32 * u < chunks && i < m) bf16_gemv_prefetch_l1(a + static_cast<long long>(i) * lda + 8 * (c + 32 * u));
    }
#pragma unroll
    for (int u = 0; u < Cfg::kUnroll; ++u) {
      if (c + 32 * u >= chunks) break;
#pragma unroll
      for (int i = 0; i < Cfg::kRows; ++i) {
        if (i < m) {
          const uint4 va = __ldg(reinterpret_cast<const uint4*>(a + static_cast<long long>(i) * lda + 8 * (c + 32 * u)));
          bf16_gemv_dot8(va, vb[u], acc[i]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < Cfg::kRows; ++i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[i] += __shfl_xor_sync(0xFFFFFFFFu, acc[i], off);
  }
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < Cfg::kRows; ++i) {
    if (i >= m) break;
    const long long at = static_cast<long long>(i) * ldd + col;
    if constexpr (Cfg::kOutF32) {
      float* p = reinterpret_cast<float*>(d) + at;
      *p = Cfg::kAccumulate ? *p + acc[i] : acc[i];
    } else {
      u16* p = reinterpret_cast<u16*>(d) + at;
      const float v = Cfg::kAccumulate ? acc[i] + __uint_as_float(static_cast<u32>(*p) << 16) : acc[i];
      *p = static_cast<u16>(ptx::pack_bf16x2(v, 0.0f) & 0xFFFFu);
    }
  }
}

}  // namespace deep_tile
