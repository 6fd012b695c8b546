// Calls from the native path into Python (deep_tile/native/bridge.py), each under the GIL:
// plan creation on the first call of a problem (dense, grouped, output variants, K-grouped), the Python path for every
// call the native path does not take (bad arguments included, so errors keep Python's types and
// messages), the SM limit, and deep_tile.errors.LaunchError for driver failures.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "gemm_plan.h"

namespace pybind11 {
class object;
}

namespace deep_tile_native {

// Remembers the bridge module (GIL held). Until then the native path refuses to run.
void install_bridge(const pybind11::object& bridge);
bool bridge_installed();

// deep_tile.device's SM limit (0: none): set_sms_limit stores it (deep_tile.set_num_sms pushes it
// to every loaded library, the loader at load), sms_limit reads it on every call without the GIL.
void set_sms_limit(int64_t limit);
int64_t sms_limit();
// deep_tile.pdl's setting: whether kernels are launched with programmatic stream serialization;
// set_pdl stores it (deep_tile.set_pdl pushes it to every loaded library, the loader at load), pdl
// reads it on every launch without the GIL.
void set_pdl(bool enabled);
bool pdl();

// The plan of this problem; Python raises (as a Python exception, kept through the dispatcher)
// when the arguments are bad.
PlanPtr make_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                  const std::optional<at::Tensor>& out, int64_t sms_limit);

// deep_tile.gemm.launch.run: the Python path. Returns the output tensor.
at::Tensor python_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                       const std::optional<at::Tensor>& out);

// The grouped kinds' twins (bridge.plan_grouped, bridge.python_grouped_path: deep_tile.gemm.launch.run_grouped):
// `info` is m_indices, masked_m, offsets or expert_ends; `expected_m` the masked kind's hint (None otherwise);
// `c`, `accumulate`, `out_dtype` the output variant (none: the bf16 GEMM).
PlanPtr make_grouped_plan(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                          const at::Tensor& b_scale, const at::Tensor& info, const std::optional<at::Tensor>& out,
                          std::optional<int64_t> expected_m, int64_t sms_limit, const std::optional<at::Tensor>& c,
                          bool accumulate, std::optional<at::ScalarType> out_dtype);
at::Tensor python_grouped_path(Kind kind, const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                               const at::Tensor& b_scale, const at::Tensor& info, const std::optional<at::Tensor>& out,
                               std::optional<int64_t> expected_m, const std::optional<at::Tensor>& c, bool accumulate,
                               std::optional<at::ScalarType> out_dtype);

// The training ops' twins: bridge.plan_acc / python_acc_path (deep_tile.gemm.launch.run_acc: the dense
// GEMM's output variants and, with `b_scale_1d`, the 1D1D GEMM) and bridge.plan_k_grouped /
// python_k_grouped_path (deep_tile.gemm.launch.run_k_grouped), with the ops' arguments as they are.
PlanPtr make_acc_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                      const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
                      std::optional<at::ScalarType> out_dtype, bool b_scale_1d, int64_t sms_limit);
at::Tensor python_acc_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                           const at::Tensor& b_scale, const std::optional<at::Tensor>& c, bool accumulate,
                           const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype,
                           bool b_scale_1d);
PlanPtr make_k_grouped_plan(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                            const at::Tensor& b_scale, const at::Tensor& group_sizes,
                            const std::optional<at::Tensor>& c, bool accumulate, const std::optional<at::Tensor>& out,
                            std::optional<at::ScalarType> out_dtype, int64_t sms_limit);
at::Tensor python_k_grouped_path(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                                 const at::Tensor& b_scale, const at::Tensor& group_sizes,
                                 const std::optional<at::Tensor>& c, bool accumulate,
                                 const std::optional<at::Tensor>& out, std::optional<at::ScalarType> out_dtype);

// Raises deep_tile.errors.LaunchError(message) as the pending Python exception and throws it.
[[noreturn]] void raise_launch_error(const std::string& message);

// The first launch of a plan: microseconds of its tensor maps and launch (deep_tile.phases;
// printed under DEEP_TILE_DEBUG).
void report_first_launch(const std::string& label, double maps_us, double launch_us);

}  // namespace deep_tile_native
