// The Python module of the native host path (built by deep_tile/native/build.py; its name,
// TORCH_EXTENSION_NAME, carries the build key). deep_tile/native/loader.py installs the bridge
// and registers the dispatcher kernels; the other functions serve tests and benchmarks.
#include <torch/csrc/utils/pybind.h>

#include "call.h"
#include "gemm_plan.h"
#include "launch.h"
#include "ops.h"
#include "python_bridge.h"
#include "signature.h"
#include "tensor_maps.h"

namespace py = pybind11;
using namespace deep_tile_native;

// Bumped when the bridge protocol (plan dict, callbacks) changes; checked by the loader.
constexpr int kBridgeVersion = 10;

namespace {

using OptionalTensor = std::optional<at::Tensor>;

const at::Tensor* given(const OptionalTensor& t) { return t.has_value() ? &*t : nullptr; }

// A Call of family `op` over the slots' tensors (every tensor by reference: they outlive the call).
Call make_call(int op, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
               const OptionalTensor& info, const OptionalTensor& c, const OptionalTensor& out,
               std::optional<int64_t> expected_m, bool accumulate, std::optional<at::ScalarType> out_dtype,
               const std::optional<std::string>& kind) {
  Call call;
  call.op = op;
  call.tensors = {&a, &a_scale, &b, &b_scale, given(info), given(c), given(out)};
  call.expected_m = expected_m;
  call.accumulate = accumulate;
  call.out_dtype = out_dtype;
  if (kind.has_value()) call.kind = c10::string_view(*kind);
  return call;
}

// The op family of a grouped kind's plain op ("grouped_contiguous" -> m_grouped_fp8_gemm_contiguous).
int grouped_family(const std::string& kind) {
  const std::string prefix = "grouped_";
  if (kind.rfind(prefix, 0) != 0) throw std::invalid_argument("deep_tile native: not a grouped kind: '" + kind + "'");
  return op_family("m_grouped_fp8_gemm_" + kind.substr(prefix.size()));
}

#define DT_CALL_ARGS                                                                                            \
  py::arg("op"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info") = py::none(), \
      py::arg("c") = py::none(), py::arg("out") = py::none(), py::arg("expected_m") = py::none(),                 \
      py::arg("accumulate") = false, py::arg("out_dtype") = py::none(), py::arg("kind") = py::none()

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deep_tile's native host path for the FP8 GEMMs (see deep_tile/native/__init__.py)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  // What the Python side also names, exposed so tests/test_native.py can compare the two.
  m.attr("MAX_OPERANDS") = kMaxOperands;
  m.attr("MAX_ARGS") = kMaxArgs;
  m.attr("MAX_MAPS") = kMaxMaps;
  m.attr("MAX_DIMS") = kMaxDims;
  py::list op_names, families, slots;
  for (const char* name : kOpNames) op_names.append(std::string(kOpNamespace) + "::" + name);
  for (const char* name : kOpFamilies) families.append(name);
  for (const char* name : kSlotNames) slots.append(name);
  m.attr("OP_NAMES") = py::tuple(op_names);
  m.attr("OP_FAMILIES") = py::tuple(families);
  m.attr("SLOTS") = py::tuple(slots);
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
  m.def("install_bridge", &install_bridge, "Remember the Python bridge module (deep_tile.native.bridge).");
  m.def("set_sms_limit", &set_sms_limit, py::arg("limit"),
        "The deep_tile.set_num_sms limit (0: none) the next calls plan with.");
  m.def("set_pdl", &set_pdl, py::arg("enabled"),
        "The deep_tile.set_pdl setting the next launches use (programmatic stream serialization).");
  m.def("register_ops", &register_ops, "Register the native kernels of the ops in OP_NAMES (CUDA and CPU keys).");
  m.def("deregister_ops", &deregister_ops, "Remove those registrations (the Python kernels take over again).");
  m.def("ops_registered", &ops_registered);
  m.def("call",
        [](const std::string& op, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const OptionalTensor& info, const OptionalTensor& c, const OptionalTensor& out,
           std::optional<int64_t> expected_m, bool accumulate, std::optional<at::ScalarType> out_dtype,
           const std::optional<std::string>& kind) {
          return run_call(make_call(op_family(op), a, a_scale, b, b_scale, info, c, out, expected_m, accumulate,
                                    out_dtype, kind));
        },
        DT_CALL_ARGS, py::call_guard<py::gil_scoped_release>(),
        "One call of the op family `op` (OP_FAMILIES) without the dispatcher, its tensors in SLOTS: returns out "
        "or the new output.");
  m.def("resolve",
        [](const std::string& op, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const OptionalTensor& info, const OptionalTensor& c, const OptionalTensor& out,
           std::optional<int64_t> expected_m, bool accumulate, std::optional<at::ScalarType> out_dtype,
           const std::optional<std::string>& kind) {
          return resolve_call(make_call(op_family(op), a, a_scale, b, b_scale, info, c, out, expected_m, accumulate,
                                        out_dtype, kind));
        },
        DT_CALL_ARGS, py::call_guard<py::gil_scoped_release>(),
        "For tests, any device: `call` short of the launch -- (whether the signature's plan was cached, the output, "
        "[the kernel's operands]); a call Python answers itself gives (False, its output, []).");
  // The entries deep_tile/ops.py's Python kernels, tests and benchmarks call.
  m.def("fp8_gemm",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const OptionalTensor& out) {
          return run_call(make_call(0, a, a_scale, b, b_scale, {}, {}, out, {}, false, {}, {}));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("out") = py::none(),
        py::call_guard<py::gil_scoped_release>(),
        "The native path without the dispatcher: out (or a new bf16 tensor) = a @ b.T, scaled.");
  m.def("m_grouped_fp8_gemm",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const OptionalTensor& out) {
          return run_call(make_call(grouped_family(kind), a, a_scale, b, b_scale, info, {}, out, expected_m, false, {},
                                    {}));
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("out") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of a grouped GEMM without the dispatcher (kind: a grouped ProblemKind value; info: "
        "m_indices, offsets, masked_m or expert_ends; expected_m: the masked kind's hint).");
  m.def("m_grouped_fp8_gemm_acc",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const OptionalTensor& c, bool accumulate, const OptionalTensor& out,
           std::optional<at::ScalarType> out_dtype) {
          return run_call(make_call(op_family("m_grouped_fp8_gemm_acc"), a, a_scale, b, b_scale, info, c, out,
                                    expected_m, accumulate, out_dtype, kind));
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("c") = py::none(), py::arg("accumulate") = false,
        py::arg("out") = py::none(), py::arg("out_dtype") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of a grouped GEMM's output variants without the dispatcher.");
  m.def("fp8_gemm_acc",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const OptionalTensor& c, bool accumulate, const OptionalTensor& out,
           std::optional<at::ScalarType> out_dtype, bool b_scale_1d) {
          return run_call(make_call(op_family(b_scale_1d ? "fp8_gemm_1d1d" : "fp8_gemm_acc"), a, a_scale, b, b_scale,
                                    {}, c, out, {}, accumulate, out_dtype, {}));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("c") = py::none(),
        py::arg("accumulate") = false, py::arg("out") = py::none(), py::arg("out_dtype") = py::none(),
        py::arg("b_scale_1d") = false, py::call_guard<py::gil_scoped_release>(),
        "The native path of the output variants (b_scale_1d: the 1D1D GEMM) without the dispatcher.");
  m.def("k_grouped_fp8_gemm",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const at::Tensor& group_sizes, const OptionalTensor& c, bool accumulate, const OptionalTensor& out,
           std::optional<at::ScalarType> out_dtype) {
          return run_call(make_call(op_family("k_grouped_fp8_gemm_1d1d"), a, a_scale, b, b_scale, group_sizes, c, out,
                                    {}, accumulate, out_dtype, {}));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("group_sizes"),
        py::arg("c") = py::none(), py::arg("accumulate") = false, py::arg("out") = py::none(),
        py::arg("out_dtype") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of the K-grouped 1D1D GEMM without the dispatcher (group_sizes an int32 tensor).");
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
  }, "Counters of this process: calls per path (every op), plans, scale copies, tensor-map cache.");
  m.def("clear", []() {
    clear_plans();
    clear_tensor_map_cache();
    reset_gemm_stats();
  }, "Forget the cached plans and tensor maps and zero the counters.");
}
