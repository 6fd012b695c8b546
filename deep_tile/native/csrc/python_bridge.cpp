#include "python_bridge.h"

#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace py = pybind11;

namespace deep_tile_native {
namespace {

struct Bridge {
  py::object plan, launch_error, report_first_launch;
};

// Leaked on purpose: Python objects must not be released after the interpreter is finalised.
Bridge* g_bridge = nullptr;
std::atomic<int64_t> g_sms_limit{0};
std::atomic<bool> g_pdl{true};

const Bridge& bridge() {
  if (g_bridge == nullptr) throw std::runtime_error("deep_tile native: the Python bridge is not installed");
  return *g_bridge;
}

[[noreturn]] void bad_plan(const std::string& what) {
  throw std::runtime_error("deep_tile native: the bridge sent " + what +
                           " (deep_tile/native/bridge.py and csrc/ disagree)");
}

[[noreturn]] void bad_spec(const std::vector<int64_t>& code) {
  std::string text;
  for (int64_t v : code) text += (text.empty() ? "" : ", ") + std::to_string(v);
  bad_plan("an argument spec this library cannot fill: [" + text + "]");
}

// One encoded spec of deep_tile.gemm.kernel_args.encode, checked.
ArgSpec spec_of(const std::vector<int64_t>& c) {
  if (c.empty() || c[0] < 0 || c[0] > static_cast<int64_t>(SpecKind::kValue)) bad_spec(c);
  ArgSpec s;
  s.kind = static_cast<SpecKind>(c[0]);
  auto operand_ok = [&](size_t i) { return c.size() > i && c[i] >= 0 && c[i] < kMaxOperands; };
  auto dim_ok = [&](size_t i) { return c.size() > i && (c[i] == 0 || c[i] == 1); };
  switch (s.kind) {
    case SpecKind::kTensorMap:
      if (c.size() != 10 || !operand_ok(1) || c[2] < 0 || c[2] > 2 || !dim_ok(3) || !dim_ok(4) || c[3] == c[4] ||
          (c[8] != 0 && c[8] != 64 && c[8] != 128 && c[8] != 256) || (c[9] != 0 && c[9] != c[6]))
        bad_spec(c);
      s.operand = static_cast<int8_t>(c[1]);
      s.element = static_cast<uint8_t>(c[2]);
      s.inner_dim = static_cast<int8_t>(c[3]);
      s.outer_dim = static_cast<int8_t>(c[4]);
      s.box_inner = static_cast<uint32_t>(c[5]);
      s.box_outer = static_cast<uint32_t>(c[6]);
      s.swizzle = static_cast<uint32_t>(c[7]);
      s.l2_promotion = static_cast<uint32_t>(c[8]);
      s.slab_rows = static_cast<uint32_t>(c[9]);
      break;
    case SpecKind::kZeroMap:
      if (c.size() != 1) bad_spec(c);
      break;
    case SpecKind::kPointer:
      if (c.size() != 2 || !operand_ok(1)) bad_spec(c);
      s.operand = static_cast<int8_t>(c[1]);
      break;
    case SpecKind::kSize:
    case SpecKind::kStride:
      if (c.size() != 3 || !operand_ok(1) || !dim_ok(2)) bad_spec(c);
      s.operand = static_cast<int8_t>(c[1]);
      s.inner_dim = static_cast<int8_t>(c[2]);
      break;
    case SpecKind::kValue:
      if (c.size() != 2) bad_spec(c);
      s.value = static_cast<int32_t>(c[1]);
      break;
  }
  return s;
}

// [sizes, strides] (+ offset) of bridge.describe.
Layout layout_of(const py::handle& sizes, const py::handle& strides, int64_t offset) {
  const auto s = sizes.cast<std::vector<int64_t>>();
  const auto t = strides.cast<std::vector<int64_t>>();
  if (s.size() != t.size() || s.size() > kMaxDims) bad_plan("a layout of more than " + std::to_string(kMaxDims) + " dims");
  Layout l;
  l.dim = static_cast<int>(s.size());
  for (int d = 0; d < l.dim; ++d) {
    l.sizes[d] = s[d];
    l.strides[d] = t[d];
  }
  l.offset = offset;
  return l;
}

OperandRecipe recipe_of(const py::handle& item) {
  const py::list r = item.cast<py::list>();
  if (r.size() != 4) bad_plan("an operand recipe that is not [slot, copy, view, scale]");
  OperandRecipe o;
  const int slot = r[0].cast<int>();
  if (slot < 0 || slot >= kSlots) bad_plan("an operand from slot " + std::to_string(slot));
  o.slot = static_cast<int8_t>(slot);
  if (!r[1].is_none()) {
    const py::list c = r[1].cast<py::list>();
    o.copied = true;
    o.copy_numel = c[0].cast<int64_t>();
    o.copy = layout_of(c[1], c[2], c[3].cast<int64_t>());
  }
  if (!r[2].is_none()) {
    const py::list v = r[2].cast<py::list>();
    o.viewed = true;
    o.view = layout_of(v[0], v[1], v[2].cast<int64_t>());
  }
  o.scale_copy = r[3].cast<bool>();
  return o;
}

// The plan dict of bridge.plan, checked (GIL held).
PlanPtr plan_of(const py::dict& d) {
  auto plan = std::make_shared<GemmPlan>();
  plan->kernel = reinterpret_cast<CUkernel>(static_cast<uintptr_t>(d["kernel"].cast<uint64_t>()));
  plan->symbol = d["symbol"].cast<std::string>();
  plan->label = d["label"].cast<std::string>();
  plan->grid = d["grid"].cast<uint32_t>();
  plan->block = d["block"].cast<uint32_t>();
  plan->smem = d["smem"].cast<uint32_t>();
  plan->cluster = d["cluster"].cast<uint32_t>();
  for (const auto& item : d["operands"]) plan->operands.push_back(recipe_of(item));
  const int count = static_cast<int>(plan->operands.size());
  if (count > kMaxOperands) bad_plan(std::to_string(count) + " operands");
  int maps = 0;
  for (const auto& code : d["args"].cast<std::vector<std::vector<int64_t>>>()) {
    plan->args.push_back(spec_of(code));
    const ArgSpec& spec = plan->args.back();
    maps += spec.kind == SpecKind::kTensorMap || spec.kind == SpecKind::kZeroMap;
    if (spec.operand >= count) bad_spec(code);
  }
  if (plan->args.size() > kMaxArgs || maps > kMaxMaps) {
    throw std::runtime_error("deep_tile native: a plan with " + std::to_string(plan->args.size()) + " arguments and " +
                             std::to_string(maps) + " tensor maps; this library fills at most " +
                             std::to_string(kMaxArgs) + " and " + std::to_string(kMaxMaps));
  }
  const py::object output = d["output"];
  if (!output.is_none()) {
    const py::list o = output.cast<py::list>();
    plan->allocates = true;
    const auto sizes = o[0].cast<std::vector<int64_t>>();
    if (sizes.size() > kMaxDims) bad_plan("an output of " + std::to_string(sizes.size()) + " dims");
    plan->output.dim = static_cast<int>(sizes.size());
    for (int d = 0; d < plan->output.dim; ++d) plan->output.sizes[d] = sizes[d];
    plan->output_type = o[1].cast<at::ScalarType>();
  }
  for (const auto& pair : d["disjoint"]) {
    const auto ij = pair.cast<std::vector<int>>();
    if (ij.size() != 2 || ij[0] < 0 || ij[0] >= kSlots || ij[1] < 0 || ij[1] >= kSlots) bad_plan("a bad slot pair");
    plan->disjoint.emplace_back(static_cast<int8_t>(ij[0]), static_cast<int8_t>(ij[1]));
  }
  return plan;
}

py::object slot_object(const at::Tensor* t) {
  return t != nullptr && t->defined() ? py::cast(*t) : py::none();
}

}  // namespace

void install_bridge(const py::object& module) {
  g_bridge = new Bridge{module.attr("plan"), module.attr("launch_error"), module.attr("report_first_launch")};
  // a previous bridge (re-installed by tests) is leaked, as above
}

bool bridge_installed() { return g_bridge != nullptr; }

void set_sms_limit(int64_t limit) { g_sms_limit.store(limit, std::memory_order_relaxed); }

int64_t sms_limit() { return g_sms_limit.load(std::memory_order_relaxed); }

void set_pdl(bool enabled) { g_pdl.store(enabled, std::memory_order_relaxed); }

bool pdl() { return g_pdl.load(std::memory_order_relaxed); }

Planned make_plan(const Call& call, int64_t limit) {
  py::gil_scoped_acquire gil;
  const auto& t = call.tensors;
  py::object expected_m = call.expected_m.has_value() ? py::cast(*call.expected_m) : py::none();
  py::object out_dtype = call.out_dtype.has_value() ? py::cast(*call.out_dtype) : py::none();
  py::object kind = call.kind.has_value() ? py::cast(std::string(*call.kind)) : py::none();
  py::object result = bridge().plan(kOpFamilies[call.op], slot_object(t[0]), slot_object(t[1]), slot_object(t[2]),
                                    slot_object(t[3]), slot_object(t[4]), slot_object(t[5]), slot_object(t[6]),
                                    expected_m, call.accumulate, out_dtype, kind, limit);
  if (py::isinstance<py::dict>(result)) return {plan_of(result.cast<py::dict>()), at::Tensor()};
  return {nullptr, result.cast<at::Tensor>()};
}

void raise_launch_error(const std::string& message) {
  py::gil_scoped_acquire gil;
  py::object error = bridge().launch_error(message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

void report_first_launch(const std::string& label, double maps_us, double launch_us) {
  py::gil_scoped_acquire gil;
  bridge().report_first_launch(label, maps_us, launch_us);
}

}  // namespace deep_tile_native
