#include "layouts.h"

#include <ATen/ops/empty.h>

#include "checks.h"
#include "launch.h"

namespace deep_tile_native {

AScaleLayout a_scale_layout(const at::Tensor& s, int64_t m, int64_t k_blocks) {
  // deep_tile.gemm.layouts.reads_row_major: contiguous rows of a multiple of 4 K blocks
  // (deep_tile.kernels.fp8_gemm.row_major_a_scale_readable), 16-byte aligned.
  if (m > 1 && k_blocks > 1 && k_blocks % 4 == 0 && s.stride(1) == 1 && s.stride(0) == k_blocks && aligned16(s)) {
    return AScaleLayout::kRowMajor;
  }
  return is_tma_aligned(s) ? AScaleLayout::kAligned : AScaleLayout::kCopy;
}

bool is_tma_aligned(const at::Tensor& s) {
  const int64_t m = s.size(0), k_blocks = s.size(1);
  if (m == 0 || k_blocks == 0) return true;
  const bool column_ok = s.stride(0) == 1 || m == 1;
  const bool pitch_ok = k_blocks == 1 || (s.stride(1) % 4 == 0 && s.stride(1) >= m);
  return column_ok && pitch_ok && aligned16(s);
}

at::Tensor tma_aligned(const at::Tensor& scale) {
  if (is_tma_aligned(scale)) return scale;
  count_a_scale_copy();
  return tma_aligned_copy(scale);
}

namespace {

// The masked kind's [G, m, k_blocks]: deep_tile.gemm.layouts.reads_row_major_3d, else is_tma_aligned_3d.
AScaleLayout a_scale_layout_3d(const at::Tensor& s) {
  const int64_t groups = s.size(0), m = s.size(1), k_blocks = s.size(2);
  if (m > 1 && k_blocks > 1 && k_blocks % 4 == 0 && s.is_contiguous() && aligned16(s)) return AScaleLayout::kRowMajor;
  if (s.numel() == 0) return AScaleLayout::kAligned;
  const int64_t pitch = align4(m);
  const bool aligned = s.stride(1) == 1 && (k_blocks == 1 || s.stride(2) == pitch) &&
                       (groups == 1 || s.stride(0) == k_blocks * pitch) && aligned16(s);
  return aligned ? AScaleLayout::kAligned : AScaleLayout::kCopy;
}

// A row-major-only kind's [rows, k_blocks]: deep_tile.gemm.layouts.is_row_major_aligned.
AScaleLayout a_scale_layout_row_major_only(const at::Tensor& s) {
  const int64_t rows = s.size(0), k_blocks = s.size(1);
  const bool as_is = (s.stride(1) == 1 || k_blocks == 1) &&
                     (rows <= 1 || (s.stride(0) % 4 == 0 && s.stride(0) >= k_blocks)) && aligned16(s);
  return as_is ? AScaleLayout::kRowMajor : AScaleLayout::kRowMajorCopy;
}

}  // namespace

bool reads_a_scale_row_major_only(Kind kind) {
  for (Kind k : kRowMajorAScaleKinds) {
    if (k == kind) return true;
  }
  return false;
}

AScaleLayout grouped_a_scale_layout(Kind kind, const at::Tensor& a_scale) {
  if (reads_a_scale_row_major_only(kind)) return a_scale_layout_row_major_only(a_scale);
  if (kind == Kind::kGroupedMasked) return a_scale_layout_3d(a_scale);
  return a_scale_layout(a_scale, a_scale.size(0), a_scale.size(1));
}

at::Tensor tma_aligned_copy(const at::Tensor& a_scale) {
  at::Tensor aligned;
  if (a_scale.dim() == 3) {  // per group, the groups one after another
    const int64_t groups = a_scale.size(0), m = a_scale.size(1), k_blocks = a_scale.size(2);
    aligned = at::empty({groups, k_blocks, align4(m)}, a_scale.options()).transpose(1, 2).narrow(1, 0, m);
  } else {
    const int64_t m = a_scale.size(0), k_blocks = a_scale.size(1);
    aligned = at::empty({k_blocks, align4(m)}, a_scale.options()).t().narrow(0, 0, m);
  }
  aligned.copy_(a_scale);
  return aligned;
}

at::Tensor row_major_copy(const at::Tensor& a_scale) {
  const int64_t rows = a_scale.size(0), k_blocks = a_scale.size(1);
  at::Tensor copy = at::empty({rows, align4(k_blocks)}, a_scale.options()).narrow(1, 0, k_blocks);
  copy.copy_(a_scale);
  return copy;
}

}  // namespace deep_tile_native
