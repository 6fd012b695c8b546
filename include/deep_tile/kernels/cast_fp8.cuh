// FP8 (e4m3) quantisation kernels in the DeepSeek-V3 layout:
//   per token: one scale per row per 128-wide group of columns;
//   per block: one scale per 128x128 block.
// scale = max(amax, 1e-4) / 448 and q = saturate_e4m3(x * (448 / max(amax, 1e-4))), the same
// float32 operations (correctly rounded division, one multiply) as deep_tile/casts/quant.py, so CPU and
// GPU results are bitwise equal.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

#ifndef DT_IN_DTYPE
#error "DT_IN_DTYPE (0 = float32, 1 = bfloat16, 2 = float16) is set by deep_tile.casts.quant_kernels"
#endif

namespace deep_tile {

#if DT_IN_DTYPE == 0
typedef float InputT;
DT_DEVICE float to_float(InputT x) { return x; }
#elif DT_IN_DTYPE == 1
typedef u16 InputT;
DT_DEVICE float to_float(InputT x) { return __uint_as_float(static_cast<u32>(x) << 16); }
#else
typedef u16 InputT;
DT_DEVICE float to_float(InputT x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}
#endif

constexpr float kFp8Max = 448.0f;
constexpr float kMinAmax = 1e-4f;

/// Two floats -> two e4m3 bytes (round to nearest even, saturating); `lo` in the low byte.
DT_DEVICE u16 pack_e4m3x2(float lo, float hi) {
  u16 packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

DT_DEVICE float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

DT_DEVICE u8 quantize_one(float x, float inv_scale) { return static_cast<u8>(pack_e4m3x2(__fmul_rn(x, inv_scale), 0.0f)); }

/// One warp per (row, 128-column group); lane i handles columns 4i..4i+3 of the group.
DT_DEVICE void per_token_cast(const InputT* x, u8* q, float* scales, int m, int k) {
  ptx::grid_dependency_wait();  // the stream predecessor may write x or read q and scales
  ptx::launch_dependents();
  const int num_groups = ceil_div(k, 128);
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= static_cast<long long>(m) * num_groups) return;
  const int lane = threadIdx.x % 32;
  const int row = static_cast<int>(warp / num_groups), group = static_cast<int>(warp % num_groups);
  const int col0 = group * 128 + lane * 4;
  const InputT* src = x + static_cast<long long>(row) * k;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = col0 + i < k ? to_float(src[col0 + i]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = fmaxf(warp_max(amax), kMinAmax);
  const float inv_scale = __fdiv_rn(kFp8Max, amax);
  if (lane == 0) scales[static_cast<long long>(row) * num_groups + group] = __fdiv_rn(amax, kFp8Max);
  u8* dst = q + static_cast<long long>(row) * k;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (col0 + i < k) dst[col0 + i] = quantize_one(v[i], inv_scale);
}

/// One 256-thread CTA per 128x128 block; thread t covers row t/2, columns 64*(t%2) .. +63.
DT_DEVICE void per_block_cast(const InputT* x, u8* q, float* scales, int n, int k) {
  __shared__ float warp_amax[8];
  ptx::grid_dependency_wait();  // the stream predecessor may write x or read q and scales
  ptx::launch_dependents();
  const int row = blockIdx.y * 128 + threadIdx.x / 2;
  const int col0 = blockIdx.x * 128 + (threadIdx.x % 2) * 64;
  const bool row_ok = row < n;
  const InputT* src = x + static_cast<long long>(row) * k;
  float amax = 0.0f;
  for (int i = 0; i < 64; ++i)
    if (row_ok && col0 + i < k) amax = fmaxf(amax, fabsf(to_float(src[col0 + i])));
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_amax[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) amax = fmaxf(amax, warp_amax[w]);
  amax = fmaxf(amax, kMinAmax);
  const float inv_scale = __fdiv_rn(kFp8Max, amax);
  if (threadIdx.x == 0) scales[blockIdx.y * gridDim.x + blockIdx.x] = __fdiv_rn(amax, kFp8Max);
  if (!row_ok) return;
  u8* dst = q + static_cast<long long>(row) * k;
  for (int i = 0; i < 64; ++i)
    if (col0 + i < k) dst[col0 + i] = quantize_one(to_float(src[col0 + i]), inv_scale);
}

}  // namespace deep_tile
