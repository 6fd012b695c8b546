// Test consumer of the signalling masked GEMM's completion counters (tests/gpu_compat_cases.py
// signal_consumer), the way DeepEP's combine uses them: it runs on another stream while the GEMM
// runs, waits (acquire) until its block's counter reaches the threshold, then reads the block's
// rows of D. One CTA per watched block. No defines.
//
// status[2 * b]: 1 the counter was seen at the threshold, 2 the budget of 1024 * budget_kcycles
// clock64 cycles ran out first (the CTA then reads nothing: no hang); status[2 * b + 1]: how many
// of the `num_real` counters in `real` were still below the threshold when this CTA saw its own
// reach it (> 0: the block was released while the GEMM still ran).
extern "C" __global__ void __launch_bounds__(256) dt_signal_consumer(
    const int* signal, const int* watch, const int* row0, const int* rows, int threshold, const unsigned short* d,
    int n, int block_m, unsigned short* copy, const int* real, int num_real, int budget_kcycles, int* status) {
  __shared__ int seen;
  const int b = blockIdx.x;
  if (threadIdx.x == 0) {
    const long long start = clock64();
    int value = 0;
    seen = 2;
    const long long budget = 1024ll * budget_kcycles;
    while (clock64() - start < budget) {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(signal + watch[b]) : "memory");
      if (value >= threshold) {
        seen = 1;
        break;
      }
    }
    int below = 0;
    if (seen == 1) {
      for (int i = 0; i < num_real; ++i) {
        int v;
        asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(signal + real[i]) : "memory");
        below += v < threshold;
      }
    }
    status[2 * b] = seen;
    status[2 * b + 1] = below;
  }
  __syncthreads();
  if (seen != 1) return;
  // The block's rows, read after the acquire (ordered by the barrier): relaxed loads at GPU scope,
  // so no stale line of a non-coherent cache is read.
  const long long count = static_cast<long long>(rows[b]) * n;
  const unsigned short* src = d + static_cast<long long>(row0[b]) * n;
  unsigned short* dst = copy + static_cast<long long>(b) * block_m * n;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) {
    unsigned short v;
    asm volatile("ld.relaxed.gpu.global.b16 %0, [%1];" : "=h"(v) : "l"(src + i) : "memory");
    dst[i] = v;
  }
}
