"""What the native extension calls back into Python for (each call under the GIL).

- :func:`plan`: the first call of a problem on a device: the full argument check (so errors are
  Python's), then :func:`deep_tile.planner.plan` (selector, kernel cache, cubin load) turned into
  the numbers the C++ side launches with. ``None`` when the kernel's contract has an argument the
  native path does not know how to fill: that problem then runs on the Python path.
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

from deep_tile import phases
from deep_tile.checks import check_fp8_gemm_args
from deep_tile import device
from deep_tile.errors import LaunchError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["VERSION", "ARGUMENT_CODES", "argument_codes", "plan", "python_path", "sms_limit", "launch_error",
           "report_first_launch"]

VERSION = 3
"""The bridge protocol version (``kBridgeVersion`` in csrc/module.cpp)."""

ARGUMENT_CODES = {
    "tma_a": (0, "tensormap"), "tma_b": (1, "tensormap"), "tma_a_scale": (2, "tensormap"),
    "tma_d": (3, "tensormap"), "b_scale": (4, "ptr"), "d": (5, "ptr"), "ldd": (6, "i32"),
    "m": (7, "i32"), "n": (8, "i32"), "k": (9, "i32"), "group_size": (10, "i32"),
}
"""Kernel argument name -> (code of ``Arg`` in csrc/gemm_plan.h, kind): what the C++ side fills."""


def argument_codes(names=family.ARGUMENTS, kinds=family.ARGUMENT_KINDS) -> list[int] | None:
    """The codes of the kernel's arguments in its order; None when one is unknown to the native
    path or has another kind (then the Python path runs the kernel)."""
    codes = []
    for name, kind in zip(names, kinds):
        code, known_kind = ARGUMENT_CODES.get(name, (None, None))
        if code is None or known_kind != kind:
            return None
        codes.append(code)
    return codes


def _record(p, m: int, n: int, k: int) -> dict:
    """The JSON-able part of a plan (what :mod:`deep_tile.plan_index` stores)."""
    config = p.config
    return {
        "defines": config.defines(), "grid": p.grid, "block": p.block, "smem": p.smem,
        "cluster": p.cluster, "box_a": list(p.boxes.a), "box_b": list(p.boxes.b),
        "box_a_scale": list(p.boxes.a_scale), "box_d": list(p.boxes.d), "d_swizzle": p.boxes.d_swizzle,
        "store_d_map": config.split_k == 1, "group_size": config.group_size,
        "a_scale_row_major": config.a_scale_row_major,
        "label": f"{m}x{n}x{k} (native path, {config.label})",
    }


def plan(a, a_scale, b, b_scale, out, limit: int) -> dict | None:
    """The launch plan of this call's problem on ``a``'s device, with ``limit`` SMs (0: all).

    From :mod:`deep_tile.plan_index` when a record is stored for this selector and device (the
    selector is then not even imported), else from :func:`deep_tile.planner.plan`.
    """
    from deep_tile import plan_index, planner
    from deep_tile.jit.loader import get_kernel
    from deep_tile.layouts import reads_row_major

    m, n, k = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    codes = argument_codes()
    if codes is None:
        return None
    index = a.device.index
    # The C++ side makes the same decision (row_major_a_scale in csrc/gemm_op.cpp).
    row_major = reads_row_major(a_scale, m, a_scale.shape[1])
    variant = "-rm" if row_major else ""
    with torch.cuda.device(a.device):
        num_sms = limit or device.device_facts(index).num_sms
        record = plan_index.lookup(index, m, n, k, num_sms, variant)
        if record is None:
            record = _record(planner.plan(m, n, k, num_sms, row_major), m, n, k)
            plan_index.store(index, m, n, k, num_sms, record, variant)
        kernel = get_kernel(family.ENTRY, record["defines"], family.SYMBOL)
        kernel.ensure_smem_limit(index, record["smem"])
    return {**record, "kernel": int(kernel.handle), "symbol": kernel.name, "args": codes,
            "box_a": tuple(record["box_a"]), "box_b": tuple(record["box_b"]),
            "box_a_scale": tuple(record["box_a_scale"]), "box_d": tuple(record["box_d"])}


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
