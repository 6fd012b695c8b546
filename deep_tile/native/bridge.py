"""What the native extension calls back into Python for (each call under the GIL).

- :func:`plan`, :func:`plan_grouped`, :func:`plan_acc` and :func:`plan_k_grouped`: the first call
  of a problem on a device (dense, one of the M-grouped kinds and their output variants, the dense GEMM's output variants and
  the 1D1D GEMM, the K-grouped GEMM): the full argument check (so errors are Python's), then
  :func:`deep_tile.gemm.planner.plan` (selector, kernel cache, cubin load) turned into what the C++
  side launches with: the kernel, the launch geometry and the plan's argument specs
  (:mod:`deep_tile.gemm.kernel_args`), which the C++ side walks as the Python launcher does.
- :func:`python_path`, :func:`python_grouped_path`, :func:`python_acc_path` and
  :func:`python_k_grouped_path`: every call the native path does not take (bad arguments, no rows),
  on :func:`deep_tile.gemm.launch.run` / :func:`~deep_tile.gemm.launch.run_grouped` /
  :func:`~deep_tile.gemm.launch.run_acc` / :func:`~deep_tile.gemm.launch.run_k_grouped`.
- :func:`sms_limit`: the :func:`deep_tile.set_num_sms` limit, which the loader hands a library when
  it loads it (``set_sms_limit``; :func:`deep_tile.set_num_sms` hands later changes to every
  loaded library), so that calls read it in C++ without taking the GIL.
- :func:`launch_error`, :func:`report_first_launch`: a driver failure as
  :class:`deep_tile.errors.LaunchError`; the phases of a plan's first call (printed under
  ``DEEP_TILE_DEBUG``).

The protocol's version is :data:`VERSION` (the library's ``BRIDGE_VERSION`` must match).
"""
from __future__ import annotations

import torch

from deep_tile import device, phases
from deep_tile.gemm import kernel_args
from deep_tile.gemm.checks import check_fp8_gemm_acc_args, check_fp8_gemm_args, check_grouped_args, check_k_grouped_args
from deep_tile.errors import LaunchError
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind

__all__ = ["VERSION", "plan", "plan_grouped", "plan_acc", "plan_k_grouped", "python_path", "python_grouped_path",
           "python_acc_path", "python_k_grouped_path", "sms_limit", "launch_error", "report_first_launch"]

VERSION = 9
"""The bridge protocol version (``kBridgeVersion`` in csrc/module.cpp)."""


def _record(p) -> dict:
    """The JSON-able part of a plan (what :mod:`deep_tile.gemm.plan_index` stores): the kernel's
    defines, the launch geometry and the argument specs encoded as ints (the C++ side walks them
    in ``fill_params``, csrc/launch.cpp)."""
    return {
        "defines": p.config.defines(), "grid": p.grid, "block": p.block, "smem": p.smem,
        "cluster": p.cluster, "args": kernel_args.encode(p.args),
        "label": f"{p.problem} (native path, {p.config.label})",
    }


def _launch_plan(problem, where: torch.device, limit: int) -> dict:
    """The launch plan of ``problem`` (checked, its a_scale layout decided) on device ``where``
    with ``limit`` SMs (0: all): from :mod:`deep_tile.gemm.plan_index` when a record is stored for this
    selector and device (the selector is then not even imported), else from
    :func:`deep_tile.gemm.planner.plan`."""
    from deep_tile.gemm import plan_index, planner
    from deep_tile.jit.loader import get_kernel

    index = where.index
    with torch.cuda.device(where):
        num_sms = limit or device.device_facts(index).num_sms
        record = plan_index.lookup(index, problem, num_sms)
        if record is None:
            record = _record(planner.plan(problem, num_sms))
            plan_index.store(index, problem, num_sms, record)
        kernel = get_kernel(family.ENTRY, record["defines"], family.symbol(problem.kind))
        kernel.ensure_smem_limit(index, record["smem"])
    return {**record, "kernel": int(kernel.handle), "symbol": kernel.name}


def plan(a, a_scale, b, b_scale, out, limit: int) -> dict:
    """The launch plan of this fp8_gemm call's problem on ``a``'s device, with ``limit`` SMs (0: all)."""
    from deep_tile.gemm.layouts import reads_row_major

    problem = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    # The C++ side decided the same (a_scale_layout in csrc/layouts.cpp; tests/test_native.py
    # compares the two rules).
    if reads_row_major(a_scale, problem.m, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    return _launch_plan(problem, a.device, limit)


def plan_grouped(kind: str, a, a_scale, b, b_scale, info, out, expected_m, limit: int, c=None, accumulate=False,
                 out_dtype=None) -> dict:
    """The launch plan of this grouped call's problem (``kind``: a grouped
    :class:`deep_tile.gemm.problem.ProblemKind` value; ``info``: m_indices, offsets, masked_m or expert_ends;
    ``expected_m``: the masked kind's hint, else None; ``c``, ``accumulate``, ``out_dtype``: the
    output variant) on ``a``'s device, with ``limit`` SMs."""
    from deep_tile.gemm.layouts import grouped_reads_row_major

    problem = check_grouped_args(ProblemKind(kind), a, a_scale, b, b_scale, info, out, expected_m, c=c,
                                 accumulate=accumulate, out_dtype=out_dtype)
    # The C++ side decided the same (grouped_a_scale_layout in csrc/layouts.cpp; compared by
    # tests/test_native.py).
    if grouped_reads_row_major(problem.kind, a_scale, problem.rows, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    return _launch_plan(problem, a.device, limit)


def plan_acc(a, a_scale, b, b_scale, c, accumulate: bool, out, out_dtype, b_scale_1d: bool, limit: int) -> dict:
    """The launch plan of this output-variant call's problem (the arguments of
    :func:`deep_tile.gemm.launch.run_acc`; ``b_scale_1d``: the 1D1D GEMM) on ``a``'s device, with
    ``limit`` SMs (0: all)."""
    from deep_tile.gemm.layouts import reads_row_major

    problem = check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d=b_scale_1d)
    # as run_acc decides (and a_scale_layout in csrc/layouts.cpp)
    if reads_row_major(a_scale, problem.m, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    return _launch_plan(problem, a.device, limit)


def plan_k_grouped(a, a_scale, b, b_scale, group_sizes, c, accumulate: bool, out, out_dtype, limit: int) -> dict:
    """The launch plan of this K-grouped call's problem (the arguments of
    :func:`deep_tile.gemm.launch.run_k_grouped` from the ops: ``group_sizes`` a tensor) on ``a``'s device,
    with ``limit`` SMs (0: all). Its a_scale is always read column-major (copied into that layout
    when not so, by both paths)."""
    problem, _ = check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype, accumulate=accumulate)
    return _launch_plan(problem, a.device, limit)


def python_path(a, a_scale, b, b_scale, out):
    """:func:`deep_tile.gemm.launch.run`: the Python host path (raises deep_tile's errors for bad arguments)."""
    from deep_tile.gemm.launch import run

    return run(a, a_scale, b, b_scale, out)


def python_grouped_path(kind: str, a, a_scale, b, b_scale, info, out, expected_m, c=None, accumulate=False,
                        out_dtype=None):
    """:func:`deep_tile.gemm.launch.run_grouped` for the grouped ``kind`` (a ProblemKind value; ``c``,
    ``accumulate``, ``out_dtype``: the output variant): the Python host path (raises deep_tile's
    errors for bad arguments). Returns ``out`` (or a new one)."""
    from deep_tile.gemm.launch import run_grouped

    return run_grouped(ProblemKind(kind), a, a_scale, b, b_scale, info, out, expected_m, c=c, accumulate=accumulate,
                       out_dtype=out_dtype)


def python_acc_path(a, a_scale, b, b_scale, c, accumulate: bool, out, out_dtype, b_scale_1d: bool):
    """:func:`deep_tile.gemm.launch.run_acc` (the Python host path of the output variants and the 1D1D
    GEMM; raises deep_tile's errors for bad arguments). Returns ``out`` (or a new one)."""
    from deep_tile.gemm.launch import run_acc

    return run_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d=b_scale_1d)


def python_k_grouped_path(a, a_scale, b, b_scale, group_sizes, c, accumulate: bool, out, out_dtype):
    """:func:`deep_tile.gemm.launch.run_k_grouped` (the Python host path of the K-grouped GEMM; raises
    deep_tile's errors for bad arguments). Returns ``out`` (or a new one)."""
    from deep_tile.gemm.launch import run_k_grouped

    return run_k_grouped(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype, accumulate=accumulate)


def sms_limit() -> int:
    """The SM limit of :func:`deep_tile.set_num_sms`, 0 when none."""
    return device.sms_limit() or 0


def launch_error(message: str) -> LaunchError:
    """The exception for a failed driver call."""
    return LaunchError(message)


def report_first_launch(label: str, maps_us: float, launch_us: float) -> None:
    """Record the phases of the first call that launched the plan ``label`` (printed under
    DEEP_TILE_DEBUG; :func:`deep_tile.phases.last_report` keeps them)."""
    phases.report_first_launch(label, maps_us * 1e-6, launch_us * 1e-6)
