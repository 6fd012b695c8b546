#include "signature.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace deep_tile_native {

static_assert(sizeof(Signature) % sizeof(uint64_t) == 0, "a signature is hashed as 64-bit words");

bool make_signature(const Call& call, int64_t limit, Signature* sig) {
  std::memset(sig, 0, sizeof(Signature));
  sig->op = call.op;
  sig->flags = int32_t(call.accumulate) | int32_t(call.expected_m.has_value()) << 1 |
               int32_t(call.out_dtype.has_value()) << 2 | int32_t(call.kind.has_value()) << 3;
  sig->expected_m = call.expected_m.value_or(0);
  sig->sms_limit = limit;
  sig->out_dtype = call.out_dtype.has_value() ? static_cast<int32_t>(*call.out_dtype) : -1;
  if (call.kind.has_value()) {
    if (call.kind->size() > sizeof(sig->kind)) return false;
    sig->kind_size = static_cast<int32_t>(call.kind->size());
    std::memcpy(sig->kind, call.kind->data(), call.kind->size());
  }
  for (int i = 0; i < kSlots; ++i) {
    const at::Tensor* t = call.tensors[i];
    TensorSignature& s = sig->tensors[i];
    s.same_as = -1;
    if (t == nullptr || !t->defined()) continue;
    const int64_t dim = t->dim();
    if (dim > kMaxDims) return false;
    s.given = 1;
    s.dtype = static_cast<int8_t>(t->scalar_type());
    const c10::Device device = t->device();
    s.device_type = static_cast<int8_t>(device.type());
    s.device_index = device.index();
    s.dim = static_cast<int8_t>(dim);
    s.align = static_cast<int8_t>(reinterpret_cast<uintptr_t>(t->data_ptr()) & 15);
    const auto sizes = t->sizes();
    const auto strides = t->strides();
    for (int64_t d = 0; d < dim; ++d) {
      s.sizes[d] = sizes[d];
      s.strides[d] = strides[d];
    }
    for (int j = 0; j < i; ++j) {
      if (call.tensors[j] != nullptr && call.tensors[j]->defined() && call.tensors[j]->is_same(*t)) {
        s.same_as = static_cast<int8_t>(j);
        break;
      }
    }
  }
  return true;
}

namespace {

struct SignatureHash {
  size_t operator()(const Signature& sig) const {
    uint64_t words[sizeof(Signature) / sizeof(uint64_t)];
    std::memcpy(words, &sig, sizeof(Signature));
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w : words) h = (h ^ w) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

struct SignatureEqual {
  bool operator()(const Signature& x, const Signature& y) const { return std::memcmp(&x, &y, sizeof(Signature)) == 0; }
};

struct Plans {
  std::mutex mutex;
  std::unordered_map<Signature, PlanPtr, SignatureHash, SignatureEqual> map;
};

Plans& plans() {
  static Plans* instance = new Plans();  // never destroyed: used until the process exits
  return *instance;
}

}  // namespace

PlanPtr find_plan(const Signature& sig) {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto found = p.map.find(sig);
  return found == p.map.end() ? nullptr : found->second;
}

void store_plan(const Signature& sig, PlanPtr plan) {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.map.insert_or_assign(sig, std::move(plan));
}

size_t plan_count() {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.map.size();
}

void clear_plans() {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.map.clear();
}

}  // namespace deep_tile_native
