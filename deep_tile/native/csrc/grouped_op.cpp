#include "grouped_op.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <stdexcept>

#include "checks.h"
#include "launch.h"
#include "layouts.h"
#include "python_bridge.h"

namespace deep_tile_native {
namespace {

// One call's arguments.
struct Call {
  Kind kind;
  const at::Tensor& a;
  const at::Tensor& a_scale;
  const at::Tensor& b;
  const at::Tensor& b_scale;
  const at::Tensor& info;
  std::optional<int64_t> expected_m;
  const std::optional<at::Tensor>& out;
  const GroupedOutput& variant;
};

// The native twin of deep_tile.gemm.problem.Problem for a grouped call, with the a_scale layout.
struct GroupedProblem {
  int64_t m = 0, n = 0, k = 0, num_groups = 1, expected_m = 0;
  int64_t rows = 0, k_blocks = 0;  // Problem.rows, Problem.k_blocks
  AScaleLayout a_scale_layout = AScaleLayout::kCopy;
  OutType out_type = OutType::kBfloat16;
  CKind c_kind = CKind::kNone;
  bool variant() const { return out_type != OutType::kBfloat16 || c_kind != CKind::kNone; }
};

bool is_masked(Kind kind) { return kind == Kind::kGroupedMasked; }
bool has_table(Kind kind) {
  return kind == Kind::kGroupedMasked || kind == Kind::kGroupedOffsets || kind == Kind::kGroupedPsum;
}

// Every condition of deep_tile.gemm.checks.check_grouped_args but the devices (device_reason) and the
// GPU's compute capability (Python checks it when a device's first plan is made); fills `p`.
const char* check_arguments(const Call& c, GroupedProblem* p) {
  for (const at::Tensor* t : {&c.a, &c.a_scale, &c.b, &c.b_scale, &c.info}) {
    if (!t->defined()) return "undefined";
  }
  const std::optional<at::Tensor>& out = c.out;
  const std::optional<at::Tensor>& addend = c.variant.c;
  if ((out.has_value() && !out->defined()) || (addend.has_value() && !addend->defined())) return "undefined";
  if (c.variant.accumulate && (addend.has_value() || !out.has_value())) return "accumulate";
  // _output_dtype: out's type, else out_dtype's, else bf16; C bf16 or FP32
  int out_type = 0;
  if (out.has_value()) {
    out_type = out_type_index(out->scalar_type());
    if (out_type < 0 || (c.variant.out_dtype.has_value() && *c.variant.out_dtype != out->scalar_type())) return "dtype";
  } else if (c.variant.out_dtype.has_value()) {
    out_type = out_type_index(*c.variant.out_dtype);
    if (out_type < 0) return "dtype";
  }
  if (addend.has_value() && out_type_index(addend->scalar_type()) < 0) return "dtype";
  if (c.a.scalar_type() != at::kFloat8_e4m3fn || c.b.scalar_type() != at::kFloat8_e4m3fn ||
      c.a_scale.scalar_type() != at::kFloat || c.b_scale.scalar_type() != at::kFloat ||
      c.info.scalar_type() != at::kInt) {
    return "dtype";
  }
  const bool masked = is_masked(c.kind);
  const int64_t dims = masked ? 3 : 2;  // a, a_scale, out and C; b and b_scale are always 3-D
  if (c.a.dim() != dims || c.a_scale.dim() != dims || c.b.dim() != 3 || c.b_scale.dim() != 3 || c.info.dim() != 1 ||
      (out.has_value() && out->dim() != dims) || (addend.has_value() && addend->dim() != dims)) {
    return "shape";
  }
  const int64_t groups = c.b.size(0), n = c.b.size(1), k = c.b.size(2);
  if (groups < 1) return "shape";
  if (has_table(c.kind) && groups > kMaxTableGroups) return "groups";
  if (masked && c.a.size(0) != groups) return "shape";
  const int64_t m = masked ? c.a.size(1) : c.a.size(0);
  if (c.a.size(-1) != k || !n_k_ok(n, k)) return "shape";
  const int64_t k_blocks = ceil_div(k, kScaleGroup);
  // (groups, m, last) for the masked kind, else (m, last)
  auto rows_then = [&](const at::Tensor& t, int64_t last) {
    return masked ? t.size(0) == groups && t.size(1) == m && t.size(2) == last : t.size(0) == m && t.size(1) == last;
  };
  if (!rows_then(c.a_scale, k_blocks)) return "shape";
  if (c.b_scale.size(0) != groups || c.b_scale.size(1) != ceil_div(n, kScaleGroup) || c.b_scale.size(2) != k_blocks) {
    return "shape";
  }
  const int64_t info_size = c.kind == Kind::kGroupedContiguous ? m : groups + (c.kind == Kind::kGroupedOffsets);
  if (c.info.size(0) != info_size) return "shape";
  if (out.has_value() && !rows_then(*out, n)) return "shape";
  if (addend.has_value() && !rows_then(*addend, n)) return "shape";
  if (const char* why = layout_reason(c.a, 16)) return why;
  if (const char* why = layout_reason(c.b, 16)) return why;
  for (const std::optional<at::Tensor>* x : {&out, &addend}) {  // rows of 16 bytes
    if (x->has_value()) {
      if (const char* why = layout_reason(**x, 16 / (*x)->element_size())) return why;
    }
  }
  if (c.info.numel() > 1 && c.info.stride(0) != 1) return "layout";
  if (masked && (!c.expected_m.has_value() || *c.expected_m < 0)) return "hint";
  p->out_type = static_cast<OutType>(out_type);
  p->c_kind = c.variant.accumulate ? CKind::kOut
              : addend.has_value() ? static_cast<CKind>(1 + out_type_index(addend->scalar_type()))
                                   : CKind::kNone;
  // _require_no_overlap of an output variant: out is written while the others are read (a C that
  // is the same view as out included: Python asks for accumulate=True then)
  if (p->variant() && out.has_value()) {
    const at::Tensor* c_read = addend.has_value() ? &*addend : nullptr;
    if (overlaps(*out, {&c.a, &c.a_scale, &c.b, &c.b_scale, &c.info, c_read})) return "overlap";
  }
  p->m = m;
  p->n = n;
  p->k = k;
  p->num_groups = groups;
  // Problem's expected_m: the masked kind's hint clamped into [1, max_m] (checks._masked_expected_m),
  // else the rows per group rounded up (Problem.__init__); tests/test_native.py compares the keys.
  p->expected_m = masked ? (m > 0 ? std::max<int64_t>(1, std::min(*c.expected_m, m)) : 1) : ceil_div(m, groups);
  p->rows = masked ? groups * m : m;
  p->k_blocks = k_blocks;
  p->a_scale_layout = grouped_a_scale_layout(c.kind, c.a_scale);
  return nullptr;
}

// check_arguments, then what the native path needs besides: one CUDA device, rows to compute.
const char* inspect(const Call& c, GroupedProblem* p) {
  if (const char* why = check_arguments(c, p)) return why;
  if (const char* why = device_reason(c.a, {&c.a_scale, &c.b, &c.b_scale, &c.info}, c.out)) return why;
  if (c.variant.c.has_value() && c.variant.c->device() != c.a.device()) return "device";
  if (p->rows == 0) return "empty";
  return nullptr;
}

// The kernel's operands but group_info (GROUPED_OPERANDS), as deep_tile.gemm.launch.grouped_operands
// makes them: 2-D views of a, out and b, b_scale contiguous, a_scale as the kernel reads it.
struct GroupedViews {
  at::Tensor a, a_scale, b, b_scale, out, c;  // c: an output variant's C (the addend, or out itself)
};

GroupedViews views_of(const Call& c, const GroupedProblem& p, const at::Tensor& out) {
  GroupedViews v;
  v.a = c.a.as_strided({p.rows, p.k}, {c.a.stride(-2), 1});
  v.out = out.as_strided({p.rows, p.n}, {out.stride(-2), 1});
  if (p.variant()) {
    const std::optional<at::Tensor>& addend = c.variant.c;
    v.c = addend.has_value() ? addend->as_strided({p.rows, p.n}, {addend->stride(-2), 1}) : v.out;
  }
  v.b = c.b.as_strided({p.num_groups * p.n, p.k}, {c.b.stride(1), 1});
  v.b_scale = c.b_scale.is_contiguous() ? c.b_scale : c.b_scale.contiguous();
  at::Tensor scale = c.a_scale;
  if (p.a_scale_layout == AScaleLayout::kCopy) {
    scale = tma_aligned_copy(scale);
    count_a_scale_copy();
  } else if (p.a_scale_layout == AScaleLayout::kRowMajorCopy) {
    scale = row_major_copy(scale);
    count_a_scale_copy();
  }
  if (is_masked(c.kind)) {
    // Row-major: [G * max_m, K blocks]; column-major per group: [G * K blocks, max_m], a row of
    // max_m floats per (group, K block) (deep_tile.kernels.fp8_gemm.a_scale_masked_columns).
    scale = reads_row_major(p.a_scale_layout) ? scale.view({p.rows, p.k_blocks})
                                              : scale.as_strided({p.num_groups * p.k_blocks, p.m}, {align4(p.m), 1});
  }
  v.a_scale = scale;
  return v;
}

}  // namespace

Kind grouped_kind(const std::string& name) {
  for (int i = 0; i < kNumKinds; ++i) {
    if (name == kKindNames[i] && static_cast<Kind>(i) != Kind::kDense && static_cast<Kind>(i) != Kind::kKGrouped) {
      return static_cast<Kind>(i);
    }
  }
  throw std::invalid_argument("deep_tile native: not a grouped problem kind: '" + name + "'");
}

namespace {

PlanKey plan_key(Kind kind, const GroupedProblem& p, int64_t device, int64_t limit) {
  PlanKey key;
  key.device = device;
  key.kind = kind;
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.num_groups = p.num_groups;
  key.expected_m = p.expected_m;
  key.sms_limit = limit;
  key.a_scale_row_major = reads_row_major(p.a_scale_layout);
  key.out_type = p.out_type;
  key.c_kind = p.c_kind;
  return key;
}

}  // namespace

at::Tensor m_grouped_fp8_gemm(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
                              const std::optional<at::Tensor>& out, const GroupedOutput& variant) {
  const Call c{kind, a, a_scale, b, b_scale, info, expected_m, out, variant};
  GroupedProblem p;
  if (inspect(c, &p) != nullptr) {
    count_python_call();
    return python_grouped_path(kind, a, a_scale, b, b_scale, info, out, expected_m, variant.c, variant.accumulate,
                               variant.out_dtype);
  }
  c10::DeviceGuard device_guard(a.device());
  const int64_t limit = sms_limit();
  const PlanKey key = plan_key(kind, p, a.device().index(), limit);
  PlanPtr plan = cached_plan(key, [&] {
    return make_grouped_plan(kind, a, a_scale, b, b_scale, info, out, expected_m, limit, variant.c,
                             variant.accumulate, variant.out_dtype);
  });
  at::Tensor result;
  if (out.has_value()) {
    result = *out;
  } else {
    std::vector<int64_t> sizes(a.sizes().begin(), a.sizes().end());
    sizes.back() = p.n;
    result = at::empty(sizes, a.options().dtype(p.out_type == OutType::kFloat32 ? at::kFloat : at::kBFloat16));
  }
  const GroupedViews v = views_of(c, p, result);
  launch_plan(*plan, Operands{{&v.a, &v.a_scale, &v.b, &v.b_scale, &v.out, &info, &v.c}, p.variant() ? 7 : 6});
  count_native_call();
  return result;
}

const char* grouped_fast_check_reason(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                                      const at::Tensor& b_scale, const at::Tensor& info,
                                      std::optional<int64_t> expected_m, const std::optional<at::Tensor>& out,
                                      bool check_device, const GroupedOutput& variant) {
  const Call c{kind, a, a_scale, b, b_scale, info, expected_m, out, variant};
  GroupedProblem p;
  const char* why = check_device ? inspect(c, &p) : check_arguments(c, &p);  // fills p first
  return fast_check_answer(why, check_device, p.rows == 0);
}

std::tuple<PlanKey, std::vector<at::Tensor>> grouped_operands(
    Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
    const at::Tensor& info, std::optional<int64_t> expected_m, const at::Tensor& out, const GroupedOutput& variant) {
  const std::optional<at::Tensor> out_arg = out;
  const Call c{kind, a, a_scale, b, b_scale, info, expected_m, out_arg, variant};
  GroupedProblem p;
  const char* why = check_arguments(c, &p);  // fills p first
  require_operands(why, p.rows == 0, true);
  const GroupedViews v = views_of(c, p, out);
  std::vector<at::Tensor> operands{v.a, v.a_scale, v.b, v.b_scale, v.out, info};
  if (p.variant()) operands.push_back(v.c);
  return {plan_key(kind, p, 0, 0), operands};
}

}  // namespace deep_tile_native
