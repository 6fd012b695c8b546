// Where a k-loop gets its b_scale values: per tile the rows of a 1D2D tile (TileBScaleRows), and one
// source type per k-loop form, chosen at compile time (BScaleFor): a load queue, the stage's copies,
// chunks shuffled across a warp, or (1D1D) the stage's columns.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"

namespace deep_tile {

/// The b_scale rows of a tile ([ceil(n / 128), K blocks] per expert): its first `first_cols`
/// columns use row n0 / 128, the rest (a tile straddling a 128-row weight block boundary) the
/// next row; `row1` is `row0` when the tile does not straddle. Producer and consumers both use it.
struct TileBScaleRows {
  const float* row0;
  const float* row1;
  int first_blocks;  // 8-column blocks that use row 0

  template <class Cfg>
  DT_DEVICE static TileBScaleRows of(const float* b_scale, int expert, int n0, int n, int num_k_blocks) {
    const int first_cols = min_int(Cfg::kBlockN, kScaleGroup - n0 % kScaleGroup);
    const float* row0 = b_scale + (expert * ceil_div(n, kScaleGroup) + n0 / kScaleGroup) * num_k_blocks;
    const bool straddles = first_cols < Cfg::kBlockN && n0 + first_cols < n;
    return {row0, straddles ? row0 + num_k_blocks : row0, straddles ? first_cols / 8 : Cfg::kBlockN / 8};
  }
};

/// The b_scale values of a tile's columns for the k-blocks in flight: row 0 and, for a tile that
/// straddles two 128-row weight blocks, row 1 (`now0`, `now1` for the k-block being promoted).
/// Each value is loaded three k-blocks before the promotion that uses it; the index is clamped
/// instead of tested, so the k-loop has no branch (ptxas serialises WGMMAs across data-dependent
/// branches, see TileMainloop). Used by the one-buffer k-loop of tiles whose width is a multiple
/// of 128 (BScaleFor).
/// NOTES: under load an L2 hit outlasts one k-block (ncu showed the promotion waiting on a load
/// issued one iteration earlier).
template <bool kTwoRows>
struct BScaleQueue {
  const float* row0;
  const float* row1;
  int last;  // last k-block of the range
  float now0 = 0.f, now1 = 0.f, next0 = 0.f, next1 = 0.f, after0 = 0.f, after1 = 0.f;

  DT_DEVICE BScaleQueue(const float* r0, const float* r1, int begin, int end) : row0(r0), row1(r1), last(end - 1) {
    if (begin < end) {
      load(begin, now0, now1);
      load(min_int(begin + 1, last), next0, next1);
      load(min_int(begin + 2, last), after0, after1);
    }
  }
  DT_DEVICE void load(int kb, float& s0, float& s1) const {
    s0 = __ldg(row0 + kb);
    if (kTwoRows) s1 = __ldg(row1 + kb);
  }
  DT_DEVICE void read_stage(const float*) {}
  /// Called when k-block kb has been promoted: kb + 1 becomes current, kb + 3 is fetched.
  DT_DEVICE void pop(int kb) {
    now0 = next0, now1 = next1;
    next0 = after0, next1 = after1;
    load(min_int(kb + 3, last), after0, after1);
  }
};

/// The b_scale values of the one-buffer k-loop of tiles whose width is not a multiple of 128
/// (144, 160, 192, ...; BScaleFor): the producer copies the two values of each k-block into its
/// stage (stage_b_scales) and the consumers read them with the stage's a_scale rows, so the k-loop
/// has no global load, address or queue of its own for them.
/// NOTES: in place of BScaleQueue, whose addresses, loads and rotation lengthen 128x192's serial k-loop;
/// 128x256 gained nothing from it, so tiles of 128-multiple widths keep the queue.
template <bool kTwoRows>
struct BScaleStaged {
  float now0 = 0.f, now1 = 0.f;

  DT_DEVICE BScaleStaged(const float*, const float*, int, int) {}
  /// Read the k-block's values from its stage (before the stage is released).
  DT_DEVICE void read_stage(const float* stage_scales) {
    if constexpr (kTwoRows) {
      const float2 v = *reinterpret_cast<const float2*>(stage_scales);
      now0 = v.x, now1 = v.y;
    } else {
      now0 = stage_scales[0];
    }
  }
  DT_DEVICE void pop(int) {}
};

/// The producer's side of BScaleStaged: copy k-block kb's two values into the stage and have the
/// stage's full barrier wait for them too (it counts this arrival besides the producer's own).
/// NOTES: asynchronous copies: a producer that loaded the values itself would wait for them at each tile's
/// start (its first stage cannot be armed before), which costs where CTAs run many short-K tiles.
DT_DEVICE void stage_b_scales(float* stage_scales, u64* full, const TileBScaleRows& rows, int kb) {
  ptx::cp_async_4(stage_scales, rows.row0 + kb);
  ptx::cp_async_4(stage_scales + 1, rows.row1 + kb);
  ptx::cp_async_mbarrier_arrive_noinc(full);
}

/// The b_scale values of the two-buffer k-loop (small tiles): each warp holds them in chunks
/// of 32 k-blocks, lane l the value of k-block (chunk start + l), and the next chunk besides: one
/// coalesced load per 32 k-blocks, issued a whole chunk before its first use, and a shuffle per
/// k-block. Indices past the range are clamped to its last k-block instead of tested, so the
/// k-loop has no branch (ptxas serialises WGMMAs across data-dependent branches, see
/// TileMainloop).
/// NOTES: with BScaleQueue the two-buffer k-loop still waited for the loads (ncu at 64x2112x7168,
/// 64x64 tile: 7% of the consumer's stall samples on the first use of one); these chunks measured
/// 1.00-1.03x on small-M shapes (H100), but 0.94-0.99x on the one-buffer k-loop of large tiles.
template <bool kTwoRows>
struct BScaleChunks {
  const float* row0;
  const float* row1;
  int begin, last;  // first and last k-block of the range
  int lane;
  int step = 0;     // k-block now - begin
  float chunk0 = 0.f, chunk1 = 0.f, next0 = 0.f, next1 = 0.f;  // lane l: k-block begin + 32c + l, + 32
  float now0 = 0.f, now1 = 0.f;

  DT_DEVICE BScaleChunks(const float* r0, const float* r1, int kb_begin, int kb_end)
      : row0(r0), row1(r1), begin(kb_begin), last(kb_end - 1), lane(static_cast<int>(threadIdx.x % 32)) {
    if (kb_begin < kb_end) {
      load(0, chunk0, chunk1);
      load(32, next0, next1);
      select();
    }
  }
  /// This lane's value of the chunk that starts `offset` k-blocks after `begin`.
  DT_DEVICE void load(int offset, float& s0, float& s1) const {
    const int kb = min_int(begin + offset + lane, last);
    s0 = __ldg(row0 + kb);
    if (kTwoRows) s1 = __ldg(row1 + kb);
  }
  DT_DEVICE void read_stage(const float*) {}
  DT_DEVICE void select() {
    now0 = __shfl_sync(0xffffffffu, chunk0, step % 32);
    if (kTwoRows) now1 = __shfl_sync(0xffffffffu, chunk1, step % 32);
  }
  /// Called when a k-block has been promoted: the next one becomes current; entering a new chunk,
  /// the prefetched one becomes current and the one after it is fetched.
  DT_DEVICE void pop(int) {
    ++step;
    if (step % 32 == 0) {
      chunk0 = next0, chunk1 = next1;
      load(step + 32, next0, next1);
    }
    select();
  }
};

/// The 1D1D kernels' (Cfg::kBScale1D) b_scale source: the promotion reads each column's value from
/// the k-block's slot (TileMainloop::finish): its stage's, or with the ring (Cfg::kBScaleRing) the
/// release state's ring slot, or with Cfg::kBScaleSlotAtIssue `slot`, taken per accumulator buffer
/// from the issue state at issue.
struct BScaleColumns {
  float now0 = 0.f, now1 = 0.f;
  int slot[2] = {0, 0};
  DT_DEVICE BScaleColumns(const float*, const float*, int, int) {}
  DT_DEVICE void read_stage(const float*) {}
  DT_DEVICE void pop(int) {}
};

/// The b_scale source of a config's k-loop: chunks and shuffles for two accumulator buffers; for
/// one, the stage's values (Cfg::kBScaleStaged) or the load queue; the stage's columns for 1D1D.
template <class Cfg, bool kTwoRows>
using BScaleFor = typename If<
    Cfg::kBScale1D, BScaleColumns,
    typename If<Cfg::kNumAccumBuffers == 2, BScaleChunks<kTwoRows>,
                typename If<Cfg::kBScaleStaged, BScaleStaged<kTwoRows>, BScaleQueue<kTwoRows>>::type>::type>::type;

}  // namespace deep_tile
