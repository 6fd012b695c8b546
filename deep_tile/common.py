"""Arithmetic, the int check and the usable CPU count shared by every layer, and the one Python
spelling of the scale group.

Leaf module: imports nothing of deep_tile. The CUDA side spells the same group ``deep_tile::kScaleGroup``
(include/deep_tile/common/types.cuh); ``deep_tile.kernels.fp8_gemm`` passes this value to the
kernel as ``DT_SCALE_GROUP`` and the kernel ``static_assert``s that the two agree.
"""
from __future__ import annotations

import operator
import os
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["SCALE_GROUP", "I32_MAX", "ceil_div", "align_up", "align4", "check_int", "usable_cpus", "recording"]

SCALE_GROUP = 128
"""Width along K of one activation scale (1x128) and edge of one weight scale block (128x128)."""
I32_MAX = 2**31 - 1
"""The largest int32: the bound of every element offset and count a kernel takes as an int."""


def ceil_div(a: int, b: int) -> int:
    """Smallest integer >= a / b (for b > 0)."""
    return (a + b - 1) // b


def align_up(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return ceil_div(value, alignment) * alignment


def align4(m: int) -> int:
    """``m`` rounded up to a multiple of 4: the column stride (in floats, 16 bytes) of a TMA-aligned a_scale."""
    return align_up(m, 4)


def check_int(func: str, name: str, value) -> int:
    """``value`` as a Python int; TypeError naming ``func`` and ``name`` for bools, floats, strings
    and other non-integers (integer scalars of numpy or torch are accepted through ``__index__``)."""
    if isinstance(value, bool):
        raise TypeError(f"{func}: {name} must be an int; got {value!r} (bool)")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{func}: {name} must be an int; got {value!r} ({type(value).__name__})") from None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def recording(log_var: ContextVar):
    """A fresh list set as ``log_var``'s value inside the block (the checks' overlap tests and the
    layouts' copies are recorded this way while the native path's plan is built)."""
    log: list = []
    token = log_var.set(log)
    try:
        yield log
    finally:
        log_var.reset(token)
