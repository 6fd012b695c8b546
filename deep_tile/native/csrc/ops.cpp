#include "ops.h"

#include <torch/library.h>

#include <stdexcept>
#include <string>

#include "acc_op.h"
#include "gemm_op.h"
#include "gemm_plan.h"
#include "grouped_op.h"
#include "k_grouped_op.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

at::Tensor op_fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale) {
  return fp8_gemm(a, a_scale, b, b_scale, std::nullopt);
}

void op_fp8_gemm_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                     at::Tensor& out) {
  fp8_gemm(a, a_scale, b, b_scale, out);
}

// The contiguous, offsets and psum kinds: (a, a_scale, b, b_scale, info[, out]).
template <Kind kKind>
at::Tensor op_grouped(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const at::Tensor& info) {
  return m_grouped_fp8_gemm(kKind, a, a_scale, b, b_scale, info, std::nullopt, std::nullopt);
}

template <Kind kKind>
void op_grouped_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const at::Tensor& info, at::Tensor& out) {
  m_grouped_fp8_gemm(kKind, a, a_scale, b, b_scale, info, std::nullopt, out);
}

// The masked kind: (a, a_scale, b, b_scale, masked_m, expected_m[, out]).
at::Tensor op_masked(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                     const at::Tensor& masked_m, int64_t expected_m) {
  return m_grouped_fp8_gemm(Kind::kGroupedMasked, a, a_scale, b, b_scale, masked_m, expected_m, std::nullopt);
}

void op_masked_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                   const at::Tensor& masked_m, int64_t expected_m, at::Tensor& out) {
  m_grouped_fp8_gemm(Kind::kGroupedMasked, a, a_scale, b, b_scale, masked_m, expected_m, out);
}

constexpr auto op_contiguous = op_grouped<Kind::kGroupedContiguous>;
constexpr auto op_contiguous_out = op_grouped_out<Kind::kGroupedContiguous>;
constexpr auto op_offsets = op_grouped<Kind::kGroupedOffsets>;
constexpr auto op_offsets_out = op_grouped_out<Kind::kGroupedOffsets>;
constexpr auto op_psum = op_grouped<Kind::kGroupedPsum>;
constexpr auto op_psum_out = op_grouped_out<Kind::kGroupedPsum>;

// The output variants: (a, a_scale, b, b_scale, c, out_dtype) -> new, or (..., c, accumulate, out);
// kOneD: the 1D1D GEMM (b_scale per row of b).
template <bool kOneD>
at::Tensor op_acc(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                  const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  const std::optional<at::Tensor> none;
  return fp8_gemm_acc(AccCall{a, a_scale, b, b_scale, c, false, none, out_dtype, kOneD});
}

template <bool kOneD>
void op_acc_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                const std::optional<at::Tensor>& c, bool accumulate, at::Tensor& out) {
  const std::optional<at::Tensor> into = out;
  fp8_gemm_acc(AccCall{a, a_scale, b, b_scale, c, accumulate, into, std::nullopt, kOneD});
}

// The K-grouped GEMM: (a, a_scale, b, b_scale, group_sizes, c, out_dtype) -> new, or
// (..., group_sizes, c, accumulate, out).
at::Tensor op_k_grouped(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                        const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  const std::optional<at::Tensor> none;
  return k_grouped_fp8_gemm(KGroupedCall{a, a_scale, b, b_scale, group_sizes, c, false, none, out_dtype});
}

void op_k_grouped_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, bool accumulate,
                      at::Tensor& out) {
  const std::optional<at::Tensor> into = out;
  k_grouped_fp8_gemm(KGroupedCall{a, a_scale, b, b_scale, group_sizes, c, accumulate, into, std::nullopt});
}

// The kind argument of the grouped output-variant ops: a grouped kind's name, else the ValueError
// deep_tile/ops.py's _grouped_kind raises (same message).
Kind op_grouped_kind(c10::string_view name) {
  const std::string text(name);
  try {
    return grouped_kind(text);
  } catch (const std::invalid_argument&) {
    std::string names;  // the grouped kinds, in ProblemKind's order
    for (int i = 0; i < kNumKinds; ++i) {
      const Kind kind = static_cast<Kind>(i);
      if (kind == Kind::kDense || kind == Kind::kKGrouped) continue;
      names += std::string(names.empty() ? "" : ", ") + "'" + kKindNames[i] + "'";
    }
    TORCH_CHECK_VALUE(false, "m_grouped_fp8_gemm_acc: kind must be one of ", names, "; got '", text, "'");
  }
}

// The grouped kinds' output variants: (kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype)
// -> new, or (..., expected_m, c, accumulate, out).
at::Tensor op_grouped_acc(c10::string_view kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                          const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                          const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  return m_grouped_fp8_gemm(op_grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, std::nullopt,
                            GroupedOutput{c, false, out_dtype});
}

void op_grouped_acc_out(c10::string_view kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                        const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                        const std::optional<at::Tensor>& c, bool accumulate, at::Tensor& out) {
  m_grouped_fp8_gemm(op_grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, out,
                     GroupedOutput{c, accumulate, std::nullopt});
}

constexpr auto op_fp8_gemm_acc = op_acc<false>;
constexpr auto op_fp8_gemm_acc_out = op_acc_out<false>;
constexpr auto op_fp8_gemm_1d1d = op_acc<true>;
constexpr auto op_fp8_gemm_1d1d_out = op_acc_out<true>;

// Leaked on purpose when registered: deregistering at process exit could run after the
// dispatcher is gone.
torch::Library* g_library = nullptr;

}  // namespace

void register_ops() {
  if (g_library != nullptr) return;
  if (!bridge_installed()) throw std::runtime_error("deep_tile native: install the bridge before registering");
  auto* library = new torch::Library(torch::Library::IMPL, kOpNamespace, std::nullopt, __FILE__, __LINE__);
  for (auto key : {c10::DispatchKey::CUDA, c10::DispatchKey::CPU}) {
    library->impl(kOpNames[0], torch::dispatch(key, TORCH_FN(op_fp8_gemm)));
    library->impl(kOpNames[1], torch::dispatch(key, TORCH_FN(op_fp8_gemm_out)));
    library->impl(kOpNames[2], torch::dispatch(key, TORCH_FN(op_contiguous)));
    library->impl(kOpNames[3], torch::dispatch(key, TORCH_FN(op_contiguous_out)));
    library->impl(kOpNames[4], torch::dispatch(key, TORCH_FN(op_offsets)));
    library->impl(kOpNames[5], torch::dispatch(key, TORCH_FN(op_offsets_out)));
    library->impl(kOpNames[6], torch::dispatch(key, TORCH_FN(op_masked)));
    library->impl(kOpNames[7], torch::dispatch(key, TORCH_FN(op_masked_out)));
    library->impl(kOpNames[8], torch::dispatch(key, TORCH_FN(op_psum)));
    library->impl(kOpNames[9], torch::dispatch(key, TORCH_FN(op_psum_out)));
    library->impl(kOpNames[10], torch::dispatch(key, TORCH_FN(op_fp8_gemm_acc)));
    library->impl(kOpNames[11], torch::dispatch(key, TORCH_FN(op_fp8_gemm_acc_out)));
    library->impl(kOpNames[12], torch::dispatch(key, TORCH_FN(op_fp8_gemm_1d1d)));
    library->impl(kOpNames[13], torch::dispatch(key, TORCH_FN(op_fp8_gemm_1d1d_out)));
    library->impl(kOpNames[14], torch::dispatch(key, TORCH_FN(op_k_grouped)));
    library->impl(kOpNames[15], torch::dispatch(key, TORCH_FN(op_k_grouped_out)));
    library->impl(kOpNames[16], torch::dispatch(key, TORCH_FN(op_grouped_acc)));
    library->impl(kOpNames[17], torch::dispatch(key, TORCH_FN(op_grouped_acc_out)));
  }
  g_library = library;
}

void deregister_ops() {
  delete g_library;
  g_library = nullptr;
}

bool ops_registered() { return g_library != nullptr; }

}  // namespace deep_tile_native
