#include "gemm_plan.h"

#include <mutex>
#include <unordered_map>

namespace deep_tile_native {
namespace {

struct KeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {k.device, int64_t(k.kind), k.m, k.n, k.k, k.num_groups, k.expected_m, k.sms_limit,
                      int64_t(k.a_scale_row_major), int64_t(k.out_type), int64_t(k.c_kind), int64_t(k.b_scale_1d)}) {
      h = (h ^ uint64_t(v)) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

struct Plans {
  std::mutex mutex;
  std::unordered_map<PlanKey, PlanPtr, KeyHash> map;
};

Plans& plans() {
  static Plans* instance = new Plans();  // never destroyed: used until the process exits
  return *instance;
}

}  // namespace

PlanPtr find_plan(const PlanKey& key) {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto found = p.map.find(key);
  return found == p.map.end() ? nullptr : found->second;
}

void store_plan(const PlanKey& key, PlanPtr plan) {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.map.emplace(key, std::move(plan));
}

size_t plan_count() {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.map.size();
}

void clear_plans() {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.map.clear();
}

}  // namespace deep_tile_native
