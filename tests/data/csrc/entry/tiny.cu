// Tiny test kernel: needs -DDT_SCALE=<int>; includes a header through -I like the real entries.
#include "dt_test/scale.cuh"

#ifndef DT_SCALE
#error "DT_SCALE must be defined (-DDT_SCALE=<int>)"
#endif

extern "C" __global__ void dt_tiny(int* out) {
  out[threadIdx.x] = dt_test::scaled(static_cast<int>(threadIdx.x), DT_SCALE);
}
