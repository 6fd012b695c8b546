// A probe for benchmarks/probes/chain_floor.py: an FP8 GEMM with DeepSeek-V3 scaling for M <= TOKENS that
// streams the weights the way the read kernel of read_floor.cu does (plain 16-byte loads into
// registers, many small CTAs per SM, no TMA, no shared-memory pipeline), to measure whether a
// decode GEMM built that way gets closer to the read chain than deep_tile's TMA/WGMMA kernels.
// Not a product kernel: N a multiple of 16, K of 128, M <= TOKENS, a_scale fp32 with any strides,
// b_scale fp32 [ceil(N / 128), K / 128] row-major, out bf16 [M, N] row-major.
//
// Operands are swapped: a warp computes out^T for 16 weight rows (the mma's M) and 8 tokens per
// n8 tile (the mma's N) with mma.sync m16n8k32 e4m3, the weights as the row-major A operand and
// the activations as the column-major B operand; both are K-major in memory. K is permuted inside
// each 128-wide block so that a thread's fragments are 32 contiguous bytes of a row: thread t of a
// quad loads bytes [32t, 32t + 32) of the block, and its word 2s (2s + 1) serves k-step s as the
// low (high) 16-column half of the mma's K. The same permutation applies to both operands, and the
// scales are constant inside a block, so the sum is unchanged. (On sm_90a ptxas runs each e4m3
// m16n8k32 as conversions to f16 and two HMMA.16816: Hopper has no native FP8 mma.sync.)
//
// Work: a row group is 16 weight rows; its K blocks are cut into slices of UNROLL blocks; a CTA
// holds `groups` row groups of `warps_per_group` warps; warp w of a group runs slices w,
// w + warps_per_group, ... (all loads of a slice issued before its math), then the group's warps
// sum their partials through shared memory. Launched with PDL it waits for its predecessor before
// any global read and then lets its dependents launch.
#ifndef TOKENS
#define TOKENS 8
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#define TILES (TOKENS / 8)

__device__ __forceinline__ uint4 ldg_stream(const unsigned char* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ unsigned word(const uint4& lo, const uint4& hi, int i) {
  const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  return w[i];
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(512, 1) deep_tile_ldg_gemm(
    const unsigned char* __restrict__ a, const float* __restrict__ a_scale, long long as_m, long long as_k,
    const unsigned char* __restrict__ b, const float* __restrict__ b_scale, unsigned short* __restrict__ out,
    int m, int n, int k, int groups, int warps_per_group, int wait) {
  __shared__ float partial[16][16][TOKENS + 1];  // [warp][row][token], padded
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int local_group = warp / warps_per_group, kw = warp % warps_per_group;
  const int group = blockIdx.x * groups + local_group;
  const int k_blocks = k / 128, slices = (k_blocks + UNROLL - 1) / UNROLL;
  float acc[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  if (group * 16 < n) {
    const int r0 = group * 16 + g;
    const unsigned char* row0 = b + static_cast<long long>(r0) * k + 32 * t;
    const unsigned char* row1 = row0 + 8LL * k;
    const float* bs_row = b_scale + static_cast<long long>(r0 / 128) * k_blocks;
    for (int slice = kw; slice < slices; slice += warps_per_group) {
      const int kb0 = slice * UNROLL;
      uint4 w[UNROLL][4];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (kb0 + u < k_blocks) {
          const long long off = (kb0 + u) * 128LL;
          w[u][0] = ldg_stream(row0 + off);
          w[u][1] = ldg_stream(row0 + off + 16);
          w[u][2] = ldg_stream(row1 + off);
          w[u][3] = ldg_stream(row1 + off + 16);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int kb = kb0 + u;
        if (kb >= k_blocks) break;
        const float bs = __ldg(bs_row + kb);
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
          const int tok = 8 * j + g;
          uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
          if (tok < m) {
            const uint4* src = reinterpret_cast<const uint4*>(a + static_cast<long long>(tok) * k + kb * 128LL + 32 * t);
            x0 = __ldg(src);
            x1 = __ldg(src + 1);
          }
          float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int s = 0; s < 4; ++s)
            mma_e4m3(d, word(w[u][0], w[u][1], 2 * s), word(w[u][2], w[u][3], 2 * s),
                     word(w[u][0], w[u][1], 2 * s + 1), word(w[u][2], w[u][3], 2 * s + 1),
                     word(x0, x1, 2 * s), word(x0, x1, 2 * s + 1));
          const int c0 = 8 * j + 2 * t;
          const float s0 = c0 < m ? __ldg(a_scale + c0 * as_m + kb * as_k) * bs : 0.f;
          const float s1 = c0 + 1 < m ? __ldg(a_scale + (c0 + 1) * as_m + kb * as_k) * bs : 0.f;
          acc[j][0] += d[0] * s0;
          acc[j][1] += d[1] * s1;
          acc[j][2] += d[2] * s0;
          acc[j][3] += d[3] * s1;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
    const int c0 = 8 * j + 2 * t;
    partial[warp][g][c0] = acc[j][0];
    partial[warp][g][c0 + 1] = acc[j][1];
    partial[warp][g + 8][c0] = acc[j][2];
    partial[warp][g + 8][c0 + 1] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < groups * 16 * TOKENS; i += blockDim.x) {
    const int lg = i / (16 * TOKENS), tok = i % (16 * TOKENS) / 16, row = i % 16;
    const int r = (blockIdx.x * groups + lg) * 16 + row;
    if (tok >= m || r >= n) continue;
    float sum = 0.f;
    for (int w = 0; w < warps_per_group; ++w) sum += partial[lg * warps_per_group + w][row][tok];
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(sum));
    out[static_cast<long long>(tok) * n + r] = h;
  }
}
