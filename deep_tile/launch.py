"""The Python launcher of the FP8 GEMM: check, plan, tensor maps, arguments, launch.

:func:`run` is fp8_gemm on the Python host path: validate (:mod:`deep_tile.checks`) -> the plan
(:mod:`deep_tile.planner`, memoised per shape) -> build the tensor maps (:mod:`deep_tile.tma`,
cached by address) -> pack the arguments in the order the kernel's contract gives
(:mod:`deep_tile.kernels.fp8_gemm`) -> launch on the current stream (:mod:`deep_tile.jit.runtime`).
It runs until the native extension is built, wherever it cannot be built, for forced configs
(tests, sweeps) and for every call the native path hands back (bad arguments: so errors are the
same on both paths).
"""
from __future__ import annotations

import dataclasses
import time

import torch

from deep_tile import planner
from deep_tile.checks import check_fp8_gemm_args
from deep_tile.common import align4, ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.layouts import get_tma_aligned_a_scale, reads_row_major

__all__ = ["run"]

_NO_TENSOR_MAP = bytes(128)  # the split-K kernel stores without the D tensor map
_launched: set = set()  # plans launched at least once by the Python path (DEEP_TILE_DEBUG report)


def run(a, a_scale, b, b_scale, out, config=None, extra_defines=None):
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
        row_major = reads_row_major(a_scale, m, groups)
        if not row_major:
            a_scale = get_tma_aligned_a_scale(a_scale)
        b_scale = b_scale.contiguous()
        if config is None and not extra_defines:
            plan = planner.plan(m, n, k, get_num_sms(), row_major)
        else:
            config = config or planner.select(m, n, k, get_num_sms())
            config = config.with_row_major_a_scale() if row_major else dataclasses.replace(config, a_scale_row_major=False)
            plan = planner.plan_for_config(config, m, n, extra_defines)
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


def _report_first_launch(plan: planner.Plan, m: int, n: int, k: int, maps_s: float, launch_s: float) -> None:
    from deep_tile import phases

    _launched.add(id(plan))
    phases.report_first_launch(f"{m}x{n}x{k} (python path, {plan.config.label})", maps_s, launch_s)
