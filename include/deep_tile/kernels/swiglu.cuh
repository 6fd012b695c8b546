// SwiGLU of the FP8 experts layer (deep_tile/nn/experts.py), elementwise in float32 from bf16:
//   forward:  h[t, c] = bf16(silu(g) * u),  g = h13[t, c], u = h13[t, inter + c],
//             silu(g) = g / (1 + exp(-g));
//   backward: d13[t, c] = bf16(dh * u * sig * (1 + g * (1 - sig))),
//             d13[t, inter + c] = bf16(dh * g * sig),  sig = 1 / (1 + exp(-g)),
// the float32 operations, in the same order, of the torch code they replace (torch's silu and
// sigmoid kernels), each rounded to bf16 to nearest even. Eight columns per thread (16-byte
// loads and stores; inter a multiple of 8), one pass over the tensors.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

namespace deep_tile {

DT_DEVICE float bf16_to_float(u32 bits16) { return __uint_as_float(bits16 << 16); }

/// Two floats -> two bf16 (round to nearest even), `lo` in the low half.
DT_DEVICE u32 pack_bf16x2_rn(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

/// The 8 floats of a 16-byte vector of bf16.
DT_DEVICE void unpack8(const uint4& v, float (&out)[8]) {
  const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = bf16_to_float(words[i] & 0xffffu);
    out[2 * i + 1] = bf16_to_float(words[i] >> 16);
  }
}

DT_DEVICE uint4 pack8(const float (&in)[8]) {
  return make_uint4(pack_bf16x2_rn(in[0], in[1]), pack_bf16x2_rn(in[2], in[3]), pack_bf16x2_rn(in[4], in[5]),
                    pack_bf16x2_rn(in[6], in[7]));
}

/// The thread's (row, first column) among rows x inter / 8 vectors, or false past the end.
DT_DEVICE bool swiglu_vector(int rows, int inter, long long& row, int& col) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int per_row = inter / 8;
  if (index >= static_cast<long long>(rows) * per_row) return false;
  row = index / per_row;
  col = static_cast<int>(index - row * per_row) * 8;
  return true;
}

DT_DEVICE void swiglu_forward(const u16* __restrict__ h13, u16* __restrict__ h, int rows, int inter) {
  ptx::grid_dependency_wait();  // the stream predecessor writes h13 or reads h
  ptx::launch_dependents();
  long long row;
  int col;
  if (!swiglu_vector(rows, inter, row, col)) return;
  const u16* src = h13 + row * 2 * inter + col;
  float g[8], u[8], out[8];
  unpack8(*reinterpret_cast<const uint4*>(src), g);
  unpack8(*reinterpret_cast<const uint4*>(src + inter), u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
  *reinterpret_cast<uint4*>(h + row * inter + col) = pack8(out);
}

DT_DEVICE void swiglu_backward(const u16* __restrict__ h13, const u16* __restrict__ dh, u16* __restrict__ d13,
                               int rows, int inter) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  long long row;
  int col;
  if (!swiglu_vector(rows, inter, row, col)) return;
  const u16* src = h13 + row * 2 * inter + col;
  float g[8], u[8], d[8], d_gate[8], d_up[8];
  unpack8(*reinterpret_cast<const uint4*>(src), g);
  unpack8(*reinterpret_cast<const uint4*>(src + inter), u);
  unpack8(*reinterpret_cast<const uint4*>(dh + row * inter + col), d);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float sig = 1.0f / (1.0f + expf(-g[i]));
    d_gate[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    d_up[i] = d[i] * g[i] * sig;
  }
  u16* dst = d13 + row * 2 * inter + col;
  *reinterpret_cast<uint4*>(dst) = pack8(d_gate);
  *reinterpret_cast<uint4*>(dst + inter) = pack8(d_up);
}

}  // namespace deep_tile
