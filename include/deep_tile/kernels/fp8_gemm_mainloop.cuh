// The consumer k-loop of the FP8 GEMM: per 128-wide K block and per sub-tile (64-row slab x
// column part) of a consumer warpgroup, WGMMA into a reused accumulator, hand the stage back, and
// promote the partial sum into the FP32 result with its scales.
//
//   issue(t):  [wait for the stage] read the a_scale rows, WGMMA chain into accumulator buffer t % B
//   finish(t): [release the stage]  result[sub] += a_scale(row) * b_scale(column block) * accumulator
//
// With one accumulator buffer the steps alternate issue, wait, finish. With two, the WGMMAs of
// the next step are issued before this one is promoted (wgmma.wait_group 1), so the tensor cores
// and the promotion overlap inside one warpgroup: a small tile's k-loop is otherwise one
// dependent chain per K block (wait for data, WGMMA, wait, promote) and latency bound.
//
// Swap-AB (Cfg::kSwapAB) swaps the WGMMA operands: each 64-row block of the B (weight) stage is
// the 64-row operand, the first kSwapN rows of the A stage the N side, so the accumulator holds
// D^T (weight rows x tokens) and the promotion scales columns by a_scale instead of rows.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/swap_fragment.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

/// Shared-memory regions of the kernel, in the order of Fp8GemmConfig::kSmemBytes.
template <class Cfg>
struct SharedStorage {
  u8* d;            // [block_m, block_n] bf16 staging for the TMA-store epilogue (persistent kernel)
  u8* a;            // [stages][block_m, 128] fp8, 128B-swizzled
  u8* b;            // [stages][block_n, 128] fp8, 128B-swizzled
  float* a_scale;   // [stages][block_m][kAScaleCols]
  float* b_scale;   // [kBScaleSlots][kBScalePitch]: per stage the tile's b_scale rows 0 and 1 of its
                    // k-block (kBScaleStaged), or its columns' values (kBScale1D, a ring of twice the stages)
  u64* full;        // [stages]: TMA bytes landed
  u64* empty;       // [stages]: consumers done with the stage
  u64* epilogue;    // kStagedEpilogue: [warpgroups] `ready`, then [warpgroups] `staged` (store_staged.cuh)
  int* group_table; // the per-expert table of the masked and offsets kinds (GroupTable)

  DT_DEVICE explicit SharedStorage(u8* base)
      : d(base),
        a(base + Cfg::kSmemDBytes),
        b(a + Cfg::kNumStages * Cfg::kTileABytes),
        a_scale(reinterpret_cast<float*>(b + Cfg::kNumStages * Cfg::kTileBBytes)),
        b_scale(a_scale + Cfg::kNumStages * Cfg::kBlockM * Cfg::kAScaleCols),
        full(reinterpret_cast<u64*>(b_scale + Cfg::kSmemBScaleBytes / 4)),
        empty(full + Cfg::kNumStages),
        epilogue(empty + Cfg::kNumStages),
        group_table(reinterpret_cast<int*>(epilogue + Cfg::kNumEpilogueBarriers)) {
    static_assert(Cfg::kSmemDBytes + Cfg::kNumStages * (Cfg::kTileABytes + Cfg::kTileBBytes) +
                          Cfg::kNumStages * Cfg::kBlockM * Cfg::kAScaleCols * 4 + Cfg::kSmemBScaleBytes +
                          Cfg::kNumStages * 16 + Cfg::kNumEpilogueBarriers * 8 == Cfg::kSmemTableOffset,
                  "Fp8GemmConfig::kSmemTableOffset differs from SharedStorage's group_table");
  }

  /// The tile slot of stage `stage` (Cfg::kTileSlots; TileSlot), after the table.
  DT_DEVICE int* tile_slot(int stage) const {
    return group_table + (kGroupTableBytes + stage * kTileSlotBytes) / 4;
  }

  /// The split-K partial tile: fp32 [block_m][kPartialPitch], over the A/B stages once they are idle.
  DT_DEVICE float* partial() const { return reinterpret_cast<float*>(a); }
};

/// Everything a consumer warpgroup needs in its k-loop that does not change between tiles.
template <class Cfg>
struct ConsumerContext {
  const SharedStorage<Cfg>& smem;
  u32 desc_a0, desc_b0;  // lower WGMMA descriptor words of stage 0 (this warpgroup's rows of A, all of B)
  int wg, warp_in_wg, lane;
  u32 rank;  // cluster rank (multicast)
};

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

/// Hand a stage back. With multicast the producer of either CTA writes into both CTAs' stage, so
/// each CTA's empty barrier collects the releases of both CTAs' consumer warps: lane r arrives at
/// cluster rank r; when the peer has already finished its last tile, both lanes count here.
/// NOTES: one predicated cluster arrive (an address in this CTA is a valid cluster address) rather
/// than a local and a remote branch: the branches cost a divergence and reconvergence per k-block.
/// With kBScaleStaged the producer's next copy into the stage is an ordinary shared-memory write
/// that every lane's read of the stage's b_scale values must precede: every lane arrives (on both
/// CTAs' barriers with multicast; on this one twice once the peer is done), the barrier counting
/// 32 per warp and CTA (kReleasesPerWarp).
/// NOTES: with one lane arriving after a __syncwarp, racecheck reported WAR hazards between lane
/// 31's read and the producer's next copy.
/// The lane of a consumer warp whose release_stage arrive lands on this CTA's own empty barrier
/// (every lane's does with kBScaleStaged; lane 0's without multicast; lane `rank`'s with it, also
/// once the peer is done): a shared-memory value of a stage that the producer rewrites after the
/// empty barrier must be read by this lane alone, or racecheck sees the other lanes' reads unordered.
template <class Cfg>
DT_DEVICE int own_release_lane(u32 rank) {
  return Cfg::kNumMulticast == 2 && !Cfg::kBScaleStaged ? static_cast<int>(rank) : 0;
}

template <class Cfg>
DT_DEVICE void release_stage(u64* empty, int lane, bool peer_alive, u32 rank) {
  if constexpr (Cfg::kBScaleStaged) {
    if constexpr (Cfg::kNumMulticast == 2) {
      ptx::mbarrier_arrive_cluster(empty, rank);
      ptx::mbarrier_arrive_cluster(empty, peer_alive ? rank ^ 1u : rank);
    } else {
      ptx::mbarrier_arrive(empty);
    }
  } else if constexpr (Cfg::kNumMulticast == 2) {
    if (lane < 2) ptx::mbarrier_arrive_cluster(empty, peer_alive ? static_cast<u32>(lane) : rank);
  } else {
    if (lane == 0) ptx::mbarrier_arrive(empty);
  }
}

/// The 1D1D b_scale slot of pipeline position `state`: its stage's, or with the ring
/// (Cfg::kBScaleRing) its place in a ring of twice the stages. The producer fills it, the
/// promotion reads it.
template <class Cfg>
DT_DEVICE int b_scale_slot(const PipelineState<Cfg::kNumStages>& state) {
  return Cfg::kBScaleRing ? state.ring2_index() : state.index;
}

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

/// The 1D1D one-buffer k-loop's b_scale values and scale products of its first kGroups 4-float
/// groups, formed while the WGMMAs run (Fp8GemmConfig::kPreScaleGroups); nothing without.
template <int kGroups>
struct PreScaled {
  float2 b[kGroups];
  float scale[kGroups][4];
};
template <>
struct PreScaled<0> {};

/// `r += v`, or with kAssign (a tile's first promotion, TileMainloop::run) `r = v`.
template <bool kAssign>
DT_DEVICE void promote_into(float& r, float v) {
  if constexpr (kAssign) {
    r = v;
  } else {
    r += v;
  }
}

/// A tile's FP32 sums set to zero, before k-loop runs that add to them.
template <class Cfg>
DT_DEVICE void zero_result(float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile]) {
#pragma unroll
  for (int s = 0; s < Cfg::kNumSubtiles; ++s)
#pragma unroll
    for (int i = 0; i < Cfg::kAccumPerSubtile; ++i) result[s][i] = 0.0f;
}

/// One tile's k-loop over k-blocks [kb_begin, kb_end). 8-column blocks jg < kFirstBlocks of the
/// tile use b_scale row 0, the rest row 1. kEarlyRelease (1D1D): each stage goes back before the
/// promotion reads its b_scale columns (Fp8GemmConfig::kEarlyReleaseMaxKBlocks).
/// NOTES: the straddle point is a template argument: as a run-time value it cost a select per 8
/// columns in the promotion (128x144 / 128x160 tiles ran at 0.80 / 0.87 of 128x128).
template <class Cfg, int kFirstBlocks, bool kEarlyRelease = false>
struct TileMainloop {
  using Wgmma = ptx::WgmmaFp8<Cfg::kWgmmaN>;
  static constexpr int kAcc = Cfg::kAccumPerSubtile;
  static constexpr bool kTwoRows = kFirstBlocks < Cfg::kBlockN / 8;
  static constexpr int kLast = Cfg::kNumSubtiles - 1;

  const ConsumerContext<Cfg>& ctx;
  PipelineState<Cfg::kNumStages>& issue_state;    // next stage to wait for and read
  PipelineState<Cfg::kNumStages>& release_state;  // next stage to hand back
  float (&result)[Cfg::kNumSubtiles][kAcc];
  BScaleFor<Cfg, kTwoRows> bscale;
  bool peer_alive;
  float acc[Cfg::kNumAccumBuffers][kAcc];
  // a_scale of this thread's two rows, or under swap-AB of its token columns (SwapFragment's
  // token slots).
  static constexpr int kRowScales = Cfg::kSwapAB ? SwapFragment<Cfg>::kTokenSlots : 2;
  float row_scale[Cfg::kNumAccumBuffers][kRowScales];
  // Cfg::kOneRingState: the stage of the k-block in flight, handed back after its last sub-tile
  // (the release state is set from the issue state once the k-loop is done). Nothing without: an
  // unused int member changed the register allocation of other kernels (64x64 two-buffer).
  struct NoStage {};
  typename If<Cfg::kOneRingState, int, NoStage>::type issued_stage{};
  // Cfg::kStaticRing: with K fixed at a multiple of the stages (Cfg::kStaticKBlocks), every tile
  // starts at stage 0, so run() walks the ring in passes of straight code whose stage, barrier,
  // a_scale and descriptor offsets are immediates (DeepGEMM's loop at these shapes). 128x64 at 56
  // K blocks: 82.3 -> 65.4 instructions per k-block and warp.
  // NOTES: against K as a run-time value it paid for 128x64 on both chips; 128x96 was mixed, 256x64 and
  // 128x128 even, and 128x160 slower than with K fixed alone.
  // Which picks use it: selector.static_ring_for.
  static constexpr bool kStaticRing = Cfg::kStaticRing;
  // kStaticRing: the descriptor bases taken again (as warp-uniform values) at each pass, so ptxas
  // forms each stage's descriptors in the pass instead of holding all of them in registers.
  struct PassDesc {
    u32 a = 0, b = 0;
  };
  typename If<kStaticRing, PassDesc, NoStage>::type pass_desc{};
  DT_DEVICE void refresh_pass_desc() {
    if constexpr (kStaticRing) {
      u32 a = ctx.desc_a0, b = ctx.desc_b0;
      asm volatile("shfl.sync.idx.b32 %0, %0, 0, 0x1f, 0xffffffff;" : "+r"(a));
      asm volatile("shfl.sync.idx.b32 %0, %0, 0, 0x1f, 0xffffffff;" : "+r"(b));
      pass_desc.a = a, pass_desc.b = b;
    }
  }

  /// 1D1D: this thread's b_scale columns of column part kPart in the k-block's slot.
  template <int kPart, int kBuf>
  DT_DEVICE const float* b_columns() const {
    const int slot = Cfg::kBScaleSlotAtIssue ? bscale.slot[kBuf] : b_scale_slot<Cfg>(release_state);
    return ctx.smem.b_scale + slot * Cfg::kBScalePitch + kPart * Cfg::kWgmmaN + 2 * (ctx.lane % 4);
  }

  // Scale products formed while the WGMMAs run (Cfg::kPreScaleGroups; 1D1D, one buffer).
  static constexpr int kPreScale = Cfg::kPreScaleGroups;
  PreScaled<kPreScale> pre;

  /// At issue, before the WGMMAs: the b_scale values of the first kPreScale groups (one-buffer
  /// k-loop: the release state is this k-block's).
  template <int kSub>
  DT_DEVICE void preload_b() {
    if constexpr (kPreScale > 0) {
      const float* cols = b_columns<kSub % Cfg::kNumNParts, 0>();
#pragma unroll
      for (int j = 0; j < kPreScale; ++j) pre.b[j] = *reinterpret_cast<const float2*>(cols + 8 * j);
    }
  }

  /// Between a sub-tile's issue and its wait: the first kPreScale groups' scale products.
  /// NOTES: ptxas sinks products used only after the wait below it, onto the serial chain from
  /// the wait to the next issue (76 of 80 FMULs at 128x160). A branch that uses them (taken
  /// only for a NaN a_scale, to no effect) keeps them above the wait; the LDS of their b_scale
  /// values, issued before the WGMMAs, have landed by then, so nothing stalls there.
  DT_DEVICE void prescale() {
    if constexpr (kPreScale > 0) {
#pragma unroll
      for (int j = 0; j < kPreScale; ++j) {
        const float2 b = pre.b[j];
        pre.scale[j][0] = row_scale[0][0] * b.x;
        pre.scale[j][1] = row_scale[0][0] * b.y;
        pre.scale[j][2] = row_scale[0][1] * b.x;
        pre.scale[j][3] = row_scale[0][1] * b.y;
      }
      if (row_scale[0][0] != row_scale[0][0]) {
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kPreScale; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) sum += pre.scale[j][q];
        asm volatile("nanosleep.u32 %0;" ::"r"(__float_as_uint(sum) & 1u));
      }
    }
  }

  template <int kBuf>
  DT_DEVICE void fence_accumulator() {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[kBuf][i]);
  }

  /// Wait for the stage (first sub-tile of k-block `kb`), read the a_scale rows, issue the WGMMAs.
  template <int kSub, int kBuf>
  DT_DEVICE void issue(int kb) {
    constexpr int kSlab = kSub / Cfg::kNumNParts, kPart = kSub % Cfg::kNumNParts;
    const int stage = issue_state.index;
    if constexpr (kSub == 0) ptx::mbarrier_wait(&ctx.smem.full[stage], issue_state.full_parity());
    if constexpr (Cfg::kOneRingState && kSub == 0) issued_stage = stage;
    // The two rows of this thread in the slab (swap-AB: its token columns); read before the stage
    // can be released.
    const int row = Cfg::kSwapAB ? SwapFragment<Cfg>::token(0, 0, ctx.lane)
                                 : ctx.wg * Cfg::kWgM + kSlab * 64 + ctx.warp_in_wg * 16 + ctx.lane / 4;
    const float* a_scale = ctx.smem.a_scale + (stage * Cfg::kBlockM + row) * Cfg::kAScaleCols +
                           (Cfg::kAScaleRowMajor ? (kb & 3) : 0);
    if constexpr (Cfg::kSwapAB) {
      using Frag = SwapFragment<Cfg>;
#pragma unroll
      for (int j = 0; j < Frag::kTokenBlocks; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {  // a_scale points at token(0, 0, lane)'s row
          row_scale[kBuf][Frag::token_slot(j, q)] = a_scale[(Frag::token(j, q, ctx.lane) - row) * Cfg::kAScaleCols];
        }
      }
    } else {
      row_scale[kBuf][0] = a_scale[0];
      row_scale[kBuf][1] = a_scale[8 * Cfg::kAScaleCols];
    }
    if constexpr (kSub == 0) bscale.read_stage(ctx.smem.b_scale + stage * 2);
    if constexpr (Cfg::kBScale1D && Cfg::kBScaleSlotAtIssue) bscale.slot[kBuf] = b_scale_slot<Cfg>(issue_state);
    if constexpr (kPreScale > 0) preload_b<kSub>();
    fence_accumulator<kBuf>();
    ptx::wgmma_fence();
    // Descriptor words advance by bytes / 16: one 32-bit add per WGMMA operand (the run-time
    // stage part once per sub-tile, the rest constants).
    u32 desc_a0 = ctx.desc_a0, desc_b0 = ctx.desc_b0;
    if constexpr (kStaticRing) desc_a0 = pass_desc.a, desc_b0 = pass_desc.b;
    const u32 a_lo = desc_a0 + stage * (Cfg::kTileABytes / 16) + kSlab * 64 * Cfg::kBlockK / 16;
    const u32 b_lo = desc_b0 + stage * (Cfg::kTileBBytes / 16) + kPart * Cfg::kWgmmaN * Cfg::kBlockK / 16;
    if constexpr (Cfg::kSwapAB) {
      // Weight rows [64 mb, 64 mb + 64) times the A stage's first kSwapN rows into accumulator
      // floats [mb * kSwapN / 2, ...).
#pragma unroll
      for (int mb = 0; mb < Cfg::kBlockN / 64; ++mb) {
#pragma unroll
        for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
          ptx::WgmmaFp8<Cfg::kSwapN>::mma(ptx::sw128_desc(b_lo + mb * 64 * Cfg::kBlockK / 16 + kk * 2),
                                          ptx::sw128_desc(a_lo + kk * 2), acc[kBuf] + mb * (Cfg::kSwapN / 2), kk > 0);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
        // k-slice kk of a 128B-swizzled K-major tile starts 32 bytes further along the row.
        Wgmma::mma(ptx::sw128_desc(a_lo + kk * 2), ptx::sw128_desc(b_lo + kk * 2), acc[kBuf], kk > 0);
      }
    }
    ptx::wgmma_commit_group();
    if constexpr (kSub == kLast) issue_state.advance();
  }

  /// After the WGMMAs of this sub-tile completed: release the stage (last sub-tile of the
  /// k-block) and promote (kAssign: the tile's first k-block, whose promotion writes the result).
  template <int kSub, int kBuf, bool kAssign = false>
  DT_DEVICE void finish() {
    constexpr int kPart = kSub % Cfg::kNumNParts;
    fence_accumulator<kBuf>();
    if constexpr (Cfg::kBScale1D) {
      // 1D1D: columns 8j + 2 (lane % 4) + {0, 1} of this part scale by their own b_scale, read
      // from the k-block's slot, after the stage went back (kEarlyRelease, only with the ring) or
      // before.
      const float* cols = b_columns<kPart, kBuf>();
      if constexpr (kEarlyRelease && kSub == kLast) {
        release_stage<Cfg>(&ctx.smem.empty[release_state.index], ctx.lane, peer_alive, ctx.rank);
        release_state.advance();
      }
      if constexpr (kPreScale > 0) {
#pragma unroll
        for (int j = 0; j < kPreScale; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            promote_into<kAssign>(result[kSub][4 * j + q], pre.scale[j][q] * acc[kBuf][4 * j + q]);
          }
        }
      }
#pragma unroll
      for (int j = kPreScale; j < kAcc / 4; ++j) {
        const float2 b = *reinterpret_cast<const float2*>(cols + 8 * j);
        promote_into<kAssign>(result[kSub][4 * j + 0], (row_scale[kBuf][0] * b.x) * acc[kBuf][4 * j + 0]);
        promote_into<kAssign>(result[kSub][4 * j + 1], (row_scale[kBuf][0] * b.y) * acc[kBuf][4 * j + 1]);
        promote_into<kAssign>(result[kSub][4 * j + 2], (row_scale[kBuf][1] * b.x) * acc[kBuf][4 * j + 2]);
        promote_into<kAssign>(result[kSub][4 * j + 3], (row_scale[kBuf][1] * b.y) * acc[kBuf][4 * j + 3]);
      }
      if constexpr (!kEarlyRelease && kSub == kLast) {
        release_stage<Cfg>(&ctx.smem.empty[release_state.index], ctx.lane, peer_alive, ctx.rank);
        release_state.advance();
      }
      return;
    }
    if constexpr (kSub == kLast) {
      if constexpr (Cfg::kOneRingState) {
        release_stage<Cfg>(&ctx.smem.empty[issued_stage], ctx.lane, peer_alive, ctx.rank);
      } else {
        release_stage<Cfg>(&ctx.smem.empty[release_state.index], ctx.lane, peer_alive, ctx.rank);
        release_state.advance();
      }
    }
    if constexpr (Cfg::kSwapAB) {
      // Each accumulator scales by its token's a_scale and its 64-row weight block's b_scale (row
      // 1 of the tile's b_scale from the straddle point on; kFirstBlocks counts 8-column blocks).
      using Frag = SwapFragment<Cfg>;
      Frag::for_each([&](int mb, int j, int h, int q) {
        const float b = mb * 8 < kFirstBlocks ? bscale.now0 : bscale.now1;
        const int i = Frag::index(mb, j, h, q);
        promote_into<kAssign>(result[kSub][i], (row_scale[kBuf][Frag::token_slot(j, q)] * b) * acc[kBuf][i]);
      });
      return;
    }
    const float lo0 = row_scale[kBuf][0] * bscale.now0, hi0 = row_scale[kBuf][1] * bscale.now0;
    const float lo1 = row_scale[kBuf][0] * bscale.now1, hi1 = row_scale[kBuf][1] * bscale.now1;
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
      const bool first = kPart * (Cfg::kWgmmaN / 8) + j < kFirstBlocks;
      const float scale_lo = first ? lo0 : lo1, scale_hi = first ? hi0 : hi1;
      promote_into<kAssign>(result[kSub][4 * j + 0], scale_lo * acc[kBuf][4 * j + 0]);
      promote_into<kAssign>(result[kSub][4 * j + 1], scale_lo * acc[kBuf][4 * j + 1]);
      promote_into<kAssign>(result[kSub][4 * j + 2], scale_hi * acc[kBuf][4 * j + 2]);
      promote_into<kAssign>(result[kSub][4 * j + 3], scale_hi * acc[kBuf][4 * j + 3]);
    }
  }

  /// Issue step kT of a fully unrolled run of kSteps (k-block, sub-tile) steps, then promote
  /// step kT - 1 while step kT runs; after the last step, drain.
  template <int kT, int kSteps>
  DT_DEVICE void overlapped_steps(int kb) {
    constexpr int kPrev = kT - 1;
    if constexpr (kT < kSteps) {
      issue<kT % Cfg::kNumSubtiles, kT % 2>(kb + kT / Cfg::kNumSubtiles);
      ptx::wgmma_wait_group<1>();
    } else {
      ptx::wgmma_wait_group<0>();
    }
    finish<kPrev % Cfg::kNumSubtiles, kPrev % 2>();
    if constexpr (kPrev % Cfg::kNumSubtiles == kLast) bscale.pop(kb + kPrev / Cfg::kNumSubtiles);
    if constexpr (kT < kSteps) overlapped_steps<kT + 1, kSteps>(kb);
  }

  /// One k-block without overlap: each sub-tile issued, waited for and promoted in turn (kAssign:
  /// the tile's first k-block, promoted into the result instead of added to it).
  template <int kSub, bool kAssign = false>
  DT_DEVICE void serial_steps(int kb) {
    if constexpr (kSub < Cfg::kNumSubtiles) {
      issue<kSub, 0>(kb);
      prescale();
      ptx::wgmma_wait_group<0>();
      finish<kSub, 0, kAssign>();
      serial_steps<kSub + 1, kAssign>(kb);
    } else {
      bscale.pop(kb);
    }
  }

  /// kStaticRing: k-blocks kb0 + kS .. kb0 + kEnd - 1 in turn, as straight code.
  template <int kS, int kEnd>
  DT_DEVICE void static_steps(int kb0) {
    if constexpr (kS < kEnd) {
      serial_steps<0>(kb0 + kS);
      static_steps<kS + 1, kEnd>(kb0);
    }
  }

  /// NOTES: ptxas tracks which accumulators an in-flight WGMMA group writes only within straight
  /// code: across a loop back-edge, or a branch choosing between wait_group 1 and 0, it injects
  /// waits and serialises every WGMMA (C7514/C7517). So the overlapped form runs in bodies of
  /// kUnroll k-blocks that start and end with nothing in flight, after the remainder k-blocks
  /// run serially.
  /// kInitResult: the k-loop sets the result (it starts from zero) instead of adding to the
  /// caller's; the one-buffer form promotes its first k-block into it, so the result is not
  /// zeroed first. Needs kb_begin < kb_end (the persistent kinds: every entry refuses k <= 0,
  /// deep_tile/checks.py and native/csrc/checks.cpp, so every tile has a k-block).
  /// NOTES: zeroing is a CS2R per accumulator register and tile, a real share of a short-K tile's
  /// instructions; which kinds gain from skipping it: Fp8GemmConfig::kLoopSetsResult.
  template <bool kInitResult>
  DT_DEVICE void run(int kb_begin, int kb_end) {
    if constexpr (kStaticRing) issue_state.index = 0, release_state.index = 0, refresh_pass_desc();
    if constexpr (Cfg::kNumAccumBuffers == 1 && kInitResult) {
      // NOTES: unconditional: with a test of the range here (zeroing when empty), ptxas hoisted
      // the zeroing above the test onto every tile's path.
      serial_steps<0, true>(kb_begin);
      ++kb_begin;
    } else if constexpr (kInitResult) {
      zero_result<Cfg>(result);
    }
    if constexpr (Cfg::kStaticKBlocks > 0) {
      // K fixed at compile time (one buffer, persistent: the range is [0, kStaticKBlocks)): a
      // constant trip count unrolled by kStaticKUnroll, so up to that many K blocks are straight
      // code and longer ranges have no run-time remainder test; ptxas folds the result's zeroing
      // (consumer_loop) into the first k-block's promotion (no CS2R).
      // NOTES: faster than the run-time loop for the dense, masked, offsets and psum kinds; the contiguous
      // kind gained nothing (docs/performance.md, 'What the selector picks, and why').
      if constexpr (kStaticRing) {
        constexpr int kS = Cfg::kNumStages;
        static_steps<kInitResult ? 1 : 0, kS>(0);
#pragma unroll 1
        for (int pass = 1; pass < Cfg::kStaticKBlocks / kS; ++pass) {
          issue_state.index = 0, release_state.index = 0;
          refresh_pass_desc();
          static_steps<0, kS>(pass * kS);
        }
      } else {
#pragma unroll Cfg::kStaticKUnroll
        for (int kb = kInitResult ? 1 : 0; kb < Cfg::kStaticKBlocks; ++kb) serial_steps<0>(kb);
      }
    } else if constexpr (Cfg::kNumAccumBuffers == 1) {
      // NOTES: unrolled by a multiple of BScaleQueue's depth, so its rotation becomes register
      // renaming (11-14 fewer instructions per k-block on this serial chain; 128x192 at
      // 4096x2112x7168, before its values were staged: 115.3 -> 106.0 us on an H100). By 6 for long K ranges (the selector's
      // choice, Fp8GemmConfig::kKUnroll); both forms in one kernel behind a run-time test of the
      // range cost up to 8% on short ones (H100, 4096x32768x512: the larger code per tile).
#pragma unroll Cfg::kKUnroll
      for (int kb = kb_begin; kb < kb_end; ++kb) serial_steps<0>(kb);
    } else {
      constexpr int kUnroll = Cfg::kNumSubtiles == 1 ? 4 : 2;
      const int body_begin = kb_begin + (kb_end - kb_begin) % kUnroll;
      for (int kb = kb_begin; kb < body_begin; ++kb) {
        // The remainder runs with buffer 0 alone.
        issue<0, 0>(kb);
        ptx::wgmma_wait_group<0>();
        finish<0, 0>();
        if constexpr (Cfg::kNumSubtiles == 2) {
          issue<1, 1>(kb);
          ptx::wgmma_wait_group<0>();
          finish<1, 1>();
        }
        bscale.pop(kb);
      }
      for (int kb = body_begin; kb < kb_end; kb += kUnroll) {
        issue<0, 0>(kb);
        overlapped_steps<1, kUnroll * Cfg::kNumSubtiles>(kb);
      }
    }
    // Cfg::kOneRingState (one-buffer k-loops only): every stage the loop waited for went back, so
    // the release state catches up with the issue state.
    if constexpr (Cfg::kOneRingState) release_state = issue_state;
  }
};

/// Compile-time int, for dispatching a run-time value onto template instances.
template <int kValue>
struct IntConstant {
  static constexpr int value = kValue;
};

/// Call `fn(IntConstant<first_blocks>)` for the run-time `first_blocks`, one of the values a tile
/// of this config can have: multiples of gcd(block_n, 128) / 8 up to 128 / 8, or block_n / 8 when
/// the whole tile uses one b_scale row.
template <class Cfg, int kCandidate = gcd(Cfg::kBlockN, 128) / 8, class Fn>
DT_DEVICE void dispatch_first_blocks(int first_blocks, const Fn& fn) {
  constexpr int kAll = Cfg::kBlockN / 8;
  if constexpr (128 % Cfg::kBlockN == 0 || kCandidate > 128 / 8 || kCandidate >= kAll) {
    fn(IntConstant<kAll>{});
  } else {
    if (first_blocks == kCandidate) {
      fn(IntConstant<kCandidate>{});
    } else {
      dispatch_first_blocks<Cfg, kCandidate + gcd(Cfg::kBlockN, 128) / 8>(first_blocks, fn);
    }
  }
}

/// TileMainloop bound to one tile's arguments, callable with the straddle point as a constant;
/// kInitResult: the k-loop sets `result` (TileMainloop::run), else adds to it.
/// NOTES: a functor rather than a lambda: NVRTC 13.0 treats an unannotated lambda in device code
/// as a host function and refuses it in JIT mode.
template <class Cfg, bool kInitResult = false>
struct RunTileMainloop {
  const ConsumerContext<Cfg>& ctx;
  PipelineState<Cfg::kNumStages>& issue_state;
  PipelineState<Cfg::kNumStages>& release_state;
  float (&result)[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile];
  const float* b_scale_row0;
  const float* b_scale_row1;
  int kb_begin, kb_end;
  bool peer_alive;
  int tile_k_blocks;  // the whole tile's k-blocks (this run may be a part): the early release's choice

  template <int kFirstBlocks>
  DT_DEVICE void operator()(IntConstant<kFirstBlocks>) const {
    constexpr int kMax = Cfg::kEarlyReleaseMaxKBlocks;
    if constexpr (kMax == Cfg::kEarlyReleaseNever || kMax == Cfg::kEarlyReleaseAlways) {
      run<kFirstBlocks, kMax == Cfg::kEarlyReleaseAlways>();
    } else if (tile_k_blocks <= kMax) {
      run<kFirstBlocks, true>();
    } else {
      run<kFirstBlocks, false>();
    }
  }

  template <int kFirstBlocks, bool kEarlyRelease>
  DT_DEVICE void run() const {
    using Loop = TileMainloop<Cfg, kFirstBlocks, kEarlyRelease>;
    Loop loop{ctx, issue_state, release_state, result,
              BScaleFor<Cfg, Loop::kTwoRows>(b_scale_row0, b_scale_row1, kb_begin, kb_end), peer_alive};
    loop.template run<kInitResult>(kb_begin, kb_end);
  }
};

}  // namespace deep_tile
