// Position in a ring of `kNumStages` shared-memory stages, each guarded by a full and an empty
// mbarrier. Producer and consumers walk the same sequence of (index, phase) pairs.
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile {

template <int kNumStages>
struct PipelineState {
  int index = 0;  // stage in [0, kNumStages)
  u32 phase = 0;  // parity of the barrier phase this pass over the ring waits for

  /// Consumers wait for the full barrier's current phase.
  DT_DEVICE u32 full_parity() const { return phase; }
  /// The producer waits on the empty barrier with the opposite parity: on the first pass the
  /// "previous" phase of a fresh barrier counts as completed, so empty stages do not block.
  DT_DEVICE u32 empty_parity() const { return phase ^ 1u; }

  /// Position in a ring of twice the stages that producer and consumers walk in step with this
  /// one (the 1D1D kernels' b_scale slots, Fp8GemmConfig::kBScaleSlots).
  DT_DEVICE int ring2_index() const { return phase ? index + kNumStages : index; }

  DT_DEVICE void advance() {
    if (++index == kNumStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace deep_tile
