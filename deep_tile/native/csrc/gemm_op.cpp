#include "gemm_op.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include "driver.h"
#include "gemm_plan.h"
#include "python_bridge.h"
#include "tensor_maps.h"

namespace deep_tile_native {

AScaleLayout a_scale_layout(const at::Tensor& s, int64_t m, int64_t k_blocks) {
  const bool aligned16 = reinterpret_cast<uintptr_t>(s.data_ptr()) % 16 == 0;
  // deep_tile.layouts.reads_row_major: contiguous rows of a multiple of 4 K blocks
  // (deep_tile.kernels.fp8_gemm.row_major_a_scale_readable), 16-byte aligned.
  if (m > 1 && k_blocks > 1 && k_blocks % 4 == 0 && s.stride(1) == 1 && s.stride(0) == k_blocks && aligned16) {
    return AScaleLayout::kRowMajor;
  }
  // deep_tile.layouts.is_tma_aligned.
  const bool column_ok = s.stride(0) == 1 || m == 1;
  const bool pitch_ok = k_blocks == 1 || (s.stride(1) % 4 == 0 && s.stride(1) >= m);
  return column_ok && pitch_ok && aligned16 ? AScaleLayout::kAligned : AScaleLayout::kCopy;
}

namespace {

std::atomic<uint64_t> g_native_calls{0}, g_python_calls{0}, g_plans_created{0}, g_a_scale_copies{0};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }
bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// The native twin of deep_tile.problem.Problem for a dense call, with the a_scale layout.
struct Problem {
  int64_t m = 0, n = 0, k = 0, k_blocks = 0;
  AScaleLayout a_scale_layout = AScaleLayout::kCopy;
};

// deep_tile.checks' layout rule for a, b and out: last dimension contiguous, row stride a
// multiple of `row_multiple`, base 16-byte aligned.
const char* layout_reason(const at::Tensor& x, int64_t row_multiple) {
  if (x.size(0) == 0 || x.size(1) == 0) return nullptr;
  if (x.stride(1) != 1 && x.size(1) > 1) return "layout";
  if (x.size(0) > 1 && x.stride(0) % row_multiple != 0) return "layout";
  if (!aligned16(x)) return "alignment";
  return nullptr;
}

// Every condition deep_tile.checks.check_fp8_gemm_args enforces, except the GPU's compute
// capability (checked by Python when a device's first plan is made), plus what the native path
// itself needs (m > 0). nullptr: the native path can run the call.
const char* inspect(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out, Problem* p) {
  if (!a.defined() || !a_scale.defined() || !b.defined() || !b_scale.defined()) return "undefined";
  if (out.has_value() && !out->defined()) return "undefined";
  if (a.scalar_type() != at::kFloat8_e4m3fn || b.scalar_type() != at::kFloat8_e4m3fn ||
      a_scale.scalar_type() != at::kFloat || b_scale.scalar_type() != at::kFloat ||
      (out.has_value() && out->scalar_type() != at::kBFloat16)) {
    return "dtype";
  }
  if (a.dim() != 2 || a_scale.dim() != 2 || b.dim() != 2 || b_scale.dim() != 2 || (out.has_value() && out->dim() != 2)) {
    return "shape";
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != k || n <= 0 || n % 8 != 0 || k <= 0 || k % 16 != 0) return "shape";
  const int64_t k_blocks = ceil_div(k, kScaleGroup);
  if (a_scale.size(0) != m || a_scale.size(1) != k_blocks) return "shape";
  if (b_scale.size(0) != ceil_div(n, kScaleGroup) || b_scale.size(1) != k_blocks) return "shape";
  if (out.has_value() && (out->size(0) != m || out->size(1) != n)) return "shape";
  if (const char* why = layout_reason(a, 16)) return why;
  if (const char* why = layout_reason(b, 16)) return why;
  if (out.has_value()) {
    if (const char* why = layout_reason(*out, 8)) return why;
  }
  const c10::Device device = a.device();
  if (!device.is_cuda() || a_scale.device() != device || b.device() != device || b_scale.device() != device ||
      (out.has_value() && out->device() != device)) {
    return "device";
  }
  if (m == 0) return "empty";
  p->m = m;
  p->n = n;
  p->k = k;
  p->k_blocks = k_blocks;
  p->a_scale_layout = a_scale_layout(a_scale, m, k_blocks);
  return nullptr;
}

// deep_tile.layouts.get_tma_aligned_a_scale for a tensor not yet in that layout.
at::Tensor aligned_copy(const at::Tensor& a_scale, int64_t m, int64_t k_blocks) {
  at::Tensor aligned = at::empty({k_blocks, align4(m)}, a_scale.options()).t().narrow(0, 0, m);
  aligned.copy_(a_scale);
  g_a_scale_copies.fetch_add(1, std::memory_order_relaxed);
  return aligned;
}

PlanPtr plan_for(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                 const std::optional<at::Tensor>& out, const Problem& p) {
  const int64_t limit = sms_limit();
  const PlanKey key{a.device().index(), p.m, p.n, p.k, limit, p.a_scale_layout == AScaleLayout::kRowMajor};
  PlanPtr plan = find_plan(key);
  if (plan == nullptr) {
    plan = make_plan(a, a_scale, b, b_scale, out, limit);  // Python: full checks, selection, kernel, specs
    store_plan(key, plan);
    g_plans_created.fetch_add(1, std::memory_order_relaxed);
  }
  return plan;
}

// The call's tensors in the family contract's OPERANDS order (deep_tile/kernels/fp8_gemm.py: a,
// a_scale (TMA-aligned, or row-major when the plan reads it so), b, b_scale (contiguous), out).
// A spec naming an operand past `count` is refused when the plan is made (bridge) and here.
struct Operands {
  std::array<const at::Tensor*, kMaxOperands> tensors{};
  int count = 0;
};

// The kernel parameters in the plan's order, in storage that lives until the launch returns
// (the driver copies them at launch, so a CUDA graph capture keeps its own copy).
struct Params {
  alignas(64) CUtensorMap maps[kMaxMaps];
  uint64_t pointers[kMaxArgs];
  int32_t ints[kMaxArgs];
  void* slots[kMaxArgs];
};

constexpr uint64_t kElementBytes[] = {1, 2, 4};  // Element (tensor_maps.h): uint8, bfloat16, float32

// The row pitch of deep_tile.kernel_args (TensorMap.value): the outer stride, or for one row the
// inner extent rounded up to 16 bytes.
uint64_t row_pitch_bytes(uint64_t inner, uint64_t outer, uint64_t stride_outer, uint64_t element_bytes) {
  return outer > 1 ? stride_outer * element_bytes : (inner * element_bytes + 15) / 16 * 16;
}

// Walks the plan's argument specs as deep_tile.kernel_args.pack_values does in Python.
void fill_params(const GemmPlan& plan, const Operands& operands, Params* params) {
  int maps = 0;
  for (size_t i = 0; i < plan.args.size(); ++i) {
    const ArgSpec& s = plan.args[i];
    if (s.operand >= operands.count) throw std::runtime_error("deep_tile native: a spec names a missing operand");
    const at::Tensor* t = s.operand >= 0 ? operands.tensors[s.operand] : nullptr;
    switch (s.kind) {
      case SpecKind::kTensorMap: {
        const uint64_t inner = t->size(s.inner_dim), outer = t->size(s.outer_dim);
        encode_tensor_map({reinterpret_cast<uint64_t>(t->data_ptr()), inner, outer,
                           row_pitch_bytes(inner, outer, t->stride(s.outer_dim), kElementBytes[s.element]),
                           s.box_inner, s.box_outer, s.swizzle, static_cast<Element>(s.element)},
                          &params->maps[maps]);
        params->slots[i] = &params->maps[maps++];
        break;
      }
      case SpecKind::kZeroMap:
        std::memset(&params->maps[maps], 0, sizeof(CUtensorMap));
        params->slots[i] = &params->maps[maps++];
        break;
      case SpecKind::kPointer:
        params->pointers[i] = reinterpret_cast<uint64_t>(t->data_ptr());
        params->slots[i] = &params->pointers[i];
        break;
      case SpecKind::kSize:
        params->ints[i] = static_cast<int32_t>(t->size(s.inner_dim));
        params->slots[i] = &params->ints[i];
        break;
      case SpecKind::kStride:
        params->ints[i] = static_cast<int32_t>(t->stride(s.inner_dim));
        params->slots[i] = &params->ints[i];
        break;
      case SpecKind::kValue:
        params->ints[i] = s.value;
        params->slots[i] = &params->ints[i];
        break;
    }
  }
}

void launch(const GemmPlan& plan, void** slots, CUstream stream, int device) {
  ensure_context(device);
  CUlaunchConfig config{};
  config.gridDimX = plan.grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = plan.block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = plan.smem;
  config.hStream = stream;
  CUlaunchAttribute cluster{};
  if (plan.cluster > 1) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = plan.cluster;
    cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  CUresult status = driver().launch_kernel_ex(&config, reinterpret_cast<CUfunction>(plan.kernel), slots, nullptr);
  if (status != CUDA_SUCCESS) {
    // Same message as deep_tile.jit.runtime.Kernel.launch.
    check(status, "cuLaunchKernelEx(" + plan.symbol + ", grid=" + std::to_string(plan.grid) + "x1x1, block=" +
                      std::to_string(plan.block) + ", smem=" + std::to_string(plan.smem) +
                      ", cluster=" + std::to_string(plan.cluster) + ")");
  }
}

void run_native(const GemmPlan& plan, const Operands& o) {
  const c10::Device device = o.tensors[0]->device();
  const auto* guard_impl = c10::impl::getDeviceGuardImpl(device.type());
  auto stream = reinterpret_cast<CUstream>(guard_impl->getStream(device).native_handle());
  Params params;
  if (!plan.reported.exchange(true)) {  // the plan's first launch: time it for deep_tile.phases
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    fill_params(plan, o, &params);
    auto t1 = clock::now();
    launch(plan, params.slots, stream, device.index());
    auto t2 = clock::now();
    report_first_launch(plan.label, std::chrono::duration<double, std::micro>(t1 - t0).count(),
                        std::chrono::duration<double, std::micro>(t2 - t1).count());
    return;
  }
  fill_params(plan, o, &params);
  launch(plan, params.slots, stream, device.index());
}

at::Tensor hand_to_python(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                          const at::Tensor& b_scale, const std::optional<at::Tensor>& out) {
  g_python_calls.fetch_add(1, std::memory_order_relaxed);
  return python_path(a, a_scale, b, b_scale, out);
}

}  // namespace

at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                    const std::optional<at::Tensor>& out) {
  Problem p;
  if (inspect(a, a_scale, b, b_scale, out, &p) != nullptr) return hand_to_python(a, a_scale, b, b_scale, out);
  c10::DeviceGuard device_guard(a.device());
  PlanPtr plan = plan_for(a, a_scale, b, b_scale, out, p);
  at::Tensor result = out.has_value() ? *out : at::empty({p.m, p.n}, a.options().dtype(at::kBFloat16));
  at::Tensor scale = p.a_scale_layout == AScaleLayout::kCopy ? aligned_copy(a_scale, p.m, p.k_blocks) : a_scale;
  at::Tensor b_scale_c = b_scale.is_contiguous() ? b_scale : b_scale.contiguous();
  try {
    run_native(*plan, Operands{{&a, &scale, &b, &b_scale_c, &result}, 5});
  } catch (const DriverError& error) {
    raise_launch_error(error.what());
  }
  g_native_calls.fetch_add(1, std::memory_order_relaxed);
  return result;
}

const char* fast_check_reason(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                              const at::Tensor& b_scale, const std::optional<at::Tensor>& out) {
  Problem p;
  const char* why = inspect(a, a_scale, b, b_scale, out, &p);
  return why == nullptr ? "" : why;
}

namespace {

at::Tensor op_fp8_gemm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale) {
  return fp8_gemm(a, a_scale, b, b_scale, std::nullopt);
}

void op_fp8_gemm_out(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b, const at::Tensor& b_scale,
                     at::Tensor& out) {
  fp8_gemm(a, a_scale, b, b_scale, out);
}

// Leaked on purpose when registered: deregistering at process exit could run after the
// dispatcher is gone.
torch::Library* g_library = nullptr;

}  // namespace

void register_ops() {
  if (g_library != nullptr) return;
  if (!bridge_installed()) throw std::runtime_error("deep_tile native: install the bridge before registering");
  auto* library = new torch::Library(torch::Library::IMPL, kOpNamespace, std::nullopt, __FILE__, __LINE__);
  for (auto key : {c10::DispatchKey::CUDA, c10::DispatchKey::CPU}) {
    library->impl(kOpNames[0], torch::dispatch(key, TORCH_FN(op_fp8_gemm)));
    library->impl(kOpNames[1], torch::dispatch(key, TORCH_FN(op_fp8_gemm_out)));
  }
  g_library = library;
}

void deregister_ops() {
  delete g_library;
  g_library = nullptr;
}

bool ops_registered() { return g_library != nullptr; }

GemmStats gemm_stats() {
  return {g_native_calls.load(), g_python_calls.load(), g_plans_created.load(), g_a_scale_copies.load()};
}

void reset_gemm_stats() {
  g_native_calls = g_python_calls = g_plans_created = g_a_scale_copies = 0;
}

}  // namespace deep_tile_native
