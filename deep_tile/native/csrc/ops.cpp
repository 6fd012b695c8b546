#include "ops.h"

#include <torch/library.h>

#include "gemm_op.h"
#include "gemm_plan.h"
#include "grouped_op.h"
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
  }
  g_library = library;
}

void deregister_ops() {
  delete g_library;
  g_library = nullptr;
}

bool ops_registered() { return g_library != nullptr; }

}  // namespace deep_tile_native
