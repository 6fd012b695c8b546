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
constexpr int kBridgeVersion = 4;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deep_tile's native host path for the FP8 GEMM (see deep_tile/native/__init__.py)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  // Facts the Python side also holds, exposed so tests/test_native.py can compare the two.
  m.attr("SCALE_GROUP") = kScaleGroup;
  m.attr("MAX_OPERANDS") = kMaxOperands;
  m.attr("OP_NAMES") = py::make_tuple(std::string(kOpNamespace) + "::" + kOpNames[0],
                                      std::string(kOpNamespace) + "::" + kOpNames[1]);
  py::dict spec_kinds;
  spec_kinds["tensor_map"] = static_cast<int>(SpecKind::kTensorMap);
  spec_kinds["zero_map"] = static_cast<int>(SpecKind::kZeroMap);
  spec_kinds["pointer"] = static_cast<int>(SpecKind::kPointer);
  spec_kinds["size"] = static_cast<int>(SpecKind::kSize);
  spec_kinds["stride"] = static_cast<int>(SpecKind::kStride);
  spec_kinds["value"] = static_cast<int>(SpecKind::kValue);
  m.attr("SPEC_KINDS") = spec_kinds;
  py::dict elements;
  elements["uint8"] = static_cast<int>(Element::kUint8);
  elements["bfloat16"] = static_cast<int>(Element::kBfloat16);
  elements["float32"] = static_cast<int>(Element::kFloat32);
  m.attr("ELEMENTS") = elements;
  m.def("a_scale_layout", [](const at::Tensor& a_scale) {
    static const char* names[] = {"aligned", "row_major", "copy"};
    return std::string(names[static_cast<int>(a_scale_layout(a_scale, a_scale.size(0), a_scale.size(1)))]);
  }, py::arg("a_scale"), "How the native path passes a 2-D a_scale: 'aligned', 'row_major' or 'copy'.");
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
