// The Python module of the native host path (built by deep_tile/native/build.py; its name,
// TORCH_EXTENSION_NAME, carries the build key). deep_tile/native/loader.py installs the bridge
// and registers the dispatcher kernels; the other functions serve tests and benchmarks.
#include <torch/csrc/utils/pybind.h>

#include "checks.h"
#include "gemm_op.h"
#include "gemm_plan.h"
#include "grouped_op.h"
#include "launch.h"
#include "layouts.h"
#include "ops.h"
#include "python_bridge.h"
#include "tensor_maps.h"

namespace py = pybind11;
using namespace deep_tile_native;

// Bumped when the bridge protocol (plan dict, callbacks) changes; checked by the loader.
constexpr int kBridgeVersion = 7;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deep_tile's native host path for the FP8 GEMMs (see deep_tile/native/__init__.py)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  // Facts the Python side also holds, exposed so tests/test_native.py can compare the two.
  m.attr("SCALE_GROUP") = kScaleGroup;
  m.attr("N_MULTIPLE") = kNMultiple;
  m.attr("K_MULTIPLE") = kKMultiple;
  m.attr("MAX_OPERANDS") = kMaxOperands;
  m.attr("MAX_TABLE_GROUPS") = kMaxTableGroups;
  py::list op_names;
  for (const char* name : kOpNames) op_names.append(std::string(kOpNamespace) + "::" + name);
  m.attr("OP_NAMES") = py::tuple(op_names);
  py::list kinds;
  for (const char* name : kKindNames) kinds.append(name);
  m.attr("PROBLEM_KINDS") = py::tuple(kinds);
  py::list row_major_only;
  for (Kind kind : kRowMajorAScaleKinds) row_major_only.append(kind_name(kind));
  m.attr("ROW_MAJOR_A_SCALE_KINDS") = py::tuple(row_major_only);
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
    return std::string(kAScaleLayoutNames[static_cast<int>(a_scale_layout(a_scale, a_scale.size(0), a_scale.size(1)))]);
  }, py::arg("a_scale"), "How the native path passes a 2-D a_scale: 'aligned', 'row_major' or 'copy'.");
  m.def("grouped_a_scale_layout", [](const std::string& kind, const at::Tensor& a_scale) {
    return std::string(kAScaleLayoutNames[static_cast<int>(grouped_a_scale_layout(grouped_kind(kind), a_scale))]);
  }, py::arg("kind"), py::arg("a_scale"),
        "How the native path passes a grouped kind's a_scale (2-D, or 3-D for grouped_masked): 'aligned', "
        "'row_major', 'copy' (into the aligned layout) or 'row_major_copy'.");
  m.def("install_bridge", &install_bridge, "Remember the Python bridge module (deep_tile.native.bridge).");
  m.def("set_sms_limit", &set_sms_limit, py::arg("limit"),
        "The deep_tile.set_num_sms limit (0: none) the next calls plan with.");
  m.def("set_pdl", &set_pdl, py::arg("enabled"),
        "The deep_tile.set_pdl setting the next launches use (programmatic stream serialization).");
  m.def("register_ops", &register_ops, "Register the native kernels of the ops in OP_NAMES (CUDA and CPU keys).");
  m.def("deregister_ops", &deregister_ops, "Remove those registrations (the Python kernels take over again).");
  m.def("ops_registered", &ops_registered);
  m.def("fp8_gemm", &fp8_gemm, py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"),
        py::arg("out") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path without the dispatcher: out (or a new bf16 tensor) = a @ b.T, scaled.");
  m.def("fast_check_reason", &fast_check_reason, py::arg("a"), py::arg("a_scale"), py::arg("b"),
        py::arg("b_scale"), py::arg("out") = py::none(),
        "Why a call would go to the Python path ('' when the native path takes it).");
  m.def("m_grouped_fp8_gemm",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const std::optional<at::Tensor>& out) {
          return m_grouped_fp8_gemm(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, out);
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("out") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of a grouped GEMM without the dispatcher (kind: a grouped ProblemKind value; info: "
        "m_indices, offsets or masked_m; expected_m: the masked kind's hint). Returns out or a new bf16 tensor.");
  m.def("grouped_fast_check_reason",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const std::optional<at::Tensor>& out, bool check_device) {
          return std::string(grouped_fast_check_reason(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m,
                                                       out, check_device));
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("out") = py::none(), py::arg("check_device") = true,
        "Why a grouped call would go to the Python path ('' when the native path takes it); check_device=False "
        "leaves the device rule out.");
  m.def("grouped_operands",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const at::Tensor& out) {
          return grouped_operands(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, out);
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m"), py::arg("out"),
        "For tests, any device: (problem key as deep_tile.problem.Problem.key() spells it, [the kernel's operands "
        "in GROUPED_OPERANDS order]) of a grouped call the fast check takes (else ValueError).");
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
  }, "Counters of this process: calls per path (every op, dense and grouped), plans, tensor-map cache.");
  m.def("clear", []() {
    clear_plans();
    clear_tensor_map_cache();
    reset_gemm_stats();
  }, "Forget the cached plans and tensor maps and zero the counters.");
}
