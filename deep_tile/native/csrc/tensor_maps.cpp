#include "tensor_maps.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "driver.h"

namespace deep_tile_native {
namespace {

// Bounded like deep_tile.gemm.tma's cache: activations from a caching allocator reuse few addresses.
constexpr size_t kCapacity = 4096;

struct SpecHash {
  size_t operator()(const MapSpec& s) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(s.address);
    mix(s.inner);
    mix(s.outer);
    mix(s.pitch_bytes);
    mix((uint64_t(s.box_inner) << 32) | s.box_outer);
    mix((uint64_t(s.l2_promotion_bytes) << 16) | (uint64_t(s.swizzle_bytes) << 8) | uint64_t(s.element));
    mix(s.slab_rows);
    return static_cast<size_t>(h);
  }
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<MapSpec, CUtensorMap, SpecHash> maps;
  uint64_t hits = 0;
  uint64_t misses = 0;
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: used until the process exits
  return *instance;
}

const char* element_name(Element e) {
  switch (e) {
    case Element::kUint8: return "uint8";
    case Element::kBfloat16: return "bfloat16";
    default: return "float32";
  }
}

CUtensorMapDataType element_type(Element e) {
  switch (e) {
    case Element::kUint8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case Element::kBfloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
}

CUtensorMapL2promotion promotion_mode(uint32_t bytes) {
  switch (bytes) {
    case 64: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case 128: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case 256: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    default: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  }
}

CUtensorMapSwizzle swizzle_mode(uint32_t bytes) {
  switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

void encode(const MapSpec& s, CUtensorMap* out) {
  const bool slab = s.slab_rows > 0;
  const cuuint32_t rank = slab ? 3 : 2;
  const cuuint64_t dims[3] = {s.inner, slab ? s.slab_rows : s.outer, s.outer};
  const cuuint64_t strides[2] = {s.pitch_bytes, s.pitch_bytes};
  const cuuint32_t box[3] = {s.box_inner, s.box_outer, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUresult status = driver().tensor_map_encode_tiled(
      out, element_type(s.element), rank, reinterpret_cast<void*>(s.address), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_mode(s.swizzle_bytes), promotion_mode(s.l2_promotion_bytes),
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    const std::string slab_dim = slab ? std::to_string(s.slab_rows) + ", " : "";
    check(status, std::string("cuTensorMapEncodeTiled(") + element_name(s.element) + ", dims=(" +
                      std::to_string(s.inner) + ", " + slab_dim + std::to_string(s.outer) + "), row pitch=" +
                      std::to_string(s.pitch_bytes) + " B, box=(" + std::to_string(s.box_inner) + ", " +
                      std::to_string(s.box_outer) + (slab ? ", 1" : "") + "), swizzle=" + std::to_string(s.swizzle_bytes) +
                      ", L2 promotion=" + std::to_string(s.l2_promotion_bytes) + ")");
  }
}

}  // namespace

bool MapSpec::operator==(const MapSpec& o) const {
  return address == o.address && inner == o.inner && outer == o.outer && pitch_bytes == o.pitch_bytes &&
         box_inner == o.box_inner && box_outer == o.box_outer && swizzle_bytes == o.swizzle_bytes &&
         l2_promotion_bytes == o.l2_promotion_bytes && element == o.element && slab_rows == o.slab_rows;
}

void encode_tensor_map(const MapSpec& spec, CUtensorMap* out) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.maps.find(spec);
    if (found != c.maps.end()) {
      ++c.hits;
      *out = found->second;
      return;
    }
  }
  encode(spec, out);  // outside the lock: a pure host computation in the driver
  std::lock_guard<std::mutex> lock(c.mutex);
  ++c.misses;
  if (c.maps.size() >= kCapacity) c.maps.clear();
  c.maps.emplace(spec, *out);
}

MapCacheStats tensor_map_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.hits, c.misses, c.maps.size()};
}

void clear_tensor_map_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.maps.clear();
  c.hits = c.misses = 0;
}

}  // namespace deep_tile_native
