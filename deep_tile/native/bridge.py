"""What the native extension calls back into Python for (each call under the GIL).

- :func:`plan`: a call whose signature (every tensor's dtype, device, sizes, strides and address
  modulo 16, which arguments are the same tensor, the scalars, the SM limit) has no plan yet, or
  whose plan's overlap tests fail. It runs the Python path's own first half
  (:func:`deep_tile.gemm.launch.prepare` and its kin: the full checks, so errors are Python's and
  nothing is written; the output; the kernel's operands) and returns what the C++ side needs to
  launch every later call of that signature without Python: the kernel and launch geometry of
  :func:`deep_tile.gemm.planner.plan`, the argument specs (:mod:`deep_tile.gemm.kernel_args`), the
  output to allocate, where each operand comes from (a call tensor as it is, a view of one, or a
  copy into a layout, as recorded while the operands were made) and which tensor pairs must not
  overlap (the overlap tests the checks made). A call with no rows gets its output instead
  (nothing to launch; not cached).
- :func:`sms_limit`: the :func:`deep_tile.set_num_sms` limit, which the loader hands a library when
  it loads it (``set_sms_limit``; :func:`deep_tile.set_num_sms` hands later changes to every
  loaded library), so that calls read it in C++ without taking the GIL.
- :func:`launch_error`, :func:`report_first_launch`: a driver failure as
  :class:`deep_tile.errors.LaunchError`; the phases of a plan's first call (printed under
  ``DEEP_TILE_DEBUG``).

The C++ side holds no rule of its own: a signature it has not seen comes here. The protocol's
version is :data:`VERSION` (the library's ``BRIDGE_VERSION`` must match).
"""
from __future__ import annotations

import torch

from deep_tile import device, phases
from deep_tile.gemm import kernel_args
from deep_tile.errors import LaunchError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["VERSION", "SLOTS", "OPS", "plan", "describe", "sms_limit", "launch_error", "report_first_launch"]

VERSION = 10
"""The bridge protocol version (``kBridgeVersion`` in csrc/module.cpp)."""

SLOTS = ("a", "a_scale", "b", "b_scale", "info", "c", "out")
"""The call's tensors as the C++ side passes them (``kSlotNames`` in csrc/call.h): ``info`` is
m_indices, offsets, masked_m, expert_ends or group_sizes; ``out`` the output (allocated when the
call has none)."""

OPS = ("fp8_gemm", "fp8_gemm_acc", "fp8_gemm_1d1d", "k_grouped_fp8_gemm_1d1d", "m_grouped_fp8_gemm_contiguous",
       "m_grouped_fp8_gemm_offsets", "m_grouped_fp8_gemm_masked", "m_grouped_fp8_gemm_psum", "m_grouped_fp8_gemm_acc")
"""The op families (each with its ``_out`` op; ``kOpFamilies`` in csrc/call.h)."""


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


def _prepare(op: str, a, a_scale, b, b_scale, info, c, out, expected_m, accumulate, out_dtype, kind) -> tuple:
    """The Python path's first half for ``op`` (one of :data:`OPS`): ``(problem, out, operands)``."""
    from deep_tile.gemm import launch
    from deep_tile.gemm.checks import grouped_op_kind
    from deep_tile.gemm.problem import ProblemKind

    if op == "fp8_gemm":
        return launch.prepare(a, a_scale, b, b_scale, out)
    if op in ("fp8_gemm_acc", "fp8_gemm_1d1d"):
        return launch.prepare_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype,
                                  b_scale_1d=op == "fp8_gemm_1d1d")
    if op == "k_grouped_fp8_gemm_1d1d":
        return launch.prepare_k_grouped(a, a_scale, b, b_scale, info, out, c, out_dtype, accumulate=accumulate)
    if op == "m_grouped_fp8_gemm_acc":
        return launch.prepare_grouped(grouped_op_kind(kind), a, a_scale, b, b_scale, info, out, expected_m, c=c,
                                      accumulate=accumulate, out_dtype=out_dtype)
    if op in OPS:
        problem_kind = ProblemKind("grouped_" + op.removeprefix("m_grouped_fp8_gemm_"))
        return launch.prepare_grouped(problem_kind, a, a_scale, b, b_scale, info, out, expected_m)
    raise ValueError(f"deep_tile native: unknown op family {op!r}; expected one of {OPS}")


def plan(op: str, a, a_scale, b, b_scale, info, c, out, expected_m, accumulate: bool, out_dtype, kind,
         limit: int):
    """The plan of this call's signature (a dict, :func:`describe`), on ``a``'s device with ``limit``
    SMs (0: all); or, for a call with no rows, its output (the Python path's answer). Bad
    arguments raise the checks' errors, nothing written."""
    from deep_tile.gemm import checks, layouts

    with checks.recording_overlap_tests() as tested, layouts.recording_copies() as copies:
        problem, made_out, operands = _prepare(op, a, a_scale, b, b_scale, info, c, out, expected_m, accumulate,
                                               out_dtype, kind)
    if operands is None:
        return made_out
    described = describe((a, a_scale, b, b_scale, info, c, made_out), operands, copies, tested,
                         allocated=out is None)
    return {**_launch_plan(problem, a.device, limit), **described}


def _slot(x, slots: tuple) -> int:
    """The index in ``slots`` of the tensor object ``x``."""
    for i, s in enumerate(slots):
        if s is x:
            return i
    raise RuntimeError("deep_tile native: a tensor the checks or layouts name is none of the call's")


def _layout(x) -> list:
    return [list(x.shape), list(x.stride())]


def _view_of(x, base) -> list | None:
    """None when ``x`` is ``base`` as it is, else ``[sizes, strides, storage offset from base's]``."""
    if x is base or (x.shape == base.shape and x.stride() == base.stride()
                     and x.storage_offset() == base.storage_offset()):
        return None
    if x.dtype != base.dtype:
        raise RuntimeError("deep_tile native: an operand views another tensor as another dtype")
    return _layout(x) + [x.storage_offset() - base.storage_offset()]


def _storage(x) -> int:
    return x.untyped_storage().data_ptr()


def describe(slots: tuple, operands: tuple, copies: list, tested: list, allocated: bool) -> dict:
    """What the C++ side makes a call's operands with, from one call made in Python: ``slots`` the
    call's tensors (:data:`SLOTS`, ``out`` the output the call got), ``operands`` the kernel's,
    ``copies`` the ``(source, copy, scale)`` of :func:`deep_tile.gemm.layouts.recording_copies`,
    ``tested`` the ``(out, others)`` of :func:`deep_tile.gemm.checks.recording_overlap_tests`,
    ``allocated``: the output was allocated for the call.

    - ``operands``: per operand ``[slot, copy, view, scale]``: start from the slot's tensor; ``copy``
      None, or ``[numel, sizes, strides, offset]``: a new buffer of ``numel`` elements of its dtype
      on its device, strided so, the tensor copied into it (``scale``: counted as a scale copy);
      ``view`` None, or ``[sizes, strides, offset]``: ``as_strided`` of that, the storage offset
      relative to its own. An operand derives from the call tensor it starts at (its address),
      never from another one that happens to share its storage.
    - ``output``: None, or ``[sizes, dtype]`` of the output to allocate (contiguous, ``a``'s device).
    - ``disjoint``: ``[i, j]`` slot pairs whose memory spans must not meet (else Python is asked).
    """
    recipes = []
    for x in operands:
        source = None
        for source_tensor, copy, scale in copies:
            if _storage(copy) == _storage(x) and _storage(x) != 0:
                base = copy
                source = [_slot(source_tensor, slots), [copy.untyped_storage().nbytes() // copy.element_size()]
                          + _layout(copy) + [copy.storage_offset()], None, bool(scale)]
                break
        if source is None:
            starts = [i for i, s in enumerate(slots) if s is not None and (s is x or (
                _storage(s) == _storage(x) and s.data_ptr() == x.data_ptr()))]
            if not starts:
                raise RuntimeError(f"deep_tile native: an operand of shape {tuple(x.shape)} comes from no call tensor")
            base = slots[starts[0]]
            source = [starts[0], None, None, False]
        source[2] = _view_of(x, base)
        recipes.append(source)
    out = slots[SLOTS.index("out")]
    return {"operands": recipes, "output": [list(out.shape), out.dtype] if allocated else None,
            "disjoint": [[_slot(o, slots), _slot(x, slots)] for o, others in tested for x in others]}


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
