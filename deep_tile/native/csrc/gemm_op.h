// The native FP8 GEMM host path: the dispatcher kernels of deep_tile::fp8_gemm and
// deep_tile::fp8_gemm_out, and the per-call work they do (checks, cached plan, tensor maps,
// launch). Any call it cannot take -- bad arguments, m == 0 -- goes to the Python path, which
// raises the same errors as without the extension.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace deep_tile_native {

// One GEMM: the output (`out` when given, else a new bf16 [m, n] tensor).
at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out);

// deep_tile.common.SCALE_GROUP: K elements per scale block (the module's SCALE_GROUP attribute).
constexpr int64_t kScaleGroup = 128;

// How the kernel gets an a_scale tensor: read as it is in the TMA-aligned column-major layout
// (kAligned), read row-major by the kernel variant (kRowMajor), or copied into the aligned
// layout first (kCopy). The rule of deep_tile.layouts (is_tma_aligned, reads_row_major);
// tests/test_native.py compares the two on many layouts through the module's a_scale_layout.
enum class AScaleLayout : int { kAligned = 0, kRowMajor = 1, kCopy = 2 };
AScaleLayout a_scale_layout(const at::Tensor& a_scale, int64_t m, int64_t k_blocks);

// Why a call would leave the native path ("" when it would not): a short reason such as
// "dtype", "shape", "layout", "alignment", "device" or "empty".
const char* fast_check_reason(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const std::optional<at::Tensor>& out);

// The ops this library implements (deep_tile.ops.NAMESPACE and SCHEMAS name them; the module's
// OP_NAMES attribute lets tests/test_native.py compare the two): fp8_gemm(a, a_scale, b, b_scale)
// and fp8_gemm_out(a, a_scale, b, b_scale, out).
constexpr const char* kOpNamespace = "deep_tile";
constexpr const char* kOpNames[] = {"fp8_gemm", "fp8_gemm_out"};

// Registers the kernels of the ops defined by deep_tile/ops.py for the CUDA and CPU dispatch
// keys (CPU: so CPU tensors get the Python path's errors through this path too).
void register_ops();
void deregister_ops();
bool ops_registered();

struct GemmStats {
  uint64_t native_calls;    // calls launched by the native path
  uint64_t python_calls;    // calls handed to the Python path
  uint64_t plans_created;
  uint64_t a_scale_copies;  // calls whose a_scale was copied into the TMA-aligned layout
};
GemmStats gemm_stats();
void reset_gemm_stats();

}  // namespace deep_tile_native
