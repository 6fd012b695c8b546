// The native host path of the dense FP8 GEMM (deep_tile::fp8_gemm and fp8_gemm_out): the checks,
// the cached plan, the operands, the launch. Any call it cannot take -- bad arguments, m == 0 --
// goes to the Python path, which raises the same errors as without the extension.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace deep_tile_native {

// One GEMM: the output (`out` when given, else a new bf16 [m, n] tensor).
at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out);

// Why a call would leave the native path ("" when it would not): a short reason such as
// "dtype", "shape", "layout", "alignment", "device" or "empty".
const char* fast_check_reason(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const std::optional<at::Tensor>& out);

}  // namespace deep_tile_native
