// What the native path needs to launch a kernel for one problem: the kernel, its launch
// geometry, and how each kernel parameter is made from the call's tensors (the argument specs of
// deep_tile/gemm/kernel_args.py, built by Python from the plan of deep_tile.gemm.planner on the first call
// of a problem, deep_tile/native/bridge.py), then cached here. No kernel fact is written in C++:
// fill_params (gemm_op.cpp) walks the specs.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deep_tile_native {

// deep_tile.gemm.kernel_args.SPEC_KINDS (tests/test_native.py compares them through the module's
// SPEC_KINDS attribute).
enum class SpecKind : uint8_t { kTensorMap = 0, kZeroMap = 1, kPointer = 2, kSize = 3, kStride = 4, kValue = 5 };

// Most operand tensors a spec may name (deep_tile.gemm.kernel_args.MAX_OPERANDS); each family's op
// passes its own, in its contract's OPERANDS order.
constexpr int kMaxOperands = 8;
// Most kernel parameters and tensor maps a plan may have (the bridge's plans are checked; the
// K-grouped kernel with C has 17 parameters; tests/test_native.py checks every kind's specs fit,
// through the module's MAX_ARGS and MAX_MAPS attributes).
constexpr int kMaxArgs = 24;
constexpr int kMaxMaps = 8;

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

struct GemmPlan {
  CUkernel kernel = nullptr;
  std::string symbol;
  std::string label;  // the problem and config, for the DEEP_TILE_DEBUG report
  uint32_t grid = 0, block = 0, smem = 0, cluster = 1;
  std::vector<ArgSpec> args;  // the kernel's parameters in declaration order
  mutable std::atomic<bool> reported{false};  // first launch timed and reported (deep_tile.phases)
};

// The kinds of problem (deep_tile.gemm.problem.ProblemKind, in its order; the module's PROBLEM_KINDS
// attribute lets tests/test_native.py compare the names): the dense GEMM and the M-grouped
// (Mixture-of-Experts) ones, and the K-grouped one (MoE weight gradients, k_grouped_op.h). The
// bridge is told a kind by its name (ProblemKind's value).
enum class Kind : uint8_t {
  kDense = 0,
  kGroupedContiguous = 1,
  kGroupedMasked = 2,
  kGroupedOffsets = 3,
  kKGrouped = 4,
  kGroupedPsum = 5
};
constexpr const char* kKindNames[] = {"dense",           "grouped_contiguous", "grouped_masked",
                                      "grouped_offsets", "k_grouped",          "grouped_psum"};
constexpr int kNumKinds = 6;
inline const char* kind_name(Kind kind) { return kKindNames[static_cast<int>(kind)]; }

// The output types (deep_tile.kernels.fp8_gemm.OUT_DTYPES, in its order: DT_OUT_KIND) and the
// kinds of addend C (C_DTYPES: none, a bf16 or FP32 tensor apart from out, out itself); the
// module's OUT_DTYPES and C_DTYPES attributes let tests/test_native.py compare the names.
enum class OutType : uint8_t { kBfloat16 = 0, kFloat32 = 1 };
constexpr const char* kOutTypeNames[] = {"bfloat16", "float32"};
enum class CKind : uint8_t { kNone = 0, kBfloat16 = 1, kFloat32 = 2, kOut = 3 };
constexpr const char* kCKindNames[] = {nullptr, "bfloat16", "float32", "out"};

// A plan is a function of the problem (the fields of deep_tile.gemm.problem.Problem.key(): kind, m,
// n, k, groups, expected rows per group, a_scale variant, output and C types, 1D1D), the device
// and the SM limit; strides and addresses only enter the tensor maps, which are cached by value
// (tensor_maps.h).
struct PlanKey {
  int64_t device = 0;
  Kind kind = Kind::kDense;
  int64_t m = 0, n = 0, k = 0;  // m: Problem.m (the masked kind's max_m; its rows are num_groups * m)
  int64_t num_groups = 1, expected_m = 0;
  int64_t sms_limit = 0;
  bool a_scale_row_major = false;  // a kernel variant of the same problem
  OutType out_type = OutType::kBfloat16;
  CKind c_kind = CKind::kNone;
  bool b_scale_1d = false;  // the 1D1D variant: b_scale per row of B
  bool operator==(const PlanKey& o) const {
    return device == o.device && kind == o.kind && m == o.m && n == o.n && k == o.k && num_groups == o.num_groups &&
           expected_m == o.expected_m && sms_limit == o.sms_limit && a_scale_row_major == o.a_scale_row_major &&
           out_type == o.out_type && c_kind == o.c_kind && b_scale_1d == o.b_scale_1d;
  }
};

using PlanPtr = std::shared_ptr<const GemmPlan>;

PlanPtr find_plan(const PlanKey& key);  // nullptr when absent; thread-safe
void store_plan(const PlanKey& key, PlanPtr plan);
size_t plan_count();
void clear_plans();

}  // namespace deep_tile_native
