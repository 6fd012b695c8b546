// Calls from the native path into Python (deep_tile/native/bridge.py), each under the GIL: the
// plan of a signature not seen before (Python checks the call, raising its own errors, and says
// how to launch every call of that signature), the SM limit and PDL settings, and
// deep_tile.errors.LaunchError for driver failures.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "call.h"
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

// bridge.plan's answer for a call: the plan of its signature, or (no rows: nothing to launch) the
// output Python made. A bad call raises Python's exception (kept through the dispatcher).
struct Planned {
  PlanPtr plan;
  at::Tensor output;
};
Planned make_plan(const Call& call, int64_t sms_limit);

// Raises deep_tile.errors.LaunchError(message) as the pending Python exception and throws it.
[[noreturn]] void raise_launch_error(const std::string& message);

// The first launch of a plan: microseconds of its tensor maps and launch (deep_tile.phases;
// printed under DEEP_TILE_DEBUG).
void report_first_launch(const std::string& label, double maps_us, double launch_us);

}  // namespace deep_tile_native
