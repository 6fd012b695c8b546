#include "ops.h"

#include <torch/library.h>

#include <stdexcept>

#include "call.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

// Family indices of kOpFamilies (call.h).
constexpr int kDense = 0, kAcc = 1, kOneD = 2, kKGrouped = 3, kContiguous = 4, kOffsets = 5, kMasked = 6, kPsum = 7,
              kGroupedAcc = 8;

constexpr bool same_name(const char* x, const char* y) { return *x == *y && (*x == 0 || same_name(x + 1, y + 1)); }
static_assert(same_name(kOpFamilies[kDense], "fp8_gemm") && same_name(kOpFamilies[kAcc], "fp8_gemm_acc") &&
              same_name(kOpFamilies[kOneD], "fp8_gemm_1d1d") &&
              same_name(kOpFamilies[kKGrouped], "k_grouped_fp8_gemm_1d1d") &&
              same_name(kOpFamilies[kContiguous], "m_grouped_fp8_gemm_contiguous") &&
              same_name(kOpFamilies[kOffsets], "m_grouped_fp8_gemm_offsets") &&
              same_name(kOpFamilies[kMasked], "m_grouped_fp8_gemm_masked") &&
              same_name(kOpFamilies[kPsum], "m_grouped_fp8_gemm_psum") &&
              same_name(kOpFamilies[kGroupedAcc], "m_grouped_fp8_gemm_acc"));

const at::Tensor* given(const std::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

Call operands_call(int op, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                   const at::Tensor& b_scale) {
  Call call;
  call.op = op;
  call.tensors = {&a, &a_scale, &b, &b_scale, nullptr, nullptr, nullptr};
  return call;
}

at::Tensor op_fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale) {
  return run_call(operands_call(kDense, a, a_scale, b, b_scale));
}

void op_fp8_gemm_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                     at::Tensor& out) {
  Call call = operands_call(kDense, a, a_scale, b, b_scale);
  call.tensors[kOutSlot] = &out;
  run_call(call);
}

// The contiguous, offsets and psum kinds: (a, a_scale, b, b_scale, info[, out]).
template <int kOp>
at::Tensor op_grouped(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const at::Tensor& info) {
  Call call = operands_call(kOp, a, a_scale, b, b_scale);
  call.tensors[4] = &info;
  return run_call(call);
}

template <int kOp>
void op_grouped_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const at::Tensor& info, at::Tensor& out) {
  Call call = operands_call(kOp, a, a_scale, b, b_scale);
  call.tensors[4] = &info;
  call.tensors[kOutSlot] = &out;
  run_call(call);
}

// The masked kind: (a, a_scale, b, b_scale, masked_m, expected_m[, out]).
at::Tensor op_masked(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                     const at::Tensor& masked_m, int64_t expected_m) {
  Call call = operands_call(kMasked, a, a_scale, b, b_scale);
  call.tensors[4] = &masked_m;
  call.expected_m = expected_m;
  return run_call(call);
}

void op_masked_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                   const at::Tensor& masked_m, int64_t expected_m, at::Tensor& out) {
  Call call = operands_call(kMasked, a, a_scale, b, b_scale);
  call.tensors[4] = &masked_m;
  call.tensors[kOutSlot] = &out;
  call.expected_m = expected_m;
  run_call(call);
}

// The output variants and the 1D1D GEMM: (a, a_scale, b, b_scale, c, out_dtype) -> new, or
// (..., c, accumulate, out).
template <int kOp>
at::Tensor op_acc(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                  const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  Call call = operands_call(kOp, a, a_scale, b, b_scale);
  call.tensors[5] = given(c);
  call.out_dtype = out_dtype;
  return run_call(call);
}

template <int kOp>
void op_acc_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                const std::optional<at::Tensor>& c, bool accumulate, at::Tensor& out) {
  Call call = operands_call(kOp, a, a_scale, b, b_scale);
  call.tensors[5] = given(c);
  call.tensors[kOutSlot] = &out;
  call.accumulate = accumulate;
  run_call(call);
}

// The K-grouped GEMM: (a, a_scale, b, b_scale, group_sizes, c, out_dtype) -> new, or
// (..., group_sizes, c, accumulate, out).
at::Tensor op_k_grouped(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                        const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  Call call = operands_call(kKGrouped, a, a_scale, b, b_scale);
  call.tensors[4] = &group_sizes;
  call.tensors[5] = given(c);
  call.out_dtype = out_dtype;
  return run_call(call);
}

void op_k_grouped_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, bool accumulate,
                      at::Tensor& out) {
  Call call = operands_call(kKGrouped, a, a_scale, b, b_scale);
  call.tensors[4] = &group_sizes;
  call.tensors[5] = given(c);
  call.tensors[kOutSlot] = &out;
  call.accumulate = accumulate;
  run_call(call);
}

// The grouped kinds' output variants: (kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype)
// -> new, or (..., expected_m, c, accumulate, out). Python checks the kind.
at::Tensor op_grouped_acc(c10::string_view kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                          const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                          const std::optional<at::Tensor>& c, at::ScalarType out_dtype) {
  Call call = operands_call(kGroupedAcc, a, a_scale, b, b_scale);
  call.tensors[4] = &info;
  call.tensors[5] = given(c);
  call.expected_m = expected_m;
  call.out_dtype = out_dtype;
  call.kind = kind;
  return run_call(call);
}

void op_grouped_acc_out(c10::string_view kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                        const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                        const std::optional<at::Tensor>& c, bool accumulate, at::Tensor& out) {
  Call call = operands_call(kGroupedAcc, a, a_scale, b, b_scale);
  call.tensors[4] = &info;
  call.tensors[5] = given(c);
  call.tensors[kOutSlot] = &out;
  call.expected_m = expected_m;
  call.accumulate = accumulate;
  call.kind = kind;
  run_call(call);
}

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
    library->impl(kOpNames[2], torch::dispatch(key, TORCH_FN(op_grouped<kContiguous>)));
    library->impl(kOpNames[3], torch::dispatch(key, TORCH_FN(op_grouped_out<kContiguous>)));
    library->impl(kOpNames[4], torch::dispatch(key, TORCH_FN(op_grouped<kOffsets>)));
    library->impl(kOpNames[5], torch::dispatch(key, TORCH_FN(op_grouped_out<kOffsets>)));
    library->impl(kOpNames[6], torch::dispatch(key, TORCH_FN(op_masked)));
    library->impl(kOpNames[7], torch::dispatch(key, TORCH_FN(op_masked_out)));
    library->impl(kOpNames[8], torch::dispatch(key, TORCH_FN(op_grouped<kPsum>)));
    library->impl(kOpNames[9], torch::dispatch(key, TORCH_FN(op_grouped_out<kPsum>)));
    library->impl(kOpNames[10], torch::dispatch(key, TORCH_FN(op_acc<kAcc>)));
    library->impl(kOpNames[11], torch::dispatch(key, TORCH_FN(op_acc_out<kAcc>)));
    library->impl(kOpNames[12], torch::dispatch(key, TORCH_FN(op_acc<kOneD>)));
    library->impl(kOpNames[13], torch::dispatch(key, TORCH_FN(op_acc_out<kOneD>)));
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
