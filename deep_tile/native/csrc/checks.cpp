#include "checks.h"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

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

int out_type_index(at::ScalarType type) {
  if (type == at::kBFloat16) return 0;
  if (type == at::kFloat) return 1;
  return -1;
}

namespace {

// _span: [first, end) byte addresses of what `x` can reach.
std::pair<uintptr_t, uintptr_t> span(const at::Tensor& x) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(x.data_ptr());
  int64_t extent = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) > 0) extent += (x.size(d) - 1) * std::abs(x.stride(d));
  }
  return {start, start + static_cast<uintptr_t>(extent) * x.element_size()};
}

}  // namespace

bool overlaps(const at::Tensor& out, std::initializer_list<const at::Tensor*> others) {
  const auto [o0, o1] = span(out);
  if (o0 == o1) return false;
  for (const at::Tensor* x : others) {
    if (x == nullptr || !x->defined() || x->numel() == 0) continue;
    const auto [x0, x1] = span(*x);
    if (x0 < o1 && o0 < x1) return true;
  }
  return false;
}

const char* fast_check_answer(const char* why, bool check_device, bool empty) {
  if (why == nullptr && !check_device && empty) why = "empty";
  return why == nullptr ? "" : why;
}

void require_operands(const char* why, bool empty, bool has_out) {
  if (why == nullptr && empty) why = "empty";
  if (why == nullptr && !has_out) why = "no out";
  if (why != nullptr) throw std::invalid_argument(std::string("deep_tile native: the fast check refuses: ") + why);
}

}  // namespace deep_tile_native
