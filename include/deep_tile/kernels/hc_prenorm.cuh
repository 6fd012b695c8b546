// The hyper-connection pre-norm GEMM (deep_tile/kernels/hc_prenorm.py): for a bf16 [m, k], b
// float32 [N, k] (N = 8, 16, 24 or 32), one K split of d = a @ b^T in TF32 and of the rows' sums of
// squares, per work item of 64 * DT_HC_MATH_GROUPS rows.
//
// The op reads a once and is bound by HBM: the K range is split by the host so that every SM
// streams a, and persistent CTAs take the work items (row block, K split) in turn with one stage
// ring, so that a short split does not drain and refill the pipeline. Every CTA also reads b's
// tile of each K block (from L2); math warpgroups of 64 rows each share it, so that b's L2
// traffic stays a fraction of a's. Per 64-wide K block the
// TMA warp loads the a tile (64 rows per warpgroup x 128 bytes) and the b tile (N rows x 256 bytes,
// as two 128-byte swizzle atoms), both 128B-swizzled. Each math warpgroup reads its a fragments
// from shared memory into registers (bf16 -> float is exact, so TF32 sees a unchanged), squares
// them for the row sums, and issues eight m64nNk8 TF32 wgmmas with A from registers and B from
// shared memory. Fragments alternate between two register sets so that
// the loads of one block overlap the previous block's wgmmas. The epilogue stores the
// accumulators straight to global memory (d is small beside a).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"
#include "deep_tile/ptx/wgmma_tf32.cuh"

#if !defined(DT_HC_STAGES) || !defined(DT_HC_MATH_GROUPS) || !defined(DT_HC_CTAS_PER_SM) || \
    !defined(DT_HC_LEAN_ISSUE) || !defined(DT_HC_A_EVICT_FIRST)
#error "DT_HC_STAGES, DT_HC_MATH_GROUPS, DT_HC_CTAS_PER_SM, DT_HC_LEAN_ISSUE, DT_HC_A_EVICT_FIRST: set by hc_prenorm.py"
#endif

namespace deep_tile {

constexpr int kHcMathGroups = DT_HC_MATH_GROUPS;
DT_STATIC_ASSERT(kHcMathGroups >= 1 && kHcMathGroups <= 4,
                 "DT_HC_MATH_GROUPS must lie in [1, 4] (TMA box rows <= 256)");
constexpr int kHcBlockM = 64 * kHcMathGroups;     // rows per CTA: the wgmma's M per warpgroup
constexpr int kHcBlockK = 64;                     // K per stage: 128 bytes of bf16, one swizzle row of a
constexpr int kHcMathThreads = 128 * kHcMathGroups;
constexpr int kHcThreads = kHcMathThreads + 32;   // and one TMA warp
constexpr int kHcStages = DT_HC_STAGES;
constexpr int kHcCtasPerSm = DT_HC_CTAS_PER_SM;  // the launch bound: registers for this many CTAs per SM
// 1: the path from the wait on a block's wgmmas to the next block's is kept short: the fragment
// sets of consecutive blocks in distinct registers (so a block's bf16 -> TF32 moves run before the
// wait; ptxas merged them otherwise), the squares after the issue, the warp index provably uniform
// (so loop counters and wgmma descriptors stay in uniform registers, not an R2UR per wgmma).
// 0: the earlier code, for comparison.
constexpr bool kHcLeanIssue = DT_HC_LEAN_ISSUE != 0;
// 0: a's loads keep L2's normal priority, so the other half of each 256-byte promoted fetch (the
// next K block's row) stays until its own load; 1: evict-first, which may drop that half first.
constexpr bool kHcAEvictFirst = DT_HC_A_EVICT_FIRST != 0;
DT_STATIC_ASSERT(kHcStages >= 2 && kHcStages <= 16, "DT_HC_STAGES must lie in [2, 16]");

/// Shared memory of one CTA for N columns: per stage the a tile then b's two K atoms, every tile
/// 1024-byte aligned (the 128B swizzle's period), then the full and empty barriers.
template <int kN>
struct HcSmem {
  static constexpr int kABytes = kHcBlockM * kHcBlockK * 2;
  static constexpr int kBAtomBytes = kN * 128;  // 32 floats of each of N rows
  static constexpr int kStageBytes = kABytes + 2 * kBAtomBytes;
  static constexpr int kBarrierOffset = kHcStages * kStageBytes;
  static constexpr int kBytes = kBarrierOffset + 2 * kHcStages * 8;
  DT_STATIC_ASSERT(kBAtomBytes % 1024 == 0 && kABytes % 1024 == 0, "N must be a multiple of 8");
  DT_STATIC_ASSERT(kHcCtasPerSm * (kBytes + 1024) <= 233472,
                   "DT_HC_CTAS_PER_SM CTAs must fit an SM's shared memory (1 KB reserved per CTA)");
};

/// An empty use and definition of a register: keeps a value live up to this point (no instruction).
DT_DEVICE void hc_keep_live(u32& reg) { asm volatile("" : "+r"(reg)); }

DT_DEVICE u32 dynamic_smem_bytes() {
  u32 bytes;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

/// The K blocks of split `split` of num_k_blocks over num_splits (the first num_k_blocks %
/// num_splits splits take one more): the first one and how many.
struct HcSplit {
  int begin, count;
  DT_DEVICE HcSplit(int num_k_blocks, int num_splits, int split) {
    const int per_split = num_k_blocks / num_splits, extra = num_k_blocks % num_splits;
    begin = split * per_split + min_int(split, extra);
    count = per_split + (split < extra ? 1 : 0);
  }
};

/// The K blocks of part `part` of num_splits * sub_splits: part / sub_splits names the split
/// (HcSplit), part % sub_splits the piece of that split's blocks (HcSplit's rule again), so the
/// pieces of a split cover exactly its blocks.
DT_DEVICE HcSplit hc_part(int num_k_blocks, int num_splits, int sub_splits, int part) {
  const HcSplit split(num_k_blocks, num_splits, part / sub_splits);
  HcSplit piece(split.count, sub_splits, part % sub_splits);
  piece.begin += split.begin;
  return piece;
}

/// A persistent CTA: work items blockIdx.x, + gridDim.x, ... of ceil(m / kHcBlockM) * parts
/// (parts = num_splits * sub_splits), item i being rows [kHcBlockM * (i / parts), +kHcBlockM) and
/// the K blocks of part i % parts (hc_part). The stage ring runs on across items, so the TMA warp
/// loads the next item's blocks while the math warpgroups finish this one. Writes
/// d[part][row][0..N) (part stride d_split_stride, row stride d_row_stride floats) and
/// sqr_sum[part * m + row].
template <int kN>
DT_DEVICE void hc_prenorm_gemm(const TmaDescriptor* map_a, const TmaDescriptor* map_b, float* __restrict__ d,
                               float* __restrict__ sqr_sum, int m, int num_k_blocks, int num_splits,
                               int d_row_stride, int d_split_stride, int sub_splits) {
  using Smem = HcSmem<kN>;
  using Mma = ptx::WgmmaTf32RegA<kN>;
  extern __shared__ __align__(1024) u8 smem[];
  u64* full = reinterpret_cast<u64*>(smem + Smem::kBarrierOffset);
  u64* empty = full + kHcStages;

  const int tid = threadIdx.x, lane = tid & 31;
  const int warp = kHcLeanIssue ? __shfl_sync(0xffffffffu, tid >> 5, 0) : tid >> 5;  // (kHcLeanIssue)
  const int parts = num_splits * sub_splits;
  const int num_items = ceil_div(m, kHcBlockM) * parts;

  if (tid == kHcMathThreads) {
    if (dynamic_smem_bytes() < static_cast<u32>(Smem::kBytes)) asm volatile("trap;");  // host and kernel disagree
    ptx::tma_prefetch_descriptor(map_a);
    ptx::tma_prefetch_descriptor(map_b);
    for (int s = 0; s < kHcStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kHcMathThreads / 32);  // one arrival per math warp
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write a, b, d or sqr_sum
  ptx::launch_dependents();

  if (warp == kHcMathThreads / 32) {
    if (lane == 0) {
      const u64 stream_policy = kHcAEvictFirst ? ptx::l2_policy_evict_first() : 0;  // a is read once
      const u64 keep_policy = ptx::l2_policy_evict_last();                          // b is read by every row block
      int g = 0;  // blocks loaded so far: the ring's position and phase
      for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
        const int m0 = (item / parts) * kHcBlockM;
        const HcSplit range = hc_part(num_k_blocks, num_splits, sub_splits, item % parts);
        for (int s = 0; s < range.count; ++s, ++g) {
          const int stage = g % kHcStages;
          ptx::mbarrier_wait(&empty[stage], ((g / kHcStages) & 1) ^ 1);
          u8* tile = smem + stage * Smem::kStageBytes;
          const int k0 = (range.begin + s) * kHcBlockK;
          ptx::mbarrier_arrive_expect_tx(&full[stage], Smem::kStageBytes);
          if (kHcAEvictFirst)
            ptx::tma_load_2d_hinted(tile, map_a, &full[stage], k0, m0, stream_policy);
          else
            ptx::tma_load_2d(tile, map_a, &full[stage], k0, m0);
          ptx::tma_load_2d_hinted(tile + Smem::kABytes, map_b, &full[stage], k0, 0, keep_policy);
          ptx::tma_load_2d_hinted(tile + Smem::kABytes + Smem::kBAtomBytes, map_b, &full[stage], k0 + 32, 0,
                                  keep_policy);
        }
      }
    }
    return;
  }

  // Math warpgroups: this thread's rows r and r + 8 of the block (its warpgroup's 64 are
  // consecutive), K columns q and q + 4 of each k8 slice.
  const int row = warp * 16 + (lane >> 2), q = lane & 3;
  float acc[Mma::kNumAccum];
  float sq0, sq1;
  u32 frag0[32], frag1[32];
  const u32 smem_base = ptx::smem_addr(smem);
  int g = 0;  // blocks consumed so far, as the TMA warp counts them

  // Wait for block g, read its a fragments into `frag` (and square them), then, once the previous
  // block's wgmmas are done (its stage and its fragment set `other` are free), release that stage
  // (`release`: the previous block is this item's) and issue this block's eight k8 wgmmas.
  // Slice i's four values of `frag` added squared to the rows' sums (the wgmmas only read `frag`).
  const auto square = [&](const u32(&frag)[32], int i) {
    const float f0 = __uint_as_float(frag[4 * i]), f1 = __uint_as_float(frag[4 * i + 1]);
    const float f2 = __uint_as_float(frag[4 * i + 2]), f3 = __uint_as_float(frag[4 * i + 3]);
    sq0 = fmaf(f0, f0, fmaf(f2, f2, sq0));
    sq1 = fmaf(f1, f1, fmaf(f3, f3, sq1));
  };
  const auto step = [&](bool release, u32(&frag)[32], u32(&other)[32]) {
    const int stage = g % kHcStages;
    ptx::mbarrier_wait(&full[stage], (g / kHcStages) & 1);
    const u8* tile = smem + stage * Smem::kStageBytes;
    const u16* upper = reinterpret_cast<const u16*>(tile + row * 128);
    const u16* lower = upper + 8 * 64;  // row + 8: same swizzle phase
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int chunk = (i ^ (row & 7)) * 8;  // the 16-byte chunk of K slice i, 8 bf16 each
      const u32 x0 = static_cast<u32>(upper[chunk + q]) << 16, x1 = static_cast<u32>(lower[chunk + q]) << 16;
      const u32 x2 = static_cast<u32>(upper[chunk + q + 4]) << 16, x3 = static_cast<u32>(lower[chunk + q + 4]) << 16;
      frag[4 * i + 0] = x0;
      frag[4 * i + 1] = x1;
      frag[4 * i + 2] = x2;
      frag[4 * i + 3] = x3;
      if (!kHcLeanIssue) square(frag, i);
    }
    ptx::wgmma_wait_group<0>();
    if (kHcLeanIssue) {  // `other` live up to the wait: `frag` cannot share its registers
#pragma unroll
      for (int i = 0; i < 32; ++i) hc_keep_live(other[i]);
    }
    if (release && lane == 0) ptx::mbarrier_arrive(&empty[(g - 1) % kHcStages]);
    const u32 b_lo = ptx::sw128_lo(smem_base + stage * Smem::kStageBytes + Smem::kABytes);
#pragma unroll
    for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
    __syncwarp();  // the wgmmas are .aligned: the warp leaves its barrier polls and arrives together
    ptx::wgmma_fence();
#pragma unroll
    for (int i = 0; i < 8; ++i)  // slice i: atom i / 4, 32 bytes per k8 along the swizzled row
      Mma::mma(&frag[4 * i], ptx::sw128_desc(b_lo + (i >> 2) * (Smem::kBAtomBytes >> 4) + (i & 3) * 2), acc, true);
    ptx::wgmma_commit_group();
#pragma unroll
    for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
    if (kHcLeanIssue) {  // the squares after the issue: off the path from the wait to the wgmmas
#pragma unroll
      for (int i = 0; i < 8; ++i) square(frag, i);
    }
    ++g;
  };

  for (int item = blockIdx.x; item < num_items; item += gridDim.x) {
    const int m_block = item / parts, split = item % parts;
    const int num_blocks = hc_part(num_k_blocks, num_splits, sub_splits, split).count;
#pragma unroll
    for (int i = 0; i < Mma::kNumAccum; ++i) acc[i] = 0.0f;
    sq0 = sq1 = 0.0f;
    int s = 0;
    for (; s + 1 < num_blocks; s += 2) {
      step(s > 0, frag0, frag1);
      step(true, frag1, frag0);
    }
    if (s < num_blocks) step(s > 0, frag0, frag1);
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
    if (num_blocks > 0 && lane == 0) ptx::mbarrier_arrive(&empty[(g - 1) % kHcStages]);  // this item's last block

#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {  // the quad's four lanes hold the rows' other columns
      sq0 += __shfl_xor_sync(0xffffffffu, sq0, offset);
      sq1 += __shfl_xor_sync(0xffffffffu, sq1, offset);
    }
    const int r0 = m_block * kHcBlockM + row, r1 = r0 + 8;
    if (q == 0) {
      if (r0 < m) sqr_sum[static_cast<long long>(split) * m + r0] = sq0;
      if (r1 < m) sqr_sum[static_cast<long long>(split) * m + r1] = sq1;
    }
    float* d_split = d + static_cast<long long>(split) * d_split_stride;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      const int col = 8 * j + 2 * q;
      if (r0 < m)
        *reinterpret_cast<float2*>(d_split + static_cast<long long>(r0) * d_row_stride + col) =
            make_float2(acc[4 * j], acc[4 * j + 1]);
      if (r1 < m)
        *reinterpret_cast<float2*>(d_split + static_cast<long long>(r1) * d_row_stride + col) =
            make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

constexpr int kHcReduceThreads = 256;

/// Partials summed in part order: for each of `groups` outputs g, d[g][r][c] = sum_s
/// work_d[g * splits + s][r][c] (work rows of n floats, contiguous; d's group stride
/// d_split_stride, row stride d_row_stride) and sqr_sum[g * m + r] likewise; a grid-stride loop
/// over groups * (m * n + m) outputs. Eight partials are loaded before they are added (in order,
/// so the bits do not depend on the batching): the sum waits on L2 once per eight.
DT_DEVICE void hc_prenorm_reduce(const float* __restrict__ work_d, const float* __restrict__ work_s,
                                 float* __restrict__ d, float* __restrict__ sqr_sum, int m, int n, int splits,
                                 int d_row_stride, int groups, int d_split_stride) {
  ptx::grid_dependency_wait();  // the split kernel before it wrote the partials
  ptx::launch_dependents();
  const long long total = static_cast<long long>(m) * n, per_group = total + m;
  constexpr int kBatch = 8;
  for (long long idx = static_cast<long long>(blockIdx.x) * kHcReduceThreads + threadIdx.x; idx < groups * per_group;
       idx += static_cast<long long>(gridDim.x) * kHcReduceThreads) {
    const int group = static_cast<int>(idx / per_group);
    const long long at = idx - group * per_group;
    const bool is_d = at < total;
    // partial s of this output: work_d[(group * splits + s) * total + at] or work_s[(..) * m + row]
    const float* src = is_d ? work_d + static_cast<long long>(group) * splits * total + at
                            : work_s + static_cast<long long>(group) * splits * m + (at - total);
    const long long step = is_d ? total : m;
    float acc = 0.0f;
    int s = 0;
    for (; s + kBatch <= splits; s += kBatch) {
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = src[(s + j) * step];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) acc += v[j];
    }
    for (; s < splits; ++s) acc += src[s * step];
    if (is_d) {
      const long long row = at / n;
      d[static_cast<long long>(group) * d_split_stride + row * d_row_stride + (at - row * n)] = acc;
    } else {
      sqr_sum[static_cast<long long>(group) * m + (at - total)] = acc;
    }
  }
}

}  // namespace deep_tile
