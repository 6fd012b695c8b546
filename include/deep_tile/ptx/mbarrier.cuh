// mbarrier wrappers (PTX ISA 9.7.13.15 "Parallel Synchronization and Communication
// Instructions: mbarrier") plus the cluster barrier and shared-address helpers.
#pragma once
#include "deep_tile/ptx/address.cuh"

// DT_WATCHDOG=1 (DEEP_TILE_WATCHDOG=1 at run time) builds a variant whose barrier waits trap
// after kWaitTimeoutNs instead of hanging. Off by default: even polling the timer once per
// 1024 failed polls cost 5-10% on several configs (measured on H200, nvrtc 13.0).
#ifndef DT_WATCHDOG
#define DT_WATCHDOG 0
#endif

namespace deep_tile::ptx {

// A wait longer than this is a bug (wrong phase, wrong tx count): the watchdog build traps instead
// of hanging the GPU forever. The host then sees "unspecified launch failure".
constexpr u64 kWaitTimeoutNs = 10000000000ull;

DT_DEVICE void mbarrier_init(u64* bar, u32 arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count));
}

/// Copy 4 bytes global -> shared without waiting for them (PTX ISA 9.7.9.25 cp.async); completion
/// is tracked by cp_async_mbarrier_arrive_noinc.
DT_DEVICE void cp_async_4(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}

/// Arrive on `bar` once every cp.async this thread issued before has landed (PTX ISA 9.7.9.25.3.2
/// cp.async.mbarrier.arrive). `.noinc`: the arrival counts against the count the barrier was
/// initialised with, so that count includes it.
DT_DEVICE void cp_async_mbarrier_arrive_noinc(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

DT_DEVICE bool mbarrier_try_wait(u32 bar_addr, u32 parity) {
  u32 done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar_addr), "r"(parity)
      : "memory");
  return done != 0;
}

/// Block until the phase with the given parity has completed, the barrier given by its shared address
/// (the watchdog build traps after kWaitTimeoutNs).
/// NOTES: the timer is read once per 1024 failed polls; reading %globaltimer on every poll
/// delayed the waiter's reaction to the flip and cost 10-15% on some configs (measured, H200).
DT_DEVICE void mbarrier_wait_at(u32 addr, u32 parity) {
  if (mbarrier_try_wait(addr, parity)) return;
#if DT_WATCHDOG
  u32 polls = 0;
  u64 start = 0;
  while (!mbarrier_try_wait(addr, parity)) {
    if ((++polls & 1023u) == 0) {
      const u64 now = global_timer_ns();
      if (start == 0) {
        start = now;
      } else if (now - start > kWaitTimeoutNs) {
        asm volatile("trap;");
      }
    }
  }
#else
  while (!mbarrier_try_wait(addr, parity)) {
  }
#endif
}

/// mbarrier_wait_at on a barrier in shared memory.
DT_DEVICE void mbarrier_wait(u64* bar, u32 parity) { mbarrier_wait_at(smem_addr(bar), parity); }

/// One arrival plus `tx_bytes` expected transaction bytes (producer side of a TMA stage).
DT_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(tx_bytes)
               : "memory");
}

/// mbarrier_arrive on a barrier's shared address.
DT_DEVICE void mbarrier_arrive_at(u32 addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");
}

DT_DEVICE void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/// Arrive on the barrier at the same offset in the shared memory of cluster CTA `cta_rank`.
/// NOTES: default (.release.cta) semantics on purpose. The arrival only says "this stage has been
/// read" (the wgmmas that read it have completed); nothing written here must become visible to
/// the peer. A `.release.cluster` arrival fences at cluster scope and, executed by every consumer
/// warp once per k-block, halved the throughput of multicast configs (measured on H200).
DT_DEVICE void mbarrier_arrive_cluster(u64* bar, u32 cta_rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n"
      " mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(cta_rank)
      : "memory");
}

/// Make barrier initialisation visible to the async proxy (TMA) and to the other cluster CTAs.
DT_DEVICE void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

DT_DEVICE u32 cluster_cta_rank() {
  u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/// Address of the same shared-memory location in the CTA of cluster rank `cta_rank`.
DT_DEVICE u32 map_to_cluster_rank(const void* ptr, u32 cta_rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(ptr)), "r"(cta_rank));
  return remote;
}

/// Four floats from a (possibly remote) shared::cluster address (16-byte aligned).
DT_DEVICE void load_cluster_f32x4(u32 cluster_addr, float (&v)[4]) {
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "r"(cluster_addr)
               : "memory");
}

/// Full barrier over every thread of every CTA in the cluster.
DT_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

/// Cluster barrier that orders no memory: for a thread with nothing to publish, e.g. one whose
/// reads of a peer's shared memory have all returned (their values were used) before it arrives.
/// NOTES: the release form compiles to MEMBAR.ALL.GPU, which also waits for the thread's global
/// stores to complete.
DT_DEVICE void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait;" ::: "memory");
}

/// Named barrier `id` (1..15; 0 is __syncthreads) over `num_threads` threads.
DT_DEVICE void named_barrier_sync(u32 id, u32 num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

/// Arrive on named barrier `id` over `num_threads` threads without waiting (PTX bar.arrive): the
/// memory accesses before it are ordered before those after a bar.sync that completes the barrier.
DT_DEVICE void named_barrier_arrive(u32 id, u32 num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

/// named_barrier_sync that also counts the threads arriving with `pred` true (PTX barrier.red.popc).
DT_DEVICE int named_barrier_popc(u32 id, u32 num_threads, bool pred) {
  int count;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\nbarrier.cta.red.popc.aligned.u32 %0, %1, %2, p;\n}"
      : "=r"(count)
      : "r"(id), "r"(num_threads), "r"(static_cast<u32>(pred))
      : "memory");
  return count;
}

}  // namespace deep_tile::ptx
