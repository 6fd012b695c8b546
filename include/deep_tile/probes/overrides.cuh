// Measurement-only overrides of the FP8 GEMM's tuned choices, for benchmarks/probes/ and tools/.
//
// The library never sets these macros. A build that passes extra defines (launch.py's and the
// planner's `extra_defines`) also gets DT_PROBE_OVERRIDES, and only then does the GEMM's entry
// include this header and compile ProbeOverrides<Cfg> instead of Cfg: each member redefined here
// hides the config's own, so a probe changes one choice without the product headers knowing of it.
// With none of the macros below set, ProbeOverrides<Cfg> is the config, instruction for instruction.
//
//   DT_PREFETCH_D_MAX_KBLOCKS  k-blocks up to which the reduce-add's D is asked of L2 ahead (0: never)
//   DT_PREFETCH_D_AHEAD        k-blocks before the tile's last one that the request goes out
//   DT_REDUCE_AS_STORE         1: the reduce-add stores its sums instead (a wrong D: the write-only bound)
//   DT_STAGED_REDUCE_MIN_KBLOCKS  the staged epilogue's reduce-add threshold (0: always, 1000: never)
//   DT_LOOP_SETS_RESULT        1 / 0: every kind that can sets its result in the k-loop / none does
//   DT_L2_PREFETCH_KBLOCKS     the dense kind's weight k-blocks asked of L2 before the PDL wait
//   DT_PRESCALE_GROUPS         the 1D1D one-buffer k-loop's 4-float groups scaled under the WGMMAs
//   DT_C_LOAD_ROWS             rows of a sub-tile whose C the direct store loads before storing
//   DT_C_LOAD_PAIRS            column pairs of such a row loaded at a time
//   DT_ONE_RING                0 / 1: the one-buffer 1D2D k-loop releases by the issued stage never / always
//   DT_B_SCALE_RING            0 / 1: the 1D1D b_scale ring (early release) never / always
//   DT_TILE_SLOTS              0: the consumers decode the group table themselves
//   DT_PARTIAL_TMA             0: a grouped kind's partial slabs go by 16-byte stores, not TMA
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile::probes {

template <class Cfg>
struct ProbeOverrides : Cfg {
#ifdef DT_PREFETCH_D_MAX_KBLOCKS
  static constexpr int kPrefetchDMaxKBlocks = Cfg::kTmaF32Reduce ? DT_PREFETCH_D_MAX_KBLOCKS : 0;
#endif
#ifdef DT_PREFETCH_D_AHEAD
  static constexpr int kPrefetchDAhead = DT_PREFETCH_D_AHEAD;
#endif
#ifdef DT_REDUCE_AS_STORE
  static constexpr bool kReduceAsStore = DT_REDUCE_AS_STORE != 0;
#endif
#ifdef DT_STAGED_REDUCE_MIN_KBLOCKS
  static constexpr int kStagedReduceMinKBlocks = DT_STAGED_REDUCE_MIN_KBLOCKS;
#endif
#ifdef DT_LOOP_SETS_RESULT
  static constexpr bool kLoopSetsResult = Cfg::kLoopSetsResultPossible && DT_LOOP_SETS_RESULT != 0;
#endif
#ifdef DT_L2_PREFETCH_KBLOCKS
  static constexpr int kL2PrefetchKBlocks = Cfg::kProblemKind == ProblemKind::kDense ? DT_L2_PREFETCH_KBLOCKS : 0;
#endif
#ifdef DT_PRESCALE_GROUPS
  static constexpr int kPreScaleGroups =
      Cfg::kBScale1D && Cfg::kNumAccumBuffers == 1 ? min_int(DT_PRESCALE_GROUPS, Cfg::kAccumPerSubtile / 4) : 0;
#endif
#ifdef DT_C_LOAD_ROWS
  static constexpr int kCLoadRows = DT_C_LOAD_ROWS;
#endif
#ifdef DT_C_LOAD_PAIRS
  static constexpr int kCLoadPairs = DT_C_LOAD_PAIRS;
  DT_STATIC_ASSERT((Cfg::kAccumPerSubtile / 4) % kCLoadPairs == 0,
                   "DT_C_LOAD_PAIRS must divide a sub-tile's column pairs");
#endif
#ifdef DT_ONE_RING
  static constexpr bool kOneRingState = DT_ONE_RING != 0 && Cfg::kNumAccumBuffers == 1 && !Cfg::kBScale1D;
  DT_STATIC_ASSERT(!Cfg::kStaticRing || !kOneRingState, "DT_ONE_RING=1 excludes DT_STATIC_RING");
#endif
#ifdef DT_B_SCALE_RING
  // The ring's slot choice (kBScaleSlotAtIssue) follows the ring, as the config derives it.
  static constexpr int kEarlyReleaseMaxKBlocks =
      Cfg::kBScale1D && DT_B_SCALE_RING != 0 ? Cfg::kEarlyReleaseAlways : Cfg::kEarlyReleaseNever;
  static constexpr bool kBScaleRing = kEarlyReleaseMaxKBlocks != Cfg::kEarlyReleaseNever;
  static constexpr bool kBScaleSlotAtIssue = kBScaleRing && Cfg::kNumMulticast == 2 && Cfg::kNumSubtiles > 1;
#endif
#ifdef DT_TILE_SLOTS
  static constexpr bool kTileSlots = DT_TILE_SLOTS != 0 && uses_tile_slots(Cfg::kProblemKind);
#endif
#ifdef DT_PARTIAL_TMA
  static constexpr bool kPartialTma = DT_PARTIAL_TMA != 0;
#endif
};

}  // namespace deep_tile::probes
