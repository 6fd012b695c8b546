"""The one planner of the FP8 GEMM: the launch plan both host paths consume.

A :class:`Plan` holds everything about a launch that depends only on the problem, the device and
the SM limit: the selected :class:`deep_tile.select.KernelConfig` (its multicast grid fitted to the
clusters that can be resident), the loaded kernel, the TMA boxes, the grid, the cluster and block
sizes and the shared memory. :func:`plan` memoises one per (problem, device, SM limit, a_scale
layout); :func:`plan_for_config` builds one for a forced config (tests, sweeps). The Python
launcher (:mod:`deep_tile.launch`) launches plans; the native path (:mod:`deep_tile.native.bridge`)
turns them into the numbers its C++ side launches with.
"""
from __future__ import annotations

import dataclasses

import torch

from deep_tile.errors import UnsupportedProblemError
from deep_tile.kernels import fp8_gemm as family

__all__ = ["Plan", "plan", "plan_for_config", "fit_clusters", "select"]


class Plan:
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
        return f"Plan(config={self.config!r}, kernel={self.kernel.name!r}, grid={self.grid}, cluster={self.cluster})"


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


def plan_for_config(config, m: int, n: int, extra_defines=None) -> Plan:
    """The plan of ``config`` (a :class:`deep_tile.select.KernelConfig`) for an ``m x n`` output on
    the current device, its kernel built with ``extra_defines`` added (not memoised)."""
    from deep_tile.jit.loader import get_kernel

    kernel = get_kernel(family.ENTRY, {**config.defines(), **(extra_defines or {})}, family.SYMBOL)
    config = fit_clusters(config, kernel)
    return Plan(config, kernel, family.tensor_map_boxes(config, m), family.launch_grid(config, m, n),
                 family.cluster_size(config))


def select(m: int, n: int, k: int, num_sms: int):
    """The selector's :class:`deep_tile.select.KernelConfig` for ``m x n x k`` on ``num_sms`` SMs
    (timed as the ``select`` phase of a first call)."""
    from deep_tile import phases
    from deep_tile.select.api import get_config

    with phases.timed("select"):
        return get_config(m, n, k, num_sms=num_sms)


def plan(m: int, n: int, k: int, num_sms: int, a_scale_row_major: bool = False) -> Plan:
    """The memoised plan of ``m x n x k`` on the current device with ``num_sms`` SMs, for an
    a_scale in the TMA-aligned layout or (``a_scale_row_major``) read row-major by the kernel (both
    host paths use it: the native path through deep_tile/native/bridge.py)."""
    key = (m, n, k, num_sms, torch.cuda.current_device(), a_scale_row_major)
    found = _plans.get(key)
    if found is None:
        config = select(m, n, k, num_sms)
        found = _plans[key] = plan_for_config(config.with_row_major_a_scale() if a_scale_row_major else config, m, n)
    return found
