#include "acc_op.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <stdexcept>
#include <string>

#include "checks.h"
#include "launch.h"
#include "layouts.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

// The native twin of deep_tile.gemm.problem.Problem for an output-variant call, with the a_scale layout.
struct AccProblem {
  int64_t m = 0, n = 0, k = 0, k_blocks = 0;
  OutType out_type = OutType::kBfloat16;
  CKind c_kind = CKind::kNone;
  AScaleLayout a_scale_layout = AScaleLayout::kCopy;
};

// out's and c's rules of check_fp8_gemm_acc_args: [m, n], n contiguous, rows of 16 bytes, aligned.
const char* output_reason(const at::Tensor& x, int64_t m, int64_t n) {
  if (x.dim() != 2) return "shape";
  if (x.size(0) != m || x.size(1) != n) return "shape";
  return layout_reason(x, 16 / x.element_size());
}

// Every condition of deep_tile.gemm.checks.check_fp8_gemm_acc_args but the devices (device_reason)
// and the GPU's compute capability (Python checks it when a device's first plan is made); fills `p`.
const char* check_arguments(const AccCall& c, AccProblem* p) {
  for (const at::Tensor* t : {&c.a, &c.a_scale, &c.b, &c.b_scale}) {
    if (!t->defined()) return "undefined";
  }
  if ((c.c.has_value() && !c.c->defined()) || (c.out.has_value() && !c.out->defined())) return "undefined";
  if (c.accumulate && (c.c.has_value() || !c.out.has_value())) return "accumulate";
  // _output_dtype: out's type, else out_dtype's, else bf16; c bf16 or FP32
  int out_type = 0;
  if (c.out.has_value()) {
    out_type = out_type_index(c.out->scalar_type());
    if (out_type < 0 || (c.out_dtype.has_value() && *c.out_dtype != c.out->scalar_type())) return "dtype";
  } else if (c.out_dtype.has_value()) {
    out_type = out_type_index(*c.out_dtype);
    if (out_type < 0) return "dtype";
  }
  if (c.c.has_value() && out_type_index(c.c->scalar_type()) < 0) return "dtype";
  if (c.a.scalar_type() != at::kFloat8_e4m3fn || c.b.scalar_type() != at::kFloat8_e4m3fn ||
      c.a_scale.scalar_type() != at::kFloat || c.b_scale.scalar_type() != at::kFloat) {
    return "dtype";
  }
  if (c.a.dim() != 2 || c.a_scale.dim() != 2 || c.b.dim() != 2 || c.b_scale.dim() != 2) return "shape";
  const int64_t m = c.a.size(0), k = c.a.size(1), n = c.b.size(0);
  if (c.b.size(1) != k || !n_k_ok(n, k)) return "shape";
  const int64_t k_blocks = ceil_div(k, kScaleGroup);
  if (c.a_scale.size(0) != m || c.a_scale.size(1) != k_blocks) return "shape";
  const int64_t b_scale_rows = c.b_scale_1d ? n : ceil_div(n, kScaleGroup);  // 1D1D: per row of b
  if (c.b_scale.size(0) != b_scale_rows || c.b_scale.size(1) != k_blocks) return "shape";
  for (const std::optional<at::Tensor>* x : {&c.out, &c.c}) {
    if (x->has_value()) {
      if (const char* why = output_reason(**x, m, n)) return why;
    }
  }
  if (const char* why = layout_reason(c.a, 16)) return why;
  if (const char* why = layout_reason(c.b, 16)) return why;
  // _require_no_overlap: out is written while the others are read (c the same view as out included)
  if (c.out.has_value()) {
    const at::Tensor* addend = c.c.has_value() ? &*c.c : nullptr;
    if (overlaps(*c.out, {&c.a, &c.a_scale, &c.b, &c.b_scale, addend})) return "overlap";
  }
  p->m = m;
  p->n = n;
  p->k = k;
  p->k_blocks = k_blocks;
  p->out_type = static_cast<OutType>(out_type);
  p->c_kind = c.accumulate ? CKind::kOut
              : c.c.has_value() ? static_cast<CKind>(1 + out_type_index(c.c->scalar_type()))
                                : CKind::kNone;
  p->a_scale_layout = a_scale_layout(c.a_scale, m, k_blocks);
  return nullptr;
}

// check_arguments, then what the native path needs besides: one CUDA device, rows to compute.
const char* inspect(const AccCall& c, AccProblem* p) {
  if (const char* why = check_arguments(c, p)) return why;
  if (const char* why = device_reason(c.a, {&c.a_scale, &c.b, &c.b_scale}, c.out)) return why;
  if (c.c.has_value() && c.c->device() != c.a.device()) return "device";
  if (p->m == 0) return "empty";
  return nullptr;
}

PlanKey plan_key(const AccCall& c, const AccProblem& p, int64_t device, int64_t limit) {
  PlanKey key;
  key.device = device;
  key.kind = Kind::kDense;
  key.m = key.expected_m = p.m;  // a dense problem expects all its rows
  key.n = p.n;
  key.k = p.k;
  key.sms_limit = limit;
  key.a_scale_row_major = reads_row_major(p.a_scale_layout);
  key.out_type = p.out_type;
  key.c_kind = p.c_kind;
  key.b_scale_1d = c.b_scale_1d;
  return key;
}

// The kernel's operands (OPERANDS, then C) as deep_tile.gemm.launch.run_acc makes them: a_scale as the
// kernel reads it, b_scale contiguous (1D1D: in the TMA-aligned column-major layout), C the
// addend or out itself (accumulating, or no C: the parameter is unused).
struct AccViews {
  at::Tensor a_scale, b_scale, out, c;
};

AccViews views_of(const AccCall& c, const AccProblem& p, const at::Tensor& out) {
  AccViews v;
  v.a_scale = c.a_scale;
  if (copies(p.a_scale_layout)) {
    v.a_scale = tma_aligned_copy(c.a_scale);
    count_a_scale_copy();
  }
  if (c.b_scale_1d) {
    v.b_scale = tma_aligned(c.b_scale);
  } else {
    v.b_scale = c.b_scale.is_contiguous() ? c.b_scale : c.b_scale.contiguous();
  }
  v.out = out;
  v.c = c.c.has_value() ? *c.c : out;
  return v;
}

}  // namespace

at::Tensor fp8_gemm_acc(const AccCall& c) {
  AccProblem p;
  if (inspect(c, &p) != nullptr) {
    count_python_call();
    return python_acc_path(c.a, c.a_scale, c.b, c.b_scale, c.c, c.accumulate, c.out, c.out_dtype, c.b_scale_1d);
  }
  c10::DeviceGuard device_guard(c.a.device());
  const int64_t limit = sms_limit();
  const PlanKey key = plan_key(c, p, c.a.device().index(), limit);
  PlanPtr plan = cached_plan(key, [&] {
    return make_acc_plan(c.a, c.a_scale, c.b, c.b_scale, c.c, c.accumulate, c.out, c.out_dtype, c.b_scale_1d, limit);
  });
  const at::ScalarType type = p.out_type == OutType::kFloat32 ? at::kFloat : at::kBFloat16;
  at::Tensor result = c.out.has_value() ? *c.out : at::empty({p.m, p.n}, c.a.options().dtype(type));
  const AccViews v = views_of(c, p, result);
  launch_plan(*plan, Operands{{&c.a, &v.a_scale, &c.b, &v.b_scale, &v.out, &v.c}, 6});
  count_native_call();
  return result;
}

const char* acc_fast_check_reason(const AccCall& c, bool check_device) {
  AccProblem p;
  const char* why = check_device ? inspect(c, &p) : check_arguments(c, &p);  // fills p first
  return fast_check_answer(why, check_device, p.m == 0);
}

std::tuple<PlanKey, std::vector<at::Tensor>> acc_operands(const AccCall& c) {
  AccProblem p;
  const char* why = check_arguments(c, &p);  // fills p first
  require_operands(why, p.m == 0, c.out.has_value());
  const AccViews v = views_of(c, p, *c.out);
  return {plan_key(c, p, 0, 0), {c.a, v.a_scale, c.b, v.b_scale, v.out, v.c}};
}

}  // namespace deep_tile_native
