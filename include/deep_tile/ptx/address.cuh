// Address-space helpers (PTX ISA 9.7.9.20 cvta) and the global nanosecond timer.
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile::ptx {

/// Shared-window address of a generic pointer into shared memory.
/// NOTES: the compiler intrinsic (not an asm cvta) lets ptxas fold `ptr + constant` into an
/// immediate offset; an opaque asm result per address kept ~10 extra registers alive.
DT_DEVICE u32 smem_addr(const void* ptr) { return static_cast<u32>(__cvta_generic_to_shared(ptr)); }

DT_DEVICE u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace deep_tile::ptx
