// TMA (bulk tensor copy) wrappers: PTX ISA 9.7.9.25 cp.async.bulk.tensor, cp.async.bulk.commit_group /
// wait_group, prefetch.tensormap, cp.async.bulk.prefetch(.tensor) (L2), and the generic<->async proxy fence.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/mbarrier.cuh"

namespace deep_tile::ptx {

DT_DEVICE void tma_prefetch_descriptor(const TmaDescriptor* desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(desc)) : "memory");
}

/// Ask L2 for the 2-D box of `desc` at (c0, c1) (no shared memory, no barrier). L2 is the point
/// of coherence of global memory, so the lines hold the latest values even if another grid
/// writes them later.
DT_DEVICE void tma_prefetch_2d_l2(const TmaDescriptor* desc, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(reinterpret_cast<u64>(desc)),
               "r"(c0), "r"(c1)
               : "memory");
}

/// Ask L2 for `bytes` (a multiple of 16) of global memory from `src` (16-byte aligned): one
/// instruction for a whole run, no shared memory, no barrier.
DT_DEVICE void bulk_prefetch_l2(const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<u64>(src)), "r"(bytes) : "memory");
}

/// 2-D tile load into this CTA's shared memory; completes `bytes` on `bar`.
/// c0 is the innermost (contiguous) coordinate, c1 the row.
DT_DEVICE void tma_load_2d(void* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

/// 3-D tile load (c2 the outermost coordinate, e.g. a batch index; out-of-bounds elements of each
/// dimension load as zero, so a box never reads the next batch's rows).
DT_DEVICE void tma_load_3d(void* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/// L2 cache policies for the `_hinted` loads (PTX createpolicy): lines loaded evict-first are the
/// first replaced, evict-last the last.
DT_DEVICE u64 l2_policy_evict_first() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
DT_DEVICE u64 l2_policy_evict_last() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

/// tma_load_2d with an L2 cache policy (from l2_policy_*).
DT_DEVICE void tma_load_2d_hinted(void* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

/// 2-D tile load multicast to every CTA in `cta_mask`: data and complete_tx land at the same
/// shared-memory offsets in each destination CTA.
DT_DEVICE void tma_load_2d_multicast(void* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1,
                                     u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

/// tma_load_2d_multicast with an L2 cache policy (from l2_policy_*).
DT_DEVICE void tma_load_2d_multicast_hinted(void* dst, const TmaDescriptor* desc, u64* bar, int c0, int c1,
                                            u16 cta_mask, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5, %6;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask), "l"(policy)
      : "memory");
}

/// 2-D tile store from shared memory; elements outside the tensor are not written.
DT_DEVICE void tma_store_2d(const TmaDescriptor* desc, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<u64>(desc)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}

/// 3-D tile store from shared memory (c0 innermost); elements outside the tensor are not written.
DT_DEVICE void tma_store_3d(const TmaDescriptor* desc, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<u64>(desc)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

/// 2-D tile reduce-add from shared memory into the tensor (PTX ISA 9.7.9.27
/// cp.reduce.async.bulk.tensor, .add on FP32): each element of the box is added to the one in
/// global memory by the memory system; elements outside the tensor are not touched.
DT_DEVICE void tma_reduce_add_2d(const TmaDescriptor* desc, const void* src, int c0, int c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<u64>(desc)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}

DT_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

/// Wait until at most N committed store groups of this thread still read shared memory.
template <int N>
DT_DEVICE void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/// Wait until every committed store group of this thread has fully completed.
DT_DEVICE void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

/// Order this thread's generic-proxy shared-memory writes before later async-proxy reads
/// (TMA store, wgmma) and vice versa.
DT_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/// Order this thread's completed async-proxy global writes (TMA stores waited for with
/// tma_store_wait_all) before its later generic-proxy accesses (a release that publishes them).
DT_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

/// `*counter += value` as a release at GPU scope (PTX red.release.gpu): every write this thread
/// has performed or observed (a named barrier's other threads' included) is visible to a thread
/// that reads the new value with an acquire.
DT_DEVICE void red_release_gpu_add(int* counter, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(counter), "r"(value) : "memory");
}

/// Tensor maps written in global memory on the device (PTX ISA tensormap.replace, sm_90a): the
/// field of the map at `desc` (64-byte aligned, global) replaced; a generic-proxy write.
DT_DEVICE void tensormap_replace_address(TmaDescriptor* desc, const void* address) {
  asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(reinterpret_cast<u64>(desc)),
               "l"(reinterpret_cast<u64>(address))
               : "memory");
}
/// Dimension 0 (contiguous) and 1 (rows) of a 2-D map, in elements.
DT_DEVICE void tensormap_replace_dims(TmaDescriptor* desc, u32 inner, u32 outer) {
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %1;" ::"l"(reinterpret_cast<u64>(desc)),
               "r"(inner)
               : "memory");
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;" ::"l"(reinterpret_cast<u64>(desc)),
               "r"(outer)
               : "memory");
}
/// The row pitch of a 2-D map in bytes (a multiple of 16).
DT_DEVICE void tensormap_replace_row_pitch(TmaDescriptor* desc, u64 bytes) {
  asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %1;" ::"l"(reinterpret_cast<u64>(desc)),
               "l"(bytes)
               : "memory");
}
/// This thread's tensor-map writes ordered before any later tensor-map-proxy use at GPU scope.
DT_DEVICE void tensormap_release() { asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory"); }
/// The map at `desc` (global) as written by a released tensormap_replace_* before this thread's TMA uses it.
DT_DEVICE void tensormap_acquire(const TmaDescriptor* desc) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(reinterpret_cast<u64>(desc)) : "memory");
}

}  // namespace deep_tile::ptx
