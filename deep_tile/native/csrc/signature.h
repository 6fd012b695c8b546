// A call's signature: everything about it Python's checks and planner read, save what depends on
// addresses beyond their alignment (the plan names those tests: GemmPlan::disjoint). Per tensor
// slot: given or not, dtype, device, sizes, strides, address modulo 16, and the first slot holding
// the same tensor; then the op family, the scalars and the SM limit. Plans are cached by it, compared
// byte for byte: the C++ side knows no rule about which signatures are valid.
#pragma once

#include <cstdint>

#include "call.h"
#include "gemm_plan.h"

namespace deep_tile_native {

struct TensorSignature {
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int8_t given, dtype, device_type, device_index, dim, align, same_as, unused;
};

struct Signature {
  int32_t op;
  int32_t flags;  // accumulate, expected_m given, out_dtype given, kind given
  int64_t expected_m;
  int64_t sms_limit;
  int32_t out_dtype;
  int32_t kind_size;
  char kind[32];
  TensorSignature tensors[kSlots];
};

// Fills `sig` (every byte: it is hashed and compared as bytes); false when the call has a tensor
// of more than kMaxDims dimensions or a kind name too long to hold (then it is planned every time).
bool make_signature(const Call& call, int64_t sms_limit, Signature* sig);

PlanPtr find_plan(const Signature& sig);  // nullptr when absent; thread-safe
void store_plan(const Signature& sig, PlanPtr plan);
size_t plan_count();
void clear_plans();

}  // namespace deep_tile_native
