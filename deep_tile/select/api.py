"""The public selection entry points: :func:`get_config` and :func:`explain`.

They join the pure selector (:func:`deep_tile.select.select_config`,
:func:`deep_tile.select.explain_text`) with the facts of the current device
(:mod:`deep_tile.device`: SM count, shared memory, chip). Arguments are checked as
:func:`deep_tile.fp8_gemm` checks them (:func:`deep_tile.gemm.checks.check_problem_shape`), so a
shape is accepted or rejected here exactly when fp8_gemm accepts or rejects it. Importing this
module imports neither torch nor cuda.

``M = 0`` is accepted, as fp8_gemm accepts it (it returns the empty output without launching a
kernel): :func:`get_config` then returns the configuration of ``M = 1`` and :func:`explain` says
that nothing is launched.

Both also describe the grouped (Mixture-of-Experts) GEMMs of :mod:`deep_tile.gemm.grouped`: with
``kind="contiguous"``, ``"masked"`` or ``"offsets"``, ``num_groups`` and (masked) ``expected_m``,
checked by :func:`deep_tile.gemm.checks.check_grouped_problem`.
"""
from __future__ import annotations

import sys
from typing import Optional

from deep_tile import arch, device, env
from deep_tile.gemm.checks import check_grouped_problem, check_problem, check_problem_kind
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select.config import KernelConfig
from deep_tile.select.report import explain_text
from deep_tile.select.selector import select_config, select_signal_config

__all__ = ["get_config", "get_problem_config", "get_signal_config", "explain", "selection_problem"]

_printed: set = set()
"""Keys ``(m, n, k, num_sms, max_smem)`` already printed under ``DEEP_TILE_PRINT_CONFIGS``."""


def _resolve(func: str, num_sms) -> tuple:
    """Checked ``(num_sms, max_smem)``; ``num_sms`` None means :func:`deep_tile.get_num_sms`."""
    num_sms = device.get_num_sms() if num_sms is None else device.check_num_sms(func, num_sms)
    return num_sms, device.max_smem_per_block()


def selection_problem(func: str, m, n, k, kind, num_groups, expected_m, out_dtype="bfloat16", c_dtype=None,
             b_scale_1d=False) -> Problem:
    """The checked :class:`deep_tile.gemm.problem.Problem` of :func:`get_config` / :func:`explain`'s
    arguments (``func`` names the caller in the messages); the command line's ``warmup`` makes
    its problems with it too."""
    from deep_tile.kernels.fp8_gemm import C_DTYPES, OUT_DTYPES

    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"{func}: out_dtype must be one of {', '.join(map(repr, OUT_DTYPES))}; got {out_dtype!r}")
    if c_dtype not in C_DTYPES:
        raise ValueError(f"{func}: c_dtype must be one of {', '.join(map(repr, C_DTYPES))}; got {c_dtype!r}")
    if not isinstance(b_scale_1d, bool):
        raise TypeError(f"{func}: b_scale_1d must be a bool; got {type(b_scale_1d).__name__}")
    if check_problem_kind(func, kind).grouped:
        if b_scale_1d:
            raise ValueError(f"{func}: b_scale_1d describes the dense 1D1D GEMM (the k_grouped kind is 1D1D "
                             f"already); got kind={kind!r}")
        problem = check_grouped_problem(func, kind, m, n, k, num_groups, expected_m)
    else:
        if num_groups != 1 or expected_m is not None:
            raise ValueError(f"{func}: num_groups and expected_m describe a grouped kind; got kind='dense' with "
                             f"num_groups={num_groups!r}, expected_m={expected_m!r}")
        problem = check_problem(func, m, n, k).with_b_scale_1d(b_scale_1d)
    if out_dtype != "bfloat16" or c_dtype is not None:
        problem = problem.with_output(out_dtype, c_dtype)
    return problem


def get_config(m: int, n: int, k: int, num_sms: Optional[int] = None, *, kind="dense", num_groups: int = 1,
               expected_m: Optional[int] = None, out_dtype: str = "bfloat16", c_dtype: Optional[str] = None,
               b_scale_1d: bool = False) -> KernelConfig:
    """The :class:`KernelConfig` fp8_gemm uses for ``out[m, n] = a[m, k] @ b[n, k]^T``, or, with a
    grouped ``kind``, the one the grouped GEMM of that kind uses.

    ``num_sms`` defaults to :func:`deep_tile.get_num_sms`; given, it must not exceed the
    device's SM count (any positive int without a CUDA device). For ``m == 0`` (nothing is
    launched) the configuration of ``m == 1`` is returned. With ``DEEP_TILE_PRINT_CONFIGS`` set,
    each new choice is printed once to stderr.

    Grouped kinds (``kind`` ``"contiguous"``, ``"masked"`` or ``"offsets"``, as
    :func:`deep_tile.m_grouped_fp8_gemm_contiguous` and the others): ``m`` is the rows of ``a``
    (masked: ``max_m``), ``num_groups`` the experts, ``expected_m`` the masked kind's hint of real
    rows per expert (default ``m``; the other kinds derive it as ``ceil(m / num_groups)``). The
    config is the kernel's before the launcher picks its a_scale variant (the offsets kind reads
    a_scale row-major: ``config.with_row_major_a_scale()``).

    Output variants (training): ``out_dtype`` ``"bfloat16"`` (default) or ``"float32"``;
    ``c_dtype`` the addend C of ``out = C + A.B^T``: None (default), ``"bfloat16"`` or ``"float32"``
    (a tensor apart from out) or ``"out"`` (out itself: in-place accumulation, a weight
    gradient's ``main_grad +=``); ``b_scale_1d``: the dense 1D1D GEMM
    (:func:`deep_tile.fp8_gemm_1d1d`, b_scale per row of b). These pick the tile as the calls with
    such tensors do (the in-place weight gradient's rule included).

    Raises:
        TypeError: an argument is not an int (the message names it).
        ValueError: ``m < 0``, ``n`` not a positive multiple of 8, ``k`` not a positive multiple
            of 16, ``num_sms`` out of range, an unknown ``kind``, or ``num_groups`` /
            ``expected_m`` out of range or given for a kind that takes none, an unknown
            ``out_dtype`` / ``c_dtype``, or ``b_scale_1d`` with a grouped kind (the message names
            the argument and the value).
    """
    problem = selection_problem("get_config", m, n, k, kind, num_groups, expected_m, out_dtype, c_dtype, b_scale_1d)
    return get_problem_config(problem, num_sms, func="get_config")


def get_problem_config(problem: Problem, num_sms: Optional[int] = None, func: str = "get_problem_config") -> KernelConfig:
    """:func:`get_config` for a checked :class:`deep_tile.gemm.problem.Problem` (the planner's entry)."""
    num_sms, max_smem = _resolve(func, num_sms)
    chip = device.device_facts().chip if device.has_cuda() else arch.DEFAULT_CHIP
    if problem.kind is ProblemKind.K_GROUPED:  # a rule of its own (deep_tile.select.k_grouped)
        from deep_tile.select.k_grouped import select_k_grouped_config

        config = select_k_grouped_config(_nonempty(problem), num_sms, max_smem)
    else:
        config = select_config(_nonempty(problem), num_sms, max_smem, chip)
    key = (problem, num_sms, max_smem)
    if key not in _printed and env.print_configs():
        _printed.add(key)
        m, n, k = problem.shape
        groups = f" {problem.kind.value} num_groups={problem.num_groups}" if problem.kind.grouped else ""
        print(f"deep_tile: m={m} n={n} k={k}{groups} num_sms={num_sms} -> {config.label} grid={config.grid_size} "
              f"raster={config.raster_width} smem={config.smem_bytes} threads={config.num_threads}",
              file=sys.stderr)
    return config


def get_signal_config(problem: Problem, max_block_n: int, num_sms: Optional[int] = None,
                      mode: int = 2) -> KernelConfig:
    """The :class:`KernelConfig` of the signalling masked kernel for a checked masked ``problem``
    on the current device: :func:`deep_tile.select.selector.select_signal_config` (tiles at most
    ``max_block_n`` columns wide; ``mode``: deep_tile.kernels.fp8_gemm.SIGNAL_MODES)."""
    num_sms, max_smem = _resolve("get_signal_config", num_sms)
    chip = device.device_facts().chip if device.has_cuda() else arch.DEFAULT_CHIP
    return select_signal_config(_nonempty(problem), num_sms, max_block_n, max_smem, chip, mode)


def _nonempty(problem: Problem) -> Problem:
    """The problem the selector is asked about: ``m == 0`` as ``m == 1`` (nothing is launched)."""
    if problem.m > 0:
        return problem
    return Problem(1, problem.n, problem.k, kind=problem.kind, num_groups=problem.num_groups, expected_m=1)


def explain(m: int, n: int, k: int, num_sms: Optional[int] = None, *, kind="dense", num_groups: int = 1,
            expected_m: Optional[int] = None, out_dtype: str = "bfloat16", c_dtype: Optional[str] = None,
            b_scale_1d: bool = False) -> str:
    """A multi-line account of :func:`get_config`'s choice for ``m x n x k`` (and, grouped, its
    ``kind``, ``num_groups`` and ``expected_m``; the output variant ``out_dtype``, ``c_dtype`` and
    ``b_scale_1d``, as :func:`get_config` takes them) and why.

    The first line names the device (or, without a CUDA device, the assumed H100 SXM). For
    ``m == 0`` the account says that no kernel is launched.

    Raises:
        TypeError, ValueError: as :func:`get_config`.
    """
    problem = selection_problem("explain", m, n, k, kind, num_groups, expected_m, out_dtype, c_dtype, b_scale_1d)
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
        caller = "fp8_gemm" if not problem.kind.grouped else "the grouped GEMM"
        return (f"{header}\nproblem: M=0 N={problem.n} K={problem.k}: the output is empty; {caller} returns it without "
                f"launching a kernel (get_config reports the M=1 configuration)")
    if problem.kind is ProblemKind.K_GROUPED:
        from deep_tile.select.k_grouped import PAIRS_MAX_TOKENS, WIDE_MIN_TOKENS
        config = get_problem_config(problem, num_sms, func="explain")
        return (f"{header}\nproblem: k_grouped M={problem.m} N={problem.n} K={problem.k} (tokens of all groups) "
                f"num_groups={problem.num_groups}\nchosen: {config.label}, grid {config.grid_size}: the rule of "
                f"deep_tile.select.k_grouped ({'64x128 with two buffers for M <= 64' if problem.m <= 64 else '128x160'}"
                f", the fastest or within 2.1% of it on every measured shape; persistent on every SM, the most stages "
                f"that fit), not the cost model; an FP32 out accumulated in place or without c, with M a multiple "
                f"of 64, takes the staged epilogue instead (above 64 rows: D loaded and stored by TMA while the "
                f"tensor cores work; 128x152, or in place 128x160 with M < N from {WIDE_MIN_TOKENS} tokens per "
                f"group); in place with at most {PAIRS_MAX_TOKENS} tokens per group, in 2-CTA pairs "
                f"sharing B (mcB) where each group has an even number of tiles")
    return header + "\n" + explain_text(problem, num_sms, max_smem, chip)
