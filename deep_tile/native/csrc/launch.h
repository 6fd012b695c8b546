// What every native op does once it has a problem: find (or make) its plan, walk the plan's
// argument specs over the call's operands (fill_params, the twin of
// deep_tile.gemm.kernel_args.pack_values), launch with cuLaunchKernelEx on the current stream, and
// count the calls of each path (the module's stats()).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "gemm_plan.h"

namespace deep_tile_native {

// The call's tensors in its family contract's operand order (deep_tile/kernels/fp8_gemm.py:
// OPERANDS for the dense kind, GROUPED_OPERANDS for the grouped ones). A spec naming an operand
// past `count` is refused when the plan is made (bridge) and here.
struct Operands {
  std::array<const at::Tensor*, kMaxOperands> tensors{};
  int count = 0;
};

// The plan of `key`: from the plan cache, else made by `make()` (Python: full checks, selection,
// kernel, specs) and stored.
template <typename Make>
PlanPtr cached_plan(const PlanKey& key, Make&& make);

// Launches `plan` over `operands` on the current stream of operands[0]'s device (a device guard
// must be active). A driver failure raises deep_tile.errors.LaunchError (as a Python exception).
void launch_plan(const GemmPlan& plan, const Operands& operands);

// Counters of this process (every op): calls launched natively, calls handed to the Python path,
// plans made, a_scale copies made.
struct GemmStats {
  uint64_t native_calls;
  uint64_t python_calls;
  uint64_t plans_created;
  uint64_t a_scale_copies;
};
GemmStats gemm_stats();
void reset_gemm_stats();
void count_native_call();
void count_python_call();
void count_plan_created();
void count_a_scale_copy();

template <typename Make>
PlanPtr cached_plan(const PlanKey& key, Make&& make) {
  PlanPtr plan = find_plan(key);
  if (plan == nullptr) {
    plan = make();
    store_plan(key, plan);
    count_plan_created();
  }
  return plan;
}

}  // namespace deep_tile_native
