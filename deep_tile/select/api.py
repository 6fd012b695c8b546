"""The public selection entry points: :func:`get_config` and :func:`explain`.

They join the pure selector (:func:`deep_tile.select.select_config`,
:func:`deep_tile.select.explain_text`) with the facts of the current device
(:mod:`deep_tile.device`: SM count, shared memory, chip). Arguments are checked as
:func:`deep_tile.fp8_gemm` checks them (:func:`deep_tile.checks.check_problem_shape`), so a
shape is accepted or rejected here exactly when fp8_gemm accepts or rejects it. Importing this
module imports neither torch nor cuda.

``M = 0`` is accepted, as fp8_gemm accepts it (it returns the empty output without launching a
kernel): :func:`get_config` then returns the configuration of ``M = 1`` and :func:`explain` says
that nothing is launched.
"""
from __future__ import annotations

import sys
from typing import Optional

from deep_tile import arch, device, env
from deep_tile.checks import check_problem
from deep_tile.problem import Problem
from deep_tile.select.config import KernelConfig
from deep_tile.select.report import explain_text
from deep_tile.select.selector import select_config

__all__ = ["get_config", "get_problem_config", "explain"]

_printed: set = set()
"""Keys ``(m, n, k, num_sms, max_smem)`` already printed under ``DEEP_TILE_PRINT_CONFIGS``."""


def _resolve(func: str, num_sms) -> tuple:
    """Checked ``(num_sms, max_smem)``; ``num_sms`` None means :func:`deep_tile.get_num_sms`."""
    num_sms = device.get_num_sms() if num_sms is None else device.check_num_sms(func, num_sms)
    return num_sms, device.max_smem_per_block()


def get_config(m: int, n: int, k: int, num_sms: Optional[int] = None) -> KernelConfig:
    """The :class:`KernelConfig` fp8_gemm uses for ``out[m, n] = a[m, k] @ b[n, k]^T``.

    ``num_sms`` defaults to :func:`deep_tile.get_num_sms`; given, it must not exceed the
    device's SM count (any positive int without a CUDA device). For ``m == 0`` (nothing is
    launched) the configuration of ``m == 1`` is returned. With ``DEEP_TILE_PRINT_CONFIGS`` set,
    each new choice is printed once to stderr.

    Raises:
        TypeError: an argument is not an int (the message names it).
        ValueError: ``m < 0``, ``n`` not a positive multiple of 8, ``k`` not a positive multiple
            of 16, or ``num_sms`` out of range (the message names the argument and the value).
    """
    return get_problem_config(check_problem("get_config", m, n, k), num_sms, func="get_config")


def get_problem_config(problem: Problem, num_sms: Optional[int] = None, func: str = "get_problem_config") -> KernelConfig:
    """:func:`get_config` for a checked :class:`deep_tile.problem.Problem` (the planner's entry)."""
    num_sms, max_smem = _resolve(func, num_sms)
    chip = device.device_facts().chip if device.has_cuda() else arch.DEFAULT_CHIP
    selected = problem if problem.m > 0 else Problem(1, problem.n, problem.k)
    config = select_config(selected, num_sms, max_smem, chip)
    key = (problem, num_sms, max_smem)
    if key not in _printed and env.print_configs():
        _printed.add(key)
        m, n, k = problem.shape
        print(f"deep_tile: m={m} n={n} k={k} num_sms={num_sms} -> {config.label} grid={config.grid_size} "
              f"raster={config.raster_width} smem={config.smem_bytes} threads={config.num_threads}",
              file=sys.stderr)
    return config


def explain(m: int, n: int, k: int, num_sms: Optional[int] = None) -> str:
    """A multi-line account of :func:`get_config`'s choice for ``m x n x k`` and why.

    The first line names the device (or, without a CUDA device, the assumed H100 SXM). For
    ``m == 0`` the account says that fp8_gemm launches no kernel.

    Raises:
        TypeError, ValueError: as :func:`get_config`.
    """
    problem = check_problem("explain", m, n, k)
    num_sms, max_smem = _resolve("explain", num_sms)
    if device.has_cuda():
        facts = device.device_facts()
        chip = facts.chip
        header = (f"device: {facts.name} (sm_{facts.capability[0]}{facts.capability[1]}, "
                  f"{facts.num_sms} SMs, {facts.max_smem_per_block} bytes smem per block)")
    else:
        chip = arch.DEFAULT_CHIP
        header = f"device: none found; assuming {chip.name} ({chip.num_sms} SMs)"
    if problem.m == 0:
        return (f"{header}\nproblem: M=0 N={problem.n} K={problem.k}: the output is empty; fp8_gemm returns it without "
                f"launching a kernel (get_config reports the M=1 configuration)")
    return header + "\n" + explain_text(problem, num_sms, max_smem, chip)
