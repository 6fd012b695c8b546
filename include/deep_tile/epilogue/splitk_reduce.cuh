// Epilogue of the split-K kernel: the kSplitK CTAs of a cluster each hold an FP32 partial of the
// same output tile in registers. The tile's rows are dealt out to the CTAs in units of 8 rows
// (Fp8GemmConfig::kSplitKUnits); each CTA pushes the units it does not own straight from its
// registers into the owner's receive buffer (st.async, completing on the owner's `received`
// barrier), then, for the units it owns, waits for the peers' bytes, sums the kSplitK partials
// in rank order (so the result is bitwise identical run to run) and stores bf16 to global memory.
// No cluster barrier follows the k-loop: a sender exits as soon as its stores are issued, and an
// owner, which its peers write into, cannot exit before their bytes have landed.
// NOTES: the former reduction (DT_SPLITK_PULL, kept for measurement) wrote the partial into the
// CTA's own stages, passed a cluster barrier, read the peers' rows through distributed shared
// memory and passed a second barrier before any CTA could exit: 1.5-2 us after the grid's last
// k-loop on an H200 at M = 64 (benchmarks/RESULTS.md, session 18).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/warpgroup.cuh"

namespace deep_tile {

/// Where the 8-row units of a split-K tile go: unit u (rows 8u..8u+7) belongs to cluster rank
/// u * kSplitK / kUnits; rank r owns units [first(r), first(r + 1)). In the owner's receive buffer
/// the sender of rank s writes slot (s < owner ? s : s - 1), unit (u - first(owner)), as chunks of
/// four floats, [chunk][lane][4] (a warp's 16-byte stores of one chunk are contiguous).
template <class Cfg>
struct SplitKUnits {
  static constexpr int kUnits = Cfg::kSplitKUnits;
  static constexpr int kFloatsPerLane = Cfg::kNumNParts * Cfg::kAccumPerSubtile / 2;  // a lane's floats of one unit
  static constexpr int kChunks = kFloatsPerLane / 4;
  DT_STATIC_ASSERT(kFloatsPerLane * 4 * 32 == Cfg::kSplitKUnitBytes && kFloatsPerLane % 4 == 0,
                   "a split-K unit is 8 rows x kBlockN floats, whole 16-byte chunks per lane");

  DT_DEVICE static int owner(int unit) { return unit * Cfg::kSplitK / kUnits; }
  DT_DEVICE static int first(int rank) { return (rank * kUnits + Cfg::kSplitK - 1) / Cfg::kSplitK; }
  /// Units holding a real row of a tile with `rows` real rows (the others are neither sent nor
  /// stored: at M = 1 one unit of the tile's eight travels).
  DT_DEVICE static int real_units(int rows) { return min_int(kUnits, ceil_div(rows, 8)); }
  /// Bytes rank `rank` receives: every peer's partial of each real unit it owns.
  DT_DEVICE static u32 received_bytes(int rank, int units) {
    const int owned = max_int(0, min_int(first(rank + 1), units) - first(rank));
    return static_cast<u32>((Cfg::kSplitK - 1) * owned * Cfg::kSplitKUnitBytes);
  }
  /// Byte offset in the receive buffer of `unit`'s chunk 0 for `lane`, sent by `sender` to `owner_rank`.
  DT_DEVICE static u32 offset(int sender, int owner_rank, int unit, int lane) {
    const int slot = sender < owner_rank ? sender : sender - 1;
    return static_cast<u32>(slot * Cfg::kSplitKSlotBytes + (unit - first(owner_rank)) * Cfg::kSplitKUnitBytes +
                            lane * 16);
  }
  /// Flat index f of a lane's floats of one unit (half `h` of a slab): result[slab * kNumNParts +
  /// part][4 j + 2 h + e], f = (part * (kAccumPerSubtile / 4) + j) * 2 + e, at tile column
  /// part * kWgmmaN + 8 j + 2 (lane % 4) + e.
  DT_DEVICE static float value(const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int slab, int h,
                               int f) {
    constexpr int kPairs = Cfg::kAccumPerSubtile / 4;
    const int part = f / (2 * kPairs), j = (f / 2) % kPairs, e = f % 2;
    return result[slab * Cfg::kNumNParts + part][4 * j + 2 * h + e];
  }
  DT_DEVICE static int column(int f, int lane) {
    constexpr int kPairs = Cfg::kAccumPerSubtile / 4;
    const int part = f / (2 * kPairs), j = (f / 2) % kPairs, e = f % 2;
    return part * Cfg::kWgmmaN + 8 * j + 2 * (lane % 4) + e;
  }
};

/// Push this thread's fragments of the real units (below `units`) this CTA does not own to their
/// owners. Call after cluster_wait (the owners' `received` barriers are initialised).
template <class Cfg>
DT_DEVICE void push_partials(float* receive, u64* received, const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile],
                             int wg, int warp_in_wg, int lane, int rank, int units) {
  using Units = SplitKUnits<Cfg>;
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int unit = (wg * Cfg::kWgM + slab * 64 + warp_in_wg * 16 + h * 8) / 8;
      const int owner = Units::owner(unit);  // warp-uniform
      if (owner == rank || unit >= units) continue;
      const u32 dst = ptx::map_to_cluster_rank(receive, static_cast<u32>(owner)) + Units::offset(rank, owner, unit, lane);
      const u32 bar = ptx::map_to_cluster_rank(received, static_cast<u32>(owner));
#pragma unroll
      for (int c = 0; c < Units::kChunks; ++c) {
        ptx::store_async_cluster_u32x4(dst + c * 512, __float_as_uint(Units::value(result, slab, h, 4 * c)),
                                       __float_as_uint(Units::value(result, slab, h, 4 * c + 1)),
                                       __float_as_uint(Units::value(result, slab, h, 4 * c + 2)),
                                       __float_as_uint(Units::value(result, slab, h, 4 * c + 3)), bar);
      }
    }
  }
}

/// For the real units this CTA owns: wait for the peers' partials, sum all kSplitK in rank order
/// and store bf16 to `d` (row pitch `ldd` elements) at the tile's origin (m0, n0), clipped to the
/// real rows (below m_end, Tile::m_end) and columns (below n).
template <class Cfg>
DT_DEVICE void reduce_received_and_store(const float* receive, u64* received,
                                         const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                                         int warp_in_wg, int lane, int rank, u8* d, int ldd, int m0, int n0, int m_end,
                                         int n) {
  using Units = SplitKUnits<Cfg>;
  const int units = Units::real_units(m_end - m0);
  bool waited = false;
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int unit = (wg * Cfg::kWgM + slab * 64 + warp_in_wg * 16 + h * 8) / 8;
      if (Units::owner(unit) != rank || unit >= units) continue;
      if (!waited) {
        ptx::mbarrier_wait(received, 0);
        waited = true;
      }
      const int row = m0 + unit * 8 + lane / 4;
      const bool row_real = row < m_end;
      u8* d_row = d + static_cast<long long>(row) * ldd * 2;
#pragma unroll
      for (int c = 0; c < Units::kChunks; ++c) {
        float peer[Cfg::kSplitK > 1 ? Cfg::kSplitK - 1 : 1][4];
#pragma unroll
        for (int s = 0; s + 1 < Cfg::kSplitK; ++s) {
          const int sender = s < rank ? s : s + 1;
          ptx::load_shared_f32x4(receive + (Units::offset(sender, rank, unit, lane) + c * 512) / 4, peer[s]);
        }
        float sum[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float own = Units::value(result, slab, h, 4 * c + e);
          // In rank order: rank p's partial is this CTA's own, or sits in slot p (below this
          // rank) or p - 1 (above it); both slot indices are compile-time, so no local memory.
          float total = rank == 0 ? own : peer[0][e];
#pragma unroll
          for (int p = 1; p < Cfg::kSplitK; ++p) {
            const float below = peer[min_int(p, Cfg::kSplitK - 2)][e], above = peer[p - 1][e];
            total += p == rank ? own : (p < rank ? below : above);
          }
          sum[e] = total;
        }
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          const int col = n0 + Units::column(4 * c + 2 * pair, lane);
          if (row_real && col < n) {
            ptx::store_global_u32(d_row + col * 2, ptx::pack_bf16x2(sum[2 * pair], sum[2 * pair + 1]));
          }
        }
      }
    }
  }
}

/// This thread's fragments of `result` into the row-major fp32 `partial` (kPartialPitch floats
/// per row) at the tile rows of consumer warpgroup `wg`.
template <class Cfg>
DT_DEVICE void write_partial(float* partial, const float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile], int wg,
                             int thread_in_wg) {
  const int warp_in_wg = thread_in_wg / 32, lane = thread_in_wg % 32;
#pragma unroll
  for (int slab = 0; slab < Cfg::kNumSlabs; ++slab) {
    const int row = wg * Cfg::kWgM + slab * 64 + warp_in_wg * 16 + lane / 4;
    float* lo = partial + row * Cfg::kPartialPitch + 2 * (lane % 4);
    float* hi = lo + 8 * Cfg::kPartialPitch;
#pragma unroll
    for (int part = 0; part < Cfg::kNumNParts; ++part) {
      const float* r = result[slab * Cfg::kNumNParts + part];
#pragma unroll
      for (int j = 0; j < Cfg::kAccumPerSubtile / 4; ++j) {
        const int col = part * Cfg::kWgmmaN + 8 * j;
        ptx::store_shared_f32x2(lo + col, r[4 * j + 0], r[4 * j + 1]);
        ptx::store_shared_f32x2(hi + col, r[4 * j + 2], r[4 * j + 3]);
      }
    }
  }
}

/// Sum rows [rank * ceil(kBlockM / kSplitK), ...) of the cluster's kSplitK partials in rank order
/// and store them as bf16 to `d` (row pitch `ldd` elements) at the tile's origin (m0, n0), clipped
/// to the real rows (below m_end, Tile::m_end) and columns (below n).
/// `tid` runs over the kNumMathThreads consumer threads.
/// NOTES: the loop over this thread's 8-column chunks has a compile-time bound (the chunks past
/// the valid rows are predicated off), so every remote load of every chunk is issued before the
/// first sum waits: a loop with a run-time bound waited for one distributed-shared-memory round
/// trip per chunk (64x2112x128, 64x64 k2 on an H200: the split cost 1.5 us at M = 64, 0.5 us at
/// M = 1).
template <class Cfg>
DT_DEVICE void reduce_partials_and_store(const float* partial, u8* d, int ldd, int m0, int n0, int m_end, int n, u32 rank,
                                         int tid) {
  constexpr int kRowsPerRank = ceil_div(Cfg::kBlockM, Cfg::kSplitK);
  constexpr int kChunks = Cfg::kBlockN / 8;  // 8 columns = 16 bytes of bf16 per store
  constexpr int kItems = ceil_div(kRowsPerRank * kChunks, Cfg::kNumMathThreads);  // chunks per thread
  const int row_begin = static_cast<int>(rank) * kRowsPerRank;
  const int rows = min_int(min_int(Cfg::kBlockM - row_begin, kRowsPerRank), m_end - m0 - row_begin);
  float part[kItems][Cfg::kSplitK][8];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * Cfg::kNumMathThreads;
    const int row = row_begin + idx / kChunks, chunk = idx % kChunks;
    if (idx < rows * kChunks && n0 + chunk * 8 < n) {
      const float* src = partial + row * Cfg::kPartialPitch + chunk * 8;
#pragma unroll
      for (int peer = 0; peer < Cfg::kSplitK; ++peer) {
        float* v = part[i][peer];
        ptx::load_cluster_f32x4(ptx::map_to_cluster_rank(src, static_cast<u32>(peer)), *reinterpret_cast<float(*)[4]>(v));
        ptx::load_cluster_f32x4(ptx::map_to_cluster_rank(src + 4, static_cast<u32>(peer)),
                                *reinterpret_cast<float(*)[4]>(v + 4));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * Cfg::kNumMathThreads;
    const int row = row_begin + idx / kChunks, chunk = idx % kChunks;
    const int col = n0 + chunk * 8;
    if (idx < rows * kChunks && col < n) {
      float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int peer = 0; peer < Cfg::kSplitK; ++peer)
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[j] += part[i][peer][j];
      u8* dst = d + (static_cast<long long>(m0 + row) * ldd + col) * 2;
      ptx::store_global_u32x4(dst, ptx::pack_bf16x2(sum[0], sum[1]), ptx::pack_bf16x2(sum[2], sum[3]),
                              ptx::pack_bf16x2(sum[4], sum[5]), ptx::pack_bf16x2(sum[6], sum[7]));
    }
  }
}

}  // namespace deep_tile
