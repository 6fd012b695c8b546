// Completion signals of the masked kind (SGLang's single-batch overlap; Cfg::kSignal): after a
// consumer warpgroup's rows of a tile are stored and visible at GPU scope, 1 is added to the counter
// of its kWgM-row slab. A policy type per mode, chosen at compile time (SignalsFor), gives the
// kernel body its three hooks: what the set-up publishes, what the producer warpgroup's spare warp
// runs, and what a consumer warpgroup does after its last tile. The store itself raises the
// counters of mode 1 and hands slabs off in mode 2 (store_bf16.cuh).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The completion counters of the signalling masked kernel (Cfg::kSignal): ceil(rows / kWgM)
/// counters per expert, whose slab of `rows` rows (max_m) starts at row expert * rows of D. The
/// pointer and `rows` are kept in spare words after the group table in shared memory, written
/// once by the set-up thread (publish) and read where a counter is added (at).
/// NOTES: any value of them held across the k-loop (the kernel parameter, an index computed before
/// the epilogue, even the table's address in SharedStorage) made ptxas 13 spill 4-300 bytes in
/// signalling builds from 64x128 to 128x256; found from the staging address after the stores,
/// nothing is.
struct SignalCounters {
  static constexpr int kWord = 3 * kMaxTableGroups + 1;  // first spare word of the group table
  static_assert(kGroupTableBytes >= (kWord + 3) * 4 && kWord % 2 == 1,
                "the group table needs 3 spare words after its entries: rows, then an 8-byte aligned pointer");

  static DT_DEVICE void publish(int* table, int* counters, int rows) {
    table[kWord] = rows;
    *reinterpret_cast<int**>(table + kWord + 1) = counters;
  }

  /// Add 1, with a release at GPU scope, to the counter of the kWgM-row slab starting at row
  /// `row0` of D (`table_bytes`: the group table). The caller has made the slab's writes its own:
  /// completed bulk stores of this thread (the proxy fence orders them before the generic
  /// release), or other threads' stores before a barrier with them (the release is cumulative).
  template <int kWgM>
  static DT_DEVICE void raise(const u8* table_bytes, int row0) {
    const int* table = reinterpret_cast<const int*>(table_bytes);
    const int rows = *reinterpret_cast<const volatile int*>(table + kWord);
    int* const counters = *reinterpret_cast<int* const volatile*>(table + kWord + 1);
    raise_at<kWgM>(counters, rows, row0);
  }
  /// raise() with the counters and `rows` given (the signal warp of kSignal == 2 holds them).
  template <int kWgM>
  static DT_DEVICE void raise_at(int* counters, int rows, int row0) {
    const int expert = row0 / rows;
    ptx::fence_proxy_async_global();
    ptx::red_release_gpu_add(counters + expert * ceil_div(rows, kWgM) + (row0 - expert * rows) / kWgM, 1);
  }
};

/// Cfg::kSignal == 2: the consumer warpgroups hand each stored slab to the signal warp (a warp of
/// the producer warpgroup, signal_loop), which raises its counter. Per consumer warpgroup `wg`, two
/// named barriers pair its threads with the signal warp: `ready` (the warpgroup's
/// previous tile is stored: its bulk stores completed, its direct stores ordered by the warpgroup's
/// barrier) and `done` (the signal warp has raised it; the first one given at the start), so a
/// warpgroup is at most one tile ahead of the signal warp and the two barriers alternate.
/// NOTES: bar.arrive orders the arriving warp's earlier accesses before those after the bar.sync
/// that completes the barrier, and the signal warp's release is cumulative: a reader that
/// acquires the counter sees the slab.
struct SignalHandOff {
  // ids 4 + wg and 6 + wg (1-3 are taken); the warpgroup's 128 threads and the signal warp's 32.
  static constexpr u32 kReady = 4, kDone = 6, kThreads = 160;

  /// Consumer warpgroup `wg` (all its threads): its previous tile is stored.
  /// NOTES: every thread of the warpgroup takes part, so no branch of the consumer's code holds a
  /// barrier: with only its first warp in them (a branch on the thread index around them), ptxas
  /// kept the next k-loop's WGMMA descriptors in regular registers (R2UR per WGMMA).
  static DT_DEVICE void pass(int wg, int thread_in_wg) {
    if (thread_in_wg == 0) ptx::fence_proxy_async_global();  // its bulk stores, for the generic release
    ptx::named_barrier_sync(kDone + wg, kThreads);
    ptx::named_barrier_arrive(kReady + wg, kThreads);
  }
  /// After the warpgroup's last pass: the signal warp's last `done`.
  static DT_DEVICE void finish(int wg) { ptx::named_barrier_sync(kDone + wg, kThreads); }
};

/// Cfg::kSignal == 2: the signal warp (one warp of the producer warpgroup) raises the counter of each
/// consumer warpgroup's slab of each of this CTA's tiles, in the consumers' order, as each is
/// handed off (SignalHandOff); a slab with no real row is handed off and not raised.
template <class Cfg>
DT_DEVICE void signal_loop(const Scheduler<Cfg>& sched, int* counters, int group_rows, int lane) {
  using HandOff = SignalHandOff;
#pragma unroll
  for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) ptx::named_barrier_arrive(HandOff::kDone + wg, HandOff::kThreads);
  const WorkRange work = sched.work();
  for (int index = work.first; index < sched.num_tiles; index += work.step) {
    const Tile<Cfg> tile = sched.tile(index);
    if (!sched.has_work(tile)) continue;
#pragma unroll
    for (int wg = 0; wg < Cfg::kNumMathWarpgroups; ++wg) {
      ptx::named_barrier_sync(HandOff::kReady + wg, HandOff::kThreads);
      const int row0 = tile.m0 + wg * Cfg::kWgM;
      if (lane == 0 && row0 < tile.m_end) SignalCounters::raise_at<Cfg::kWgM>(counters, group_rows, row0);
      __syncwarp();
      ptx::named_barrier_arrive(HandOff::kDone + wg, HandOff::kThreads);
    }
  }
}

/// No completion signals (every kernel but the signalling masked one). The hooks the bf16 store
/// calls (store_bf16.cuh) are each mode's: the wait before the staging slab is reused, the
/// hand-off of the previous slab, and the raise after a slab's direct or TMA store.
struct NoSignals {
  DT_DEVICE static void publish(int*, int*, int, int) {}
  template <class Cfg>
  DT_DEVICE static void run_signal_warp(const Scheduler<Cfg>&, int*, int) {}
  template <class Cfg>
  DT_DEVICE static void after_last_tile(const Scheduler<Cfg>&, int, int) {}
  /// Thread 0 of a warpgroup: the previous store has finished reading the staging slab.
  DT_DEVICE static void wait_staging_free() { ptx::tma_store_wait_read<0>(); }
  DT_DEVICE static void hand_off_previous(int, int, int) {}
  template <int kWgM>
  DT_DEVICE static void after_direct_slab(const u8*, int, u32, int, int) {}
  template <int kWgM>
  DT_DEVICE static void after_tma_slab(const u8*, int, int) {}
};

/// Mode 1: the storing thread raises each slab's counter right after the slab's store; the
/// set-up publishes the counters beside the group table, where the store finds them.
struct SignalsAfterStore : NoSignals {
  DT_DEVICE static void publish(int* table, int* counters, int rows, int lane) {
    if (lane == 0) SignalCounters::publish(table, counters, rows);
  }
  /// Every thread of the warpgroup, after its direct stores of `rows` rows from `row0`.
  /// NOTES: the barrier orders every thread's stores before thread 0's release, which is
  /// cumulative: a reader that acquires the count sees them all (PTX memory model, causality
  /// order through bar.sync). `rows` is the same in every thread of the warpgroup.
  template <int kWgM>
  DT_DEVICE static void after_direct_slab(const u8* table_bytes, int thread_in_wg, u32 barrier_id, int rows,
                                          int row0) {
    if (rows > 0) {
      ptx::named_barrier_sync(barrier_id, 128);
      if (thread_in_wg == 0) SignalCounters::raise<kWgM>(table_bytes, row0);
    }
  }
  /// Thread 0, after committing the slab's TMA stores: their writes complete (wait_group without
  /// .read: written, not only read from shared memory), then the raise.
  template <int kWgM>
  DT_DEVICE static void after_tma_slab(const u8* table_bytes, int rows, int row0) {
    if (rows > 0) {
      ptx::tma_store_wait_all();
      SignalCounters::raise<kWgM>(table_bytes, row0);
    }
  }
};

/// Mode 2: a warp of the producer warpgroup raises the counters as the consumers hand the slabs
/// over at their next store (SignalHandOff), the last one after the consumer's loop.
/// NOTES: the signal warp takes the counters from the kernel parameter: published beside the table,
/// they made ptxas move the consumers' WGMMA descriptors out of uniform registers (slower).
struct SignalsAtNextStore : NoSignals {
  /// The producer warpgroup's third warp (the first issues the loads, the second builds the table).
  template <class Cfg>
  DT_DEVICE static void run_signal_warp(const Scheduler<Cfg>& sched, int* counters, int rows) {
    if (threadIdx.x / 32 == Cfg::kNumMathWarps + 2) signal_loop<Cfg>(sched, counters, rows, threadIdx.x % 32);
  }
  template <class Cfg>
  DT_DEVICE static void after_last_tile(const Scheduler<Cfg>& sched, int wg, int thread_in_wg) {
    if (sched.work().first < sched.num_tiles) {
      ptx::named_barrier_sync(1 + wg, 128);  // the last tile's direct stores, before the hand-off
      SignalHandOff::pass(wg, thread_in_wg);
    }
    SignalHandOff::finish(wg);
  }
  /// The previous store completed, its writes visible, before its slab is handed off.
  DT_DEVICE static void wait_staging_free() { ptx::tma_store_wait_all(); }
  /// The previous tile's slab (`prev_row0` >= 0): its TMA stores completed (wait_staging_free),
  /// its direct stores ordered by the warpgroup's barrier.
  DT_DEVICE static void hand_off_previous(int prev_row0, int wg, int thread_in_wg) {
    if (prev_row0 >= 0) SignalHandOff::pass(wg, thread_in_wg);
  }
};

template <class Cfg>
using SignalsFor = typename If<Cfg::kSignal == 1, SignalsAfterStore,
                               typename If<Cfg::kSignal == 2, SignalsAtNextStore, NoSignals>::type>::type;

}  // namespace deep_tile
