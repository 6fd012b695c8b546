// Epilogues of the output variants other than plain bf16 (Cfg::kDirectStore): D in FP32
// (Cfg::kOutKind 1) or bf16, plus an optional C (Cfg::kCKind: bf16, FP32, or D itself),
// D = C + A.B^T.
//
// store_tile_f32_tma (Cfg::kTmaF32Store: a dense persistent FP32 D without C, or the 1D1D
// kind's FP32 D accumulated in place): each consumer warpgroup stages one 64-row sub-tile of FP32
// at a time in shared memory (swizzled atoms of kF32AtomCols floats) and the TMA unit stores it
// (in place, Cfg::kTmaF32Reduce: adds it to D, a reduce-add in the memory system, so D is never
// read into registers); the warpgroup goes on as soon as the unit has read the staging, so the
// stores overlap the next tile's k-loop. Each element of D is added to once: the tiles do not
// overlap.
//
// store_tile_direct (the other variants): each thread stores its accumulators straight from
// registers to global memory, two neighbouring columns at a time (8 bytes of FP32, 4 of bf16: the
// four lanes of a row cover 32 contiguous bytes of FP32, one sector). C is read beside D with the
// same pattern; C may be D itself: every element is read and then written by the one thread that
// owns it, and each thread issues all its loads of C for a row (or both its rows,
// Fp8GemmConfig::kCLoadRows) of a sub-tile before its first store there, so no store of D
// overtakes a read of C.
//
// Every m-block of these variants starts at its own rows (Scheduler::tile_m0): no row is stored
// twice, which in place would add the product twice.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/swap_fragment.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"

namespace deep_tile {

/// C's two elements at element offset `at` (row * ldc + col, col even) as floats (0 without C).
template <class Cfg>
DT_DEVICE float2 load_c_pair(const u8* c, long long at) {
  if constexpr (Cfg::kCType == 2) {
    return *reinterpret_cast<const float2*>(c + at * 4);
  } else if constexpr (Cfg::kCType == 1) {
    const u32 v = *reinterpret_cast<const u32*>(c + at * 2);
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    return make_float2(0.0f, 0.0f);
  }
}

/// C's element at element offset `at` as a float (0 without C).
template <class Cfg>
DT_DEVICE float load_c(const u8* c, long long at) {
  if constexpr (Cfg::kCType == 2) {
    return *reinterpret_cast<const float*>(c + at * 4);
  } else if constexpr (Cfg::kCType == 1) {
    return __uint_as_float(static_cast<u32>(*reinterpret_cast<const unsigned short*>(c + at * 2)) << 16);
  } else {
    return 0.0f;
  }
}

/// Two values to D at element offset `at` (col even) in D's type.
template <class Cfg>
DT_DEVICE void store_d_pair(u8* d, long long at, float v0, float v1) {
  if constexpr (Cfg::kOutKind == 1) {
    *reinterpret_cast<float2*>(d + at * 4) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<u32*>(d + at * 2) = ptx::pack_bf16x2(v0, v1);
  }
}

/// One value to D at element offset `at` in D's type.
template <class Cfg>
DT_DEVICE void store_d(u8* d, long long at, float v) {
  if constexpr (Cfg::kOutKind == 1) {
    *reinterpret_cast<float*>(d + at * 4) = v;
  } else {
    ptx::store_global_bf16(d + at * 2, v);
  }
}

/// Store (C +) the tile at (m0, n0) from the WGMMA accumulator layout (`result[t]`: sub-tile
/// t = slab * kNumNParts + part, as store_tile_bf16 reads it) to D, row pitch `ldd`, C row pitch
/// `ldc` (elements). Rows at or past m_end and columns past n are skipped;
/// the grouped kinds store the real rows of this warpgroup only (`row_real`: whether this
/// thread's row, thread_in_wg of the warpgroup's rows, is one; they are a prefix).
template <class Cfg>
DT_DEVICE void store_tile_direct(const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                                 int thread_in_wg, int m0, int n0, int m_end, int n, bool row_real, u8* d, int ldd,
                                 const u8* c, int ldc) {
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
  const int wg_row0 = m0 + wg * Cfg::kWgM;
  int row_begin = m0, row_end = m_end;
  if constexpr (Cfg::kGrouped) {
    row_begin = wg_row0;
    row_end = wg_row0 + ptx::named_barrier_popc(1 + wg, 128, row_real);
  }
  constexpr int kRows = Cfg::kCLoadRows;  // rows loaded together: 1 or 2
  constexpr int kPairs = Cfg::kCLoadPairs;  // and column pairs of each
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += kRows) {  // this thread's rows of the slab: lane / 4 and 8 below it
#pragma unroll
      for (int part = 0; part < Cfg::kNumNParts; ++part) {
        const float* r = result[slab * Cfg::kNumNParts + part];
        const int col0 = n0 + part * Cfg::kWgmmaN + 2 * (lane % 4);
        // Every load of C for these rows' columns [8 j0, 8 (j0 + kPairs)) of the sub-tile first,
        // then their stores (see the header).
#pragma unroll
        for (int j0 = 0; j0 < Cfg::kAccumPerSubtile / 4; j0 += kPairs) {
          float2 cv[kRows][kPairs];
#pragma unroll
          for (int h = h0; h < h0 + kRows; ++h) {
            const int row = wg_row0 + slab * 64 + warp_in_wg * 16 + lane / 4 + 8 * h;
            const bool ok = row >= row_begin && row < row_end;
            const long long c_row = static_cast<long long>(row) * ldc;
#pragma unroll
            for (int j = j0; j < j0 + kPairs; ++j) {
              const int col = col0 + 8 * j;
              cv[h - h0][j - j0] = ok && col < n ? load_c_pair<Cfg>(c, c_row + col) : make_float2(0.0f, 0.0f);
            }
          }
#pragma unroll
          for (int h = h0; h < h0 + kRows; ++h) {
            const int row = wg_row0 + slab * 64 + warp_in_wg * 16 + lane / 4 + 8 * h;
            const bool ok = row >= row_begin && row < row_end;
            const long long d_row = static_cast<long long>(row) * ldd;
#pragma unroll
            for (int j = j0; j < j0 + kPairs; ++j) {
              const int col = col0 + 8 * j;
              if (ok && col < n) {
                store_d_pair<Cfg>(d, d_row + col, r[4 * j + 2 * h] + cv[h - h0][j - j0].x,
                                  r[4 * j + 2 * h + 1] + cv[h - h0][j - j0].y);
              }
            }
          }
        }
      }
    }
  }
}

/// store_tile_swapped (store_bf16.cuh) for the direct-store variants: `result[0]` holds D^T as
/// SwapFragment lays it out; every load of C before the first store.
template <class Cfg>
DT_DEVICE void store_tile_swapped_direct(const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile],
                                         int thread_in_wg, int m0, int n0, int m_end, int n, u8* d, int ldd,
                                         const u8* c, int ldc) {
  using Frag = SwapFragment<Cfg>;
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
  float cv[Cfg::kAccumPerSubtile];
  Frag::for_each([&](int mb, int j, int h, int q) {
    const int col = n0 + Frag::weight_row(mb, h, warp_in_wg, lane), row = m0 + Frag::token(j, q, lane);
    cv[Frag::index(mb, j, h, q)] =
        col < n && row < m_end ? load_c<Cfg>(c, static_cast<long long>(row) * ldc + col) : 0.0f;
  });
  Frag::for_each([&](int mb, int j, int h, int q) {
    const int col = n0 + Frag::weight_row(mb, h, warp_in_wg, lane), row = m0 + Frag::token(j, q, lane);
    const int i = Frag::index(mb, j, h, q);
    if (col < n && row < m_end) store_d<Cfg>(d, static_cast<long long>(row) * ldd + col, result[0][i] + cv[i]);
  });
}

/// A thread's addresses in a consumer warpgroup's FP32 staging (`staging`: 64 x kWgmmaN floats,
/// kWgmmaN / kF32AtomCols atoms of [64 rows x kF32AtomCols floats], 16-byte chunks swizzled as
/// the D tensor map's swizzle): its two neighbouring columns 8 j + 2 (lane % 4) of its row
/// warp * 16 + lane / 4 + 8 h (the WGMMA accumulator layout) are at `at(h, j)`.
/// NOTES: a thread's rows r and r + 8 share their swizzle, so the addresses are kPeriod run-time
/// offsets plus immediates. Written per (h, j) from the row and column, the 2 x kAccumPerSubtile / 4
/// addresses were hoisted out of the tile loop by ptxas 12.9 and spilled (256x128 1D1D in place:
/// 140 bytes, NVRTC 12.9; ptxas 13 did not).
/// NOTES: the 128-byte swizzle puts rows r and r ^ 1 on the same two chunks (bank conflicts); odd rows
/// writing block j ^ 2 removes them, but was slower and unsteady with many small groups, so it is not kept.
template <class Cfg, bool kPlain = Cfg::kF32PlainStaging>
struct F32StagingSlots {
  static constexpr int kAtomBytes = Cfg::kF32AtomCols * 4;  // one row of an atom: the swizzle span
  static constexpr int kChunksPerRow = kAtomBytes / 16;
  static constexpr int kPeriod = Cfg::kF32AtomCols / 8;  // 8-column blocks per atom
  static_assert(((8 * kAtomBytes) >> 7) % kChunksPerRow == 0, "rows r and r + 8 must share their swizzle");

  u32 row_addr;
  u32 in_atom[kPeriod];

  DT_DEVICE F32StagingSlots(const u8* staging, int thread_in_wg) {
    const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
    const int row = warp_in_wg * 16 + lane / 4;
    const int swizzle = (row * kAtomBytes >> 7) & (kChunksPerRow - 1);
    row_addr = ptx::smem_addr(staging) + static_cast<u32>(row * kAtomBytes);
#pragma unroll
    for (int p = 0; p < kPeriod; ++p) {
      const int col = 8 * p + 2 * (lane % 4);  // within the atom
      in_atom[p] = static_cast<u32>((((col / 4) ^ swizzle) << 4) + (col % 4) * 4);
    }
  }
  DT_DEVICE u32 at(int h, int j) const {
    return row_addr + in_atom[j % kPeriod] + (8 * h + (j / kPeriod) * 64) * kAtomBytes;
  }
};

/// The unswizzled staging (Cfg::kF32PlainStaging): one atom of 64 rows at a pitch of kWgmmaN
/// floats, whose pitch of 8 or 24 words mod 32 puts a half-warp's four rows of 8-byte writes on
/// 32 distinct banks; the addresses are one register plus immediates.
template <class Cfg>
struct F32StagingSlots<Cfg, true> {
  static constexpr int kPitchBytes = Cfg::kWgmmaN * 4;
  static_assert(Cfg::kF32AtomCols == Cfg::kWgmmaN && (Cfg::kWgmmaN % 32 == 8 || Cfg::kWgmmaN % 32 == 24),
                "the unswizzled FP32 staging is one atom, a pitch of 8 or 24 words mod 32");

  u32 base;

  DT_DEVICE F32StagingSlots(const u8* staging, int thread_in_wg) {
    const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
    const int row = warp_in_wg * 16 + lane / 4;
    base = ptx::smem_addr(staging) + static_cast<u32>(row * kPitchBytes + 8 * (lane % 4));
  }
  DT_DEVICE u32 at(int h, int j) const { return base + static_cast<u32>(8 * h * kPitchBytes + 32 * j); }
};

/// Ask L2 for consumer warpgroup wg's first sub-tile (slab 0, part 0) of D in the tile at (m0, n0),
/// in the staging's boxes (Cfg::kPrefetchDMaxKBlocks: the reduce-add's D asked for ahead); rows at
/// or past m_end and columns past n are not asked for.
template <class Cfg>
DT_DEVICE void prefetch_d_first_subtile(const TmaDescriptor* tma_d, int wg, int m0, int n0, int m_end, int n) {
  const int row0 = m0 + wg * Cfg::kWgM;
  if (row0 >= m_end) return;
  // NOTES: a loop, not unrolled: the producer runs on 40 registers, and the 18 boxes of a 144-wide
  // tile's 32-byte-swizzled atoms unrolled spilled there (84 bytes; 128x144, FP32 in place).
#pragma unroll 1
  for (int atom = 0; atom < Cfg::kWgmmaN / Cfg::kF32AtomCols; ++atom) {
    const int col0 = n0 + atom * Cfg::kF32AtomCols;
    if (col0 < n) ptx::tma_prefetch_2d_l2(tma_d, col0, row0);
  }
}

/// Store the FP32 tile at (m0, n0) through the TMA unit (Cfg::kTmaF32Store; added to D with
/// Cfg::kTmaF32Reduce). Each of this warpgroup's
/// sub-tiles (`result[t]`, t = slab * kNumNParts + part) is written to the warpgroup's staging
/// (`smem_d`: per warpgroup 64 x kWgmmaN floats, F32StagingSlots) and handed to the
/// unit, which clips rows at or past m_end (D's rows) and columns past n.
template <class Cfg>
DT_DEVICE void store_tile_f32_tma(u8* smem_d, const TmaDescriptor* tma_d,
                                  const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                                  int thread_in_wg, int m0, int n0, int m_end, int n) {
  using Slots = F32StagingSlots<Cfg>;
  constexpr int kAtoms = Cfg::kWgmmaN / Cfg::kF32AtomCols;
  const u32 barrier_id = 1 + wg;  // named barrier of this warpgroup
  u8* staging = smem_d + wg * 64 * Cfg::kWgmmaN * 4;
  const Slots slots(staging, thread_in_wg);
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
#pragma unroll
    for (int part = 0; part < Cfg::kNumNParts; ++part) {
      const float* r = result[slab * Cfg::kNumNParts + part];
      // The unit must have read the previous sub-tile out of the staging before it is overwritten.
      if (thread_in_wg == 0) ptx::tma_store_wait_read<0>();
      ptx::named_barrier_sync(barrier_id, 128);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < Cfg::kAccumPerSubtile / 4; ++j) {
          ptx::store_shared_f32x2_at(slots.at(h, j), r[4 * j + 2 * h], r[4 * j + 2 * h + 1]);
        }
      }
      ptx::fence_proxy_async_shared();
      ptx::named_barrier_sync(barrier_id, 128);
      if (thread_in_wg == 0) {
        const int row0 = m0 + wg * Cfg::kWgM + slab * 64;
        if (row0 < m_end) {
#pragma unroll
          for (int atom = 0; atom < kAtoms; ++atom) {
            const int col0 = n0 + part * Cfg::kWgmmaN + atom * Cfg::kF32AtomCols;
            if (col0 < n) {
              if constexpr (Cfg::kTmaF32Reduce && !Cfg::kReduceAsStore) {
                ptx::tma_reduce_add_2d(tma_d, staging + atom * 64 * Slots::kAtomBytes, col0, row0);
              } else {
                ptx::tma_store_2d(tma_d, staging + atom * 64 * Slots::kAtomBytes, col0, row0);
              }
            }
          }
        }
        ptx::tma_store_commit();
      }
    }
  }
}

}  // namespace deep_tile
