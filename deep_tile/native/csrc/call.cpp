#include "call.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "launch.h"
#include "python_bridge.h"
#include "signature.h"

namespace deep_tile_native {

int op_family(c10::string_view name) {
  for (int i = 0; i < kNumOpFamilies; ++i) {
    if (name == kOpFamilies[i]) return i;
  }
  throw std::invalid_argument("deep_tile native: not an op family: '" + std::string(name) + "'");
}

namespace {

// [first, end) byte addresses `x` can reach, the hull of its strides: the interval test the plan's
// disjoint pairs name (deep_tile.gemm.checks' overlap test: the second tensor skipped when empty).
std::pair<uintptr_t, uintptr_t> span(const at::Tensor& x) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(x.data_ptr());
  int64_t extent = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) > 0) extent += (x.size(d) - 1) * std::abs(x.stride(d));
  }
  return {start, start + static_cast<uintptr_t>(extent) * x.element_size()};
}

bool overlapping(const GemmPlan& plan, const Call& call) {
  for (const auto& [i, j] : plan.disjoint) {
    const at::Tensor& y = *call.tensors[j];
    if (y.numel() == 0) continue;
    const auto [x0, x1] = span(*call.tensors[i]);
    const auto [y0, y1] = span(y);
    if (x0 < y1 && y0 < x1) return true;
  }
  return false;
}

c10::IntArrayRef sizes_of(const Layout& l) { return {l.sizes, static_cast<size_t>(l.dim)}; }
c10::IntArrayRef strides_of(const Layout& l) { return {l.strides, static_cast<size_t>(l.dim)}; }

// A resolved call: its plan, output and operands (`made` holds the ones that are new tensors).
struct Resolved {
  PlanPtr plan;
  bool found = false;
  at::Tensor output;  // the output a call without out gets (or the answer Python gave)
  std::array<at::Tensor, kMaxOperands> made;
  Operands operands;
};

// The plan of the call's signature (made by Python when new, or when its overlap tests fail), the
// output and the operands. Returns false when Python answered the call itself (no rows).
bool resolve(const Call& call, Resolved* r) {
  const int64_t limit = sms_limit();
  Signature sig;
  const bool keyed = make_signature(call, limit, &sig);
  r->plan = keyed ? find_plan(sig) : nullptr;
  r->found = r->plan != nullptr;
  if (r->plan == nullptr || overlapping(*r->plan, call)) {
    Planned planned;
    try {
      planned = make_plan(call, limit);
    } catch (...) {
      count_python_call();
      throw;
    }
    if (planned.plan == nullptr) {
      count_python_call();
      r->output = std::move(planned.output);
      return false;
    }
    if (keyed && !r->found) {
      store_plan(sig, planned.plan);
      count_plan_created();
    }
    r->plan = std::move(planned.plan);
  }
  const GemmPlan& plan = *r->plan;
  const at::Tensor* slots[kSlots];
  for (int i = 0; i < kSlots; ++i) slots[i] = call.tensors[i];
  if (plan.allocates) {
    r->output = at::empty(sizes_of(plan.output), call.tensors[0]->options().dtype(plan.output_type));
    slots[kOutSlot] = &r->output;
  }
  r->operands.count = static_cast<int>(plan.operands.size());
  for (int i = 0; i < r->operands.count; ++i) {
    const OperandRecipe& o = plan.operands[i];
    const at::Tensor* t = slots[o.slot];
    if (o.copied) {
      at::Tensor copy = at::empty({o.copy_numel}, t->options())
                            .as_strided(sizes_of(o.copy), strides_of(o.copy), o.copy.offset);
      copy.copy_(*t);
      if (o.scale_copy) count_a_scale_copy();
      r->made[i] = std::move(copy);
      t = &r->made[i];
    }
    if (o.viewed) {
      r->made[i] = t->as_strided(sizes_of(o.view), strides_of(o.view), t->storage_offset() + o.view.offset);
      t = &r->made[i];
    }
    r->operands.tensors[i] = t;
  }
  return true;
}

}  // namespace

at::Tensor run_call(const Call& call) {
  Resolved r;
  const at::Tensor* a = call.tensors[0];
  std::optional<c10::DeviceGuard> guard;
  if (a != nullptr && a->defined() && a->is_cuda()) guard.emplace(a->device());
  if (!resolve(call, &r)) return r.output;
  launch_plan(*r.plan, r.operands);
  count_native_call();
  return r.plan->allocates ? r.output : *call.tensors[kOutSlot];
}

std::tuple<bool, at::Tensor, std::vector<at::Tensor>> resolve_call(const Call& call) {
  Resolved r;
  if (!resolve(call, &r)) return {false, r.output, {}};
  std::vector<at::Tensor> operands;
  for (int i = 0; i < r.operands.count; ++i) operands.push_back(*r.operands.tensors[i]);
  return {r.found, r.plan->allocates ? r.output : *call.tensors[kOutSlot], operands};
}

}  // namespace deep_tile_native
