// The tile scheduler: which output tiles a CTA computes, over which K blocks, and what the kernel
// body needs to know of each tile (its origin in A, B and D, its real rows, whether the 2-CTA
// pair shares the multicast operand). The producer, the consumers and the epilogues ask it and
// know nothing else of the problem's shape, so a new kind of problem is a new Scheduler
// specialisation with the same members:
//
//   Scheduler<Cfg> sched(m, n, k, raster_width, group, table);   // read_table() after the first barrier (table kinds)
//   const WorkRange work = sched.work();                 // first tile, step, K blocks
//   auto ahead = sched.load_ahead(work.first);           // what tile() reads from global memory
//   for (int index = work.first; index < sched.num_tiles; index += work.step) {
//     const Tile<Cfg> tile = sched.tile(index, ahead);   // m0, n0, m_end, expert, multicast, peer_alive
//     ahead = sched.load_ahead(index + work.step);       // the next tile's, in flight during this one
//     ... K blocks [work.kb_begin, work.kb_end) of the tile ...
//   }
//   sched.stage_tx_bytes()                               // the full barrier's bytes per stage
//   sched.first_tile()                                   // split-K: the cluster's one tile
//   sched.n, sched.num_k_blocks                          // columns of D, K blocks (b_scale's pitch)
//   sched.row_tag(row), sched.row_is_real(tile, row, tag)  // grouped: a row is stored (tag loaded
//                                                        // before the k-loop, judged after it)
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

/// What the kernel multiplies; Fp8GemmConfig::kProblemKind picks the Scheduler specialisation
/// (deep_tile/gemm/problem.py ProblemKind names the same kinds; DT_PROBLEM_KIND is the value).
///   kDense: D[M, N] = A[M, K] B[N, K]^T, one B.
/// The M-grouped kinds of Mixture-of-Experts GEMMs stack one B [N, K] and b_scale
/// [ceil(N/128), K blocks] per expert (group) and give each expert some rows of A and D:
///   kGroupedContiguous: m_indices[M] names each row's expert (ids outside [0, G): padding);
///     each expert's rows are one run that starts at a multiple of 128, so a tile's expert is
///     the id of its first row, and its real rows are those carrying that id (a prefix);
///   kGroupedMasked: expert g owns the slab of rows [g * max_m, (g + 1) * max_m) of which the
///     first min(masked_m[g], max_m) are real;
///   kGroupedOffsets: expert g owns rows [offsets[g], offsets[g + 1]) (any start, no padding);
///   kGroupedPsum: DeepGEMM's psum contiguous layout: expert g owns rows
///     [align_up(ends[g - 1], group_rows), ends[g]) (ends[-1] = 0; ends clamped into [0, M]; rows
///     between the runs are padding). The starts are multiples of 128, so a column-major a_scale
///     box starts 16-byte aligned.
/// The masked, offsets and psum kinds keep a table of each expert's m-blocks in shared memory (built
/// by one warp before the kernel's first barrier), so their tiles are numbered without holes.
/// The K-grouped kind (Mixture-of-Experts weight gradients, 1D1D only) groups along K instead:
///   kKGrouped: D[g] (M x N, the groups' outputs one after another) = A[:, K_g] B[:, K_g]^T, where
///     group g owns the K range [sum_{h<g} sizes[h], + sizes[g]) of A and B (sizes: int32 [G] on
///     the device, any values: clamped into [0, K]); every group has all M x N tiles, each with
///     its own K range (KGroupedScheduler).
///   kKGroupedBlocks: kKGrouped with A and B in DeepGEMM's NT layout: group g's [M, sizes[g]] and
///     [N, sizes[g]] blocks row-major, the groups one after another in flat buffers, each read
///     through its own tensor map (a per-group table in global memory, kernels/k_grouped_maps.cuh).
enum class ProblemKind {
  kDense = 0,
  kGroupedContiguous = 1,
  kGroupedMasked = 2,
  kGroupedOffsets = 3,
  kKGrouped = 4,
  kGroupedPsum = 5,
  kKGroupedBlocks = 6
};

/// The run-time description of a grouped problem (kernel arguments; unused by kDense).
struct GroupArgs {
  const int* info;  // kGroupedContiguous: m_indices [M]; kGroupedMasked: masked_m [G]; kGroupedOffsets: offsets [G + 1];
                    // kKGrouped: the groups' sizes along K [G]; kGroupedPsum: the experts' row ends [G]
  int num_groups;   // G, the experts stacked in B
  int group_rows;   // kGroupedMasked: max_m, the rows of each expert's slab; kGroupedPsum: the alignment of
                    // the experts' starts (a multiple of 128); else unused
};

/// Whether a kind keeps the per-expert table in shared memory (GroupTable).
__host__ __device__ constexpr bool has_group_table(ProblemKind kind) {
  return kind == ProblemKind::kGroupedMasked || kind == ProblemKind::kGroupedOffsets || kind == ProblemKind::kKGrouped ||
         kind == ProblemKind::kGroupedPsum || kind == ProblemKind::kKGroupedBlocks;
}

/// Most experts of the kinds with a table (deep_tile/kernels/fp8_gemm.py MAX_TABLE_GROUPS).
constexpr int kMaxTableGroups = 512;
/// Shared-memory bytes of the table: first m-block, first row and row end of each expert, plus
/// the total m-block count.
constexpr int kGroupTableBytes = align_up((3 * kMaxTableGroups + 1) * 4, 16);

/// Bytes per pipeline stage of the tile slots after the table (the kinds of uses_tile_slots): the
/// tile whose first k-block a stage holds.
constexpr int kTileSlotBytes = 16;

/// Whether the producer hands each tile to the consumers in a tile slot (TileSlot) instead of
/// every warpgroup decoding it from the table: the masked, offsets and psum kinds, whose tile()
/// is a binary search and divisions over the table (a chain of dependent shared-memory loads)
/// that the consumers ran between two tiles' k-loops.
__host__ __device__ constexpr bool uses_tile_slots(ProblemKind kind) {
  return kind == ProblemKind::kGroupedMasked || kind == ProblemKind::kGroupedOffsets || kind == ProblemKind::kGroupedPsum;
}

/// The tiles and K blocks of one CTA: tiles first, first + step, ... below Scheduler::num_tiles,
/// each over K blocks [kb_begin, kb_end).
struct WorkRange {
  int first, step;
  int kb_begin, kb_end;
};

/// The k-blocks [begin, end) of one tile's k-loop (the CTA's range, or a K-grouped tile's group's).
struct KBlocks {
  int begin, end;
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

/// A tile in the 16-byte slot of the stage that holds its first k-block (Cfg::kTileSlots): the
/// producer writes it after that stage's empty barrier and before arming its full barrier, whose
/// arrival releases the write; a consumer warp reads it after the full barrier's phase completes,
/// by the lane that later releases the stage (own_release_lane), so the slot is the stage's like
/// its data. The expert (< 512)
/// shares its word with the pair flags. Two 8-byte accesses: the table, after the 8-byte
/// barriers, is 8-byte aligned only.
struct TileSlot {
  static constexpr int kMulticastBit = 1 << 30, kPeerAliveBit = 1 << 29;

  template <class Cfg>
  static DT_DEVICE void write(int* slot, const Tile<Cfg>& t) {
    const int flags = (t.multicast ? kMulticastBit : 0) | (t.peer_alive ? kPeerAliveBit : 0);
    reinterpret_cast<int2*>(slot)[0] = make_int2(t.m0, t.n0);
    reinterpret_cast<int2*>(slot)[1] = make_int2(t.m_end, t.expert | flags);
  }
  /// Read by lane `reader` of the warp alone (the lane whose release of the stage orders the read
  /// before the producer's next write) and broadcast to the others; every lane must call it.
  template <class Cfg>
  static DT_DEVICE Tile<Cfg> read(const int* slot, int lane, int reader) {
    int2 lo = make_int2(0, 0), hi = make_int2(0, 0);
    if (lane == reader) lo = reinterpret_cast<const int2*>(slot)[0], hi = reinterpret_cast<const int2*>(slot)[1];
    lo.x = __shfl_sync(0xffffffffu, lo.x, reader), lo.y = __shfl_sync(0xffffffffu, lo.y, reader);
    hi.x = __shfl_sync(0xffffffffu, hi.x, reader), hi.y = __shfl_sync(0xffffffffu, hi.y, reader);
    const int expert = hi.y & (kPeerAliveBit - 1);
    if constexpr (Cfg::kNumMulticast == 2) {
      return Tile<Cfg>{lo.x, lo.y, hi.x, expert, (hi.y & kMulticastBit) != 0, (hi.y & kPeerAliveBit) != 0};
    } else {
      return Tile<Cfg>{lo.x, lo.y, hi.x, expert};
    }
  }
};
static_assert(kGroupTableBytes % 8 == 0 && kTileSlotBytes % 8 == 0, "tile slots are read as 8-byte words");

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
    return WorkRange{cta_first_tile<Cfg>(), static_cast<int>(gridDim.x), 0, Cfg::k_blocks(num_k_blocks)};
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

/// Bytes the TMA loads of one stage bring, the same for every stage of a launch (out-of-bounds
/// box elements are zero-filled and count), for an A of `m` rows. The host's A box has
/// min(block_m, m) rows, or half a tile under multicast of A with both halves landing here (twin
/// of deep_tile/kernels/fp8_gemm.py a_box_rows); its a_scale box min(block_m, m rounded up to 4)
/// rows (twin of a_scale_box_rows); the B box is whole tiles.
template <class Cfg>
DT_DEVICE u32 stage_tx_bytes_for(int m) {
  const int a_rows = Cfg::kMulticastA ? Cfg::kBlockM : min_int(Cfg::kBlockM, m);
  const int a_scale_rows = min_int(Cfg::kBlockM, (max_int(m, 1) + 3) / 4 * 4);
  return static_cast<u32>(Cfg::kStageTxBytes - (Cfg::kBlockM - a_rows) * Cfg::kBlockK -
                          (Cfg::kBlockM - a_scale_rows) * 4 * Cfg::kAScaleCols);
}

template <class Cfg, ProblemKind kKind = Cfg::kProblemKind>
struct Scheduler;

/// The shared-memory table of the masked, offsets and psum kinds: for expert e, its first virtual
/// m-block (the m-blocks of all experts numbered one after another; m_block_start[G] is their
/// total), its first row in A/D and the end of its real rows.
struct GroupTable {
  int* m_block_start;  // [kMaxTableGroups + 1]
  int* row_begin;      // [kMaxTableGroups]
  int* row_end;        // [kMaxTableGroups]

  DT_DEVICE explicit GroupTable(int* base)
      : m_block_start(base), row_begin(base + kMaxTableGroups + 1), row_end(base + 2 * kMaxTableGroups + 1) {}

  /// Filled by one warp (`lane` 0..31): each expert's rows from the arguments, its m-block count,
  /// and the prefix sums; 32 x 4 experts per round, their loads issued together.
  template <ProblemKind kKind, int kBlockM>
  DT_DEVICE void build(const GroupArgs& group, int m, int lane) const {
    int carry = 0;
    for (int base = 0; base < group.num_groups; base += 128) {
      int begin[4], end[4], blocks[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = base + j * 32 + lane;
        begin[j] = end[j] = 0;
        if (e < group.num_groups) {
          if constexpr (kKind == ProblemKind::kGroupedMasked) {
            begin[j] = e * group.group_rows;
            end[j] = begin[j] + min_int(max_int(__ldg(group.info + e), 0), group.group_rows);
          } else if constexpr (kKind == ProblemKind::kGroupedPsum) {
            // the previous end (clamped into [0, m]) rounded up to the alignment; an end before
            // its start (decreasing ends, the caller's error) leaves the expert without rows
            const int previous = e == 0 ? 0 : min_int(max_int(__ldg(group.info + e - 1), 0), m);
            begin[j] = min_int((previous + group.group_rows - 1) / group.group_rows * group.group_rows, m);
            end[j] = min_int(max_int(__ldg(group.info + e), begin[j]), m);
          } else {  // offsets, clamped into [0, m] and non-decreasing per expert
            begin[j] = min_int(max_int(__ldg(group.info + e), 0), m);
            end[j] = min_int(max_int(__ldg(group.info + e + 1), begin[j]), m);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = base + j * 32 + lane;
        blocks[j] = ceil_div(end[j] - begin[j], kBlockM);
        int inclusive = blocks[j];  // warp-wide inclusive scan
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
          if (lane >= d) inclusive += v;
        }
        if (e < group.num_groups) {
          m_block_start[e] = carry + inclusive - blocks[j];
          row_begin[e] = begin[j];
          row_end[e] = end[j];
        }
        carry += __shfl_sync(0xffffffffu, inclusive, 31);
      }
    }
    if (lane == 0) m_block_start[group.num_groups] = carry;
  }

  /// kKGrouped: each group's K range [row_begin[e], row_end[e]) from the sizes (negative ones as
  /// 0), clamped into [0, k): the exclusive prefix sums, by one warp (`lane` 0..31), 32 groups per
  /// round. The scan saturates at k, so no sum overflows whatever the sizes.
  DT_DEVICE void build_k_ranges(const GroupArgs& group, int k, int lane) const {
    int carry = 0;
    for (int base = 0; base < group.num_groups; base += 32) {
      const int e = base + lane;
      const int size = e < group.num_groups ? min_int(max_int(__ldg(group.info + e), 0), k) : 0;
      int inclusive = size;  // warp-wide inclusive scan, saturating at k
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive = min_int(inclusive + v, k);
      }
      int exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
      if (lane == 0) exclusive = 0;
      if (e < group.num_groups) {
        row_begin[e] = min_int(carry + exclusive, k);
        row_end[e] = min_int(carry + inclusive, k);
      }
      carry = min_int(carry + __shfl_sync(0xffffffffu, inclusive, 31), k);
    }
  }

  /// The expert owning virtual m-block v (< the total): the last e with m_block_start[e] <= v.
  DT_DEVICE int expert_of(int v, int num_groups) const {
    int lo = 0, hi = num_groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (m_block_start[mid] <= v) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
};

/// kDense: the ceil(m / block_m) x ceil(n / block_n) tiles of D in raster order.
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kDense> {
  int m, n;
  RasterOrder<Cfg::kRasterAlongM> order;
  int num_tiles;
  int num_k_blocks;

  DT_DEVICE Scheduler(int m_, int n_, int k, int raster_width, const GroupArgs&, int*)
      : m(m_),
        n(n_),
        order{ceil_div(m_, Cfg::kBlockM), ceil_div(n_, Cfg::kBlockN), raster_width},
        num_tiles(order.num_tiles()),
        num_k_blocks(Cfg::k_blocks(ceil_div(k, Cfg::kBlockK))) {}

  DT_DEVICE WorkRange work() const { return cta_work_range<Cfg>(num_tiles, num_k_blocks); }
  DT_DEVICE int first_tile() const { return cta_first_tile<Cfg>(); }

  /// Whether a tile has work (a kind with padding tiles skips some).
  static DT_DEVICE bool has_work(const Tile<Cfg>&) { return true; }
  /// Origin of a tile's a_scale box: (row, first K block) in the column-major map.
  DT_DEVICE int a_scale_row(const Tile<Cfg>& t) const { return t.m0; }
  DT_DEVICE int a_scale_kb0(const Tile<Cfg>&) const { return 0; }

  /// What tile() reads from global memory, loaded one tile ahead (dense: nothing).
  struct Ahead {};
  DT_DEVICE Ahead load_ahead(int) const { return Ahead{}; }

  /// First row of m-block `m_block`'s tile. The last m-block, when M fills it only partly, starts
  /// earlier, so that its boxes end at most 3 rows past M (its start rounded up to a multiple of 4
  /// rows: a column-major a_scale box must start 16-byte aligned): it recomputes rows of the
  /// m-block before and stores the same values there again.
  /// NOTES: the TMA unit's zero-fill of a box half or more past M is slow: a GEMM whose last m-block was half
  /// filled ran slower than the same GEMM with M rounded up to whole tiles.
  /// `(x + 3) & ~3` rounds x up to a multiple of 4 for negative x too (M below one tile), where
  /// align_up's division rounds toward zero (the clamp to 0 would hide it). Spelling this or
  /// stage_tx_bytes_for's rounding as align_up changed every kernel's SASS (tools/sass_diff.py), so both
  /// stay as they are.
  /// NOTES: the output variants (Cfg::kDirectStore) keep every m-block at its own rows: with C
  /// read from D (in place), rows stored twice would be accumulated twice.
  DT_DEVICE int tile_m0(int m_block) const {
    if constexpr (Cfg::kDirectStore) {
      return m_block * Cfg::kBlockM;
    } else {
      return max_int(0, min_int(m_block * Cfg::kBlockM, (m - Cfg::kBlockM + 3) & ~3));
    }
  }

  DT_DEVICE Tile<Cfg> tile(int index, Ahead = Ahead{}) const {
    const TileCoord coord = order.coord(index);
    if constexpr (Cfg::kNumMulticast == 1) {
      return Tile<Cfg>{tile_m0(coord.m_block), coord.n_block * Cfg::kBlockN, m, 0};
    } else {
      // The peer has tile index ^ 1; both CTAs of the pair compute the same answers.
      const bool peer_alive = (index ^ 1) < num_tiles;
      const bool multicast = peer_alive && shares_multicast_operand<Cfg>(coord, order.coord(index ^ 1));
      return Tile<Cfg>{tile_m0(coord.m_block), coord.n_block * Cfg::kBlockN, m, 0, multicast, peer_alive};
    }
  }

  /// The full barrier's bytes per stage (stage_tx_bytes_for).
  DT_DEVICE u32 stage_tx_bytes() const { return stage_tx_bytes_for<Cfg>(m); }
};

/// kGroupedContiguous: the ceil(m / block_m) x ceil(n / block_n) tiles of D in raster order, as
/// dense; a tile's expert is m_indices[m0]. A tile whose first row is padding has no work, unless
/// its multicast peer has: then it runs along with the peer's expert and stores nothing, so the
/// pair stays in step (their stages and barriers are shared). Its real rows are those of its
/// expert (row_is_real), a prefix of the tile by the layout's rule.
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kGroupedContiguous> {
  int m, n;
  RasterOrder<Cfg::kRasterAlongM> order;
  int num_tiles;
  int num_k_blocks;
  GroupArgs group;

  DT_DEVICE Scheduler(int m_, int n_, int k, int raster_width, const GroupArgs& group_, int*)
      : m(m_),
        n(n_),
        order{ceil_div(m_, Cfg::kBlockM), ceil_div(n_, Cfg::kBlockN), raster_width},
        num_tiles(order.num_tiles()),
        num_k_blocks(ceil_div(k, Cfg::kBlockK)),
        group(group_) {}

  DT_DEVICE WorkRange work() const { return cta_work_range<Cfg>(num_tiles, num_k_blocks); }
  DT_DEVICE int first_tile() const { return cta_first_tile<Cfg>(); }
  static DT_DEVICE bool has_work(const Tile<Cfg>& t) { return t.expert >= 0; }
  DT_DEVICE int a_scale_row(const Tile<Cfg>& t) const { return t.m0; }
  DT_DEVICE int a_scale_kb0(const Tile<Cfg>&) const { return 0; }

  /// An id read from m_indices as the expert it names, or -1 for padding (outside [0, G)).
  DT_DEVICE int expert_of_id(int id) const { return id >= 0 && id < group.num_groups ? id : -1; }
  /// m_indices[row], or -1 past the last row.
  DT_DEVICE int load_id(int row) const { return row < m ? __ldg(group.info + row) : -1; }

  /// The m_indices entries tile() decodes: the first row's of the tile and of its multicast
  /// peer. A global load (hundreds of cycles): the kernel issues the next tile's before this
  /// tile's k-loop and decodes them after it, so the tile start does not wait for them.
  struct Ahead {
    int id, peer_id;
  };
  DT_DEVICE Ahead load_ahead(int index) const {
    Ahead ahead{-1, -1};
    if (index < num_tiles) {
      ahead.id = load_id(order.coord(index).m_block * Cfg::kBlockM);
      if constexpr (Cfg::kNumMulticast == 2) {
        if ((index ^ 1) < num_tiles) ahead.peer_id = load_id(order.coord(index ^ 1).m_block * Cfg::kBlockM);
      }
    }
    return ahead;
  }

  /// This thread's row's m_indices entry, loaded before the k-loop (row_is_real uses it after).
  DT_DEVICE int row_tag(int row) const { return load_id(row); }
  /// Whether row `row` of tile `t` (with `tag` = row_tag(row)) is one of its real rows (stored).
  DT_DEVICE bool row_is_real(const Tile<Cfg>& t, int row, int tag) const {
    return row < t.m_end && expert_of_id(tag) == t.expert;
  }

  DT_DEVICE Tile<Cfg> tile(int index, const Ahead& ahead) const {
    const TileCoord coord = order.coord(index);
    const int m0 = coord.m_block * Cfg::kBlockM, n0 = coord.n_block * Cfg::kBlockN;
    const int expert = expert_of_id(ahead.id);
    if constexpr (Cfg::kNumMulticast == 1) {
      return Tile<Cfg>{m0, n0, m, expert};
    } else {
      const bool peer_exists = (index ^ 1) < num_tiles;
      const TileCoord peer = order.coord(index ^ 1);
      const int peer_expert = peer_exists ? expert_of_id(ahead.peer_id) : -1;
      if (expert < 0 && peer_expert < 0) return Tile<Cfg>{m0, n0, m0, -1, false, false};
      const bool peer_alive = peer_exists;  // a padding tile beside a real one runs along
      const int run_expert = expert >= 0 ? expert : peer_expert;
      const bool multicast = peer_alive && shares_multicast_operand<Cfg>(coord, peer) &&
                             (peer_expert < 0 || expert < 0 || peer_expert == expert);
      return Tile<Cfg>{m0, n0, expert >= 0 ? m : m0, run_expert, multicast, peer_alive};
    }
  }
  DT_DEVICE Tile<Cfg> tile(int index) const { return tile(index, load_ahead(index)); }

  DT_DEVICE u32 stage_tx_bytes() const { return stage_tx_bytes_for<Cfg>(m); }
};

/// kGroupedMasked, kGroupedOffsets and kGroupedPsum: every tile has work; a multicast pair shares its operand
/// only within one expert. The order depends on the raster axis:
///   along M (Cfg::kRasterAlongM): the experts' tiles one after another (expert e's first tile is
///     m_block_start[e] * n-blocks, GroupTable), each expert's own m-blocks x n-blocks grid in
///     bands of m-blocks, so a band holding a whole expert reads its weights once;
///   along N: one raster over the experts' m-blocks numbered one after another (the GroupTable's
///     virtual m-blocks) times the n-blocks, bands of n-blocks walking every expert.
/// NOTES: the single raster along M cut its bands across experts, each band re-reading the weights of
/// every expert it touched. The selector (select.config.raster) takes bands along M where an expert is
/// expected to have 2 to 16 m-blocks; for experts of one m-block the per-expert order was slower, and bands
/// of n-blocks keep the order of all experts.
template <class Cfg, ProblemKind kKind>
struct TableScheduler {
  int m, n;
  int num_groups;
  int group_rows;
  GroupTable table;
  RasterOrder<Cfg::kRasterAlongM> order;
  int num_tiles;
  int num_k_blocks;

  /// Made before the table is built; read_table() completes it once the table is published
  /// (after the kernel's first barrier).
  DT_DEVICE TableScheduler(int m_, int n_, int k, int raster_width, const GroupArgs& group, int* table_base)
      : m(m_),
        n(n_),
        num_groups(group.num_groups),
        group_rows(group.group_rows),
        table(table_base),
        order{0, ceil_div(n_, Cfg::kBlockN), raster_width},
        num_tiles(0),
        num_k_blocks(ceil_div(k, Cfg::kBlockK)) {}

  DT_DEVICE void read_table() {
    order.num_m_blocks = table.m_block_start[num_groups];
    num_tiles = order.num_tiles();
  }

  DT_DEVICE WorkRange work() const { return cta_work_range<Cfg>(num_tiles, num_k_blocks); }
  DT_DEVICE int first_tile() const { return cta_first_tile<Cfg>(); }
  static DT_DEVICE bool has_work(const Tile<Cfg>&) { return true; }

  /// The masked kind's column-major a_scale is [G][K blocks][max_m]: a map of max_m-float rows,
  /// one per (expert, K block), so the box starts at the row within the expert.
  DT_DEVICE int a_scale_row(const Tile<Cfg>& t) const {
    return kKind == ProblemKind::kGroupedMasked && !Cfg::kAScaleRowMajor ? t.m0 - t.expert * group_rows : t.m0;
  }
  DT_DEVICE int a_scale_kb0(const Tile<Cfg>& t) const {
    return kKind == ProblemKind::kGroupedMasked && !Cfg::kAScaleRowMajor ? t.expert * num_k_blocks : 0;
  }

  /// The table lives in shared memory: nothing to load ahead, and no row tag.
  struct Ahead {};
  DT_DEVICE Ahead load_ahead(int) const { return Ahead{}; }
  DT_DEVICE int row_tag(int) const { return 0; }
  DT_DEVICE bool row_is_real(const Tile<Cfg>& t, int row, int) const { return row < t.m_end; }

  /// A tile's expert and its (m-block within the expert, n-block). Along M the experts' tiles
  /// come one after another, so tile `index` belongs to the expert of virtual m-block
  /// index / n-blocks; along N one raster runs over the virtual m-blocks of all experts.
  struct ExpertCoord {
    int expert;
    TileCoord coord;
  };
  DT_DEVICE ExpertCoord expert_coord(int index) const {
    if constexpr (Cfg::kRasterAlongM) {
      const int n_blocks = order.num_n_blocks;
      const int expert = table.expert_of(index / n_blocks, num_groups);
      const int first = table.m_block_start[expert];
      const RasterOrder<true> own{table.m_block_start[expert + 1] - first, n_blocks, order.raster_width};
      return ExpertCoord{expert, own.coord(index - first * n_blocks)};
    } else {
      const TileCoord coord = order.coord(index);
      const int expert = table.expert_of(coord.m_block, num_groups);
      return ExpertCoord{expert, TileCoord{coord.m_block - table.m_block_start[expert], coord.n_block}};
    }
  }

  DT_DEVICE Tile<Cfg> tile(int index, Ahead = Ahead{}) const {
    const ExpertCoord at = expert_coord(index);
    const int m0 = table.row_begin[at.expert] + at.coord.m_block * Cfg::kBlockM;
    const int n0 = at.coord.n_block * Cfg::kBlockN, m_end = table.row_end[at.expert];
    if constexpr (Cfg::kNumMulticast == 1) {
      return Tile<Cfg>{m0, n0, m_end, at.expert};
    } else {
      const bool peer_alive = (index ^ 1) < num_tiles;
      const ExpertCoord peer = expert_coord(peer_alive ? index ^ 1 : index);
      const bool multicast =
          peer_alive && peer.expert == at.expert && shares_multicast_operand<Cfg>(at.coord, peer.coord);
      return Tile<Cfg>{m0, n0, m_end, at.expert, multicast, peer_alive};
    }
  }

  DT_DEVICE u32 stage_tx_bytes() const { return stage_tx_bytes_for<Cfg>(m); }
};

template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kGroupedMasked> : TableScheduler<Cfg, ProblemKind::kGroupedMasked> {
  using TableScheduler<Cfg, ProblemKind::kGroupedMasked>::TableScheduler;
};
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kGroupedOffsets> : TableScheduler<Cfg, ProblemKind::kGroupedOffsets> {
  using TableScheduler<Cfg, ProblemKind::kGroupedOffsets>::TableScheduler;
};
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kGroupedPsum> : TableScheduler<Cfg, ProblemKind::kGroupedPsum> {
  using TableScheduler<Cfg, ProblemKind::kGroupedPsum>::TableScheduler;
};

/// A K-grouped tile's K range: k-blocks [kb_begin, kb_end) (128-wide, numbered from K = 0), of
/// which the first holds the group's tokens from column `lo` on and the last up to column `hi`
/// (exclusive; 128: the whole block). The other columns of those two blocks belong to the
/// neighbouring groups (or lie past K) and are zeroed in the stage before the WGMMAs read it
/// (fp8_gemm_sm90.cuh, run_k_grouped_tile).
struct KRange {
  int kb_begin, kb_end;
  int lo, hi;
};

/// kKGrouped: G x ceil(m / block_m) x ceil(n / block_n) tiles, group by group, each group's tiles
/// in the raster order; every CTA takes every gridDim.x-th tile (persistent). A tile's expert is
/// its group (which output D[g], which K range); A, a_scale, B and b_scale are shared by all
/// groups, their K coordinates those of the group's range. A tile's work is proportional to its
/// group's size, and consecutive tiles go to different CTAs, so uneven groups spread over every
/// CTA (no CTA takes a whole large group). Under 2-CTA multicast a group has an even number of
/// tiles (the host's rule: deep_tile/kernels/fp8_gemm.py k_grouped_multicast_allowed), so both
/// tiles of a pair are of one group and run the same k-blocks in step.
/// The table (GroupTable::build_k_ranges) holds each group's token range.
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kKGrouped> {
  int m, n;
  int num_groups;
  GroupTable table;
  RasterOrder<Cfg::kRasterAlongM> order;
  int tiles_per_group;
  int num_tiles;
  int num_k_blocks;

  DT_DEVICE Scheduler(int m_, int n_, int k, int raster_width, const GroupArgs& group, int* table_base)
      : m(m_),
        n(n_),
        num_groups(group.num_groups),
        table(table_base),
        order{ceil_div(m_, Cfg::kBlockM), ceil_div(n_, Cfg::kBlockN), raster_width},
        tiles_per_group(order.num_tiles()),
        num_tiles(order.num_tiles() * group.num_groups),
        num_k_blocks(ceil_div(k, Cfg::kBlockK)) {}

  DT_DEVICE void read_table() {}
  DT_DEVICE WorkRange work() const { return cta_work_range<Cfg>(num_tiles, num_k_blocks); }
  DT_DEVICE int first_tile() const { return cta_first_tile<Cfg>(); }
  static DT_DEVICE bool has_work(const Tile<Cfg>&) { return true; }
  DT_DEVICE int a_scale_row(const Tile<Cfg>& t) const { return t.m0; }
  DT_DEVICE int a_scale_kb0(const Tile<Cfg>&) const { return 0; }

  struct Ahead {};
  DT_DEVICE Ahead load_ahead(int) const { return Ahead{}; }
  DT_DEVICE int row_tag(int) const { return 0; }
  DT_DEVICE bool row_is_real(const Tile<Cfg>& t, int row, int) const { return row < t.m_end; }

  DT_DEVICE Tile<Cfg> tile(int index, Ahead = Ahead{}) const {
    const int group = index / tiles_per_group;
    const TileCoord coord = order.coord(index - group * tiles_per_group);
    if constexpr (Cfg::kNumMulticast == 1) {
      return Tile<Cfg>{coord.m_block * Cfg::kBlockM, coord.n_block * Cfg::kBlockN, m, group};
    } else {
      // tiles_per_group is even (the host's rule), so the pair (index, index ^ 1) is of one group:
      // one K range, the same k-blocks in step.
      const bool peer_alive = (index ^ 1) < num_tiles;
      const bool multicast =
          peer_alive && shares_multicast_operand<Cfg>(coord, order.coord((index ^ 1) - group * tiles_per_group));
      return Tile<Cfg>{coord.m_block * Cfg::kBlockM, coord.n_block * Cfg::kBlockN, m, group, multicast, peer_alive};
    }
  }

  /// The K range of tile `t`'s group (an empty group: kb_begin == kb_end).
  DT_DEVICE KRange k_range(const Tile<Cfg>& t) const {
    const int begin = table.row_begin[t.expert], end = table.row_end[t.expert];
    if (begin >= end) return KRange{0, 0, 0, Cfg::kBlockK};
    const int kb_begin = begin / Cfg::kBlockK, kb_end = ceil_div(end, Cfg::kBlockK);
    return KRange{kb_begin, kb_end, begin - kb_begin * Cfg::kBlockK, end - (kb_end - 1) * Cfg::kBlockK};
  }

  DT_DEVICE u32 stage_tx_bytes() const { return stage_tx_bytes_for<Cfg>(m); }
};

/// kKGroupedBlocks: whether a group's token range [begin, end) is read through its own tensor maps:
/// both ends on a multiple of 16 tokens (TMA's row pitch and address alignment; the map-table
/// kernel, kernels/k_grouped_maps.cuh, writes maps for these groups only).
DT_DEVICE bool k_grouped_block_fits(int begin, int end) { return (begin | end) % 16 == 0; }

/// kKGroupedBlocks: the K-grouped tiles, K ranges and table as kKGrouped; A and B of tile `t` are
/// read through its group's tensor maps, at K coordinates counted from the group's first token.
template <class Cfg>
struct Scheduler<Cfg, ProblemKind::kKGroupedBlocks> : Scheduler<Cfg, ProblemKind::kKGrouped> {
  using Scheduler<Cfg, ProblemKind::kKGrouped>::Scheduler;
  /// The first token of tile `t`'s group (its block's column 0).
  DT_DEVICE int k_origin(const Tile<Cfg>& t) const { return this->table.row_begin[t.expert]; }

  /// As kKGrouped's, but a group that does not fit (k_grouped_block_fits; the caller's error) runs
  /// as an empty group: its maps are never read.
  DT_DEVICE KRange k_range(const Tile<Cfg>& t) const {
    const int begin = this->table.row_begin[t.expert], end = this->table.row_end[t.expert];
    if (!k_grouped_block_fits(begin, end)) return KRange{0, 0, 0, Cfg::kBlockK};
    return Scheduler<Cfg, ProblemKind::kKGrouped>::k_range(t);
  }
};

}  // namespace deep_tile
