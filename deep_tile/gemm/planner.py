"""The one planner of the FP8 GEMM: the launch plan both host paths consume.

A :class:`Plan` holds everything about a launch that depends only on the problem
(:class:`deep_tile.gemm.problem.Problem`, its a_scale layout included), the device and the SM limit:
the selected :class:`deep_tile.select.KernelConfig` (its multicast grid fitted to the clusters
that can be resident), the loaded kernel, the argument specs (how each kernel parameter is made
from the call's tensors, :mod:`deep_tile.gemm.kernel_args`), the grid, the cluster and block sizes and
the shared memory. :func:`plan` memoises one per (problem, SM limit, device);
:func:`plan_for_config` builds one for a forced config (tests, sweeps). The Python launcher
(:mod:`deep_tile.gemm.launch`) walks a plan's specs in Python; the native path
(:mod:`deep_tile.native.bridge`) hands the same specs, encoded as ints, to its C++ walker.
"""
from __future__ import annotations

import dataclasses

import torch

from deep_tile.errors import UnsupportedProblemError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["Plan", "plan", "plan_for_config", "plan_k_grouped_blocks", "plan_signal", "plan_head_strided", "fit_clusters",
           "select"]


class Plan:
    """Everything about a launch that depends only on the problem and the config: memoised.
    (A plain class, not a dataclass: this module is imported by the first call of a process.)

    Attributes:
        problem: the :class:`deep_tile.gemm.problem.Problem`.
        config: the :class:`deep_tile.select.KernelConfig` (grid fitted to the resident clusters).
        kernel: the loaded :class:`deep_tile.jit.runtime.Kernel`.
        args: how each kernel parameter is made from the call's tensors
            (:mod:`deep_tile.gemm.kernel_args` specs, the kernel's order): both host paths walk them.
        grid, cluster, block, smem: the launch geometry.
    """

    __slots__ = ("problem", "config", "kernel", "args", "grid", "cluster", "block", "smem")

    def __init__(self, problem, config, kernel, args: tuple, grid: int, cluster: int):
        self.problem = problem
        self.config = config
        self.kernel = kernel  # deep_tile.jit.runtime.Kernel
        self.args = args
        self.grid = grid
        self.cluster = cluster
        self.block = config.num_threads  # launch constants, derived once rather than per call
        self.smem = config.smem_bytes

    def __repr__(self) -> str:
        return (f"Plan({self.problem!r}, config={self.config!r}, kernel={self.kernel.name!r}, grid={self.grid}, "
                f"cluster={self.cluster})")


_plans: dict = {}


def fit_clusters(config, kernel):
    """Shrink a multicast config's grid to the clusters that can be resident at once."""
    if config.num_multicast == 1:
        return config
    device = torch.cuda.current_device()
    clusters = kernel.max_active_clusters(device, config.num_threads, config.smem_bytes, config.num_multicast)
    limit = clusters * config.num_multicast
    if limit < 2:
        raise UnsupportedProblemError(f"fp8_gemm: no 2-CTA cluster of config {config.label} fits on device {device}")
    return config if config.grid_size <= limit else dataclasses.replace(config, grid_size=limit)


def _plan_of(problem, config, defines: dict, symbol: str, argument_specs) -> Plan:
    """The plan of ``config``'s kernel (``defines``, ``symbol`` of the FP8 GEMM entry) for
    ``problem``: its 2-CTA grid fitted to the device (:func:`fit_clusters`), its arguments
    ``argument_specs(config, problem)``."""
    from deep_tile.jit.loader import get_kernel

    kernel = get_kernel(family.ENTRY, defines, symbol)
    config = fit_clusters(config, kernel)
    return Plan(problem, config, kernel, argument_specs(config, problem),
                family.launch_grid(config, problem.rows, problem.n), family.cluster_size(config))


def plan_for_config(config, problem, extra_defines=None) -> Plan:
    """The plan of ``config`` (a :class:`deep_tile.select.KernelConfig`) for ``problem`` (a
    :class:`deep_tile.gemm.problem.Problem`) on the current device, its kernel built with
    ``extra_defines`` added (not memoised). The config's a_scale variant and kind follow the
    problem's."""
    config = config.for_problem(problem)
    defines = {**config.defines(), **family.probe_defines(extra_defines)}
    return _plan_of(problem, config, defines, family.symbol(problem.kind), family.argument_specs)


def select(problem, num_sms: int):
    """The selector's :class:`deep_tile.select.KernelConfig` for ``problem`` on ``num_sms`` SMs
    (timed as the ``select`` phase of a first call)."""
    from deep_tile import phases
    from deep_tile.select.api import get_problem_config

    with phases.timed("select"):
        return get_problem_config(problem, num_sms=num_sms)


def plan(problem, num_sms: int) -> Plan:
    """The memoised plan of ``problem`` (a :class:`deep_tile.gemm.problem.Problem`, its a_scale layout
    included) on the current device with ``num_sms`` SMs (both host paths use it: the native path
    through deep_tile/native/bridge.py)."""
    key = (problem, num_sms, torch.cuda.current_device())
    found = _plans.get(key)
    if found is None:
        found = _plans[key] = plan_for_config(select(problem, num_sms), problem)
    return found


def plan_k_grouped_blocks(problem, num_sms: int, config=None) -> Plan:
    """The plan of the K-grouped ``problem`` in DeepGEMM's NT layout: the selector's pick for the
    K-grouped kind (or ``config``, not memoised), its kernel built as
    ``ProblemKind::kKGroupedBlocks`` (:func:`deep_tile.kernels.fp8_gemm.k_grouped_blocks_defines`),
    its arguments :func:`deep_tile.kernels.fp8_gemm.k_grouped_blocks_argument_specs`."""
    key = ("k_grouped_blocks", problem, num_sms, torch.cuda.current_device())
    found = _plans.get(key) if config is None else None
    if found is None:
        chosen = (config or select(problem, num_sms)).for_problem(problem)
        found = _plan_of(problem, chosen, family.k_grouped_blocks_defines(chosen), family.GROUPED_SYMBOL,
                         family.k_grouped_blocks_argument_specs)
        if config is None:
            _plans[key] = found
    return found


def plan_signal(problem, num_sms: int, max_block_n: int, mode: int = family.SIGNAL_AT_NEXT_STORE) -> Plan:
    """The memoised plan of the signalling masked kernel (``DT_SIGNAL``, symbol
    :data:`deep_tile.kernels.fp8_gemm.SIGNAL_SYMBOL`) for the masked ``problem`` on the current
    device with ``num_sms`` SMs, its tile at most ``max_block_n`` columns wide, ``mode`` one of
    :data:`deep_tile.kernels.fp8_gemm.SIGNAL_MODES` (when each counter is raised); its arguments are
    :func:`deep_tile.kernels.fp8_gemm.signal_argument_specs` (operands
    :data:`~deep_tile.kernels.fp8_gemm.SIGNAL_OPERANDS`)."""
    from deep_tile.select.api import get_signal_config

    key = ("signal", problem, num_sms, max_block_n, mode, torch.cuda.current_device())
    found = _plans.get(key)
    if found is None:
        config = get_signal_config(problem, max_block_n, num_sms, mode).for_problem(problem)
        found = _plans[key] = _plan_of(problem, config, {**config.defines(), family.SIGNAL_DEFINE: mode},
                                       family.SIGNAL_SYMBOL, family.signal_argument_specs)
    return found


def plan_head_strided(problem, num_sms: int):
    """The memoised plan of the masked ``problem``'s head-strided kernel (``DT_HEAD_STRIDED``,
    fp8_einsum's ``strided`` path) on the current device with ``num_sms`` SMs: the selector's pick
    with the row-major a_scale, its arguments :func:`deep_tile.kernels.fp8_gemm.head_strided_argument_specs`
    (operands the [max_m, G * cols] views); None when that pick cannot run head-strided
    (:func:`deep_tile.kernels.fp8_gemm.head_strided_problems`)."""
    problem = problem.with_a_scale_row_major()
    key = ("head_strided", problem, num_sms, torch.cuda.current_device())
    if key not in _plans:
        config = select(problem, num_sms).for_problem(problem)
        _plans[key] = None if family.head_strided_problems(config, problem) else _plan_of(
            problem, config, family.head_strided_defines(config), family.GROUPED_SYMBOL,
            family.head_strided_argument_specs)
    return _plans[key]
