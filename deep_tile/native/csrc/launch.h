// The launch of a plan over a call's operands: walk the plan's argument specs (fill_params, as
// deep_tile.gemm.kernel_args.pack_values walks them in Python), launch with cuLaunchKernelEx on
// the current stream, and count the calls of each path (the module's stats()).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "gemm_plan.h"

namespace deep_tile_native {

// The kernel's operands in its family contract's order (deep_tile/kernels/fp8_gemm.py: OPERANDS
// for the dense kind, GROUPED_OPERANDS for the grouped ones, then C). A spec naming an operand
// past `count` is refused here.
struct Operands {
  std::array<const at::Tensor*, kMaxOperands> tensors{};
  int count = 0;
};

// Launches `plan` over `operands` on the current stream of operands[0]'s device (a device guard
// must be active). A driver failure raises deep_tile.errors.LaunchError (as a Python exception).
void launch_plan(const GemmPlan& plan, const Operands& operands);

// Counters of this process (every op): calls launched natively, calls Python answered (an error,
// or no rows), plans made, scale copies made.
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

}  // namespace deep_tile_native
