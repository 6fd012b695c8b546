#include "k_grouped_op.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <stdexcept>
#include <string>

#include "checks.h"
#include "grouped_op.h"
#include "launch.h"
#include "layouts.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

// The native twin of deep_tile.gemm.problem.Problem for a K-grouped call.
struct KGroupedProblem {
  int64_t m = 0, n = 0, k = 0, num_groups = 1;
  OutType out_type = OutType::kFloat32;
  CKind c_kind = CKind::kNone;
};

// `c` is `out` (the same tensor object: check_k_grouped_args's `c is out`, in-place accumulation).
bool c_is_out(const KGroupedCall& c) {
  return c.c.has_value() && c.out.has_value() && c.c->is_same(*c.out);
}

// Every condition of deep_tile.gemm.checks.check_k_grouped_args but the devices (device_reason) and the
// GPU's compute capability (Python checks it when a device's first plan is made); fills `p`.
const char* check_arguments(const KGroupedCall& c, KGroupedProblem* p) {
  for (const at::Tensor* t : {&c.a, &c.a_scale, &c.b, &c.b_scale, &c.group_sizes}) {
    if (!t->defined()) return "undefined";
  }
  if ((c.c.has_value() && !c.c->defined()) || (c.out.has_value() && !c.out->defined())) return "undefined";
  if (c.a.scalar_type() != at::kFloat8_e4m3fn || c.b.scalar_type() != at::kFloat8_e4m3fn ||
      c.a_scale.scalar_type() != at::kFloat || c.b_scale.scalar_type() != at::kFloat) {
    return "dtype";
  }
  // _output_dtype: out's type, else out_dtype's, else FP32; c bf16 or FP32
  int out_type = 1;
  if (c.out.has_value()) {
    out_type = out_type_index(c.out->scalar_type());
    if (out_type < 0 || (c.out_dtype.has_value() && *c.out_dtype != c.out->scalar_type())) return "dtype";
  } else if (c.out_dtype.has_value()) {
    out_type = out_type_index(*c.out_dtype);
    if (out_type < 0) return "dtype";
  }
  if (c.c.has_value() && out_type_index(c.c->scalar_type()) < 0) return "dtype";
  if (c.c.has_value() && !c.out.has_value()) return "c needs out";
  if (c.accumulate && (c.c.has_value() || !c.out.has_value())) return "accumulate";
  if (c.a.dim() != 2 || c.a_scale.dim() != 2 || c.b.dim() != 2 || c.b_scale.dim() != 2) return "shape";
  const int64_t m = c.a.size(0), k = c.a.size(1), n = c.b.size(0);
  if (c.b.size(1) != k || !n_k_ok(n, k)) return "shape";
  const int64_t k_blocks = ceil_div(k, kScaleGroup);
  if (c.a_scale.size(0) != m || c.a_scale.size(1) != k_blocks) return "shape";
  if (c.b_scale.size(0) != n || c.b_scale.size(1) != k_blocks) return "shape";
  const at::Tensor& sizes = c.group_sizes;
  if (sizes.scalar_type() != at::kInt || sizes.dim() != 1 || !sizes.is_contiguous()) return "group_sizes";
  const int64_t groups = sizes.size(0);
  if (groups < 1 || groups > kMaxTableGroups) return "groups";
  for (const std::optional<at::Tensor>* x : {&c.out, &c.c}) {
    if (!x->has_value()) continue;
    const at::Tensor& t = **x;
    if (t.dim() != 3 || t.size(0) != groups || t.size(1) != m || t.size(2) != n) return "shape";
    if (const char* why = layout_reason(t, 16 / t.element_size())) return why;  // groups one after another
  }
  if (const char* why = layout_reason(c.a, 16)) return why;
  if (const char* why = layout_reason(c.b, 16)) return why;
  const bool in_place = c.accumulate || c_is_out(c);
  if (c.out.has_value()) {
    const at::Tensor* addend = c.c.has_value() && !in_place ? &*c.c : nullptr;
    if (overlaps(*c.out, {&c.a, &c.a_scale, &c.b, &c.b_scale, &sizes, addend})) return "overlap";
  }
  p->m = m;
  p->n = n;
  p->k = k;
  p->num_groups = groups;
  p->out_type = static_cast<OutType>(out_type);
  p->c_kind = in_place ? CKind::kOut
              : c.c.has_value() ? static_cast<CKind>(1 + out_type_index(c.c->scalar_type()))
                                : CKind::kNone;
  return nullptr;
}

// check_arguments, then what the native path needs besides: one CUDA device, rows to compute.
const char* inspect(const KGroupedCall& c, KGroupedProblem* p) {
  if (const char* why = check_arguments(c, p)) return why;
  if (const char* why = device_reason(c.a, {&c.a_scale, &c.b, &c.b_scale, &c.group_sizes}, c.out)) return why;
  if (c.c.has_value() && c.c->device() != c.a.device()) return "device";
  if (p->m == 0) return "empty";
  return nullptr;
}

PlanKey plan_key(const KGroupedProblem& p, int64_t device, int64_t limit) {
  PlanKey key;
  key.device = device;
  key.kind = Kind::kKGrouped;
  key.m = key.expected_m = p.m;  // deep_tile.gemm.problem.Problem: the K-grouped kind expects all its rows
  key.n = p.n;
  key.k = p.k;
  key.num_groups = p.num_groups;
  key.sms_limit = limit;
  key.out_type = p.out_type;
  key.c_kind = p.c_kind;
  key.b_scale_1d = true;  // always 1D1D
  return key;
}

// The kernel's operands (GROUPED_OPERANDS, then C) as deep_tile.gemm.launch.launch_k_grouped makes
// them: both scales in the TMA-aligned column-major layout (copied into it when not so), out and
// C ([G, m, n]; C is out when accumulating or without C) as [G * m, n] views.
std::vector<at::Tensor> views_of(const KGroupedCall& c, const KGroupedProblem& p, const at::Tensor& out) {
  const int64_t rows = p.num_groups * p.m;
  auto flat = [&](const at::Tensor& x) { return x.as_strided({rows, p.n}, {x.stride(1), 1}); };
  const at::Tensor& addend = c.c.has_value() ? *c.c : out;
  return {c.a, tma_aligned(c.a_scale), c.b, tma_aligned(c.b_scale), flat(out), c.group_sizes, flat(addend)};
}

}  // namespace

at::Tensor k_grouped_fp8_gemm(const KGroupedCall& c) {
  KGroupedProblem p;
  if (inspect(c, &p) != nullptr) {
    count_python_call();
    return python_k_grouped_path(c.a, c.a_scale, c.b, c.b_scale, c.group_sizes, c.c, c.accumulate, c.out,
                                 c.out_dtype);
  }
  c10::DeviceGuard device_guard(c.a.device());
  const int64_t limit = sms_limit();
  PlanPtr plan = cached_plan(plan_key(p, c.a.device().index(), limit), [&] {
    return make_k_grouped_plan(c.a, c.a_scale, c.b, c.b_scale, c.group_sizes, c.c, c.accumulate, c.out, c.out_dtype,
                               limit);
  });
  const at::ScalarType type = p.out_type == OutType::kFloat32 ? at::kFloat : at::kBFloat16;
  at::Tensor result =
      c.out.has_value() ? *c.out : at::empty({p.num_groups, p.m, p.n}, c.a.options().dtype(type));
  const std::vector<at::Tensor> v = views_of(c, p, result);
  launch_plan(*plan, Operands{{&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]}, 7});
  count_native_call();
  return result;
}

const char* k_grouped_fast_check_reason(const KGroupedCall& c, bool check_device) {
  KGroupedProblem p;
  const char* why = check_device ? inspect(c, &p) : check_arguments(c, &p);  // fills p first
  return fast_check_answer(why, check_device, p.m == 0);
}

std::tuple<PlanKey, std::vector<at::Tensor>> k_grouped_operands(const KGroupedCall& c) {
  KGroupedProblem p;
  const char* why = check_arguments(c, &p);  // fills p first
  require_operands(why, p.m == 0, c.out.has_value());
  return {plan_key(p, 0, 0), views_of(c, p, *c.out)};
}

}  // namespace deep_tile_native
