// 16-byte asynchronous copies global -> shared (PTX ISA 9.7.9.25 cp.async, the LDGSTS of sm_80+),
// tracked per thread in commit groups.
#pragma once
#include "deep_tile/ptx/address.cuh"

namespace deep_tile::ptx {

/// Copy `src_bytes` (16 or 0) bytes to `smem_dst` and zero-fill the rest of its 16 bytes; `.cg`
/// bypasses L1 (each byte is read once per CTA).
DT_DEVICE void cp_async_16_zfill(void* smem_dst, const void* gmem_src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}

/// The same with `smem_dst` already a shared-memory address (a loop that steps one address).
DT_DEVICE void cp_async_16_zfill(u32 smem_dst, const void* gmem_src, u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

/// Close the group of this thread's copies issued since the last commit (an empty group counts too).
DT_DEVICE void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
DT_DEVICE void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace deep_tile::ptx
