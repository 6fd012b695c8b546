"""Fill the kernel cache ahead of time with the FP8 GEMM kernels a set of shapes will use.

``python -m deep_tile warmup --shape M,N,K ... --grouped KIND,G,M,N,K[,EXPECTED_M] ...`` is the
command-line front end. For each shape the configuration is chosen exactly as
:func:`deep_tile.fp8_gemm` chooses it (:func:`deep_tile.select.select_config`); a grouped problem
(a :class:`deep_tile.gemm.problem.Problem` of a grouped kind, e.g. from
:func:`deep_tile.gemm.checks.check_grouped_problem`) as the grouped GEMMs choose it, with the a_scale
variant they launch with the TMA-aligned a_scale layout (row-major for the offsets kind, which
reads no other). Each distinct kernel is compiled once into the disk cache
(:func:`deep_tile.jit.cache.get_cubin`); shapes whose configurations build the same kernel share
it. Nothing here creates a CUDA context: compiling needs no GPU.

An unusable cache directory fails every kernel the same way; its :class:`deep_tile.errors.CacheError`
is reported by the first failed result only (the later ones say ``cache_unusable`` with no message
of their own), so the command line prints it once and still counts every kernel as an error.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from deep_tile.gemm.checks import check_problem_shape
from deep_tile.device import check_num_sms
from deep_tile import env
from deep_tile.errors import CacheError, DeepTileError
from deep_tile.kernels.fp8_gemm import ENTRY as GEMM_ENTRY, ROW_MAJOR_A_SCALE_KINDS, symbol as gemm_symbol
from deep_tile.jit import cache
from deep_tile.jit.loader import build_defines
from deep_tile.gemm.problem import Problem
from deep_tile.select import KernelConfig
from deep_tile.select.api import get_problem_config

__all__ = ["WarmupKernel", "WarmupResult", "check_shape", "plan", "launched_config", "build"]


@dataclass(frozen=True)
class WarmupKernel:
    """One distinct kernel to build, and the shapes that use it.

    Attributes:
        config: the configuration chosen for the first of ``shapes`` (the others differ at most
            in runtime launch parameters such as the grid size).
        defines: the compile-time defines of the build (the cache key's defines).
        shapes: the problems that run this kernel, in the order given: ``(m, n, k)`` for a dense
            one, the :class:`deep_tile.gemm.problem.Problem` for a grouped one.
    """

    config: KernelConfig
    defines: tuple
    shapes: tuple


@dataclass(frozen=True)
class WarmupResult:
    """The outcome of building one :class:`WarmupKernel`.

    Attributes:
        kernel: what was built.
        status: ``"hit"`` (found in the cache), ``"miss"`` (compiled and stored), ``"uncached"``
            (compiled with ``DEEP_TILE_DISABLE_CACHE`` set) or ``"error"``.
        seconds: wall time of the lookup or compile.
        error: the exception's message when ``status == "error"``, else ``""``; also ``""`` when
            the error is an unusable cache directory that an earlier result of this process
            already reported (``cache_unusable`` then says so).
        cache_unusable: the error is the cache directory's (:class:`deep_tile.errors.CacheError`):
            every kernel fails until ``DEEP_TILE_CACHE_DIR`` (or ``DEEP_TILE_DISABLE_CACHE``) changes.
    """

    kernel: WarmupKernel
    status: str
    seconds: float
    error: str = ""
    cache_unusable: bool = False


_reported_unusable: set = set()  # cache directories whose CacheError a result already carried


def check_shape(shape: Sequence[int]) -> tuple:
    """``shape`` as an ``(m, n, k)`` tuple that :func:`deep_tile.fp8_gemm` accepts.

    The values are checked by :func:`deep_tile.gemm.checks.check_problem_shape`, fp8_gemm's own shape
    check, so the messages are fp8_gemm's with ``warmup`` as the function name. ``m == 0`` is
    accepted (fp8_gemm launches nothing for it; :func:`plan` builds no kernel for it).

    Raises:
        ValueError: ``shape`` is not three values, or fails the shape check.
        TypeError: a value is not an int.
    """
    values = tuple(shape)
    if len(values) != 3:
        raise ValueError(f"warmup: a shape must be three ints (m, n, k); got {shape!r}")
    return check_problem_shape("warmup", *values)


def plan(shapes: Iterable, num_sms: int) -> list[WarmupKernel]:
    """Group ``shapes`` by the kernel their selected configuration builds, first use first.

    Each item is an ``(m, n, k)`` shape of :func:`deep_tile.fp8_gemm` or a
    :class:`deep_tile.gemm.problem.Problem` (any kind and output variant; a grouped one as
    :func:`deep_tile.gemm.checks.check_grouped_problem` makes it), its configuration the one the call
    gets (:func:`deep_tile.select.api.get_problem_config`: the K-grouped kind's rule included).
    Repeated problems are counted once;
    problems with ``m == 0`` get no kernel (nothing is launched for them). The defines include
    what the environment adds at build time (``DEEP_TILE_WATCHDOG``), as
    :func:`deep_tile.jit.loader.get_kernel` does.

    Raises:
        ValueError, TypeError: a shape is invalid (see :func:`check_shape`), or ``num_sms`` is not
            an SM count (see :func:`deep_tile.device.check_num_sms`).
    """
    num_sms = check_num_sms("warmup", num_sms)
    groups: dict[tuple, list] = {}
    configs: dict[tuple, KernelConfig] = {}
    seen = set()
    for shape in shapes:
        problem = shape if isinstance(shape, Problem) else Problem(*check_shape(shape))
        if problem.m == 0 or problem in seen:
            continue
        seen.add(problem)
        config = launched_config(get_problem_config(problem, num_sms, func="warmup"), problem)
        defines = tuple(sorted(build_defines(config.defines()).items()))
        configs.setdefault(defines, config)
        plain = not problem.kind.grouped and problem == Problem(*problem.shape)
        groups.setdefault(defines, []).append(problem.shape if plain else problem)
    return [WarmupKernel(configs[d], d, tuple(s)) for d, s in groups.items()]


def launched_config(config: KernelConfig, problem: Problem) -> KernelConfig:
    """``config`` as the launcher builds it for ``problem`` given the TMA-aligned a_scale layout
    (:meth:`deep_tile.select.KernelConfig.for_problem`): row-major where the problem says so or
    its kind reads no other (:data:`deep_tile.kernels.fp8_gemm.ROW_MAJOR_A_SCALE_KINDS`)."""
    if problem.kind in ROW_MAJOR_A_SCALE_KINDS:
        problem = problem.with_a_scale_row_major()
    return config.for_problem(problem)


def build(kernel: WarmupKernel, compiler: Optional[str] = None) -> WarmupResult:
    """Compile ``kernel`` into the disk cache (or find it there) with ``compiler``.

    ``compiler`` overrides ``DEEP_TILE_COMPILER`` (None: the default compiler). Compile and
    cache failures are returned as ``status="error"`` rather than raised, so a caller can go on
    with the other kernels. An unusable cache directory's message is returned once per process
    and directory (see :class:`WarmupResult`); the attempt is still made each time (it fails
    before compiling), so a directory made usable meanwhile is used.

    Raises:
        ValueError: ``compiler`` is not ``"nvrtc"``, ``"nvcc"`` or None, or a ``DEEP_TILE_*``
            variable has a bad value (nothing is written then).
    """
    before = cache.cache_stats()
    start = time.perf_counter()
    try:
        cache.get_cubin(GEMM_ENTRY, dict(kernel.defines), gemm_symbol(kernel.config.problem_kind), compiler=compiler)
    except CacheError as error:
        directory = str(env.cache_dir())
        message = "" if directory in _reported_unusable else str(error)
        _reported_unusable.add(directory)
        return WarmupResult(kernel, "error", time.perf_counter() - start, message, cache_unusable=True)
    except DeepTileError as error:
        return WarmupResult(kernel, "error", time.perf_counter() - start, str(error))
    _reported_unusable.discard(str(env.cache_dir()))
    seconds = time.perf_counter() - start
    after = cache.cache_stats()
    if after["hits"] > before["hits"]:
        status = "hit"
    elif after["misses"] > before["misses"]:
        status = "miss"
    else:
        status = "uncached"
    return WarmupResult(kernel, status, seconds)
