// A local array written and read at runtime-dependent indices lives in local memory:
// ptxas reports a nonzero stack frame, which DEEP_TILE_PTXAS_CHECK rejects.
extern "C" __global__ void dt_spill(float* out, const int* idx) {
  float buf[64];
#pragma unroll 1
  for (int i = 0; i < 64; ++i) buf[(i * idx[0]) & 63] = out[i];
  out[threadIdx.x] = buf[idx[threadIdx.x] & 63];
}
