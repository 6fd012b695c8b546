// Handing a consumed stage back to the producer (both CTAs' barriers under multicast), and the
// 1D1D b_scale slot of a pipeline position.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"

namespace deep_tile {

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

}  // namespace deep_tile
