// One native op for every GEMM op: a call is its op family, its tensors in fixed slots and its
// scalars. run_call looks its signature up (signature.h); a signature seen before launches with
// its plan and no Python; a new one (or a call whose plan's overlap tests fail) is planned by
// Python (deep_tile/native/bridge.py), which raises the checks' errors for a bad call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/string_view.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace deep_tile_native {

// The call's tensor slots (deep_tile.native.bridge.SLOTS; the module's SLOTS attribute is
// compared): info is m_indices, offsets, masked_m, expert_ends or group_sizes.
constexpr const char* kSlotNames[] = {"a", "a_scale", "b", "b_scale", "info", "c", "out"};
constexpr int kSlots = 7;
constexpr int kOutSlot = 6;

// The op families, each with its _out op (deep_tile.native.bridge.OPS; compared through OP_FAMILIES).
constexpr const char* kOpFamilies[] = {"fp8_gemm",
                                       "fp8_gemm_acc",
                                       "fp8_gemm_1d1d",
                                       "k_grouped_fp8_gemm_1d1d",
                                       "m_grouped_fp8_gemm_contiguous",
                                       "m_grouped_fp8_gemm_offsets",
                                       "m_grouped_fp8_gemm_masked",
                                       "m_grouped_fp8_gemm_psum",
                                       "m_grouped_fp8_gemm_acc"};
constexpr int kNumOpFamilies = 9;

// The index of an op family by name; throws std::invalid_argument for another name.
int op_family(c10::string_view name);

struct Call {
  int op = 0;                                        // kOpFamilies index
  std::array<const at::Tensor*, kSlots> tensors{};   // nullptr: not given
  std::optional<int64_t> expected_m;
  bool accumulate = false;
  std::optional<at::ScalarType> out_dtype;
  std::optional<c10::string_view> kind;              // m_grouped_fp8_gemm_acc's kind argument
};

// The call's output (out when given, else a new tensor).
at::Tensor run_call(const Call& call);

// For tests: what run_call does short of the launch -- (whether the signature's plan was found,
// the output, the kernel's operands).
std::tuple<bool, at::Tensor, std::vector<at::Tensor>> resolve_call(const Call& call);

}  // namespace deep_tile_native
