// The Python module of the native host path (built by deep_tile/native/build.py; its name,
// TORCH_EXTENSION_NAME, carries the build key). deep_tile/native/loader.py installs the bridge
// and registers the dispatcher kernels; the other functions serve tests and benchmarks.
#include <torch/csrc/utils/pybind.h>

#include "gemm_op.h"
#include "gemm_plan.h"
#include "python_bridge.h"
#include "tensor_maps.h"

namespace py = pybind11;
using namespace deep_tile_native;

// Bumped when the bridge protocol (plan dict, callbacks) changes; checked by the loader.
constexpr int kBridgeVersion = 3;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deep_tile's native host path for the FP8 GEMM (see deep_tile/native/__init__.py)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  m.def("install_bridge", &install_bridge, "Remember the Python bridge module (deep_tile.native.bridge).");
  m.def("set_sms_limit", &set_sms_limit, py::arg("limit"),
        "The deep_tile.set_num_sms limit (0: none) the next calls plan with.");
  m.def("register_ops", &register_ops,
        "Register the native kernels of deep_tile::fp8_gemm and fp8_gemm_out (CUDA and CPU keys).");
  m.def("deregister_ops", &deregister_ops, "Remove those registrations (the Python kernels take over again).");
  m.def("ops_registered", &ops_registered);
  m.def("fp8_gemm", &fp8_gemm, py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"),
        py::arg("out") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path without the dispatcher: out (or a new bf16 tensor) = a @ b.T, scaled.");
  m.def("fast_check_reason", &fast_check_reason, py::arg("a"), py::arg("a_scale"), py::arg("b"),
        py::arg("b_scale"), py::arg("out") = py::none(),
        "Why a call would go to the Python path ('' when the native path takes it).");
  m.def("stats", []() {
    GemmStats g = gemm_stats();
    MapCacheStats t = tensor_map_cache_stats();
    py::dict d;
    d["native_calls"] = g.native_calls;
    d["python_calls"] = g.python_calls;
    d["plans_created"] = g.plans_created;
    d["a_scale_copies"] = g.a_scale_copies;
    d["plans"] = plan_count();
    d["tensor_map_hits"] = t.hits;
    d["tensor_map_misses"] = t.misses;
    d["tensor_maps"] = t.size;
    return d;
  }, "Counters of this process: calls per path, plans, tensor-map cache.");
  m.def("clear", []() {
    clear_plans();
    clear_tensor_map_cache();
    reset_gemm_stats();
  }, "Forget the cached plans and tensor maps and zero the counters.");
}
