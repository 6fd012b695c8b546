// The tile scheduler: which output tiles a CTA computes, over which K blocks, and what the kernel
// body needs to know of each tile (its origin in A, B and D, its real rows, whether the 2-CTA
// pair shares the multicast operand). The producer, the consumers and the epilogues ask it and
// know nothing else of the problem's shape, so a new kind of problem is a new Scheduler
// specialisation with the same members:
//
//   const Scheduler<Cfg> sched(m, n, k, raster_width);
//   const WorkRange work = sched.work();                 // first tile, step, K blocks
//   for (int index = work.first; index < sched.num_tiles; index += work.step) {
//     const Tile<Cfg> tile = sched.tile(index);          // m0, n0, m_end, expert, multicast, peer_alive
//     ... K blocks [work.kb_begin, work.kb_end) of the tile ...
//   }
//   sched.stage_tx_bytes()                               // the full barrier's bytes per stage
//   sched.first_tile()                                   // split-K: the cluster's one tile
//   sched.n, sched.num_k_blocks                          // columns of D, K blocks (b_scale's pitch)
//
// The dense kind numbers its tiles in a raster order (RasterOrder): the output's blocks are cut
// into bands of `raster_width` blocks along the fast axis and each band is walked slow axis by
// slow axis, so the tiles in flight share a few panels of A and B in L2. With 2-CTA multicast
// the two CTAs of a cluster take tiles 2i and 2i+1; the order puts the multicast operand's index
// on the slow axis (Fp8GemmConfig::kRasterAlongM), so the pair shares it whenever the band is
// even wide; when it is not (an odd last band) that pair loads on its own.
//
// NOTES: the kernel's SASS is sensitive to the shape of this interface (nvcc 13.0): the loop
// tests `index < sched.num_tiles` itself (behind a member function ptxas inverted the loop's
// branches), and a tile without multicast is exactly four ints (a larger struct, or one with
// bools, went through a stack slot first and reordered the split-K kernels' prologue).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/mbarrier.cuh"

namespace deep_tile {

/// What the kernel multiplies; Fp8GemmConfig::kProblemKind picks the Scheduler specialisation.
///   kDense: D[M, N] = A[M, K] B[N, K]^T, one B.
/// The M-grouped kinds of Mixture-of-Experts GEMMs (to come) stack one B [N, K] and b_scale
/// [ceil(N/128), K blocks] per expert and give each expert its rows of A and D: a contiguous
/// range of rows (from an offsets array), or a fixed slab of expected rows of which masked_m[e]
/// are real. Their schedulers walk (expert, m_block, n_block) and fill Tile::expert and m_end.
enum class ProblemKind { kDense };

/// The tiles and K blocks of one CTA: tiles first, first + step, ... below Scheduler::num_tiles,
/// each over K blocks [kb_begin, kb_end).
struct WorkRange {
  int first, step;
  int kb_begin, kb_end;
};

/// One output tile, as the producer, the consumers and the epilogues see it: Tile<Cfg>.
template <bool kPaired>
struct BasicTile {
  int m0;           // first row of the tile in A, a_scale and D
  int n0;           // first column of the tile in D, first row in its expert's B
  int m_end;        // rows [m0, min(m0 + block_m, m_end)) are real; loads past m_end are zero-filled
                    // or stale, and nothing is stored there
  int expert;       // which of the stacked B and b_scale the tile multiplies (dense: 0)
  bool multicast;   // the 2-CTA pair shares the multicast operand: each CTA loads half of it for both
  bool peer_alive;  // the pair's other CTA has a tile at this step (its consumers release our stages)
};
/// Without multicast the pair flags are compile-time false.
template <>
struct BasicTile<false> {
  int m0, n0, m_end, expert;
  static constexpr bool multicast = false, peer_alive = false;
};
template <class Cfg>
using Tile = BasicTile<Cfg::kNumMulticast == 2>;

struct TileCoord {
  int m_block;
  int n_block;
};

/// The raster order of a num_m_blocks x num_n_blocks grid of tiles: bands of `raster_width`
/// blocks along the fast axis (N, or M when kAlongM), each walked slow axis by slow axis.
template <bool kAlongM>
struct RasterOrder {
  int num_m_blocks;
  int num_n_blocks;
  int raster_width;  // width of a band along the fast axis, in blocks (even)

  __host__ __device__ int num_tiles() const { return num_m_blocks * num_n_blocks; }

  /// Tile index -> (m_block, n_block). !kAlongM: bands of n-blocks walked row by row
  /// (consecutive tiles share m_block); kAlongM: bands of m-blocks (consecutive tiles share n_block).
  __host__ __device__ TileCoord coord(int index) const {
    const int fast_total = kAlongM ? num_m_blocks : num_n_blocks;
    const int slow_total = kAlongM ? num_n_blocks : num_m_blocks;
    const int tiles_per_band = slow_total * raster_width;
    const int band = index / tiles_per_band;
    const int in_band = index - band * tiles_per_band;
    const int first_fast = band * raster_width;
    const int width = min_int(raster_width, fast_total - first_fast);
    const int slow = in_band / width;
    const int fast = first_fast + in_band - slow * width;
    return kAlongM ? TileCoord{fast, slow} : TileCoord{slow, fast};
  }
};

/// The first tile of this CTA: its index in a persistent launch (kSplitK == 1), else its
/// cluster's one tile.
template <class Cfg>
DT_DEVICE int cta_first_tile() {
  return static_cast<int>(Cfg::kSplitK == 1 ? blockIdx.x : blockIdx.x / Cfg::kSplitK);
}

/// The work of this CTA, for any kind of problem: persistent, every gridDim.x-th tile over all
/// K blocks; split-K, the cluster's one tile over the rank's share of the K blocks.
template <class Cfg>
DT_DEVICE WorkRange cta_work_range(int num_tiles, int num_k_blocks) {
  if constexpr (Cfg::kSplitK == 1) {
    return WorkRange{cta_first_tile<Cfg>(), static_cast<int>(gridDim.x), 0, num_k_blocks};
  } else {
    // NOTES: the host launches exactly num_tiles * kSplitK CTAs, so each cluster has one tile
    // (a step of num_tiles ends the loop after it without overflowing).
    const int rank = static_cast<int>(ptx::cluster_cta_rank());
    const int per_rank = ceil_div(num_k_blocks, Cfg::kSplitK);
    const int first = cta_first_tile<Cfg>();
    const int kb_begin = min_int(num_k_blocks, rank * per_rank);
    return WorkRange{first, num_tiles, kb_begin, min_int(num_k_blocks, kb_begin + per_rank)};
  }
}

/// Whether a pair of tiles shares the multicast operand's block (A: the m-block, B: the n-block).
template <class Cfg>
DT_DEVICE bool shares_multicast_operand(TileCoord mine, TileCoord theirs) {
  return Cfg::kMulticastA ? mine.m_block == theirs.m_block : mine.n_block == theirs.n_block;
}

template <class Cfg, ProblemKind kKind = Cfg::kProblemKind>
struct Scheduler;

/// kDense: the ceil(m / block_m) x ceil(n / block_n) tiles of D in raster order.
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kDense> {
  int m, n;
  RasterOrder<Cfg::kRasterAlongM> order;
  int num_tiles;
  int num_k_blocks;

  DT_DEVICE Scheduler(int m_, int n_, int k, int raster_width)
      : m(m_),
        n(n_),
        order{ceil_div(m_, Cfg::kBlockM), ceil_div(n_, Cfg::kBlockN), raster_width},
        num_tiles(order.num_tiles()),
        num_k_blocks(ceil_div(k, Cfg::kBlockK)) {}

  DT_DEVICE WorkRange work() const { return cta_work_range<Cfg>(num_tiles, num_k_blocks); }
  DT_DEVICE int first_tile() const { return cta_first_tile<Cfg>(); }

  DT_DEVICE Tile<Cfg> tile(int index) const {
    const TileCoord coord = order.coord(index);
    if constexpr (Cfg::kNumMulticast == 1) {
      return Tile<Cfg>{coord.m_block * Cfg::kBlockM, coord.n_block * Cfg::kBlockN, m, 0};
    } else {
      // The peer has tile index ^ 1; both CTAs of the pair compute the same answers.
      const bool peer_alive = (index ^ 1) < num_tiles;
      const bool multicast = peer_alive && shares_multicast_operand<Cfg>(coord, order.coord(index ^ 1));
      return Tile<Cfg>{coord.m_block * Cfg::kBlockM, coord.n_block * Cfg::kBlockN, m, 0, multicast, peer_alive};
    }
  }

  /// Bytes the TMA loads of one stage bring, the same for every stage of a launch (out-of-bounds
  /// box elements are zero-filled and count). The host's A box has min(block_m, m) rows, or half
  /// a tile under multicast of A with both halves landing here (twin of
  /// deep_tile/kernels/fp8_gemm.py a_box_rows); the other boxes are whole tiles.
  DT_DEVICE u32 stage_tx_bytes() const {
    const int a_rows = Cfg::kMulticastA ? Cfg::kBlockM : min_int(Cfg::kBlockM, m);
    return static_cast<u32>(Cfg::kStageTxBytes - (Cfg::kBlockM - a_rows) * Cfg::kBlockK);
  }
};

}  // namespace deep_tile
