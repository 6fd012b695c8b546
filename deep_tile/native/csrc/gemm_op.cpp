#include "gemm_op.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include "checks.h"
#include "launch.h"
#include "layouts.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

// The native twin of deep_tile.gemm.problem.Problem for a dense call, with the a_scale layout.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, k_blocks = 0;
  AScaleLayout a_scale_layout = AScaleLayout::kCopy;
};

// Every condition deep_tile.gemm.checks.check_fp8_gemm_args enforces, except the GPU's compute
// capability (checked by Python when a device's first plan is made), plus what the native path
// itself needs (m > 0). nullptr: the native path can run the call.
const char* inspect(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out, GemmProblem* p) {
  if (!a.defined() || !a_scale.defined() || !b.defined() || !b_scale.defined()) return "undefined";
  if (out.has_value() && !out->defined()) return "undefined";
  if (a.scalar_type() != at::kFloat8_e4m3fn || b.scalar_type() != at::kFloat8_e4m3fn ||
      a_scale.scalar_type() != at::kFloat || b_scale.scalar_type() != at::kFloat ||
      (out.has_value() && out->scalar_type() != at::kBFloat16)) {
    return "dtype";
  }
  if (a.dim() != 2 || a_scale.dim() != 2 || b.dim() != 2 || b_scale.dim() != 2 || (out.has_value() && out->dim() != 2)) {
    return "shape";
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != k || !n_k_ok(n, k)) return "shape";
  const int64_t k_blocks = ceil_div(k, kScaleGroup);
  if (a_scale.size(0) != m || a_scale.size(1) != k_blocks) return "shape";
  if (b_scale.size(0) != ceil_div(n, kScaleGroup) || b_scale.size(1) != k_blocks) return "shape";
  if (out.has_value() && (out->size(0) != m || out->size(1) != n)) return "shape";
  if (const char* why = layout_reason(a, 16)) return why;
  if (const char* why = layout_reason(b, 16)) return why;
  if (out.has_value()) {
    if (const char* why = layout_reason(*out, 8)) return why;
  }
  if (const char* why = device_reason(a, {&a_scale, &b, &b_scale}, out)) return why;
  if (m == 0) return "empty";
  p->m = m;
  p->n = n;
  p->k = k;
  p->k_blocks = k_blocks;
  p->a_scale_layout = a_scale_layout(a_scale, m, k_blocks);
  return nullptr;
}

}  // namespace

at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out) {
  GemmProblem p;
  if (inspect(a, a_scale, b, b_scale, out, &p) != nullptr) {
    count_python_call();
    return python_path(a, a_scale, b, b_scale, out);
  }
  c10::DeviceGuard device_guard(a.device());
  const int64_t limit = sms_limit();
  PlanKey key;
  key.device = a.device().index();
  key.kind = Kind::kDense;
  key.m = key.expected_m = p.m;  // deep_tile.gemm.problem.Problem: a dense problem expects all its rows
  key.n = p.n;
  key.k = p.k;
  key.sms_limit = limit;
  key.a_scale_row_major = reads_row_major(p.a_scale_layout);
  PlanPtr plan = cached_plan(key, [&] { return make_plan(a, a_scale, b, b_scale, out, limit); });
  at::Tensor result = out.has_value() ? *out : at::empty({p.m, p.n}, a.options().dtype(at::kBFloat16));
  at::Tensor scale = a_scale;
  if (copies(p.a_scale_layout)) {
    scale = tma_aligned_copy(a_scale);
    count_a_scale_copy();
  }
  at::Tensor b_scale_c = b_scale.is_contiguous() ? b_scale : b_scale.contiguous();
  launch_plan(*plan, Operands{{&a, &scale, &b, &b_scale_c, &result}, 5});
  count_native_call();
  return result;
}

const char* fast_check_reason(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const std::optional<at::Tensor>& out) {
  GemmProblem p;
  const char* why = inspect(a, a_scale, b, b_scale, out, &p);
  return why == nullptr ? "" : why;
}

}  // namespace deep_tile_native
