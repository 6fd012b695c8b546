#include "python_bridge.h"

#include <torch/csrc/utils/pybind.h>

#include <atomic>

namespace py = pybind11;

namespace deep_tile_native {
namespace {

struct Bridge {
  py::object plan, python_path, launch_error, report_first_launch;
};

// Leaked on purpose: Python objects must not be released after the interpreter is finalised.
Bridge* g_bridge = nullptr;
std::atomic<int64_t> g_sms_limit{0};

const Bridge& bridge() {
  if (g_bridge == nullptr) throw std::runtime_error("deep_tile native: the Python bridge is not installed");
  return *g_bridge;
}

py::object optional_tensor(const std::optional<at::Tensor>& t) {
  return t.has_value() ? py::cast(*t) : py::none();
}

Box box_of(const py::dict& plan, const char* name) {
  auto pair = plan[name].cast<std::pair<uint32_t, uint32_t>>();
  return Box{pair.first, pair.second};
}

}  // namespace

void install_bridge(const py::object& module) {
  auto* b = new Bridge{module.attr("plan"), module.attr("python_path"), module.attr("launch_error"),
                       module.attr("report_first_launch")};
  g_bridge = b;  // a previous bridge (re-installed by tests) is leaked, as above
}

bool bridge_installed() { return g_bridge != nullptr; }

void set_sms_limit(int64_t limit) { g_sms_limit.store(limit, std::memory_order_relaxed); }

int64_t sms_limit() { return g_sms_limit.load(std::memory_order_relaxed); }

PlanPtr make_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                  const std::optional<at::Tensor>& out, int64_t limit) {
  py::gil_scoped_acquire gil;
  py::object result = bridge().plan(a, a_scale, b, b_scale, optional_tensor(out), limit);
  auto plan = std::make_shared<GemmPlan>();
  if (result.is_none()) {
    plan->python_only = true;
    return plan;
  }
  py::dict d = result.cast<py::dict>();
  plan->kernel = reinterpret_cast<CUkernel>(static_cast<uintptr_t>(d["kernel"].cast<uint64_t>()));
  plan->symbol = d["symbol"].cast<std::string>();
  plan->label = d["label"].cast<std::string>();
  plan->grid = d["grid"].cast<uint32_t>();
  plan->block = d["block"].cast<uint32_t>();
  plan->smem = d["smem"].cast<uint32_t>();
  plan->cluster = d["cluster"].cast<uint32_t>();
  plan->a = box_of(d, "box_a");
  plan->b = box_of(d, "box_b");
  plan->a_scale = box_of(d, "box_a_scale");
  plan->d = box_of(d, "box_d");
  plan->d_swizzle = d["d_swizzle"].cast<uint32_t>();
  plan->store_d_map = d["store_d_map"].cast<bool>();
  plan->a_scale_row_major = d["a_scale_row_major"].cast<bool>();
  plan->group_size = d["group_size"].cast<int32_t>();
  for (auto code : d["args"].cast<std::vector<int>>()) {
    if (code < 0 || code >= static_cast<int>(Arg::kCount)) {
      throw std::runtime_error("deep_tile native: the bridge sent an unknown argument code " + std::to_string(code));
    }
    plan->args.push_back(static_cast<Arg>(code));
  }
  return plan;
}

at::Tensor python_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                       const std::optional<at::Tensor>& out) {
  py::gil_scoped_acquire gil;
  return bridge().python_path(a, a_scale, b, b_scale, optional_tensor(out)).cast<at::Tensor>();
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
