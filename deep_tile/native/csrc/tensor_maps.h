// 2-D tiled TMA descriptors (CUtensorMap), and the 3-D slab view of deep_tile.gemm.kernel_args.TensorMap,
// encoded by the driver and cached by everything that goes into them (the parameters and error
// message of deep_tile/gemm/tma.py, which encodes them for the Python path).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace deep_tile_native {

enum class Element : uint32_t { kUint8 = 0, kBfloat16 = 1, kFloat32 = 2 };

struct MapSpec {
  uint64_t address;
  uint64_t inner;          // contiguous dimension, elements
  uint64_t outer;          // rows
  uint64_t pitch_bytes;    // row pitch
  uint32_t box_inner;
  uint32_t box_outer;
  uint32_t swizzle_bytes;       // 0, 32, 64 or 128
  uint32_t l2_promotion_bytes;  // 0, 64, 128 or 256: what an L2 miss fetches
  Element element;
  uint32_t slab_rows = 0;  // > 0: dims (inner, slab_rows, outer), both outer strides pitch_bytes, box (.., .., 1)

  bool operator==(const MapSpec& other) const;
};

// Writes the descriptor of `spec` to `out`, from the cache when it holds one. Thread-safe.
// Throws DriverError naming the parameters when the driver refuses them.
void encode_tensor_map(const MapSpec& spec, CUtensorMap* out);

struct MapCacheStats {
  uint64_t hits;
  uint64_t misses;
  size_t size;
};

MapCacheStats tensor_map_cache_stats();
void clear_tensor_map_cache();

}  // namespace deep_tile_native
