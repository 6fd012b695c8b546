// The Python module of the native host path (built by deep_tile/native/build.py; its name,
// TORCH_EXTENSION_NAME, carries the build key). deep_tile/native/loader.py installs the bridge
// and registers the dispatcher kernels; the other functions serve tests and benchmarks.
#include <torch/csrc/utils/pybind.h>

#include "acc_op.h"
#include "checks.h"
#include "gemm_op.h"
#include "gemm_plan.h"
#include "grouped_op.h"
#include "k_grouped_op.h"
#include "launch.h"
#include "layouts.h"
#include "ops.h"
#include "python_bridge.h"
#include "tensor_maps.h"

namespace py = pybind11;
using namespace deep_tile_native;

// Bumped when the bridge protocol (plan dict, callbacks) changes; checked by the loader.
constexpr int kBridgeVersion = 9;

namespace {

// A plan key's problem as deep_tile.gemm.problem.Problem.key() spells it (for tests): (kind, m, n, k,
// groups, expected_m, a_scale_row_major), then (out_dtype, c_dtype) unless bf16 without C, then
// "1d1d" for the 1D1D variants.
py::tuple problem_key(const PlanKey& key) {
  py::list items;
  for (py::object v : {py::cast(std::string(kind_name(key.kind))), py::cast(key.m), py::cast(key.n), py::cast(key.k),
                       py::cast(key.num_groups), py::cast(key.expected_m), py::cast(key.a_scale_row_major)}) {
    items.append(v);
  }
  if (key.out_type != OutType::kBfloat16 || key.c_kind != CKind::kNone) {
    items.append(std::string(kOutTypeNames[static_cast<int>(key.out_type)]));
    const char* c = kCKindNames[static_cast<int>(key.c_kind)];
    items.append(c == nullptr ? py::none() : py::cast(std::string(c)));
  }
  if (key.b_scale_1d) items.append(std::string("1d1d"));
  return py::tuple(items);
}

py::tuple key_and_operands(const std::tuple<PlanKey, std::vector<at::Tensor>>& result) {
  return py::make_tuple(problem_key(std::get<0>(result)), std::get<1>(result));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "deep_tile's native host path for the FP8 GEMMs (see deep_tile/native/__init__.py)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  // Facts the Python side also holds, exposed so tests/test_native.py can compare the two.
  m.attr("SCALE_GROUP") = kScaleGroup;
  m.attr("N_MULTIPLE") = kNMultiple;
  m.attr("K_MULTIPLE") = kKMultiple;
  m.attr("MAX_OPERANDS") = kMaxOperands;
  m.attr("MAX_ARGS") = kMaxArgs;
  m.attr("MAX_MAPS") = kMaxMaps;
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
  py::list out_dtypes, c_dtypes;
  for (const char* name : kOutTypeNames) out_dtypes.append(name);
  for (const char* name : kCKindNames) c_dtypes.append(name == nullptr ? py::none() : py::cast(std::string(name)));
  m.attr("OUT_DTYPES") = py::tuple(out_dtypes);
  m.attr("C_DTYPES") = py::tuple(c_dtypes);
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
  m.def("m_grouped_fp8_gemm_acc",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
           std::optional<at::ScalarType> out_dtype) {
          return m_grouped_fp8_gemm(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, out,
                                    GroupedOutput{c, accumulate, out_dtype});
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("c") = py::none(), py::arg("accumulate") = false,
        py::arg("out") = py::none(), py::arg("out_dtype") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of a grouped GEMM's output variants without the dispatcher: out (or a new tensor of "
        "out_dtype) = C + the grouped product (C: c, or out itself when accumulate).");
  m.def("grouped_fast_check_reason",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const std::optional<at::Tensor>& out, bool check_device, const std::optional<at::Tensor>& c,
           bool accumulate, std::optional<at::ScalarType> out_dtype) {
          return std::string(grouped_fast_check_reason(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m,
                                                       out, check_device, GroupedOutput{c, accumulate, out_dtype}));
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m") = py::none(), py::arg("out") = py::none(), py::arg("check_device") = true,
        py::arg("c") = py::none(), py::arg("accumulate") = false, py::arg("out_dtype") = py::none(),
        "Why a grouped call would go to the Python path ('' when the native path takes it); check_device=False "
        "leaves the device rule out; c, accumulate, out_dtype: the output variant.");
  m.def("grouped_operands",
        [](const std::string& kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
           const at::Tensor& b_scale, const at::Tensor& info, std::optional<int64_t> expected_m,
           const at::Tensor& out, const std::optional<at::Tensor>& c, bool accumulate) {
          return key_and_operands(grouped_operands(grouped_kind(kind), a, a_scale, b, b_scale, info, expected_m, out,
                                                   GroupedOutput{c, accumulate, std::nullopt}));
        },
        py::arg("kind"), py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("info"),
        py::arg("expected_m"), py::arg("out"), py::arg("c") = py::none(), py::arg("accumulate") = false,
        "For tests, any device: (problem key as deep_tile.gemm.problem.Problem.key() spells it, [the kernel's operands "
        "in GROUPED_OPERANDS order, then C for an output variant]) of a grouped call the fast check takes (else "
        "ValueError).");
  // The training ops (acc_op.h, k_grouped_op.h): the ops' arguments as they are (out_dtype None
  // for the _out variants, out None for the others).
  m.def("fp8_gemm_acc",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
           std::optional<at::ScalarType> out_dtype, bool b_scale_1d) {
          return fp8_gemm_acc(AccCall{a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d});
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("c") = py::none(),
        py::arg("accumulate") = false, py::arg("out") = py::none(), py::arg("out_dtype") = py::none(),
        py::arg("b_scale_1d") = false, py::call_guard<py::gil_scoped_release>(),
        "The native path of the output variants (b_scale_1d: the 1D1D GEMM) without the dispatcher: "
        "out (or a new tensor) = C + a @ b.T, scaled (deep_tile.gemm.launch.run_acc's arguments).");
  m.def("acc_fast_check_reason",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
           std::optional<at::ScalarType> out_dtype, bool b_scale_1d, bool check_device) {
          return std::string(acc_fast_check_reason(
              AccCall{a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d}, check_device));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("c") = py::none(),
        py::arg("accumulate") = false, py::arg("out") = py::none(), py::arg("out_dtype") = py::none(),
        py::arg("b_scale_1d") = false, py::arg("check_device") = true,
        "Why an output-variant call would go to the Python path ('' when the native path takes it).");
  m.def("acc_operands",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const std::optional<at::Tensor>& c, bool accumulate, const at::Tensor& out, bool b_scale_1d) {
          const std::optional<at::Tensor> into = out;
          return key_and_operands(
              acc_operands(AccCall{a, a_scale, b, b_scale, c, accumulate, into, std::nullopt, b_scale_1d}));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("c"), py::arg("accumulate"),
        py::arg("out"), py::arg("b_scale_1d") = false,
        "For tests, any device: (problem key as Problem.key() spells it, [the kernel's operands: OPERANDS, then C]) "
        "of an output-variant call the fast check takes (else ValueError).");
  m.def("k_grouped_fp8_gemm",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, bool accumulate,
           const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype) {
          return k_grouped_fp8_gemm(KGroupedCall{a, a_scale, b, b_scale, group_sizes, c, accumulate, out, out_dtype});
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("group_sizes"),
        py::arg("c") = py::none(), py::arg("accumulate") = false, py::arg("out") = py::none(),
        py::arg("out_dtype") = py::none(), py::call_guard<py::gil_scoped_release>(),
        "The native path of the K-grouped 1D1D GEMM without the dispatcher (deep_tile.gemm.launch.run_k_grouped's "
        "arguments, group_sizes an int32 tensor). Returns out or a new [G, m, n] tensor.");
  m.def("k_grouped_fast_check_reason",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, bool accumulate,
           const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype, bool check_device) {
          return std::string(k_grouped_fast_check_reason(
              KGroupedCall{a, a_scale, b, b_scale, group_sizes, c, accumulate, out, out_dtype}, check_device));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("group_sizes"),
        py::arg("c") = py::none(), py::arg("accumulate") = false, py::arg("out") = py::none(),
        py::arg("out_dtype") = py::none(), py::arg("check_device") = true,
        "Why a K-grouped call would go to the Python path ('' when the native path takes it).");
  m.def("k_grouped_operands",
        [](const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
           const at::Tensor& group_sizes, const std::optional<at::Tensor>& c, bool accumulate, const at::Tensor& out) {
          const std::optional<at::Tensor> into = out;
          return key_and_operands(
              k_grouped_operands(KGroupedCall{a, a_scale, b, b_scale, group_sizes, c, accumulate, into, std::nullopt}));
        },
        py::arg("a"), py::arg("a_scale"), py::arg("b"), py::arg("b_scale"), py::arg("group_sizes"), py::arg("c"),
        py::arg("accumulate"), py::arg("out"),
        "For tests, any device: (problem key as Problem.key() spells it, [the kernel's operands: GROUPED_OPERANDS, "
        "then C]) of a K-grouped call the fast check takes (else ValueError).");
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
