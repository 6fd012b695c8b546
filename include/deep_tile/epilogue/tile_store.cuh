// How a persistent kernel's tile leaves the kernel, as a policy type per output variant, chosen at
// compile time (TileStoreFor): the consumer loop makes one store call per tile and knows no variant.
//
//   Bf16TmaStore       bf16 D through shared memory and TMA (the default; with completion signals)
//   HeadStridedStore   the same, each group's rows and columns in D's [rows, G * n] view (kHeadStrided)
//   SwappedStore       swap-AB bf16 D, transposed back, straight from registers
//   F32TmaStore        FP32 D staged per sub-tile, stored or reduce-added by TMA (kTmaF32Store)
//   StagedStore        the K-grouped FP32 D through the storer thread (kStagedEpilogue)
//   KGroupedDirectStore  the K-grouped D[g] (and C[g]) from registers
//   SwappedDirectStore / DirectStore  FP32 D and/or C from registers (kDirectStore)
//   PartialsOnly       split-K: the tile's partial stays in registers for the cluster reduction
//
// Each also says whether the kernel prefetches D's tensor map (kPrefetchTmaD) and what a consumer
// thread waits for after its last tile (finish), and may run a role in the producer warpgroup.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/epilogue/store_bf16.cuh"
#include "deep_tile/epilogue/store_direct.cuh"
#include "deep_tile/epilogue/store_staged.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// A consumer thread's FP32 sums of one tile.
template <class Cfg>
using TileResult = float[Cfg::kNumSubtiles][Cfg::kAccumPerSubtile];

/// What every tile store reads: the kernel's output parameters and this thread's place.
template <class Cfg>
struct StoreArgs {
  u8* smem_d;                  // D's staging (SharedStorage::d)
  u64* epilogue;               // the staged epilogue's barriers (SharedStorage::epilogue)
  const TmaDescriptor* tma_d;
  u8* d;
  int ldd;
  const u8* c;
  int ldc;
  int m, n;                    // rows (per group of the K-grouped kind) and columns of D
  int wg, thread_in_wg;
};

/// Nothing to wait for after the last tile, no role in the producer warpgroup.
template <class Cfg>
struct StoreNothingPending {
  static constexpr bool kPrefetchTmaD = false;
  DT_DEVICE static void finish(int) {}
  DT_DEVICE static void init_barriers(u64*) {}
  DT_DEVICE static void run_producer_role(u8*, u64*, const TmaDescriptor*, const Scheduler<Cfg>&) {}
};

/// The bulk (TMA) stores of the last tile complete before the kernel exits.
template <class Cfg>
struct StoreBulkPending : StoreNothingPending<Cfg> {
  static constexpr bool kPrefetchTmaD = true;
  DT_DEVICE static void finish(int thread_in_wg) {
    if (thread_in_wg == 0) ptx::tma_store_wait_all();
  }
};

template <class Cfg>
struct Bf16TmaStore : StoreBulkPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool row_real,
                       bool first_tile, int) {
    // The previous tile's slab, handed to the signal warp here (SignalsAtNextStore), exists after the first tile.
    store_tile_bf16<Cfg>(o.smem_d, o.tma_d, result, o.wg, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n, row_real, o.d,
                         o.ldd, first_tile ? -1 : 0);
  }
};

/// Bf16TmaStore of the head-strided kernel (Cfg::kHeadStrided): group e's rows are rows
/// m0 - e * m of D's [m, G * n] view (o.m is max_m there), its columns from e * n, so the tile's
/// origin and column bound are moved there and the grouped store's TMA and 16-byte paths apply.
template <class Cfg>
struct HeadStridedStore : StoreBulkPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool row_real,
                       bool, int) {
    const int rows_before = t.expert * o.m, cols_before = t.expert * o.n;
    store_tile_bf16<Cfg>(o.smem_d, o.tma_d, result, o.wg, o.thread_in_wg, t.m0 - rows_before, cols_before + t.n0,
                         t.m_end - rows_before, cols_before + o.n, row_real, o.d, o.ldd, -1);
  }
};

template <class Cfg>
struct SwappedStore : StoreBulkPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool, bool, int) {
    store_tile_swapped<Cfg>(result, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n, o.d, o.ldd);
  }
};

template <class Cfg>
struct F32TmaStore : StoreBulkPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool, bool, int) {
    store_tile_f32_tma<Cfg>(o.smem_d, o.tma_d, result, o.wg, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n);
  }
};

template <class Cfg>
struct StagedStore : StoreNothingPending<Cfg> {
  static constexpr bool kPrefetchTmaD = true;
  u32 ready_phase = 0;  // this warpgroup's parity of its staging's `ready` barrier

  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool, bool,
                       int tile_k_blocks) {
    add_to_staging<Cfg>(o.smem_d, StagedBarriers<Cfg>{o.epilogue}, result, o.wg, o.thread_in_wg, t.m0, t.m_end,
                        tile_k_blocks, ready_phase);
  }
  DT_DEVICE static void init_barriers(u64* epilogue) {
    StagedBarriers<Cfg>{epilogue}.init();
  }
  /// The producer warpgroup's third warp's first lane (the second builds the group table first).
  DT_DEVICE static void run_producer_role(u8* smem_d, u64* epilogue, const TmaDescriptor* tma_d,
                                          const Scheduler<Cfg>& sched) {
    if (threadIdx.x == Cfg::kNumMathThreads + 64) storer_loop<Cfg>(smem_d, StagedBarriers<Cfg>{epilogue}, tma_d, sched);
  }
};

template <class Cfg>
struct KGroupedDirectStore : StoreNothingPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool row_real,
                       bool, int) {
    // into D[g] (and from C[g]): rows g * m on
    const long long rows_before = static_cast<long long>(t.expert) * o.m;
    store_tile_direct<Cfg>(result, o.wg, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n, row_real,
                           o.d + rows_before * o.ldd * (Cfg::kOutKind == 1 ? 4 : 2), o.ldd,
                           o.c + rows_before * o.ldc * (Cfg::kCType == 2 ? 4 : 2), o.ldc);
  }
};

template <class Cfg>
struct SwappedDirectStore : StoreNothingPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool, bool, int) {
    store_tile_swapped_direct<Cfg>(result, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n, o.d, o.ldd, o.c, o.ldc);
  }
};

template <class Cfg>
struct DirectStore : StoreNothingPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>& o, const TileResult<Cfg>& result, const Tile<Cfg>& t, bool row_real,
                       bool, int) {
    store_tile_direct<Cfg>(result, o.wg, o.thread_in_wg, t.m0, t.n0, t.m_end, o.n, row_real, o.d, o.ldd, o.c, o.ldc);
  }
};

/// Split-K: the tile's partial stays in `result`; the kernel body reduces the cluster's partials
/// after the k-loops (splitk_reduce.cuh).
template <class Cfg>
struct PartialsOnly : StoreNothingPending<Cfg> {
  DT_DEVICE void store(const StoreArgs<Cfg>&, const TileResult<Cfg>&, const Tile<Cfg>&, bool, bool, int) {}
};

/// The store of a config's output variant (the first that applies, in this order).
template <class Cfg>
using TileStoreFor = typename If<
    (Cfg::kSplitK > 1), PartialsOnly<Cfg>,
    typename If<Cfg::kTmaF32Store, F32TmaStore<Cfg>,
    typename If<Cfg::kStagedEpilogue, StagedStore<Cfg>,
    typename If<Cfg::kKGrouped, KGroupedDirectStore<Cfg>,
    typename If<Cfg::kDirectStore && Cfg::kSwapAB, SwappedDirectStore<Cfg>,
    typename If<Cfg::kDirectStore, DirectStore<Cfg>,
    typename If<Cfg::kSwapAB, SwappedStore<Cfg>,
    typename If<Cfg::kHeadStrided, HeadStridedStore<Cfg>, Bf16TmaStore<Cfg>>::type>::type>::type>::type>::type>::type>::type>::type;

}  // namespace deep_tile
