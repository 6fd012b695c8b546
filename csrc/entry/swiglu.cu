// JIT entry for the SwiGLU kernels of the FP8 experts layer (deep_tile/nn/swiglu.py launches them; no defines).
#include "deep_tile/kernels/swiglu.cuh"

/// h13 [rows, 2 * inter] bf16 -> h [rows, inter] bf16; grid covers rows * inter / 8 threads.
extern "C" __global__ void __launch_bounds__(256) deep_tile_swiglu_forward(const deep_tile::u16* __restrict__ h13,
                                                                          deep_tile::u16* __restrict__ h,
                                                                          int rows, int inter) {
  deep_tile::swiglu_forward(h13, h, rows, inter);
}

/// h13 [rows, 2 * inter], dh [rows, inter] bf16 -> d13 [rows, 2 * inter] bf16; grid covers rows * inter / 8 threads.
extern "C" __global__ void __launch_bounds__(256) deep_tile_swiglu_backward(const deep_tile::u16* __restrict__ h13,
                                                                           const deep_tile::u16* __restrict__ dh,
                                                                           deep_tile::u16* __restrict__ d13,
                                                                           int rows, int inter) {
  deep_tile::swiglu_backward(h13, dh, d13, rows, inter);
}
