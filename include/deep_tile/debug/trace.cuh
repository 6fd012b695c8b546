// Per-CTA timeline of one kernel (measurement builds only: DT_TRACE=<any non-zero id>). Each CTA
// stores the global nanosecond timer at fixed points into the module's buffer `dt_trace_buf`
// (CTA c at [c * 8 + point]; its SM at [c * 8 + 7]), which tools/trace_chain.py reads after the
// launch. Give each launch to be told apart its own DT_TRACE value (its own module). Without
// DT_TRACE (or with 0) nothing here is compiled in: the product's kernels are the same instruction for
// instruction (tools/sass_diff.py).
// NOTES: the entry stamp is a global store before the grid-dependency wait; the buffer is the
// module's own, which no other kernel reads or writes, so PDL's rule (nothing the predecessor
// may touch before the wait) still holds.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/address.cuh"

namespace deep_tile::trace {

#if defined(DT_TRACE) && DT_TRACE
#define DT_TRACE_ON 1
constexpr bool kEnabled = true;
#else
constexpr bool kEnabled = false;
#endif

// kPublished: split-K kernels only, when the cluster barrier after the partials' write has
// passed (so kLoopDone -> kPublished is the wait for the cluster's slowest CTA, kPublished ->
// kEnd the reduction and the second barrier).
enum Point { kEntry, kWaited, kFirstData, kLastIssue, kLoopDone, kEnd, kPublished, kNumPoints };
constexpr int kSlots = 8;      // per CTA: the points, then the SM
static_assert(kNumPoints < kSlots, "the SM takes the last slot");
constexpr int kMaxCtas = 1024;

}  // namespace deep_tile::trace

#ifdef DT_TRACE_ON
extern "C" __device__ deep_tile::u64 dt_trace_buf[deep_tile::trace::kMaxCtas * deep_tile::trace::kSlots];
__device__ deep_tile::u64 dt_trace_buf[deep_tile::trace::kMaxCtas * deep_tile::trace::kSlots];
#endif

namespace deep_tile::trace {

template <Point kPoint>
DT_DEVICE void stamp() {
#ifdef DT_TRACE_ON
  if (blockIdx.x < kMaxCtas) {
    const u64 now = ptx::global_timer_ns();
    volatile u64* slot = dt_trace_buf + blockIdx.x * kSlots;
    slot[kPoint] = now;
    if constexpr (kPoint == kEntry) {
      u32 sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      slot[7] = sm;
    }
  }
#endif
}

/// stamp() when `cond` holds (one thread of several).
template <Point kPoint>
DT_DEVICE void stamp_if(bool cond) {
  if constexpr (kEnabled) {
    if (cond) stamp<kPoint>();
  }
}

}  // namespace deep_tile::trace
