// What the native path needs to launch every call of one signature (signature.h): the kernel, its
// launch geometry, how each kernel parameter is made from the operands (the argument specs of
// deep_tile/gemm/kernel_args.py), how each operand is made from the call's tensors, the output to
// allocate and the tensor pairs that must not overlap. deep_tile/native/bridge.py builds all of it
// in Python on the first call of a signature; nothing here is a rule of its own.
#pragma once

#include <c10/core/ScalarType.h>
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace deep_tile_native {

// deep_tile.gemm.kernel_args.SPEC_KINDS (tests/test_native.py compares them through the module's
// SPEC_KINDS attribute).
enum class SpecKind : uint8_t { kTensorMap = 0, kZeroMap = 1, kPointer = 2, kSize = 3, kStride = 4, kValue = 5 };

// Most operand tensors a spec may name (deep_tile.gemm.kernel_args.MAX_OPERANDS).
constexpr int kMaxOperands = 8;
// Most kernel parameters and tensor maps a plan may have (the bridge's plans are checked;
// tests/test_native.py checks every kind's specs fit, through MAX_ARGS and MAX_MAPS).
constexpr int kMaxArgs = 24;
constexpr int kMaxMaps = 8;
// Most dimensions of a call tensor, an operand or an output the native path handles (a call
// with a tensor of more is planned by Python every time, which refuses it).
constexpr int kMaxDims = 3;

// One kernel parameter: see deep_tile/gemm/kernel_args.py for the meaning of each kind.
struct ArgSpec {
  SpecKind kind = SpecKind::kValue;
  int8_t operand = -1;      // kTensorMap, kPointer, kSize, kStride
  uint8_t element = 0;      // kTensorMap: Element (tensor_maps.h)
  int8_t inner_dim = 0;     // kTensorMap: the operand's contiguous dimension; kSize/kStride: the dimension
  int8_t outer_dim = 1;     // kTensorMap: the rows
  uint32_t box_inner = 0, box_outer = 0, swizzle = 0, l2_promotion = 256;  // kTensorMap
  uint32_t slab_rows = 0;  // kTensorMap: > 0, the 3-D slab view (MapSpec::slab_rows)
  int32_t value = 0;        // kValue
};

// Sizes, strides (elements) and a storage offset.
struct Layout {
  int dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t offset = 0;
};

// How one operand is made from the call's tensors (bridge.describe): the tensor of `slot`, copied
// into a new buffer of `copy_numel` elements laid out as `copy` when `copied`, then viewed as
// `view` (its offset relative to the tensor's own) when `viewed`.
struct OperandRecipe {
  int8_t slot = 0;
  bool copied = false, viewed = false, scale_copy = false;  // scale_copy: counted in stats()
  int64_t copy_numel = 0;
  Layout copy, view;
};

struct GemmPlan {
  CUkernel kernel = nullptr;
  std::string symbol;
  std::string label;  // the problem and config, for the DEEP_TILE_DEBUG report
  uint32_t grid = 0, block = 0, smem = 0, cluster = 1;
  std::vector<ArgSpec> args;             // the kernel's parameters in declaration order
  std::vector<OperandRecipe> operands;   // the kernel's operands in its contract's order
  bool allocates = false;                // the call has no out: allocate one
  Layout output;                         // its sizes (contiguous)
  at::ScalarType output_type = at::kBFloat16;
  std::vector<std::pair<int8_t, int8_t>> disjoint;  // slot pairs whose memory must not overlap
  mutable std::atomic<bool> reported{false};  // first launch timed and reported (deep_tile.phases)
};

using PlanPtr = std::shared_ptr<const GemmPlan>;

}  // namespace deep_tile_native
