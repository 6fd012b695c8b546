// What the native path needs to launch the FP8 GEMM for one problem: the kernel, its launch
// geometry, its tensor-map boxes and its argument order. Built by Python
// (deep_tile/native/bridge.py, from deep_tile.gemm's plan and deep_tile.kernels.fp8_gemm's
// contract) on the first call of a problem, then cached here.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deep_tile_native {

// Kernel parameters the native path knows how to fill; the bridge maps the contract's names
// (deep_tile.kernels.fp8_gemm.ARGUMENTS) onto these codes, in the kernel's order.
enum class Arg : uint8_t { kTmaA = 0, kTmaB, kTmaAScale, kTmaD, kBScale, kD, kLdd, kM, kN, kK, kGroupSize, kCount };

struct Box {
  uint32_t inner = 0;
  uint32_t outer = 0;
};

struct GemmPlan {
  bool python_only = false;  // the bridge could not describe the launch: run the Python path
  CUkernel kernel = nullptr;
  std::string symbol;
  std::string label;  // the problem and config, for the DEEP_TILE_DEBUG report
  uint32_t grid = 0, block = 0, smem = 0, cluster = 1;
  Box a, b, a_scale, d;
  uint32_t d_swizzle = 0;
  bool store_d_map = true;  // false under split-K: the kernel gets a zeroed D map
  bool a_scale_row_major = false;  // the kernel reads a row-major a_scale (4-group boxes)
  int32_t group_size = 0;
  std::vector<Arg> args;
  mutable std::atomic<bool> reported{false};  // first launch timed and reported (deep_tile.phases)
};

// A plan is a function of the problem shape, the device and the SM limit; strides and
// addresses only enter the tensor maps, which are cached by value (tensor_maps.h).
struct PlanKey {
  int64_t device, m, n, k, sms_limit;
  bool a_scale_row_major;  // a kernel variant of the same problem
  bool operator==(const PlanKey& o) const {
    return device == o.device && m == o.m && n == o.n && k == o.k && sms_limit == o.sms_limit &&
           a_scale_row_major == o.a_scale_row_major;
  }
};

using PlanPtr = std::shared_ptr<const GemmPlan>;

PlanPtr find_plan(const PlanKey& key);  // nullptr when absent; thread-safe
void store_plan(const PlanKey& key, PlanPtr plan);
size_t plan_count();
void clear_plans();

}  // namespace deep_tile_native
