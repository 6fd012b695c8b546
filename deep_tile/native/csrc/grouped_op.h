// The native host path of the M-grouped (Mixture-of-Experts) FP8 GEMMs:
// deep_tile::m_grouped_fp8_gemm_{contiguous,offsets,masked,psum}[_out] and their output variants,
// deep_tile::m_grouped_fp8_gemm_acc[_out]. The twin of
// deep_tile.gemm.launch.run_grouped: the checks of deep_tile.gemm.checks.check_grouped_args (any call not
// certainly valid goes to the Python path, so errors are Python's), a plan cached per problem,
// the operands as the 2-D views of deep_tile.gemm.launch.grouped_operands, the launch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_plan.h"

namespace deep_tile_native {

// deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS: most groups of the kinds with a per-expert table
// in shared memory (masked, offsets, psum); the module's MAX_TABLE_GROUPS attribute is compared.
constexpr int64_t kMaxTableGroups = 512;

// The kind named by its ProblemKind value ("grouped_contiguous", ...); throws std::invalid_argument
// for a name that is not a grouped kind.
Kind grouped_kind(const std::string& name);

// The output variant of a grouped call (the m_grouped_fp8_gemm_acc ops; the default is the plain
// bf16 GEMM): an addend `c` (bf16 or FP32, out's shape), `accumulate` (C is out itself), and the
// type of an output the call allocates (`out_dtype`; out's own type when out is given).
struct GroupedOutput {
  std::optional<at::Tensor> c;
  bool accumulate = false;
  std::optional<at::ScalarType> out_dtype;
};

// One grouped GEMM of `kind`: `info` is m_indices, offsets, masked_m or expert_ends; `expected_m` the masked
// kind's hint (nullopt for the others). Returns `out` when given, else a new output (bf16, or
// variant.out_dtype).
at::Tensor m_grouped_fp8_gemm(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                              const std::optional<at::Tensor>& out, const GroupedOutput& variant = {});

// Why a call would leave the native path ("" when it would not); `check_device` false leaves out
// the device rule (so CPU tensors can test every other rule).
const char* grouped_fast_check_reason(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                                      const at::Tensor& b_scale, const at::Tensor& info,
                                      std::optional<int64_t> expected_m, const std::optional<at::Tensor>& out,
                                      bool check_device, const GroupedOutput& variant = {});

// For tests (any device): the plan key (its problem fields are what deep_tile.gemm.problem.Problem.key()
// holds) and the operands the kernel would get (GROUPED_OPERANDS order, then C for an output
// variant). Throws std::invalid_argument naming the reason when the fast check refuses the call.
std::tuple<PlanKey, std::vector<at::Tensor>> grouped_operands(
    Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
    const at::Tensor& info, std::optional<int64_t> expected_m, const at::Tensor& out,
    const GroupedOutput& variant = {});

}  // namespace deep_tile_native
