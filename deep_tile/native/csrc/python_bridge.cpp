#include "python_bridge.h"

#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace py = pybind11;

namespace deep_tile_native {
namespace {

struct Bridge {
  py::object plan, python_path, plan_grouped, python_grouped_path, plan_acc, python_acc_path, plan_k_grouped,
      python_k_grouped_path, launch_error, report_first_launch;
};

// Leaked on purpose: Python objects must not be released after the interpreter is finalised.
Bridge* g_bridge = nullptr;
std::atomic<int64_t> g_sms_limit{0};
std::atomic<bool> g_pdl{true};

const Bridge& bridge() {
  if (g_bridge == nullptr) throw std::runtime_error("deep_tile native: the Python bridge is not installed");
  return *g_bridge;
}

py::object optional_tensor(const std::optional<at::Tensor>& t) {
  return t.has_value() ? py::cast(*t) : py::none();
}

py::object optional_int(std::optional<int64_t> v) { return v.has_value() ? py::cast(*v) : py::none(); }

py::object optional_dtype(std::optional<at::ScalarType> t) { return t.has_value() ? py::cast(*t) : py::none(); }

[[noreturn]] void bad_spec(const std::vector<int64_t>& code) {
  std::string text;
  for (int64_t v : code) text += (text.empty() ? "" : ", ") + std::to_string(v);
  throw std::runtime_error("deep_tile native: the bridge sent an argument spec this library cannot fill: [" + text +
                           "] (deep_tile/gemm/kernel_args.py and csrc/gemm_plan.h disagree)");
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

}  // namespace

void install_bridge(const py::object& module) {
  auto* b = new Bridge{module.attr("plan"),           module.attr("python_path"),
                       module.attr("plan_grouped"),   module.attr("python_grouped_path"),
                       module.attr("plan_acc"),       module.attr("python_acc_path"),
                       module.attr("plan_k_grouped"), module.attr("python_k_grouped_path"),
                       module.attr("launch_error"),   module.attr("report_first_launch")};
  g_bridge = b;  // a previous bridge (re-installed by tests) is leaked, as above
}

bool bridge_installed() { return g_bridge != nullptr; }

void set_sms_limit(int64_t limit) { g_sms_limit.store(limit, std::memory_order_relaxed); }

int64_t sms_limit() { return g_sms_limit.load(std::memory_order_relaxed); }

void set_pdl(bool enabled) { g_pdl.store(enabled, std::memory_order_relaxed); }

bool pdl() { return g_pdl.load(std::memory_order_relaxed); }

namespace {

// The plan dict of bridge.plan / plan_grouped, checked (GIL held).
PlanPtr plan_of(const py::object& result) {
  auto plan = std::make_shared<GemmPlan>();
  py::dict d = result.cast<py::dict>();
  plan->kernel = reinterpret_cast<CUkernel>(static_cast<uintptr_t>(d["kernel"].cast<uint64_t>()));
  plan->symbol = d["symbol"].cast<std::string>();
  plan->label = d["label"].cast<std::string>();
  plan->grid = d["grid"].cast<uint32_t>();
  plan->block = d["block"].cast<uint32_t>();
  plan->smem = d["smem"].cast<uint32_t>();
  plan->cluster = d["cluster"].cast<uint32_t>();
  int maps = 0;
  for (const auto& code : d["args"].cast<std::vector<std::vector<int64_t>>>()) {
    plan->args.push_back(spec_of(code));
    const SpecKind kind = plan->args.back().kind;
    maps += kind == SpecKind::kTensorMap || kind == SpecKind::kZeroMap;
  }
  if (plan->args.size() > kMaxArgs || maps > kMaxMaps) {
    throw std::runtime_error("deep_tile native: a plan with " + std::to_string(plan->args.size()) + " arguments and " +
                             std::to_string(maps) + " tensor maps; this library fills at most " +
                             std::to_string(kMaxArgs) + " and " + std::to_string(kMaxMaps));
  }
  return plan;
}

}  // namespace

PlanPtr make_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                  const std::optional<at::Tensor>& out, int64_t limit) {
  py::gil_scoped_acquire gil;
  return plan_of(bridge().plan(a, a_scale, b, b_scale, optional_tensor(out), limit));
}

PlanPtr make_grouped_plan(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                          const at::Tensor& b_scale, const at::Tensor& info, const std::optional<at::Tensor>& out,
                          std::optional<int64_t> expected_m, int64_t limit, const std::optional<at::Tensor>& c,
                          bool accumulate, std::optional<at::ScalarType> out_dtype) {
  py::gil_scoped_acquire gil;
  return plan_of(bridge().plan_grouped(kind_name(kind), a, a_scale, b, b_scale, info, optional_tensor(out),
                                       optional_int(expected_m), limit, optional_tensor(c), accumulate,
                                       optional_dtype(out_dtype)));
}

at::Tensor python_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                       const std::optional<at::Tensor>& out) {
  py::gil_scoped_acquire gil;
  return bridge().python_path(a, a_scale, b, b_scale, optional_tensor(out)).cast<at::Tensor>();
}

at::Tensor python_grouped_path(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                               const at::Tensor& b_scale, const at::Tensor& info, const std::optional<at::Tensor>& out,
                               std::optional<int64_t> expected_m, const std::optional<at::Tensor>& c, bool accumulate,
                               std::optional<at::ScalarType> out_dtype) {
  py::gil_scoped_acquire gil;
  py::object result = bridge().python_grouped_path(kind_name(kind), a, a_scale, b, b_scale, info,
                                                  optional_tensor(out), optional_int(expected_m), optional_tensor(c),
                                                  accumulate, optional_dtype(out_dtype));
  return result.cast<at::Tensor>();
}

PlanPtr make_acc_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
                      std::optional<at::ScalarType> out_dtype, bool b_scale_1d, int64_t limit) {
  py::gil_scoped_acquire gil;
  return plan_of(bridge().plan_acc(a, a_scale, b, b_scale, optional_tensor(c), accumulate, optional_tensor(out),
                                   optional_dtype(out_dtype), b_scale_1d, limit));
}

at::Tensor python_acc_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                           const at::Tensor& b_scale, const std::optional<at::Tensor>& c, bool accumulate,
                           const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype,
                           bool b_scale_1d) {
  py::gil_scoped_acquire gil;
  return bridge()
      .python_acc_path(a, a_scale, b, b_scale, optional_tensor(c), accumulate, optional_tensor(out),
                       optional_dtype(out_dtype), b_scale_1d)
      .cast<at::Tensor>();
}

PlanPtr make_k_grouped_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                            const at::Tensor& b_scale, const at::Tensor& group_sizes,
                            const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
                            std::optional<at::ScalarType> out_dtype, int64_t limit) {
  py::gil_scoped_acquire gil;
  return plan_of(bridge().plan_k_grouped(a, a_scale, b, b_scale, group_sizes, optional_tensor(c), accumulate,
                                         optional_tensor(out), optional_dtype(out_dtype), limit));
}

at::Tensor python_k_grouped_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                                 const at::Tensor& b_scale, const at::Tensor& group_sizes,
                                 const std::optional<at::Tensor>& c, bool accumulate,
                                 const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype) {
  py::gil_scoped_acquire gil;
  return bridge()
      .python_k_grouped_path(a, a_scale, b, b_scale, group_sizes, optional_tensor(c), accumulate,
                             optional_tensor(out), optional_dtype(out_dtype))
      .cast<at::Tensor>();
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
