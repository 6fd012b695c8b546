#include "checks.h"

namespace deep_tile_native {

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

bool n_k_ok(int64_t n, int64_t k) { return n > 0 && n % kNMultiple == 0 && k > 0 && k % kKMultiple == 0; }

namespace {

const char* rows_reason(const at::Tensor& x, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                        int64_t row_multiple) {
  if (rows == 0 || cols == 0) return nullptr;
  if (col_stride != 1 && cols > 1) return "layout";
  if (rows > 1 && row_stride % row_multiple != 0) return "layout";
  if (!aligned16(x)) return "alignment";
  return nullptr;
}

}  // namespace

const char* layout_reason(const at::Tensor& x, int64_t row_multiple) {
  if (x.dim() == 3) {
    const int64_t groups = x.size(0), rows = x.size(1), cols = x.size(2);
    if (groups > 1 && rows > 0 && cols > 0 && x.stride(0) != rows * x.stride(1)) return "layout";
    return rows_reason(x, groups * rows, cols, x.stride(1), x.stride(2), row_multiple);
  }
  return rows_reason(x, x.size(0), x.size(1), x.stride(0), x.stride(1), row_multiple);
}

const char* device_reason(const at::Tensor& first, std::initializer_list<const at::Tensor*> others,
                          const std::optional<at::Tensor>& out) {
  const c10::Device device = first.device();
  if (!device.is_cuda()) return "device";
  for (const at::Tensor* t : others) {
    if (t->device() != device) return "device";
  }
  if (out.has_value() && out->device() != device) return "device";
  return nullptr;
}

}  // namespace deep_tile_native
