// Basic types and helpers shared by all device code.
//
// NOTES: the device code includes no system or CUDA header at all, so NVRTC needs no include
// path besides include/ (CUDA 13 moved libcu++ under include/cccl, which breaks JITs that
// include <cuda/std/...>). Fixed-width integers and the tensor-map type are defined here.
#pragma once

namespace deep_tile {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Opaque 128-byte TMA descriptor (CUtensorMap), built on the host by cuTensorMapEncodeTiled
// and passed by value as a __grid_constant__ kernel parameter.
struct alignas(64) TmaDescriptor {
  u64 opaque[16];
};

/// Width along K of one activation scale (1x128) and edge of one weight scale block (128x128);
/// deep_tile/common.py SCALE_GROUP is the Python spelling, checked through DT_SCALE_GROUP.
constexpr int kScaleGroup = 128;

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int align_up(int a, int b) { return ceil_div(a, b) * b; }
__host__ __device__ constexpr int gcd(int a, int b) { return b == 0 ? a : gcd(b, a % b); }
/// The largest divisor of n (> 0) that is at most cap (>= 1).
__host__ __device__ constexpr int largest_divisor_at_most(int n, int cap) {
  return n % cap == 0 ? cap : largest_divisor_at_most(n, cap - 1);
}
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }

/// `If<c, T, F>::type` is T when c holds, else F (std::conditional, which NVRTC has no header for).
template <bool kCond, class T, class F>
struct If {
  using type = T;
};
template <class T, class F>
struct If<false, T, F> {
  using type = F;
};

}  // namespace deep_tile

#define DT_DEVICE __device__ __forceinline__
// Always give a message naming the parameter and its legal range.
#define DT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
