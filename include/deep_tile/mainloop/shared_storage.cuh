// The GEMM kernels' shared memory, cut into its regions, and what a consumer warpgroup's k-loop
// keeps for every tile.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

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

}  // namespace deep_tile
