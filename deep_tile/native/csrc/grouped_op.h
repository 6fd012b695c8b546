// The native host path of the M-grouped (Mixture-of-Experts) FP8 GEMMs:
// deep_tile::m_grouped_fp8_gemm_{contiguous,offsets,masked,psum}[_out]. The twin of
// deep_tile.launch.run_grouped: the checks of deep_tile.checks.check_grouped_args (any call not
// certainly valid goes to the Python path, so errors are Python's), a plan cached per problem,
// the operands as the 2-D views of deep_tile.launch.grouped_operands, the launch.
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

// One grouped GEMM of `kind`: `info` is m_indices, offsets, masked_m or expert_ends; `expected_m` the masked
// kind's hint (nullopt for the others). Returns `out` when given, else a new bf16 output.
at::Tensor m_grouped_fp8_gemm(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                              const std::optional<at::Tensor>& out);

// Why a call would leave the native path ("" when it would not); `check_device` false leaves out
// the device rule (so CPU tensors can test every other rule).
const char* grouped_fast_check_reason(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                                      const at::Tensor& b_scale, const at::Tensor& info,
                                      std::optional<int64_t> expected_m, const std::optional<at::Tensor>& out,
                                      bool check_device);

// For tests (any device): the plan key's problem fields as deep_tile.problem.Problem.key() spells
// them, (kind, m, n, k, num_groups, expected_m, a_scale_row_major), and the operands the kernel
// would get (GROUPED_OPERANDS order). Throws std::invalid_argument naming the reason when the
// fast check refuses the call.
using ProblemKeyTuple = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
std::tuple<ProblemKeyTuple, std::vector<at::Tensor>> grouped_operands(
    Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
    const at::Tensor& info, std::optional<int64_t> expected_m, const at::Tensor& out);

}  // namespace deep_tile_native
