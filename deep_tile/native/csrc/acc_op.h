// The native host path of the dense GEMM's output variants and of the 1D1D GEMM (training):
// deep_tile::fp8_gemm_acc[_out] and fp8_gemm_1d1d[_out], out = C + A.B^T in bf16 or FP32. The
// twin of deep_tile.gemm.launch.run_acc: the checks of deep_tile.gemm.checks.check_fp8_gemm_acc_args (any
// call not certainly valid -- an overlap of out with any input included -- goes to the Python
// path, so errors are Python's), a plan cached per problem, the launch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <vector>

#include "gemm_plan.h"

namespace deep_tile_native {

// One call of an output-variant op, as deep_tile.gemm.launch.run_acc takes it: `c` the addend (none,
// or a tensor apart from out), `accumulate` C is `out` itself, `out` (none: allocated, of
// `out_dtype`, bf16 when that is none too), `b_scale_1d` the 1D1D GEMM.
struct AccCall {
  const at::Tensor& a;
  const at::Tensor& a_scale;
  const at::Tensor& b;
  const at::Tensor& b_scale;
  const std::optional<at::Tensor>& c;
  bool accumulate;
  const std::optional<at::Tensor>& out;
  std::optional<at::ScalarType> out_dtype;
  bool b_scale_1d;
};

// The call's output: `out` when given, else a new [m, n] tensor of the output type.
at::Tensor fp8_gemm_acc(const AccCall& call);

// Why a call would leave the native path ("" when it would not); `check_device` false leaves out
// the device rule (so CPU tensors can test every other rule).
const char* acc_fast_check_reason(const AccCall& call, bool check_device);

// For tests (any device): the plan key of a call the fast check takes (device 0, no SM limit) and
// the operands the kernel would get (OPERANDS, then C), `out` given. Throws std::invalid_argument
// naming the reason when the fast check refuses the call.
std::tuple<PlanKey, std::vector<at::Tensor>> acc_operands(const AccCall& call);

}  // namespace deep_tile_native
