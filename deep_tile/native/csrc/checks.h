// The rules of deep_tile/gemm/checks.py both native ops test before they take a call (the C++ side
// only decides whether a call is certainly valid; every refused call goes to the Python path,
// which raises the checks' errors). Each answer is a short reason ("shape", "layout",
// "alignment", "device", ...) or nullptr when the rule holds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace deep_tile_native {

// deep_tile.gemm.checks.N_MULTIPLE / K_MULTIPLE (the module's N_MULTIPLE and K_MULTIPLE attributes let
// tests/test_native.py compare them): n and k must be positive multiples of these.
constexpr int64_t kNMultiple = 8;
constexpr int64_t kKMultiple = 16;
// deep_tile.common.SCALE_GROUP: K elements per scale block (the module's SCALE_GROUP attribute).
constexpr int64_t kScaleGroup = 128;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }
bool aligned16(const at::Tensor& t);

// check_problem_shape's rule for n and k.
bool n_k_ok(int64_t n, int64_t k);

// _require_aligned of a 2-D tensor (or of a 3-D one read as 2-D, its groups one after another, as
// check_grouped_args reads a, b and out): last dimension contiguous, row stride a multiple of
// `row_multiple` elements, base 16-byte aligned.
const char* layout_reason(const at::Tensor& x, int64_t row_multiple);

// _require_device without the GPU's compute capability (Python checks it when a device's first
// plan is made): every tensor given on `first`'s device, a CUDA one.
const char* device_reason(const at::Tensor& first, std::initializer_list<const at::Tensor*> others,
                          const std::optional<at::Tensor>& out);

// _output_dtype's rule for one tensor or dtype: the index of `type` in OUT_DTYPES (bf16 0, FP32 1),
// or -1 for any other type.
int out_type_index(at::ScalarType type);

// _require_no_overlap: whether `out` (written) may reach memory any of `others` (read) may reach,
// each tensor's reach the hull of its strides (_span); undefined and empty `others` are skipped.
bool overlaps(const at::Tensor& out, std::initializer_list<const at::Tensor*> others);

// An op's *_fast_check_reason answer for the bridge: "" when the call is taken, else `why`. Without
// the device check (check_device false) a call with no rows is refused too ("empty").
const char* fast_check_answer(const char* why, bool check_device, bool empty);

// What an op's *_operands entry needs: the argument check passed (`why` nullptr), rows to compute
// and an out. Throws std::invalid_argument naming the first reason that fails.
void require_operands(const char* why, bool empty, bool has_out);

}  // namespace deep_tile_native
