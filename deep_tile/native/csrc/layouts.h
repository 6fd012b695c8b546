// The a_scale layouts the kernel reads, and the rule that picks one: the C++ twin of
// deep_tile/gemm/layouts.py (and of the a_scale choice in deep_tile.gemm.launch.grouped_operands).
// tests/test_native.py compares the two rules over many layouts through the module's
// a_scale_layout and grouped_a_scale_layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "gemm_plan.h"

namespace deep_tile_native {

// How the kernel gets an a_scale tensor: read as it is in the TMA-aligned column-major layout
// (kAligned), read row-major as it is by the kernel variant (kRowMajor), copied into the aligned
// layout first (kCopy), or copied into 16-byte rows and read row-major (kRowMajorCopy: the
// offsets kind, which reads only row-major).
enum class AScaleLayout : int { kAligned = 0, kRowMajor = 1, kCopy = 2, kRowMajorCopy = 3 };
constexpr const char* kAScaleLayoutNames[] = {"aligned", "row_major", "copy", "row_major_copy"};

inline bool reads_row_major(AScaleLayout layout) {
  return layout == AScaleLayout::kRowMajor || layout == AScaleLayout::kRowMajorCopy;
}
inline bool copies(AScaleLayout layout) {
  return layout == AScaleLayout::kCopy || layout == AScaleLayout::kRowMajorCopy;
}

// deep_tile.kernels.fp8_gemm.ROW_MAJOR_A_SCALE_KINDS: the kinds whose kernels read a_scale
// row-major only (the module's ROW_MAJOR_A_SCALE_KINDS attribute is compared with it).
constexpr Kind kRowMajorAScaleKinds[] = {Kind::kGroupedOffsets};
bool reads_a_scale_row_major_only(Kind kind);

// A 2-D [m, k_blocks] a_scale of the dense and contiguous kinds: reads_row_major, else
// is_tma_aligned, else a copy (get_tma_aligned_a_scale).
AScaleLayout a_scale_layout(const at::Tensor& a_scale, int64_t m, int64_t k_blocks);

// The a_scale of a grouped kind as grouped_operands reads it (grouped_reads_row_major): for the
// row-major-only kinds (offsets; a 2-D a_scale) as it is when is_row_major_aligned, else copied;
// the masked kind's [G, max_m, k_blocks] by reads_row_major_3d, else is_tma_aligned_3d; the
// contiguous kind's as the dense one's.
AScaleLayout grouped_a_scale_layout(Kind kind, const at::Tensor& a_scale);

// deep_tile.gemm.layouts.is_tma_aligned of a 2-D [rows, k_blocks] scale tensor.
bool is_tma_aligned(const at::Tensor& scale);

// get_tma_aligned_a_scale of a 2-D scale tensor (a_scale, or the 1D1D kinds' b_scale): as it is
// when is_tma_aligned, else a copy into that layout (counted as an a_scale copy).
at::Tensor tma_aligned(const at::Tensor& scale);

// get_tma_aligned_a_scale of a 2-D or 3-D a_scale not in that layout: a copy into it.
at::Tensor tma_aligned_copy(const at::Tensor& a_scale);

// get_row_major_a_scale of a 2-D a_scale not readable as it is: a copy into rows of
// align4(k_blocks) floats.
at::Tensor row_major_copy(const at::Tensor& a_scale);

}  // namespace deep_tile_native
