// Probes for benchmarks/read_floor.py and benchmarks/chain_floor.py: the least any kernel launched
// like deep_tile's can take under the benchmarks' timer. `deep_tile_empty` does nothing;
// `deep_tile_stream_read` reads `n16` 16-byte words once (a grid-stride loop, four independent
// loads in flight per thread) and folds them with XOR, storing only when a CTA's fold equals `key`
// (for random data, with probability 2^-32): the loads cannot be dropped, and in practice nothing
// is written. Launched with programmatic dependent launch (chain_floor.py), it first waits for its
// predecessor when `wait` is non-zero (griddepcontrol.wait, as deep_tile's kernels do before they
// read), then lets its dependents launch (early: its CTAs fill every SM, so a dependent's CTAs
// start as this grid's finish); launched plainly (read_floor.py), both instructions do nothing.
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
