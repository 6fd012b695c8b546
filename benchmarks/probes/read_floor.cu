// Probes for benchmarks/probes/read_floor.py and benchmarks/probes/chain_floor.py: the least any kernel launched
// like deep_tile's can take under the benchmarks' timer. `deep_tile_empty` does nothing;
// `deep_tile_stream_read` reads `n16` 16-byte words once (a grid-stride loop, four independent
// loads in flight per thread) and folds them with XOR, storing only when a CTA's fold equals `key`
// (for random data, with probability 2^-32): the loads cannot be dropped, and in practice nothing
// is written. Launched with programmatic dependent launch (chain_floor.py), it first waits for its
// predecessor when `wait` is non-zero (griddepcontrol.wait, as deep_tile's kernels do before they
// read), then lets its dependents launch (early: its CTAs fill every SM, so a dependent's CTAs
// start as this grid's finish); launched plainly (read_floor.py), both instructions do nothing.
// `deep_tile_strip_read` (below; chain_floor.py --strips) reads B in the GEMM's pattern instead.
extern "C" __global__ void deep_tile_empty() {}

extern "C" __global__ void __launch_bounds__(512) deep_tile_stream_read(const uint4* __restrict__ src,
                                                                        long long n16, unsigned key,
                                                                        unsigned* sink, int wait) {
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned fold = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 v0 = __ldg(src + i), v1 = __ldg(src + i + stride);
    const uint4 v2 = __ldg(src + i + 2 * stride), v3 = __ldg(src + i + 3 * stride);
    fold ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    fold ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldg(src + i);
    fold ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (fold == key) sink[blockIdx.x] = fold;
}

// `deep_tile_strip_read` reads an N x K byte matrix (row pitch K, a multiple of 128) the way a
// GEMM's producer streams B: CTA c owns rows [c * rows, (c + 1) * rows) and walks them through K
// one step of 512 x 16 bytes at a time (consecutive threads read consecutive 16-byte words of one
// row's current columns; rows = 64: one 128-byte column of 64 rows per step, the GEMM's B box).
// The bytes land in shared memory through cp.async (as TMA's do, no registers held),
// STRIP_DEPTH steps in flight (dynamic shared memory: STRIP_DEPTH x 8 KB), and nothing reads
// them. 512 threads; rows must divide 64 and the step (8192 / rows bytes) divide K.
#ifndef STRIP_DEPTH
#define STRIP_DEPTH 13
#endif
extern "C" __global__ void __launch_bounds__(512) deep_tile_strip_read(const unsigned char* __restrict__ src,
                                                                       int n, int k, int rows,
                                                                       int wait) {
  extern __shared__ __align__(16) unsigned char slots[];
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int words_per_row = 512 / rows;
  const int row = blockIdx.x * rows + threadIdx.x / words_per_row;
  const int step_bytes = words_per_row * 16;
  const int steps = k / step_bytes;
  if (row >= n) return;
  const unsigned char* p = src + static_cast<long long>(row) * k + (threadIdx.x % words_per_row) * 16;
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(slots)) + threadIdx.x * 16;
  for (int s = 0; s < steps; ++s) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(base + (s % STRIP_DEPTH) * 8192), "l"(p + s * step_bytes)
                 : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" :: "n"(STRIP_DEPTH - 1) : "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}
