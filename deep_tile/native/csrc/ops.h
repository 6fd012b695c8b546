// The ops this library implements, and their registration as dispatcher kernels: every GEMM op of
// deep_tile/ops.py (its NAMESPACE and SCHEMAS; the module's OP_NAMES attribute lets
// tests/test_native.py compare the two), each a thin adapter of its schema to one Call (call.h).
#pragma once

namespace deep_tile_native {

constexpr const char* kOpNamespace = "deep_tile";
constexpr const char* kOpNames[] = {
    "fp8_gemm",
    "fp8_gemm_out",
    "m_grouped_fp8_gemm_contiguous",
    "m_grouped_fp8_gemm_contiguous_out",
    "m_grouped_fp8_gemm_offsets",
    "m_grouped_fp8_gemm_offsets_out",
    "m_grouped_fp8_gemm_masked",
    "m_grouped_fp8_gemm_masked_out",
    "m_grouped_fp8_gemm_psum",
    "m_grouped_fp8_gemm_psum_out",
    "fp8_gemm_acc",
    "fp8_gemm_acc_out",
    "fp8_gemm_1d1d",
    "fp8_gemm_1d1d_out",
    "k_grouped_fp8_gemm_1d1d",
    "k_grouped_fp8_gemm_1d1d_out",
    "m_grouped_fp8_gemm_acc",
    "m_grouped_fp8_gemm_acc_out",
};

// Registers the kernels of these ops for the CUDA and CPU dispatch keys (CPU: so CPU tensors get
// the Python path's errors through this path too). They take precedence over the Python kernels
// deep_tile/ops.py registers for CompositeExplicitAutograd.
void register_ops();
void deregister_ops();
bool ops_registered();

}  // namespace deep_tile_native
