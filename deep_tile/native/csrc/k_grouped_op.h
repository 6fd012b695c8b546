// The native host path of the K-grouped 1D1D GEMM (MoE weight gradients):
// deep_tile::k_grouped_fp8_gemm_1d1d[_out], out[g] = C[g] + A[:, K_g] B[:, K_g]^T with the group
// sizes on the device. The twin of deep_tile.gemm.launch.run_k_grouped: the checks of
// deep_tile.gemm.checks.check_k_grouped_args (any call not certainly valid goes to the Python path, so
// errors are Python's), a plan cached per problem (the sizes are read by the kernel only, so a
// CUDA graph replays with new ones), the operands of deep_tile.gemm.launch.launch_k_grouped, the launch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <tuple>
#include <vector>

#include "gemm_plan.h"

namespace deep_tile_native {

// One call, as deep_tile.gemm.launch.run_k_grouped takes it from the ops: `group_sizes` the int32 [G]
// sizes, `c` the addend (none, out itself, or a tensor apart from out), `accumulate` C is `out`,
// `out` (none: allocated, of `out_dtype`, FP32 when that is none too).
struct KGroupedCall {
  const at::Tensor& a;
  const at::Tensor& a_scale;
  const at::Tensor& b;
  const at::Tensor& b_scale;
  const at::Tensor& group_sizes;
  const std::optional<at::Tensor>& c;
  bool accumulate;
  const std::optional<at::Tensor>& out;
  std::optional<at::ScalarType> out_dtype;
};

// The call's output: `out` when given, else a new [G, m, n] tensor of the output type.
at::Tensor k_grouped_fp8_gemm(const KGroupedCall& call);

// Why a call would leave the native path ("" when it would not); `check_device` false leaves out
// the device rule (so CPU tensors can test every other rule).
const char* k_grouped_fast_check_reason(const KGroupedCall& call, bool check_device);

// For tests (any device): the plan key of a call the fast check takes (device 0, no SM limit) and
// the operands the kernel would get (GROUPED_OPERANDS, then C), `out` given. Throws
// std::invalid_argument naming the reason when the fast check refuses the call.
std::tuple<PlanKey, std::vector<at::Tensor>> k_grouped_operands(const KGroupedCall& call);

}  // namespace deep_tile_native
