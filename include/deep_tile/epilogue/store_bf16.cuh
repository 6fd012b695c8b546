// Epilogue of the persistent kernel: FP32 results -> bf16 -> shared memory (stmatrix, swizzled,
// bank-conflict free) -> TMA store. Each consumer warpgroup stores its own kWgM rows through its
// own staging region, so the two warpgroups never wait for each other.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/epilogue/completion_signals.cuh"
#include "deep_tile/kernels/swap_fragment.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// Copy the first `rows` rows of a warpgroup's staged tile (the swizzled layout below) to D with
/// 16-byte stores: the grouped kinds' partial slabs that the slab view cannot store (one whose
/// box would start above row 0 of D, or all of them with Cfg::kPartialTma off; store_slab_grouped).
/// Columns past n are skipped (n % 8 == 0).
struct alignas(16) Bytes16 {
  u32 word[4];
};

template <class Cfg>
DT_DEVICE void store_rows_direct(const u8* staging, u8* d, int ldd, int row0, int rows, int n0, int n,
                                 int thread_in_wg) {
  constexpr int kSwizzle = Cfg::kStoreSwizzleBytes;
  constexpr int kChunksPerRow = kSwizzle / 16;  // 16-byte chunks (8 columns) per atom row
  constexpr int kChunks = Cfg::kBlockN / 8;      // per tile row
  for (int idx = thread_in_wg; idx < rows * kChunks; idx += 128) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    const int col = n0 + chunk * 8;
    if (col < n) {
      const int atom = chunk / kChunksPerRow;
      const int swizzled = (chunk % kChunksPerRow) ^ ((row * kSwizzle >> 7) & (kChunksPerRow - 1));
      const Bytes16 v = *reinterpret_cast<const Bytes16*>(staging + atom * Cfg::kStoreRows * kSwizzle + row * kSwizzle +
                                                      (swizzled << 4));
      *reinterpret_cast<Bytes16*>(d + (static_cast<long long>(row0 + row) * ldd + col) * 2) = v;
    }
  }
}

// SlabView: the grouped kinds' (Cfg::kGrouped) map of D is 3-D, (column, r, s) at row r + s:
// dims (n, kStoreRows, rows of D), the two outer ones both one row apart, box (kAtomCols,
// kStoreRows, 1). A box at (col0, c, row0 - c) holds rows row0 .. row0 + kStoreRows - 1 and the
// TMA unit writes only its first kStoreRows - c, r being out of the tensor past kStoreRows: a
// slab whose `rows` real rows are a prefix stores them alone by TMA with c = kStoreRows - rows
// (row0 >= c, else the s coordinate would be negative: those slabs go by store_rows_direct).
// A whole slab (c = 0) is the 2-D store. NOTES: the driver encodes the overlapping view (both
// strides one row; driver 580.159, H100 and H200) and the TMA unit clips it per dimension.

/// The grouped kinds' store of a warpgroup's staged slab (its rows from `row0`, the first `rows`
/// of them real; SlabView): by TMA, or by store_rows_direct where the TMA box cannot start (or
/// Cfg::kPartialTma is off); with Cfg::kSignal == 1 the slab's counter raised once written.
/// Every thread of the warpgroup calls it (named barrier `barrier_id`).
template <class Cfg>
DT_DEVICE void store_slab_grouped(u8* smem_d, const TmaDescriptor* tma_d, const u8* staging, int thread_in_wg,
                                  u32 barrier_id, int row0, int rows, int n0, int n, u8* d, int ldd) {
  const int clipped = Cfg::kStoreRows - rows;  // the box rows SlabView clips (those past the real ones)
  if (rows < Cfg::kStoreRows && !(Cfg::kPartialTma && rows > 0 && row0 >= clipped)) {
    store_rows_direct<Cfg>(staging, d, ldd, row0, rows, n0, n, thread_in_wg);
    SignalsFor<Cfg>::template after_direct_slab<Cfg::kWgM>(smem_d + Cfg::kSmemTableOffset, thread_in_wg, barrier_id,
                                                           rows, row0);
    return;
  }
  if (thread_in_wg == 0) {
    if (rows > 0) {
#pragma unroll
      for (int atom = 0; atom < Cfg::kNumAtoms; ++atom) {
        const int col0 = n0 + atom * Cfg::kAtomCols;
        if (col0 < n) {
          ptx::tma_store_3d(tma_d, staging + atom * Cfg::kStoreRows * Cfg::kStoreSwizzleBytes, col0, clipped,
                            row0 - clipped);
        }
      }
    }
    ptx::tma_store_commit();
    SignalsFor<Cfg>::template after_tma_slab<Cfg::kWgM>(smem_d + Cfg::kSmemTableOffset, rows, row0);
  }
}

/// Store the tile at (m0, n0) of D, clipped by the TMA unit to D's bounds; a warpgroup whose rows
/// all lie at or past m_end (Tile::m_end) stores nothing, and columns past n are skipped by atom.
/// `result[t]` is sub-tile t = slab * kNumNParts + part: rows slab*64 .. +63 of this warpgroup,
/// columns part*kWgmmaN .. +kWgmmaN-1, in the WGMMA accumulator layout.
/// The grouped kinds (Cfg::kGrouped) store exactly the real rows: `row_real` says whether this
/// thread's row (thread_in_wg of the warpgroup's rows) is one, and the real rows are a prefix; a
/// slab goes by TMA through SlabView, or (a part of one at the top of D, or Cfg::kPartialTma off)
/// by store_rows_direct through `d` (row pitch `ldd`).
/// Cfg::kSignal: once this warpgroup's rows of the tile are written and visible at GPU scope,
/// its slab's completion counter (SignalCounters, in the group table after `smem_d`, the start of
/// shared memory) gets 1 added with a release: right after the store (kSignal == 1), or, handed
/// to the signal warp (SignalHandOff), when the warpgroup stores its next tile (kSignal == 2:
/// `prev_row0` >= 0 when there was a previous tile; consumer_loop hands off the last one after its
/// loop). A slab with no real row stores nothing and adds nothing.
template <class Cfg>
DT_DEVICE void store_tile_bf16(u8* smem_d, const TmaDescriptor* tma_d,
                               const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                               int thread_in_wg, int m0, int n0, int m_end, int n, bool row_real = false,
                               u8* d = nullptr, int ldd = 0, int prev_row0 = -1) {
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
  const u32 barrier_id = 1 + wg;  // named barrier of this warpgroup
  u8* staging = smem_d + wg * Cfg::kStoreRows * Cfg::kBlockN * 2;

  // Staging layout: kNumAtoms atoms of [kWgM rows x kSwizzle bytes]; inside an atom, 16-byte chunk c
  // of a row lives at c ^ (bits 7+ of the row's byte offset) -- the TMA swizzle pattern, which
  // also makes each 8-row stmatrix phase hit 8 distinct bank groups.
  // NOTES: column block jg (even, compile time) and this lane's half h = lane/16 give
  // atom = jg / kChunksPerRow and chunk = (jg % kChunksPerRow) | h, so the swizzled chunk is
  // (jg % kChunksPerRow) ^ (h ^ row_swizzle): the only run-time parts are per-thread constants.
  // Written this way ptxas keeps few address registers alive across the main loop.
  constexpr int kSwizzle = Cfg::kStoreSwizzleBytes;
  constexpr int kChunksPerRow = kSwizzle / 16;
  constexpr int kBlocksPerPart = Cfg::kWgmmaN / 8;
  // The previous tile's store must have finished reading the staging slab (kSignal == 2: have
  // completed, its writes visible, for the hand-off below).
  if (thread_in_wg == 0) SignalsFor<Cfg>::wait_staging_free();
  int rows = Cfg::kStoreRows;  // real rows of this warpgroup's slab (grouped kinds)
  if constexpr (Cfg::kGrouped) {
    rows = ptx::named_barrier_popc(barrier_id, 128, row_real);
  } else {
    ptx::named_barrier_sync(barrier_id, 128);
  }
  SignalsFor<Cfg>::hand_off_previous(prev_row0, wg, thread_in_wg);
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
    const int row = slab * 64 + warp_in_wg * 16 + lane % 16;
    const int lane_xor = (lane / 16) ^ ((row * kSwizzle >> 7) & (kChunksPerRow - 1));
    u8* row_ptr = staging + row * kSwizzle;
#pragma unroll
    for (int part = 0; part < Cfg::kNumNParts; ++part) {
#pragma unroll
      for (int j = 0; j < kBlocksPerPart; j += 2) {
        const int jg = part * kBlocksPerPart + j;
        const int atom = jg / kChunksPerRow, chunk = jg % kChunksPerRow;
        const float* r = &result[slab * Cfg::kNumNParts + part][4 * j];
        ptx::stmatrix_x4(row_ptr + atom * Cfg::kStoreRows * kSwizzle + ((chunk ^ lane_xor) << 4),
                         ptx::pack_bf16x2(r[0], r[1]), ptx::pack_bf16x2(r[2], r[3]), ptx::pack_bf16x2(r[4], r[5]),
                         ptx::pack_bf16x2(r[6], r[7]));
      }
    }
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(barrier_id, 128);

  if constexpr (Cfg::kGrouped) {
    store_slab_grouped<Cfg>(smem_d, tma_d, staging, thread_in_wg, barrier_id, m0 + wg * Cfg::kWgM, rows, n0, n, d,
                            ldd);
    return;
  }
  if (thread_in_wg == 0) {
    const int row0 = m0 + wg * Cfg::kWgM;
    if (row0 < m_end) {
#pragma unroll
      for (int atom = 0; atom < Cfg::kNumAtoms; ++atom) {
        const int col0 = n0 + atom * Cfg::kAtomCols;
        if (col0 < n) ptx::tma_store_2d(tma_d, staging + atom * Cfg::kStoreRows * kSwizzle, col0, row0);
      }
    }
    ptx::tma_store_commit();
  }
}

/// Store a swap-AB tile (Cfg::kSwapAB: `result[0]` holds D^T, weight rows x tokens, laid out as
/// SwapFragment says) straight from registers; columns past n and rows at or past m_end are
/// skipped. A swap-AB tile has at most 16 real rows, a few KB of output, so bf16 stores of 2
/// bytes (each 8 lanes of a warp writing 16 contiguous bytes) replace the staging and TMA store.
template <class Cfg>
DT_DEVICE void store_tile_swapped(const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int thread_in_wg,
                                  int m0, int n0, int m_end, int n, u8* d, int ldd) {
  using Frag = SwapFragment<Cfg>;
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
#pragma unroll
  for (int mb = 0; mb < Frag::kBlocks; ++mb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = n0 + Frag::weight_row(mb, h, warp_in_wg, lane);
#pragma unroll
      for (int j = 0; j < Frag::kTokenBlocks; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int row = m0 + Frag::token(j, q, lane);
          if (col < n && row < m_end) {
            ptx::store_global_bf16(d + (static_cast<long long>(row) * ldd + col) * 2, result[0][Frag::index(mb, j, h, q)]);
          }
        }
      }
    }
  }
}

}  // namespace deep_tile
