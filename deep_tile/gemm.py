"""The public FP8 GEMM: ``out = (a * a_scale) @ (b * b_scale).T`` in bf16 on Hopper.

:func:`fp8_gemm` calls the custom op ``torch.ops.deep_tile.fp8_gemm`` (or ``fp8_gemm_out``), see
:mod:`deep_tile.ops`. The op runs on one of two host paths that launch the same kernel with the
same arguments:

- the native path (:mod:`deep_tile.native`, C++): per call only the checks, a cached plan lookup,
  cached tensor maps and the launch;
- the Python path, :func:`_run` here: validate (deep_tile.checks) -> pick a KernelConfig
  (deep_tile.select, memoised per shape) -> get the compiled kernel (deep_tile.jit.loader) ->
  build the tensor maps (deep_tile.tma, cached by address) -> pack the arguments in the order the
  kernel's contract gives (deep_tile.kernels.fp8_gemm) -> launch on the current stream
  (deep_tile.jit.runtime). It runs until the native extension is built, wherever it cannot be
  built, for forced configs (tests, sweeps) and for every call the native path hands back
  (bad arguments: so errors are the same on both paths).

Both paths make their plans with :func:`_plan`. The heavy modules (selector, JIT) are imported
on first use, not with this module.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from deep_tile import ops
from deep_tile.checks import check_fp8_gemm_args
from deep_tile.common import align4, ceil_div
from deep_tile.errors import UnsupportedProblemError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["fp8_gemm", "get_tma_aligned_a_scale"]


def get_tma_aligned_a_scale(a_scale: torch.Tensor) -> torch.Tensor:
    """Return `a_scale` [m, g] in the layout the kernel reads without a copy.

    That layout is column-major with the column stride rounded up to a multiple of 4 floats
    (16 bytes, a TMA requirement): strides ``(1, align4(m))``, i.e. memory ``[g][align4(m)]``.
    A tensor already in that layout (16-byte aligned) is returned as is; any other layout,
    row-major included, is copied once into it (one small device copy of m*g floats).
    """
    if not isinstance(a_scale, torch.Tensor) or a_scale.dim() != 2:
        raise ValueError("get_tma_aligned_a_scale: a_scale must be a 2-D tensor of shape (m, ceil(k/128)); "
                         f"got {getattr(a_scale, 'shape', type(a_scale).__name__)}")
    m, groups = a_scale.shape
    pitch = align4(m)
    if _is_tma_aligned(a_scale):
        return a_scale
    aligned = torch.empty((groups, pitch), dtype=a_scale.dtype, device=a_scale.device).t()[:m]
    aligned.copy_(a_scale)
    return aligned


def _is_tma_aligned(a_scale: torch.Tensor) -> bool:
    """Whether `a_scale` is already in the TMA-aligned column-major layout (the native path's
    ``tma_aligned_a_scale`` in deep_tile/native/csrc/gemm_op.cpp is the same rule)."""
    m, groups = a_scale.shape
    if m == 0 or groups == 0:
        return True
    column_ok = a_scale.stride(0) == 1 or m == 1
    pitch_ok = groups == 1 or (a_scale.stride(1) % 4 == 0 and a_scale.stride(1) >= m)
    return column_ok and pitch_ok and a_scale.data_ptr() % 16 == 0


def fp8_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """FP8 GEMM with DeepSeek-V3 fine-grained scaling (NT layout), on an sm_90 GPU.

    ``out[i, j] = bf16( sum_k a[i,k] * a_scale[i, k//128] * b[j,k] * b_scale[j//128, k//128] )``
    with the 128-wide partial sums accumulated in FP32.

    Args:
        a: [m, k] float8_e4m3fn, k contiguous, row stride a multiple of 16, 16-byte aligned.
        a_scale: [m, ceil(k/128)] float32. Zero-copy in the TMA-aligned column-major layout
            (strides ``(1, align4(m))``, see :func:`get_tma_aligned_a_scale`); any other layout,
            row-major included, costs one small copy per call.
        b: [n, k] float8_e4m3fn, k contiguous; n a multiple of 8, k a multiple of 16.
        b_scale: [ceil(n/128), ceil(k/128)] float32 (copied if not contiguous).
        out: optional [m, n] bfloat16, n contiguous, row stride a multiple of 8; allocated when
            None.

    Returns:
        `out`. m == 0 returns at once. Bad arguments raise TypeError/ValueError before anything
        is written. The kernel runs on ``torch.cuda.current_stream()`` and can be captured in a
        CUDA graph. This is the custom op ``torch.ops.deep_tile.fp8_gemm`` (``out`` None) or
        ``torch.ops.deep_tile.fp8_gemm_out``: torch.compile traces it without a graph break.
    """
    try:
        if out is None:
            return ops.fp8_gemm(a, a_scale, b, b_scale)
        ops.fp8_gemm_out(a, a_scale, b, b_scale, out)
        return out
    except (TypeError, RuntimeError):
        error = _argument_error(a, a_scale, b, b_scale, out)
        if error is None:
            raise
    raise error  # outside the handler: the schema's own message is not chained in


def _argument_error(a, a_scale, b, b_scale, out) -> Exception | None:
    """deep_tile's error for arguments the op's schema refused before any check ran (non-tensors),
    or None when the checks pass (the op failed for another reason)."""
    try:
        check_fp8_gemm_args(a, a_scale, b, b_scale, out, data_checks=False)
    except (TypeError, ValueError) as error:
        return error
    return None


class _Plan:
    """Everything about a launch that depends only on the problem and the config: memoised.
    (A plain class, not a dataclass: this module is imported by the first call of a process.)"""

    __slots__ = ("config", "kernel", "boxes", "grid", "cluster", "block", "smem")

    def __init__(self, config, kernel, boxes: family.TensorMapBoxes, grid: int, cluster: int):
        self.config = config
        self.kernel = kernel  # deep_tile.jit.runtime.Kernel
        self.boxes = boxes
        self.grid = grid
        self.cluster = cluster
        self.block = config.num_threads  # launch constants, derived once rather than per call
        self.smem = config.smem_bytes

    def __repr__(self) -> str:
        return f"_Plan(config={self.config!r}, kernel={self.kernel.name!r}, grid={self.grid}, cluster={self.cluster})"


_plans: dict = {}
_NO_TENSOR_MAP = bytes(128)  # the split-K kernel stores without the D tensor map
_launched: set = set()  # plans launched at least once by the Python path (DEEP_TILE_DEBUG report)


def _fit_clusters(config, kernel):
    """Shrink a multicast config's grid to the clusters that can be resident at once."""
    if config.num_multicast == 1:
        return config
    device = torch.cuda.current_device()
    clusters = kernel.max_active_clusters(device, config.num_threads, config.smem_bytes, config.num_multicast)
    limit = clusters * config.num_multicast
    if limit < 2:
        raise UnsupportedProblemError(f"fp8_gemm: no 2-CTA cluster of config {config.label} fits on device {device}")
    return config if config.grid_size <= limit else dataclasses.replace(config, grid_size=limit)


def _plan_for_config(config, m: int, n: int, extra_defines=None) -> _Plan:
    from deep_tile.jit.loader import get_kernel

    kernel = get_kernel(family.ENTRY, {**config.defines(), **(extra_defines or {})}, family.SYMBOL)
    config = _fit_clusters(config, kernel)
    return _Plan(config, kernel, family.tensor_map_boxes(config, m), family.launch_grid(config, m, n),
                 family.cluster_size(config))


def _get_config(m: int, n: int, k: int, num_sms: int):
    from deep_tile import phases
    from deep_tile.select.api import get_config

    with phases.timed("select"):
        return get_config(m, n, k, num_sms=num_sms)


def _plan(m: int, n: int, k: int, num_sms: int, a_scale_row_major: bool = False) -> _Plan:
    """The memoised plan of ``m x n x k`` on the current device with ``num_sms`` SMs, for an
    a_scale in the TMA-aligned layout or (``a_scale_row_major``) read row-major by the kernel (both
    host paths use it: the native path through deep_tile/native/bridge.py)."""
    key = (m, n, k, num_sms, torch.cuda.current_device(), a_scale_row_major)
    plan = _plans.get(key)
    if plan is None:
        config = _get_config(m, n, k, num_sms)
        plan = _plan_for_config(config.with_row_major_a_scale() if a_scale_row_major else config, m, n)
        _plans[key] = plan
    return plan


def _reads_row_major(a_scale, m: int, groups: int) -> bool:
    """Whether the kernel reads this a_scale as it is, row-major: contiguous rows of ``groups``
    floats, 16-byte aligned, ``groups`` a multiple of 4 (and not already the column-major layout)."""
    return (m > 1 and groups > 1 and family.row_major_a_scale_readable(groups) and a_scale.stride(1) == 1
            and a_scale.stride(0) == groups and a_scale.data_ptr() % 16 == 0)


def _run(a, a_scale, b, b_scale, out, config=None, extra_defines=None):
    """fp8_gemm on the Python host path, with an optional forced KernelConfig and extra
    compile-time defines (tests and tuning sweeps use them to cover every family and variant)."""
    m, n, k = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    device = a.device
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    if m == 0:
        return out
    from deep_tile.device import get_num_sms
    from deep_tile.jit.runtime import KernelArgs
    from deep_tile.tma import encode_2d

    groups = ceil_div(k, family.BLOCK_K)
    with torch.cuda.device(device):
        # NOTES: a row-major a_scale is read by a kernel variant (a 4-group TMA box per stage)
        # rather than copied into the column-major layout on every call.
        row_major = _reads_row_major(a_scale, m, groups)
        if not row_major:
            a_scale = get_tma_aligned_a_scale(a_scale)
        b_scale = b_scale.contiguous()
        if config is None and not extra_defines:
            plan = _plan(m, n, k, get_num_sms(), row_major)
        else:
            config = config or _get_config(m, n, k, get_num_sms())
            config = config.with_row_major_a_scale() if row_major else dataclasses.replace(config, a_scale_row_major=False)
            plan = _plan_for_config(config, m, n, extra_defines)
        first = config is None and not extra_defines and id(plan) not in _launched
        start = time.perf_counter()
        config, boxes = plan.config, plan.boxes
        if row_major:  # [m rows][groups] floats: the inner dimension is the group
            a_scale_map = encode_2d(a_scale.data_ptr(), "float32", groups, m, groups * 4, *boxes.a_scale, 0)
        else:
            pitch = a_scale.stride(1) if groups > 1 else align4(m)
            a_scale_map = encode_2d(a_scale.data_ptr(), "float32", m, groups, pitch * 4, *boxes.a_scale, 0)
        tma_d = _NO_TENSOR_MAP if config.split_k > 1 else encode_2d(
            out.data_ptr(), "bfloat16", n, m, out.stride(0) * 2, *boxes.d, boxes.d_swizzle)
        values = {
            "tma_a": encode_2d(a.data_ptr(), "uint8", k, m, a.stride(0), *boxes.a, 128),
            "tma_b": encode_2d(b.data_ptr(), "uint8", k, n, b.stride(0), *boxes.b, 128),
            "tma_a_scale": a_scale_map,
            "tma_d": tma_d,
            "b_scale": b_scale.data_ptr(),
            "d": out.data_ptr(),
            "ldd": out.stride(0),
            "m": m, "n": n, "k": k, "group_size": config.group_size,
        }
        args = KernelArgs([(kind, values[name]) for kind, name in zip(family.ARGUMENT_KINDS, family.ARGUMENTS)])
        mapped = time.perf_counter()
        plan.kernel.launch(grid=plan.grid, block=plan.block, smem_bytes=plan.smem,
                           stream=torch.cuda.current_stream(device).cuda_stream, args=args,
                           device=device.index, cluster=plan.cluster)
        if first:
            _report_first_launch(plan, m, n, k, mapped - start, time.perf_counter() - mapped)
    return out


def _report_first_launch(plan: _Plan, m: int, n: int, k: int, maps_s: float, launch_s: float) -> None:
    from deep_tile import phases

    _launched.add(id(plan))
    phases.report_first_launch(f"{m}x{n}x{k} (python path, {plan.config.label})", maps_s, launch_s)
