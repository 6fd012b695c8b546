// The CUDA driver entry points the native host path calls, resolved at run time.
//
// libcuda.so.1 is opened with dlopen (it is already loaded by torch's CUDA runtime), so the
// extension needs cuda.h at build time but no libcuda at link time: it builds on machines
// without a GPU driver. Every failure is a DriverError whose message names the call and the
// driver's error (the op boundary turns it into deep_tile.errors.LaunchError).
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

#if CUDA_VERSION < 12000
#error "deep_tile's native host path needs cuda.h from CUDA 12.0 or newer (CUkernel, CUtensorMap)"
#endif

namespace deep_tile_native {

class DriverError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Driver {
  decltype(&::cuInit) init;
  decltype(&::cuGetErrorName) get_error_name;
  decltype(&::cuGetErrorString) get_error_string;
  decltype(&::cuTensorMapEncodeTiled) tensor_map_encode_tiled;
  decltype(&::cuLaunchKernelEx) launch_kernel_ex;
  decltype(&::cuCtxGetCurrent) ctx_get_current;
  decltype(&::cuCtxSetCurrent) ctx_set_current;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain;
  decltype(&::cuDeviceGet) device_get;
};

// The resolved entry points (resolved once per process; thread-safe). Throws DriverError when
// libcuda.so.1 or one of the symbols cannot be found.
const Driver& driver();

// Throws DriverError("<what> failed: NAME (code): text") unless `result` is CUDA_SUCCESS.
void check(CUresult result, const std::string& what);

// Makes `device`'s primary context current on this thread when no context is (the launch of a
// library kernel runs in the current context).
void ensure_context(int device);

}  // namespace deep_tile_native
