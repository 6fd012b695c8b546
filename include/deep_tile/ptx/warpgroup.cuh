// Warpgroup-level register reconfiguration (PTX ISA 9.7.18.1 setmaxnreg), stmatrix (9.7.14.5.16)
// and packing conversions used by the epilogue.
#pragma once
#include "deep_tile/ptx/address.cuh"

namespace deep_tile::ptx {

/// Release registers down to N per thread (producer warpgroup). N in [24, 256], multiple of 8.
template <int N>
DT_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

/// Request registers up to N per thread (consumer warpgroups).
template <int N>
DT_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

/// Two floats -> packed bf16x2 (round to nearest even); `lo` lands in the low half (lower address).
DT_DEVICE u32 pack_bf16x2(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

/// Store four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and
/// register ri holds this thread's two elements of matrix i (row lane/4, columns 2*(lane%4)+{0,1}).
DT_DEVICE void stmatrix_x4(void* row_addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(row_addr)),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

/// Two floats to shared memory (8-byte aligned).
DT_DEVICE void store_shared_f32x2(void* ptr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(smem_addr(ptr)), "f"(a), "f"(b) : "memory");
}

/// store_shared_f32x2 at a shared-space address (ptx::smem_addr's).
DT_DEVICE void store_shared_f32x2_at(u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

/// Two floats from shared memory at a shared-space address (8-byte aligned).
DT_DEVICE float2 load_shared_f32x2_at(u32 addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

/// One float to global memory as bf16 (round to nearest even; 2-byte aligned).
DT_DEVICE void store_global_bf16(void* ptr, float v) {
  asm volatile("{\n .reg .b16 h;\n cvt.rn.bf16.f32 h, %1;\n st.global.b16 [%0], h;\n}" ::"l"(reinterpret_cast<u64>(ptr)),
               "f"(v)
               : "memory");
}

/// Sixteen bytes to global memory (16-byte aligned).
DT_DEVICE void store_global_u32x4(void* ptr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(reinterpret_cast<u64>(ptr)), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}

}  // namespace deep_tile::ptx
