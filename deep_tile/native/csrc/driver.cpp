#include "driver.h"

#include <dlfcn.h>

#include <mutex>

namespace deep_tile_native {
namespace {

void* open_libcuda() {
  // Already loaded by torch's CUDA runtime in every process that has a CUDA tensor.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw DriverError(std::string("deep_tile native: cannot open libcuda.so.1 (the NVIDIA driver): ") +
                      (why ? why : "unknown error"));
  }
  return handle;
}

template <typename T>
void resolve(void* handle, const char* name, T& slot) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    throw DriverError(std::string("deep_tile native: libcuda.so.1 has no symbol ") + name +
                      " (the driver is older than CUDA 12.0?)");
  }
  slot = reinterpret_cast<T>(symbol);
}

Driver load_driver() {
  void* handle = open_libcuda();
  Driver d{};
  resolve(handle, "cuInit", d.init);
  resolve(handle, "cuGetErrorName", d.get_error_name);
  resolve(handle, "cuGetErrorString", d.get_error_string);
  resolve(handle, "cuTensorMapEncodeTiled", d.tensor_map_encode_tiled);
  resolve(handle, "cuLaunchKernelEx", d.launch_kernel_ex);
  resolve(handle, "cuCtxGetCurrent", d.ctx_get_current);
  resolve(handle, "cuCtxSetCurrent", d.ctx_set_current);
  resolve(handle, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain);
  resolve(handle, "cuDeviceGet", d.device_get);
  CUresult status = d.init(0);
  if (status != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.get_error_name(status, &name);
    throw DriverError(std::string("cuInit failed: ") + (name ? name : "?") + " (" +
                      std::to_string(static_cast<int>(status)) + ")");
  }
  return d;
}

}  // namespace

const Driver& driver() {
  static const Driver resolved = load_driver();  // thread-safe; retried if it threw
  return resolved;
}

void check(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const Driver& d = driver();
  if (d.get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_UNKNOWN";
  if (d.get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  // Same shape as deep_tile.jit.runtime.check: "<what> failed: NAME (code): text".
  throw DriverError(what + " failed: " + name + " (" + std::to_string(static_cast<int>(result)) + "): " + text);
}

void ensure_context(int device) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check(d.ctx_get_current(&current), "cuCtxGetCurrent");
  if (current != nullptr) return;
  CUdevice handle = 0;
  check(d.device_get(&handle, device), "cuDeviceGet(" + std::to_string(device) + ")");
  CUcontext primary = nullptr;
  check(d.primary_ctx_retain(&primary, handle), "cuDevicePrimaryCtxRetain(" + std::to_string(device) + ")");
  check(d.ctx_set_current(primary), "cuCtxSetCurrent(device " + std::to_string(device) + ")");
}

}  // namespace deep_tile_native
