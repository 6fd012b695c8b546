// BF16 GEMMs on Hopper (sm_90a): DeepGEMM's bf16_gemm_{nt,nn,tn,tt} and the M-grouped BF16 GEMMs
// (contiguous with m_indices, masked with masked_m), one kernel whose operands' majorness is a
// template parameter (deep_tile/kernels/bf16_gemm.py is the host's contract).
//
//   D[m, n] (+)= sum_k A[m, k] * B[n, k]      (float32 accumulation, bf16 or float32 D)
//
// A and B are loaded by TMA into 128B-swizzled shared memory, K-major (boxes of 64 k x rows) or
// MN-major (boxes of 64 rows x 64 k, one per 64 rows); the BF16 wgmma reads an MN-major operand
// through its transpose immediate (ptx/wgmma_bf16.cuh), so no layout needs a transposing copy.
// One producer warpgroup (one elected thread issues the TMAs, 40 registers) fills a ring of
// kStages full/empty mbarrier stages; two consumer warpgroups (232 registers) each own 64 rows
// of the 128 x kBlockN tile (kBlockN any multiple of 16, so that few-column problems fill the SMs),
// or (kBlockM = 64, the dense GEMM) one consumer warpgroup (248 registers) owns a 64-row tile: twice
// the tiles of a small-m or few-column problem, so the SMs fill without splitting K.
// CTAs are persistent and walk the tiles in bands of kBandM m-blocks (consecutive CTAs share B
// tiles in L2). At tiny m, kBoxM < 128 loads only A's first kBoxM rows (TMA fills out-of-bounds rows
// at full cost) and the second consumer warpgroup, which owns no valid row, only releases stages.
// With kClusterM = 2 (the dense GEMM, K-major B) two CTAs of a cluster take adjacent m-blocks of
// one n-block and each loads half of the B tile, multicast to both: B's L2 reads halve; each CTA's
// consumers release a stage in both CTAs (a stage is refilled only when both have read it).
// The dense GEMM may split K (num_groups = the splits): split s reduces its share of the k blocks
// and writes its float32 partial rows (row-major) to a workspace, then bumps the tile's counter
// (acquire-release at GPU scope); the CTA that brings it to the split count resets it to zero (the
// next launch and graph replays find it so) and sums the partials in split order (deterministic
// whatever the arrival order; each thread sums kBlockN / 8 quads of 4 columns, a split's loads all in
// flight, or at a row or two one quad over many splits at once) and stores D from registers: no host
// reduction. The staged epilogue (kTmaStore) packs each warpgroup's 64 rows into 128B-swizzled boxes
// of 128-byte rows (64 bf16 or 32 float32 columns), double-buffered, each stored by TMA (or
// TMA-reduce-added into float32 D when kAccumulate) while the next fills; columns past the last
// whole box, and every other case (bf16 accumulation, the masked and K-grouped GEMMs, a D pitch TMA
// cannot take) store straight from registers (bf16x2 / float2 per thread, bounds-checked), adding
// D's previous value when kAccumulate (the host copies c into d first, as DeepGEMM does).
// The batched GEMM (kBf16Batched) computes D_g = A_g B_g^T for num_groups batch indices g in one
// persistent launch: A and B are read through 3-D maps (k or n, row, g), so a box past m, n or k is
// zero-filled inside batch g (never the next batch's rows, whatever the strides); with kTmaStore D
// leaves through a 3-D map (column, row, g) as the staged boxes above, clipped to batch g's m x n (the per-head
// einsum's D rows lie 16-128 KiB apart: 4-byte stores from registers, 8 rows per warp instruction, hold
// the consumers for microseconds per tile, while TMA stores leave during the next tile's wgmmas), else
// from registers at g * group_ldd; its tiles are walked
// batch by batch, (g, m-block, n-block).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_bf16.cuh"

namespace deep_tile {

enum Bf16GemmType : int {
  kBf16Normal = 0, kBf16MGroupedContiguous = 1, kBf16MGroupedMasked = 2, kBf16KGrouped = 3, kBf16Batched = 4
};

/// The kernel's compile-time configuration (13 parameters; Python: deep_tile/kernels/bf16_gemm.py).
///   kMajorA / kMajorB: 0 = K-major (unit stride along k), 1 = MN-major (unit stride along m / n).
///   kBlockN: tile columns (a multiple of 16 up to 256; of 64 when B is MN-major); kStages: the ring's depth.
///   kOutF32: D is float32 (else bf16); kAccumulate: D += A B^T; kGemmType: Bf16GemmType;
///   kTmaStore: D leaves through swizzled shared memory and TMA stores / reduce-adds (else from registers);
///   kBoxM: A rows loaded per stage (128; 16, 32 or 64 for the dense and batched GEMMs when m <= kBoxM);
///   kClusterM: 1, or 2 (CTA pairs on adjacent m-blocks sharing B by TMA multicast);
///   kStoreAll: with kTmaStore, a buffer per box (the whole tile staged, one wait per tile) instead of two;
///   kCompactA: with kBoxM <= 64, A's stage slot holds the 64 rows the one working warpgroup reads (a deeper ring);
///   kBlockM: 128 (two consumer warpgroups), or 64 (one; the dense and batched GEMMs, kBoxM <= 64: the A box, 64
///   for whole tiles).
///   kKMerge: 64-k blocks per stage (the dense K-major GEMM): one full wait, one commit / wait and one release
///     per kKMerge blocks, kKMerge A and B boxes under one expect_tx (narrow tiles' per-block sync costs as much as their wgmmas).
template <int kMajorA_, int kMajorB_, int kBlockN_, int kStages_, int kOutF32_, int kAccumulate_, int kGemmType_,
          int kTmaStore_, int kBoxM_, int kClusterM_, int kStoreAll_ = 0, int kCompactA_ = 0, int kBlockM_ = 128,
          int kKMerge_ = 1>
struct Bf16GemmConfig {
  static constexpr int kMajorA = kMajorA_, kMajorB = kMajorB_;
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kBlockK = 64;  // 64 bf16 = one 128-byte swizzle row
  static constexpr int kStages = kStages_;
  static constexpr bool kOutF32 = kOutF32_ != 0, kAccumulate = kAccumulate_ != 0;
  static constexpr int kGemmType = kGemmType_;
  static constexpr int kConsumers = kBlockM / 64;           // consumer warpgroups, 64 rows each
  static constexpr int kThreads = 128 * (1 + kConsumers);  // the producer warpgroup besides
  // one consumer warpgroup may take more of the register file (its 64 x 256 accumulator at most)
  static constexpr int kLoadRegs = 40, kMathRegs = kConsumers == 1 ? 248 : 232;
  static constexpr int kBandM = 8;      // m-blocks per band of the tile order
  static constexpr int kBoxM = kBoxM_;
  static constexpr int kClusterM = kClusterM_;
  static constexpr bool kCompactA = kCompactA_ != 0;
  static constexpr int kKMerge = kKMerge_, kStageK = kBlockK * kKMerge;  // a stage's k extent
  // a stage: kKMerge A sub-slots of one 64-k box each, then kKMerge B sub-slots
  static constexpr int kASub = (kCompactA ? 64 : kBlockM) * kBlockK * 2, kBSub = kBlockN * kBlockK * 2;
  static constexpr int kABytes = kASub * kKMerge, kBBytes = kBSub * kKMerge;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStageTxBytes = (kBoxM * kBlockK * 2 + kBSub) * kKMerge;  // what one stage's TMAs deliver
  static constexpr bool kTmaStore = kTmaStore_ != 0;
  static constexpr int kStoreBytes = 64 * 128;  // one box: a warpgroup's 64 rows of 128 bytes
  static constexpr int kStoreCols = kOutF32 ? 32 : 64;  // D columns in a box's 128-byte row
  static constexpr int kStoreBoxes = kTmaStore ? kBlockN / kStoreCols : 0;  // whole boxes per warpgroup and tile
  static constexpr bool kStoreAll = kStoreAll_ != 0;
  // per warpgroup: fill one while the other is stored, or (kStoreAll) every box its own, no wait inside a tile
  static constexpr int kStoreBuffers = kStoreAll ? kStoreBoxes : 2;
  static constexpr int kSmemBytes =
      kStages * kStageBytes + (kTmaStore ? kConsumers * kStoreBuffers * kStoreBytes : 0) + 2 * kStages * 8;
  DT_STATIC_ASSERT(kMajorA_ == 0 || kMajorA_ == 1, "kMajorA: 0 (K-major) or 1 (MN-major)");
  DT_STATIC_ASSERT(kMajorB_ == 0 || kMajorB_ == 1, "kMajorB: 0 (K-major) or 1 (MN-major)");
  DT_STATIC_ASSERT(kBlockN_ % 16 == 0 && kBlockN_ >= 16 && kBlockN_ <= 256, "kBlockN: a multiple of 16, at most 256");
  DT_STATIC_ASSERT(kMajorB_ == 0 || kBlockN_ % 64 == 0, "an MN-major B loads 64-row boxes: kBlockN a multiple of 64");
  DT_STATIC_ASSERT(kBoxM_ == 128 || ((kBoxM_ == 16 || kBoxM_ == 32 || kBoxM_ == 64) &&
                                     (kGemmType_ == kBf16Normal || kGemmType_ == kBf16Batched) &&
                                     (kMajorA_ == 0 || kBoxM_ == 64)),
                   "kBoxM: 128, or 16 / 32 / 64 (MN-major A: 64) for the dense and batched GEMMs");
  DT_STATIC_ASSERT(kClusterM_ == 1 || (kClusterM_ == 2 && kGemmType_ == kBf16Normal && kMajorB_ == 0 && kBoxM_ == 128),
                   "kClusterM: 1, or 2 for the dense GEMM with a K-major B");
  DT_STATIC_ASSERT(kStages_ >= 2 && kSmemBytes <= 227 * 1024, "kStages: at least 2, within 227 KiB of shared memory");
  DT_STATIC_ASSERT(kGemmType_ >= 0 && kGemmType_ <= 4, "kGemmType: Bf16GemmType");
  DT_STATIC_ASSERT(kCompactA_ == 0 || (kCompactA_ == 1 && kBoxM_ <= 64),
                   "kCompactA: only with kBoxM <= 64 (the second warpgroup then reads no A)");
  DT_STATIC_ASSERT(kBlockM_ == 128 || (kBlockM_ == 64 && (kGemmType_ == kBf16Normal || kGemmType_ == kBf16Batched) &&
                                       kBoxM_ <= 64 &&
                                       kClusterM_ == 1 && kCompactA_ == 0),
                   "kBlockM: 128, or 64 for the dense and batched GEMMs (kBoxM <= 64, no pairs; its A slot is 64 rows)");
  DT_STATIC_ASSERT(kKMerge_ == 1 || (kKMerge_ >= 2 && kKMerge_ <= 8 && kGemmType_ == kBf16Normal && kMajorA_ == 0 &&
                                     kMajorB_ == 0 && kClusterM_ == 1),
                   "kKMerge: 1, or 2..8 for the dense GEMM with K-major A and B and no pairs");
  DT_STATIC_ASSERT(kLoadRegs * 128 + kMathRegs * 128 * kConsumers <= 64 * 1024, "the register split fits the file");
  DT_STATIC_ASSERT(kStoreAll_ == 0 || (kStoreAll_ == 1 && kTmaStore_ == 1 && kStoreBoxes >= 3),
                   "kStoreAll: with kTmaStore and at least three boxes (two are double-buffered already)");
  DT_STATIC_ASSERT(kGemmType_ == kBf16Normal || kGemmType_ == kBf16KGrouped || kMajorA_ == 0,
                   "the M-grouped and batched GEMMs take a K-major A");
  DT_STATIC_ASSERT(kGemmType_ != kBf16Batched || (kClusterM_ == 1 && kAccumulate_ == 0),
                   "the batched GEMM runs no accumulation and no CTA pairs (D through a 3-D map or from registers)");
  DT_STATIC_ASSERT((kGemmType_ != kBf16MGroupedContiguous && kGemmType_ != kBf16MGroupedMasked) ||
                       (kOutF32_ == 0 && kAccumulate_ == 0),
                   "the M-grouped GEMMs write bf16 without accumulation (DeepGEMM's)");
  DT_STATIC_ASSERT(kGemmType_ != kBf16KGrouped || (kOutF32_ == 1 && kAccumulate_ == 1),
                   "the K-grouped GEMM accumulates into float32 D (DeepGEMM's)");
  DT_STATIC_ASSERT(kTmaStore_ == 0 || ((kOutF32_ == 1 || kAccumulate_ == 0) && kGemmType_ != kBf16MGroupedMasked &&
                                       kGemmType_ != kBf16KGrouped),
                   "kTmaStore: not bf16 accumulation (TMA adds float32 only), nor the masked GEMM (rows past masked_m "
                   "stay untouched) or the K-grouped one (a tile's rows may reach the next group)");
};

/// One tile of work: where its operands and outputs are.
struct Bf16Tile {
  int m_block, n_block;  // block indices (m_block within the group for the masked GEMM)
  int a_row;             // first row of A (the 2-D view's row; masked: group * m + ...)
  int b_base;            // row offset of the group's B in B's 2-D view (K-major: g * n, MN-major: g * k)
  int m_limit;           // rows of D valid from the tile's first row
  int d_row;             // D's row of the tile's first row (D's 2-D view: [groups * m, n] when grouped)
  int k_begin;           // first k of the tile's reduction (the K-grouped GEMM: its group's first)
  int k_blocks;          // BLOCK_K steps of the reduction
  int split, slot;       // split K: this tile's split and its output tile's index (counter, workspace)
  int group;             // the batched GEMM: the batch index (TMA's third coordinate, D's batch offset)
  bool valid;            // false: nothing to compute (contiguous tiles of padding rows)
};

/// Persistent tile order (the same walk in the producer and the consumers).
template <class Cfg>
struct Bf16Scheduler {
  int m, n, k, num_groups;
  const int* layout;  // m_indices (contiguous) or masked_m (masked)
  int num_n_blocks;
  // masked: the group the walk is in and the tiles before it
  int group = 0, tiles_before = 0, group_tiles = 0;
  int k_before = 0;  // K-grouped: the k rows of the groups before `group`
  int rank = 0;      // kClusterM = 2: this CTA's m-block within its cluster's pair

  DT_DEVICE Bf16Scheduler(int m_, int n_, int k_, int groups, const int* layout_)
      : m(m_), n(n_), k(k_), num_groups(groups), layout(layout_), num_n_blocks(ceil_div(n_, Cfg::kBlockN)) {
    if (Cfg::kGemmType == kBf16MGroupedMasked) group_tiles = ceil_div(masked_rows(0), Cfg::kBlockM) * num_n_blocks;
    if (Cfg::kClusterM > 1) rank = static_cast<int>(ptx::cluster_cta_rank());
  }

  /// Group g's rows of the masked GEMM, clamped to [0, m] (a bad count must not write another group).
  DT_DEVICE int masked_rows(int g) const { return min_int(max_int(layout[g], 0), m); }

  /// Band order within a rectangle of `mb` x `nb` blocks.
  DT_DEVICE void order(int t, int mb, int& m_block, int& n_block) const {
    const int band_tiles = Cfg::kBandM * num_n_blocks;
    const int band = t / band_tiles, in_band = t - band * band_tiles;
    const int first = band * Cfg::kBandM;
    const int rows = min_int(mb - first, Cfg::kBandM);
    m_block = first + in_band % rows;
    n_block = in_band / rows;
  }

  /// The t-th tile; false when the walk is over.
  DT_DEVICE bool get(int t, Bf16Tile& tile) {
    tile.valid = true;
    tile.k_begin = 0;
    tile.split = tile.slot = 0;
    tile.k_blocks = ceil_div(k, Cfg::kStageK);  // stages (k past the end: TMA's zero fill)
    if (Cfg::kGemmType == kBf16Batched) {
      // batch g's tiles follow batch g - 1's: (g, m-block, n-block), every batch the same m x n x k
      const int mb = ceil_div(m, Cfg::kBlockM), per_group = mb * num_n_blocks;
      const int g = t / per_group;
      if (g >= num_groups) return false;
      order(t - g * per_group, mb, tile.m_block, tile.n_block);
      tile.group = g;
      tile.a_row = tile.d_row = tile.m_block * Cfg::kBlockM;
      tile.b_base = 0;
      tile.m_limit = min_int(m - tile.a_row, Cfg::kBlockM);
      return true;
    }
    if (Cfg::kGemmType == kBf16KGrouped) {
      // every group has the same tiles: d[g] = sum over its k rows; layout holds each group's k (multiples of 128)
      const int mb = ceil_div(m, Cfg::kBlockM), per_group = mb * num_n_blocks;
      const int g = t / per_group;
      if (g >= num_groups) return false;
      for (; group < g; ++group) k_before += layout[group];
      order(t - g * per_group, mb, tile.m_block, tile.n_block);
      tile.a_row = tile.m_block * Cfg::kBlockM;
      tile.d_row = g * m + tile.a_row;
      tile.b_base = 0;
      tile.m_limit = min_int(m - tile.a_row, Cfg::kBlockM);
      tile.k_begin = k_before;
      tile.k_blocks = layout[g] / Cfg::kBlockK;
      tile.valid = tile.k_blocks > 0;
      return true;
    }
    if (Cfg::kGemmType == kBf16MGroupedMasked) {
      while (t - tiles_before >= group_tiles) {
        if (++group >= num_groups) return false;
        tiles_before += group_tiles;
        group_tiles = ceil_div(masked_rows(group), Cfg::kBlockM) * num_n_blocks;
      }
      const int masked = masked_rows(group);
      order(t - tiles_before, ceil_div(masked, Cfg::kBlockM), tile.m_block, tile.n_block);
      tile.a_row = group * m + tile.m_block * Cfg::kBlockM;
      tile.b_base = group * (Cfg::kMajorB ? k : n);
      tile.m_limit = min_int(masked - tile.m_block * Cfg::kBlockM, Cfg::kBlockM);
      tile.d_row = tile.a_row;
      return true;
    }
    // kClusterM = 2: t walks pairs of m-blocks (the second of an odd count lies past m)
    const int mb = ceil_div(ceil_div(m, Cfg::kBlockM), Cfg::kClusterM), tiles = mb * num_n_blocks;
    // the dense GEMM: num_groups splits of K, the split the slowest index (split 0's tiles first);
    // the contiguous kind has one split, so its walk ends after `tiles` (no m_indices read past m)
    const int split = t / tiles;
    if (split >= (Cfg::kGemmType == kBf16Normal ? num_groups : 1)) return false;
    tile.split = split;
    tile.slot = t - split * tiles;
    order(tile.slot, mb, tile.m_block, tile.n_block);
    tile.m_block = tile.m_block * Cfg::kClusterM + rank;
    tile.a_row = tile.m_block * Cfg::kBlockM;
    tile.m_limit = min_int(m - tile.a_row, Cfg::kBlockM);
    tile.d_row = tile.a_row;
    tile.b_base = 0;
    if (Cfg::kGemmType == kBf16Normal && num_groups > 1) {
      const int per = ceil_div(tile.k_blocks, num_groups);  // the host makes every split non-empty
      tile.k_begin = split * per * Cfg::kStageK;
      tile.k_blocks = min_int(per, tile.k_blocks - split * per);
      tile.valid = tile.k_blocks > 0;
    }
    // an odd m-block count's last twin reads its partner's rows (no fully out-of-bounds box) and stores nothing
    if (Cfg::kClusterM > 1 && tile.a_row >= m) tile.a_row -= Cfg::kBlockM;
    if (Cfg::kGemmType == kBf16MGroupedContiguous) {
      const int g = layout[tile.a_row];
      tile.valid = g >= 0 && g < num_groups;
      tile.b_base = (tile.valid ? g : 0) * (Cfg::kMajorB ? k : n);
    }
    return true;
  }
};

/// D's columns c and c + 1 (only c when c + 1 == n) of the row at `base`, from registers: bf16x2 or
/// float2, adding D's previous values when kAccumulate.
template <class Cfg>
DT_DEVICE void bf16_store_pair(void* d, long long base, int c, int n, float v0, float v1) {
  const bool pair = c + 1 < n;
  if (Cfg::kOutF32) {
    float* p = reinterpret_cast<float*>(d) + base + c;
    if (pair) {
      if (Cfg::kAccumulate) {
        const float2 old = *reinterpret_cast<const float2*>(p);
        v0 += old.x, v1 += old.y;
      }
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      p[0] = Cfg::kAccumulate ? p[0] + v0 : v0;
    }
  } else {
    u16* p = reinterpret_cast<u16*>(d) + base + c;
    if (pair) {
      if (Cfg::kAccumulate) {
        const u32 old = *reinterpret_cast<const u32*>(p);
        v0 += __uint_as_float((old & 0xFFFFu) << 16);
        v1 += __uint_as_float(old & 0xFFFF0000u);
      }
      *reinterpret_cast<u32*>(p) = ptx::pack_bf16x2(v0, v1);
    } else {
      if (Cfg::kAccumulate) v0 += __uint_as_float(static_cast<u32>(p[0]) << 16);
      p[0] = static_cast<u16>(ptx::pack_bf16x2(v0, 0.0f) & 0xFFFFu);
    }
  }
}

/// `*counter += 1`, acquire-release at GPU scope: the partials this CTA wrote before it (ordered by
/// a barrier) are visible to the thread that sees the final count, and it sees everyone's.
/// Box q (kStoreCols columns) of this thread's accumulators, rows r and r + 8 of its warpgroup's 64,
/// packed into the 128B-swizzled 64-row buffer the TMA store reads.
template <class Cfg, int kNumAccum>
DT_DEVICE void bf16_pack_box(u8* buf, const float (&acc)[kNumAccum], int q, int r, int lane) {
  constexpr int kGroups = Cfg::kStoreCols / 8;  // 8-column accumulator groups per box row
#pragma unroll
  for (int jj = 0; jj < kGroups; ++jj) {
    const int j = q * kGroups + jj;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r + 8 * h;
      if constexpr (Cfg::kOutF32) {
        // 8 floats = two 16-byte chunks: lanes 0-1 of a quad fill the first, 2-3 the second
        const int chunk = 2 * jj + (lane % 4) / 2;
        *reinterpret_cast<float2*>(buf + row * 128 + ((chunk ^ (row & 7)) << 4) + (lane % 2) * 8) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      } else {
        const u32 v = ptx::pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        *reinterpret_cast<u32*>(buf + row * 128 + ((jj ^ (row & 7)) << 4) + (lane % 4) * 4) = v;
      }
    }
  }
}

DT_DEVICE u32 bf16_split_arrive(u32* counter) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

template <class Cfg>
DT_DEVICE void bf16_gemm(const TmaDescriptor* tmap_a, const TmaDescriptor* tmap_b, const TmaDescriptor* tmap_d,
                         void* __restrict__ d, const int* __restrict__ layout, int m, int n, int k, int ldd,
                         int num_groups, float* __restrict__ workspace, u32* __restrict__ counters,
                         int group_ldd) {
  using Mma = ptx::WgmmaBf16<Cfg::kBlockN, Cfg::kMajorA, Cfg::kMajorB>;
  constexpr int kStages = Cfg::kStages, kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kBlockK = Cfg::kBlockK;
  extern __shared__ __align__(1024) u8 smem[];
  u8* smem_a = smem;
  u8* smem_b = smem + kStages * Cfg::kABytes;
  u8* smem_d = smem + kStages * Cfg::kStageBytes;  // kTmaStore: kStoreBuffers per consumer warpgroup
  u64* full =
      reinterpret_cast<u64*>(smem_d + (Cfg::kTmaStore ? Cfg::kConsumers * Cfg::kStoreBuffers * Cfg::kStoreBytes : 0));
  u64* empty = full + kStages;

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    ptx::tma_prefetch_descriptor(tmap_a);
    ptx::tma_prefetch_descriptor(tmap_b);
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 4 * Cfg::kConsumers * Cfg::kClusterM);  // one arrival per consumer warp of the cluster
    }
    ptx::fence_barrier_init();
  }
  // a pair's barriers must be initialised before the peer multicasts into them or arrives on them
  if constexpr (Cfg::kClusterM > 1) ptx::cluster_sync();
  else __syncthreads();
  ptx::grid_dependency_wait();  // the stream predecessor may write A, B, D or the layout
  ptx::launch_dependents();

  Bf16Scheduler<Cfg> sched(m, n, k, num_groups, layout);

  if (wg == 0) {
    ptx::setmaxnreg_dec<Cfg::kLoadRegs>();
    if (tid == 0) {
      int stage = 0;
      u32 phase = 0;
      Bf16Tile tile;
      for (int t = blockIdx.x / Cfg::kClusterM; sched.get(t, tile); t += gridDim.x / Cfg::kClusterM) {
        if (!tile.valid) continue;
        const int n0 = tile.n_block * kBlockN;
        for (int kb = 0; kb < tile.k_blocks; ++kb) {
          ptx::mbarrier_wait(&empty[stage], phase ^ 1);
          u64* bar = &full[stage];
          ptx::mbarrier_arrive_expect_tx(bar, Cfg::kStageTxBytes);
          u8* a = smem_a + stage * Cfg::kABytes;
          u8* b = smem_b + stage * Cfg::kBBytes;
          const int k0 = tile.k_begin + kb * Cfg::kStageK;
          if (Cfg::kGemmType == kBf16Batched) {  // 3-D maps (k or n, row, batch): a box stays in its batch
            ptx::tma_load_3d(a, tmap_a, bar, k0, tile.a_row, tile.group);
          } else if (Cfg::kMajorA == 0) {
#pragma unroll
            for (int i = 0; i < Cfg::kKMerge; ++i) ptx::tma_load_2d(a + i * Cfg::kASub, tmap_a, bar, k0 + i * kBlockK, tile.a_row);
          } else {
#pragma unroll
            for (int i = 0; i < Cfg::kBoxM / 64; ++i) ptx::tma_load_2d(a + i * 64 * 128, tmap_a, bar, tile.a_row + 64 * i, k0);
          }
          if (Cfg::kGemmType == kBf16Batched && Cfg::kMajorB == 0) {
            ptx::tma_load_3d(b, tmap_b, bar, k0, n0, tile.group);
          } else if (Cfg::kGemmType == kBf16Batched) {  // MN-major: 64-column boxes of 64 k rows, as the 2-D map's
#pragma unroll
            for (int i = 0; i < kBlockN / 64; ++i) ptx::tma_load_3d(b + i * 64 * 128, tmap_b, bar, n0 + 64 * i, k0, tile.group);
          } else if (Cfg::kClusterM > 1) {  // this CTA's half of the B tile, to both CTAs
            constexpr int kHalf = kBlockN / 2;
            ptx::tma_load_2d_multicast(b + sched.rank * kHalf * 128, tmap_b, bar, k0, n0 + sched.rank * kHalf, 0x3);
          } else if (Cfg::kMajorB == 0) {
#pragma unroll
            for (int i = 0; i < Cfg::kKMerge; ++i) ptx::tma_load_2d(b + i * Cfg::kBSub, tmap_b, bar, k0 + i * kBlockK, tile.b_base + n0);
          } else {
#pragma unroll
            for (int i = 0; i < kBlockN / 64; ++i) ptx::tma_load_2d(b + i * 64 * 128, tmap_b, bar, n0 + 64 * i, tile.b_base + k0);
          }
          stage = stage + 1 == kStages ? 0 : stage + 1;
          phase ^= stage == 0;
        }
      }
    }
    if constexpr (Cfg::kClusterM > 1) ptx::cluster_sync();  // the peer may still arrive on our barriers
    return;
  }

  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  const int cw = Cfg::kConsumers == 1 ? 0 : wg - 1;  // this warpgroup's 64 rows of the tile (a constant for one)
  const int warp = (tid / 32) & 3, lane = tid & 31;
  // descriptor steps: a k16 slice is 32 bytes along a K-major row, 16 rows of 128 bytes MN-major
  constexpr u32 kStepA = Cfg::kMajorA ? 16 * 128 : 32, kStepB = Cfg::kMajorB ? 16 * 128 : 32;
  // LBO: MN-major operands step 8 KiB (one 64-row TMA box) between 64-element MN atoms; K-major ignores it
  constexpr u32 kLboA = Cfg::kMajorA ? 64 * 128 : 0, kLboB = Cfg::kMajorB ? 64 * 128 : 0;
  const u32 a_base = ptx::smem_addr(smem_a) + cw * 64 * 128;
  const u32 b_base = ptx::smem_addr(smem_b);
  float acc[Mma::kNumAccum];
  u32 stores = 0;  // kTmaStore: boxes this warpgroup has stored, whose parity picks the buffer
  int stage = 0;
  u32 phase = 0;
  Bf16Tile tile;
  // kKMerge > 1: barrier addresses and descriptors' low words formed once, broadcast from lane 0 (else ptxas
  // re-reads the shared window, S2R, before each stage's wait and rebuilds each descriptor); other kernels unchanged
  constexpr bool kMerged = Cfg::kKMerge > 1;
  const u32 full_addr = kMerged ? __shfl_sync(0xFFFFFFFFu, ptx::smem_addr(full), 0) : 0u;
  const u32 empty_addr = kMerged ? __shfl_sync(0xFFFFFFFFu, ptx::smem_addr(empty), 0) : 0u;
  const u64 desc_a0 = ptx::sw128_desc_lbo(a_base, kLboA), desc_b0 = ptx::sw128_desc_lbo(b_base, kLboB);
  const u64 desc_hi = desc_a0 & 0xFFFFFFFF00000000ull;  // SBO and swizzle: the same for A and B (K-major, LBO 0)
  const u32 lo_a0 = kMerged ? __shfl_sync(0xFFFFFFFFu, static_cast<u32>(desc_a0), 0) : 0u;
  const u32 lo_b0 = kMerged ? __shfl_sync(0xFFFFFFFFu, static_cast<u32>(desc_b0), 0) : 0u;
  // a stage is free once every consumer warp of the cluster has read it
  auto release = [&](int s) {
    if (lane != 0) return;
    if constexpr (Cfg::kKMerge > 1) {
      ptx::mbarrier_arrive_at(empty_addr + s * 8);
    } else if constexpr (Cfg::kClusterM > 1) {
#pragma unroll
      for (int r = 0; r < Cfg::kClusterM; ++r) ptx::mbarrier_arrive_cluster(&empty[s], static_cast<u32>(r));
    } else {
      ptx::mbarrier_arrive(&empty[s]);
    }
  };
  // kBoxM <= 64 in a 128-row tile: the second warpgroup's rows are past m (never loaded): it only releases
  // the stages, in a loop of its own (a branch inside the wgmma loop makes ptxas wait on every wgmma)
  if (Cfg::kConsumers > 1 && Cfg::kBoxM <= 64 && cw == 1) {
    for (int t = blockIdx.x; sched.get(t, tile); t += gridDim.x) {
      if (!tile.valid) continue;
      for (int kb = 0; kb < tile.k_blocks; ++kb) {
        ptx::mbarrier_wait(&full[stage], phase);
        release(stage);
        stage = stage + 1 == kStages ? 0 : stage + 1;
        phase ^= stage == 0;
      }
    }
    return;
  }
  for (int t = blockIdx.x / Cfg::kClusterM; sched.get(t, tile); t += gridDim.x / Cfg::kClusterM) {
    if (!tile.valid) continue;
    int prev_stage = -1;
    // kKMerge > 1: the trip count broadcast from lane 0, so that ptxas proves the loop warp-uniform and keeps the
    // stage and its descriptors in uniform registers (87 instructions per 192 k, not 133 with an R2UR per wgmma)
    const int k_stages = Cfg::kKMerge > 1 ? __shfl_sync(0xFFFFFFFFu, tile.k_blocks, 0) : tile.k_blocks;
    for (int kb = 0; kb < k_stages; ++kb) {
      if constexpr (Cfg::kKMerge > 1) ptx::mbarrier_wait_at(full_addr + stage * 8, phase);
      else ptx::mbarrier_wait(&full[stage], phase);
      // the stage's descriptors' low words (start address >> 4, in range: shared memory is under 256 KiB)
      const u32 lo_a = lo_a0 + stage * (Cfg::kABytes / 16), lo_b = lo_b0 + stage * (Cfg::kBBytes / 16);
#pragma unroll
      for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kKMerge * (kBlockK / 16); ++kk) {
        if constexpr (Cfg::kKMerge > 1) {
          // k16 slice kk: sub-slot kk / 4 of the stage, slice kk % 4 within its 64-k box
          const u32 off_a = (kk / (kBlockK / 16)) * Cfg::kASub + (kk % (kBlockK / 16)) * kStepA;
          const u32 off_b = (kk / (kBlockK / 16)) * Cfg::kBSub + (kk % (kBlockK / 16)) * kStepB;
          Mma::mma(desc_hi | (lo_a + off_a / 16), desc_hi | (lo_b + off_b / 16), acc, kb > 0 || kk > 0);
        } else {
          const u64 da = ptx::sw128_desc_lbo(a_base + stage * Cfg::kABytes + kk * kStepA, kLboA);
          const u64 db = ptx::sw128_desc_lbo(b_base + stage * Cfg::kBBytes + kk * kStepB, kLboB);
          Mma::mma(da, db, acc, kb > 0 || kk > 0);
        }
      }
      ptx::wgmma_commit_group();
#pragma unroll
      for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
      ptx::wgmma_wait_group<1>();  // the previous stage's wgmmas are done: release it
      if (prev_stage >= 0) release(prev_stage);
      prev_stage = stage;
      stage = stage + 1 == kStages ? 0 : stage + 1;
      phase ^= stage == 0;
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int i = 0; i < Mma::kNumAccum; ++i) ptx::fence_operand(acc[i]);
    if (prev_stage >= 0) release(prev_stage);
    if (tile.m_limit <= 0) continue;  // a pair's twin past m

    if (Cfg::kGemmType == kBf16Normal && Cfg::kClusterM == 1 && num_groups > 1) {
      // split K: this split's rows out (row-major), then the tile's last split sums all in split order
      constexpr u32 kSplitThreads = Cfg::kBoxM <= 64 ? 128 : 256;  // an idle warpgroup takes no part
      constexpr int kTileFloats = kBlockM * kBlockN;
      const int ctid = tid - 128;
      float* tile_ws = workspace + static_cast<long long>(tile.slot) * num_groups * kTileFloats;
      {
        float* mine = tile_ws + tile.split * kTileFloats;
        const int r0 = cw * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (r0 + 8 * h >= tile.m_limit) continue;
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j)
            __stcg(reinterpret_cast<float2*>(mine + (r0 + 8 * h) * kBlockN + 8 * j + 2 * (lane % 4)),
                   make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
        }
      }
      ptx::named_barrier_sync(3, kSplitThreads);  // every partial store before the leader's release
      bool last = false;
      if (ctid == 0) {
        last = bf16_split_arrive(counters + tile.slot) == static_cast<u32>(num_groups - 1);
        if (last) counters[tile.slot] = 0;  // no other split touches it again in this launch
      }
      if (ptx::named_barrier_popc(3, kSplitThreads, last) == 0) continue;
      // thread ctid sums quads (4 columns of a row) ctid + u kSplitThreads into acc, split by split in
      // order: every quad of a split in flight at once, two splits at once for narrow tiles
      constexpr int kQuadsPerRow = kBlockN / 4, kU = kBlockN / 8;  // kU quads per thread = acc's floats / 4
      constexpr int kS = kU <= 8 ? 2 : 1;                    // splits loaded together
      constexpr int kChunk = kU <= 16 ? kU : 8;              // quads per pass: wide tiles keep registers for acc
      const int quads = tile.m_limit * kQuadsPerRow;
      const float4* ws4 = reinterpret_cast<const float4*>(tile_ws) + ctid;
      if (quads <= static_cast<int>(kSplitThreads)) {
        // a quad per thread at most (a row or two): many splits' loads in flight at once, one round trip
        constexpr int kAtOnce = kU <= 16 ? 16 : 4;
        if (ctid < quads) {
#pragma unroll 1
          for (int s0 = 0; s0 < num_groups; s0 += kAtOnce) {
            float4 p[kAtOnce];
#pragma unroll
            for (int ss = 0; ss < kAtOnce; ++ss)
              if (s0 + ss < num_groups) p[ss] = __ldcg(ws4 + (s0 + ss) * (kTileFloats / 4));
#pragma unroll
            for (int ss = 0; ss < kAtOnce; ++ss) {
              if (s0 + ss >= num_groups) break;
              const bool first = s0 + ss == 0;
              acc[0] = first ? p[ss].x : acc[0] + p[ss].x;
              acc[1] = first ? p[ss].y : acc[1] + p[ss].y;
              acc[2] = first ? p[ss].z : acc[2] + p[ss].z;
              acc[3] = first ? p[ss].w : acc[3] + p[ss].w;
            }
          }
        }
      } else {
#pragma unroll
        for (int u0 = 0; u0 < kU; u0 += kChunk) {
#pragma unroll 1
          for (int s0 = 0; s0 < num_groups; s0 += kS) {
#pragma unroll
            for (int ss = 0; ss < kS; ++ss) {
              const int s = s0 + ss;
              if (s >= num_groups) break;
#pragma unroll
              for (int u = u0; u < (u0 + kChunk < kU ? u0 + kChunk : kU); ++u) {
                if (ctid + u * static_cast<int>(kSplitThreads) >= quads) continue;
                const float4 v = __ldcg(ws4 + s * (kTileFloats / 4) + u * kSplitThreads);
                acc[4 * u] = s ? acc[4 * u] + v.x : v.x;
                acc[4 * u + 1] = s ? acc[4 * u + 1] + v.y : v.y;
                acc[4 * u + 2] = s ? acc[4 * u + 2] + v.z : v.z;
                acc[4 * u + 3] = s ? acc[4 * u + 3] + v.w : v.w;
              }
            }
          }
        }
      }
      // quad ctid + u kSplitThreads sits at row r, quad q: stepped without a division per quad
      int r = ctid / kQuadsPerRow, q = ctid - r * kQuadsPerRow;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (ctid + u * static_cast<int>(kSplitThreads) < quads) {
          const int c = tile.n_block * kBlockN + q * 4;
          const long long base = (tile.d_row + r) * static_cast<long long>(ldd);
          if (c < n) bf16_store_pair<Cfg>(d, base, c, n, acc[4 * u], acc[4 * u + 1]);
          if (c + 2 < n) bf16_store_pair<Cfg>(d, base, c + 2, n, acc[4 * u + 2], acc[4 * u + 3]);
        }
        q += static_cast<int>(kSplitThreads) % kQuadsPerRow;
        r += static_cast<int>(kSplitThreads) / kQuadsPerRow;
        if (q >= kQuadsPerRow) q -= kQuadsPerRow, ++r;
      }
      continue;
    }

    if constexpr (Cfg::kStoreAll) {
      // every box packed into its own buffer, then one thread stores them all: the only wait is for the
      // previous tile's stores to have read the buffers, long done after this tile's k loop
      const int r = warp * 16 + lane / 4;
      const bool leader = (tid & 127) == 0;
      if (leader) ptx::tma_store_wait_read<0>();
      ptx::named_barrier_sync(1 + cw, 128);
#pragma unroll
      for (int q = 0; q < Cfg::kStoreBoxes; ++q)
        bf16_pack_box<Cfg>(smem_d + (cw * Cfg::kStoreBuffers + q) * Cfg::kStoreBytes, acc, q, r, lane);
      ptx::fence_proxy_async_shared();  // the generic-proxy writes before the TMA engine reads them
      ptx::named_barrier_sync(1 + cw, 128);
      if (leader) {
        const int row = tile.d_row + cw * 64;
#pragma unroll
        for (int q = 0; q < Cfg::kStoreBoxes; ++q) {
          u8* buf = smem_d + (cw * Cfg::kStoreBuffers + q) * Cfg::kStoreBytes;
          const int c = tile.n_block * kBlockN + Cfg::kStoreCols * q;
          if constexpr (Cfg::kGemmType == kBf16Batched) ptx::tma_store_3d(tmap_d, buf, c, row, tile.group);
          else if constexpr (Cfg::kAccumulate) ptx::tma_reduce_add_2d(tmap_d, buf, c, row);
          else ptx::tma_store_2d(tmap_d, buf, c, row);
        }
        ptx::tma_store_commit();
      }
    } else if constexpr (Cfg::kStoreBoxes > 0) {
      // per box of kStoreCols columns: pack into a 128B-swizzled 64-row box, then one thread stores it
      const int r = warp * 16 + lane / 4;           // this thread's rows r and r + 8 of the warpgroup's 64
      const bool leader = (tid & 127) == 0;
#pragma unroll
      for (int q = 0; q < Cfg::kStoreBoxes; ++q) {
        u8* buf = smem_d + (cw * Cfg::kStoreBuffers + (stores++ & 1)) * Cfg::kStoreBytes;
        if (leader) ptx::tma_store_wait_read<1>();  // the store that last read this buffer is done
        ptx::named_barrier_sync(1 + cw, 128);
        bf16_pack_box<Cfg>(buf, acc, q, r, lane);
        ptx::fence_proxy_async_shared();  // the generic-proxy writes before the TMA engine reads them
        ptx::named_barrier_sync(1 + cw, 128);
        if (leader) {
          const int c = tile.n_block * kBlockN + Cfg::kStoreCols * q, row = tile.d_row + cw * 64;
          if constexpr (Cfg::kGemmType == kBf16Batched) ptx::tma_store_3d(tmap_d, buf, c, row, tile.group);
          else if constexpr (Cfg::kAccumulate) ptx::tma_reduce_add_2d(tmap_d, buf, c, row);
          else ptx::tma_store_2d(tmap_d, buf, c, row);
          ptx::tma_store_commit();
        }
      }
    }
    // columns past the staged boxes (all of them without kTmaStore) go straight from registers
    constexpr int kDirectFrom = Cfg::kStoreBoxes * Cfg::kStoreCols / 8;
    if constexpr (kDirectFrom == kBlockN / 8) continue;

    // rows r0 and r0 + 8 of this warpgroup's 64, columns 8j + 2 (lane % 4) (+1)
    const int r0 = cw * 64 + warp * 16 + lane / 4;
    const int c0 = tile.n_block * kBlockN + 2 * (lane % 4);
    const long long d_row0 = tile.d_row;
    // the batched GEMM: batch g's D starts g * group_ldd elements in (any stride the host's view has)
    const long long d_batch = Cfg::kGemmType == kBf16Batched ? tile.group * static_cast<long long>(group_ldd) : 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      if (r >= tile.m_limit) continue;
      const long long base = d_batch + (d_row0 + r) * static_cast<long long>(ldd);
#pragma unroll
      for (int j = kDirectFrom; j < kBlockN / 8; ++j) {
        const int c = c0 + 8 * j;
        if (c < n) bf16_store_pair<Cfg>(d, base, c, n, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
  }
  if (Cfg::kTmaStore && (tid & 127) == 0) ptx::tma_store_wait_all();  // shared memory outlives its last store
  if constexpr (Cfg::kClusterM > 1) ptx::cluster_sync();  // the peer's last multicasts and arrivals are done
}

}  // namespace deep_tile
