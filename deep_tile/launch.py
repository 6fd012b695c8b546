"""The Python launcher of the FP8 GEMM: check, plan, tensor maps, arguments, launch.

:func:`run` is fp8_gemm on the Python host path: validate (:mod:`deep_tile.checks`) -> the plan
(:mod:`deep_tile.planner`, memoised per problem) -> walk the plan's argument specs
(:mod:`deep_tile.kernel_args`: tensor maps from :mod:`deep_tile.tma`, cached by address) ->
launch on the current stream (:mod:`deep_tile.jit.runtime`).
It runs until the native extension is built, wherever it cannot be built, for forced configs
(tests, sweeps) and for every call the native path hands back (bad arguments: so errors are the
same on both paths).
"""
from __future__ import annotations

import time

import torch

from deep_tile import phases, planner
from deep_tile.checks import check_fp8_gemm_args
from deep_tile.device import get_num_sms
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernel_args import pack_values
from deep_tile.layouts import get_tma_aligned_a_scale, reads_row_major
from deep_tile.tma import encode_2d

__all__ = ["run", "launch"]

_launched: set = set()  # plans launched at least once by the Python path (DEEP_TILE_DEBUG report)


def run(a, a_scale, b, b_scale, out, config=None, extra_defines=None):
    """fp8_gemm on the Python host path, with an optional forced KernelConfig and extra
    compile-time defines (tests and tuning sweeps use them to cover every family and variant)."""
    problem = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    device = a.device
    if out is None:
        out = torch.empty((problem.m, problem.n), dtype=torch.bfloat16, device=device)
    if problem.m == 0:
        return out
    with torch.cuda.device(device):
        # NOTES: a row-major a_scale is read by a kernel variant (a 4-block TMA box per stage)
        # rather than copied into the column-major layout on every call.
        if reads_row_major(a_scale, problem.m, problem.k_blocks):
            problem = problem.with_a_scale_row_major()
        else:
            a_scale = get_tma_aligned_a_scale(a_scale)
        b_scale = b_scale.contiguous()
        forced = config is not None or bool(extra_defines)
        if forced:
            plan = planner.plan_for_config(config or planner.select(problem, get_num_sms()), problem, extra_defines)
        else:
            plan = planner.plan(problem, get_num_sms())
        launch(plan, (a, a_scale, b, b_scale, out), device, report=not forced)
    return out


def launch(plan: planner.Plan, operands: tuple, device, report: bool = True) -> None:
    """Launch ``plan`` on ``device``'s current stream, its parameters made from ``operands`` (the
    family contract's ``OPERANDS``, in order) by walking the plan's argument specs. ``report``:
    time the first launch of the plan for :mod:`deep_tile.phases` (``DEEP_TILE_DEBUG``)."""
    first = report and id(plan) not in _launched
    start = time.perf_counter()
    args = KernelArgs(pack_values(plan.args, operands, encode_2d))
    mapped = time.perf_counter()
    plan.kernel.launch(grid=plan.grid, block=plan.block, smem_bytes=plan.smem,
                       stream=torch.cuda.current_stream(device).cuda_stream, args=args,
                       device=device.index, cluster=plan.cluster)
    if first:
        _launched.add(id(plan))
        phases.report_first_launch(f"{plan.problem} (python path, {plan.config.label})", mapped - start,
                                   time.perf_counter() - mapped)
