"""What the native extension calls back into Python for (each call under the GIL).

- :func:`plan`: the first call of a problem on a device: the full argument check (so errors are
  Python's), then :func:`deep_tile.planner.plan` (selector, kernel cache, cubin load) turned into
  what the C++ side launches with: the kernel, the launch geometry and the plan's argument specs
  (:mod:`deep_tile.kernel_args`), which the C++ side walks as the Python launcher does.
- :func:`python_path`: every call the native path does not take (bad arguments, ``m == 0``).
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

from deep_tile import device, kernel_args, phases
from deep_tile.checks import check_fp8_gemm_args
from deep_tile.errors import LaunchError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["VERSION", "plan", "python_path", "sms_limit", "launch_error", "report_first_launch"]

VERSION = 4
"""The bridge protocol version (``kBridgeVersion`` in csrc/module.cpp)."""


def _record(p) -> dict:
    """The JSON-able part of a plan (what :mod:`deep_tile.plan_index` stores): the kernel's
    defines, the launch geometry and the argument specs encoded as ints (the C++ side walks them
    in ``fill_params``, csrc/gemm_op.cpp)."""
    return {
        "defines": p.config.defines(), "grid": p.grid, "block": p.block, "smem": p.smem,
        "cluster": p.cluster, "args": kernel_args.encode(p.args),
        "label": f"{p.problem} (native path, {p.config.label})",
    }


def plan(a, a_scale, b, b_scale, out, limit: int) -> dict:
    """The launch plan of this call's problem on ``a``'s device, with ``limit`` SMs (0: all).

    From :mod:`deep_tile.plan_index` when a record is stored for this selector and device (the
    selector is then not even imported), else from :func:`deep_tile.planner.plan`.
    """
    from deep_tile import plan_index, planner
    from deep_tile.jit.loader import get_kernel
    from deep_tile.layouts import reads_row_major

    problem = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    index = a.device.index
    # The C++ side decided the same (a_scale_layout in csrc/gemm_op.cpp; tests/test_native.py
    # compares the two rules).
    if reads_row_major(a_scale, problem.m, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    with torch.cuda.device(a.device):
        num_sms = limit or device.device_facts(index).num_sms
        record = plan_index.lookup(index, problem, num_sms)
        if record is None:
            record = _record(planner.plan(problem, num_sms))
            plan_index.store(index, problem, num_sms, record)
        kernel = get_kernel(family.ENTRY, record["defines"], family.SYMBOL)
        kernel.ensure_smem_limit(index, record["smem"])
    return {**record, "kernel": int(kernel.handle), "symbol": kernel.name}


def python_path(a, a_scale, b, b_scale, out):
    """:func:`deep_tile.launch.run`: the Python host path (raises deep_tile's errors for bad arguments)."""
    from deep_tile.launch import run

    return run(a, a_scale, b, b_scale, out)


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
