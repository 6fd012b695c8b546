// TF32 warpgroup MMA with A in registers (PTX ISA 9.7.15.5 wgmma.mma_async, .tf32):
// D[64 x N] (+)= A[64 x 8] * B[N x 8]^T, f32 accumulators, B K-major in shared memory (descriptor).
// A fragment of thread t (w = t/32, l = t%32, r = 16w + l/4): a[0] = (r, l%4), a[1] = (r+8, l%4),
// a[2] = (r, l%4+4), a[3] = (r+8, l%4+4), each the 32-bit pattern of a float (the low 13 mantissa
// bits are ignored). Accumulator layout as in wgmma_fp8.cuh. The fence / commit / wait wrappers
// live there too.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile::ptx {

/// TF32 wgmma of shape m64nNk8 with A from registers; specialised below for N = 8, 16, 24, 32.
template <int N>
struct WgmmaTf32RegA;

template <>
struct WgmmaTf32RegA<8> {
  static constexpr int kNumAccum = 4;
  /// d (+)= A * B^T; `accumulate` false overwrites d.
  static DT_DEVICE void mma(const u32* a, u64 desc_b, float* d, bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }
};

template <>
struct WgmmaTf32RegA<16> {
  static constexpr int kNumAccum = 8;
  /// d (+)= A * B^T; `accumulate` false overwrites d.
  static DT_DEVICE void mma(const u32* a, u64 desc_b, float* d, bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }
};

template <>
struct WgmmaTf32RegA<24> {
  static constexpr int kNumAccum = 12;
  /// d (+)= A * B^T; `accumulate` false overwrites d.
  static DT_DEVICE void mma(const u32* a, u64 desc_b, float* d, bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n24k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, %16, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }
};

template <>
struct WgmmaTf32RegA<32> {
  static constexpr int kNumAccum = 16;
  /// d (+)= A * B^T; `accumulate` false overwrites d.
  static DT_DEVICE void mma(const u32* a, u64 desc_b, float* d, bool accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }
};

}  // namespace deep_tile::ptx
