"""The Python launcher of the FP8 GEMM: check, plan, tensor maps, arguments, launch.

:func:`run` is fp8_gemm on the Python host path: :func:`prepare` (validate, :mod:`deep_tile.gemm.checks`;
allocate; the kernel's operands, the native path's first call of a signature starts there too) -> the plan
(:mod:`deep_tile.gemm.planner`, memoised per problem) -> walk the plan's argument specs
(:mod:`deep_tile.gemm.kernel_args`: tensor maps from :mod:`deep_tile.gemm.tma`, cached by address) ->
launch on the current stream (:mod:`deep_tile.jit.runtime`), with programmatic dependent launch
unless :mod:`deep_tile.pdl` says otherwise.
It runs until the native extension is built, wherever it cannot be built, for forced configs
(tests, sweeps) and for every call the native path hands back (bad arguments: so errors are the
same on both paths).
"""
from __future__ import annotations

import time

import torch

from deep_tile import phases
from deep_tile.gemm import planner
from deep_tile.gemm.checks import K_GROUPED_FN, check_fp8_gemm_acc_args, check_fp8_gemm_args, check_grouped_args, check_k_grouped_args
from deep_tile.common import align4
from deep_tile.device import get_num_sms
from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.gemm.kernel_args import pack_values
from deep_tile.kernels import moe_layout
from deep_tile.kernels.fp8_gemm import ROW_MAJOR_A_SCALE_KINDS
from deep_tile.gemm.layouts import contiguous, get_row_major_a_scale, get_tma_aligned_a_scale, grouped_reads_row_major, \
    reads_row_major
from deep_tile.pdl import get_pdl
from deep_tile.gemm.problem import ProblemKind
from deep_tile.gemm.tma import encode_2d

__all__ = ["run", "prepare", "new_output", "run_acc", "prepare_acc", "acc_operands", "run_grouped", "prepare_grouped",
           "grouped_operands", "run_k_grouped", "prepare_k_grouped", "launch_k_grouped", "k_grouped_operands",
           "K_GROUPED_LAYOUTS", "k_grouped_blocks_views", "launch_k_grouped_blocks", "launch",
           "launch_small_kernel"]

_launched: set = set()  # plans launched at least once by the Python path (DEEP_TILE_DEBUG report)


def run(a, a_scale, b, b_scale, out, config=None, extra_defines=None):
    """fp8_gemm on the Python host path, with an optional forced KernelConfig and extra
    compile-time defines (tests and tuning sweeps use them to cover every family and variant)."""
    problem, out, operands = prepare(a, a_scale, b, b_scale, out)
    if operands is not None:
        with torch.cuda.device(a.device):
            _plan_and_launch(problem, operands, a.device, config, extra_defines)
    return out


def prepare(a, a_scale, b, b_scale, out) -> tuple:
    """``(problem, out, operands)`` of an fp8_gemm call: checked (raises before anything is
    written), ``out`` allocated when None, the kernel's operands (:data:`deep_tile.kernels.fp8_gemm.OPERANDS`;
    None when there are no rows) and the problem with the a_scale layout they have. Both host
    paths start here: the native one on the first call of a signature (deep_tile/native/bridge.py)."""
    problem = check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    if out is None:
        out = new_output(problem, a)
    if problem.m == 0:
        return problem, out, None
    # NOTES: a row-major a_scale is read by a kernel variant (a 4-block TMA box per stage)
    # rather than copied into the column-major layout on every call.
    if reads_row_major(a_scale, problem.m, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    else:
        a_scale = get_tma_aligned_a_scale(a_scale)
    return problem, out, (a, a_scale, b, contiguous(b_scale), out)


def new_output(problem, a) -> torch.Tensor:
    """The output a call without ``out`` gets: ``[m, n]`` (dense), ``a``'s leading dimensions and
    ``n`` (M-grouped), ``[num_groups, m, n]`` (K-grouped), of the problem's output type."""
    if problem.kind is ProblemKind.K_GROUPED:
        shape = (problem.num_groups, problem.m, problem.n)
    elif problem.kind is ProblemKind.DENSE:
        shape = (problem.m, problem.n)
    else:
        shape = tuple(a.shape[:-1]) + (problem.n,)
    return torch.empty(shape, dtype=getattr(torch, problem.out_dtype), device=a.device)


def run_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype=None, config=None, extra_defines=None,
            b_scale_1d=False):
    """fp8_gemm with an FP32 output and/or an addend, ``out = C + A.B^T``, on the Python host path
    (the arguments of :func:`deep_tile.gemm.checks.check_fp8_gemm_acc_args`: ``accumulate`` means C is
    ``out``; ``b_scale_1d``: the 1D1D GEMM, b_scale ``[n, ceil(k/128)]``), with an optional forced
    KernelConfig and extra defines. Returns ``out``."""
    problem, out, operands = prepare_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d)
    if operands is not None:
        with torch.cuda.device(a.device):
            _plan_and_launch(problem, operands, a.device, config, extra_defines)
    return out


def prepare_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype=None, b_scale_1d=False) -> tuple:
    """:func:`prepare` of an output-variant call (the arguments of :func:`run_acc`)."""
    problem = check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d=b_scale_1d)
    if out is None:
        out = new_output(problem, a)
    if problem.m == 0:
        return problem, out, None
    problem, operands = acc_operands(problem, a, a_scale, b, b_scale, c, out, b_scale_1d)
    return problem, out, operands


def acc_operands(problem, a, a_scale, b, b_scale, c, out, b_scale_1d: bool = False) -> tuple:
    """``(problem, operands)``: the output variants' kernel operands
    (:data:`deep_tile.kernels.fp8_gemm.OPERANDS`, then C) of checked arguments, and the problem
    with the a_scale layout the kernel reads (row-major where it can, else the TMA-aligned
    column-major one, copied into it when needed)."""
    if reads_row_major(a_scale, problem.m, problem.k_blocks):
        problem = problem.with_a_scale_row_major()
    else:
        a_scale = get_tma_aligned_a_scale(a_scale)
    # 1D1D: b_scale read as a_scale is, column-major ([K blocks][align4(n)], copied when not so)
    b_scale = get_tma_aligned_a_scale(b_scale) if b_scale_1d else contiguous(b_scale)
    # the kernel's C operand: c, or out itself (accumulate, or no C: the parameter is unused)
    return problem, (a, a_scale, b, b_scale, out, out if c is None else c)


def _plan_and_launch(problem, operands: tuple, device, config, extra_defines) -> None:
    """The memoised plan of ``problem`` (or one of a forced config) launched over ``operands``."""
    forced = config is not None or bool(extra_defines)
    if forced:
        plan = planner.plan_for_config(config or planner.select(problem, get_num_sms()), problem, extra_defines)
    else:
        plan = planner.plan(problem, get_num_sms())
    launch(plan, operands, device, report=not forced)


def run_grouped(kind: ProblemKind, a, a_scale, b, b_scale, info, out, expected_m=None, config=None,
                extra_defines=None, *, c=None, accumulate=False, out_dtype=None):
    """A grouped (Mixture-of-Experts) GEMM of ``kind`` on the Python host path: the arguments of
    :mod:`deep_tile.gemm.grouped`'s functions (``info``: m_indices, offsets or masked_m; the output
    variants' ``c``, ``accumulate`` (C is ``out``) and ``out_dtype`` as
    :func:`deep_tile.gemm.checks.check_grouped_args` takes them), with an optional forced KernelConfig
    and extra defines (tests, sweeps). Returns ``out``."""
    problem, out, operands = prepare_grouped(kind, a, a_scale, b, b_scale, info, out, expected_m, c=c,
                                             accumulate=accumulate, out_dtype=out_dtype)
    if operands is not None:
        with torch.cuda.device(a.device):
            _plan_and_launch(problem, operands, a.device, config, extra_defines)
    return out


def prepare_grouped(kind: ProblemKind, a, a_scale, b, b_scale, info, out, expected_m=None, *, c=None,
                    accumulate=False, out_dtype=None) -> tuple:
    """:func:`prepare` of a grouped call (the arguments of :func:`run_grouped`)."""
    problem = check_grouped_args(kind, a, a_scale, b, b_scale, info, out, expected_m, c=c, accumulate=accumulate,
                                 out_dtype=out_dtype)
    if out is None:
        out = new_output(problem, a)
    if problem.rows == 0:
        return problem, out, None
    problem, operands = grouped_operands(problem, a, a_scale, b, b_scale, info, out, c)
    return problem, out, operands


def grouped_operands(problem, a, a_scale, b, b_scale, info, out, c=None) -> tuple:
    """``(problem, operands)``: the grouped kernel's operands
    (:data:`deep_tile.kernels.fp8_gemm.GROUPED_OPERANDS`; then C for an output variant: ``c``, or
    ``out`` itself when accumulating or without C) as 2-D views of checked arguments, and
    the problem with the a_scale layout the kernel reads (:func:`deep_tile.gemm.layouts.grouped_reads_row_major`:
    row-major where it can, else the TMA-aligned column-major one, copied into it when needed)."""
    rows, k, n = problem.rows, problem.k, problem.n
    k_blocks = problem.k_blocks
    a2 = a.as_strided((rows, k), (a.stride(-2), 1))
    out2 = out.as_strided((rows, n), (out.stride(-2), 1))
    b2 = b.as_strided((problem.num_groups * n, k), (b.stride(1), 1))
    row_major = grouped_reads_row_major(problem.kind, a_scale, rows, k_blocks)
    if row_major:
        problem = problem.with_a_scale_row_major()
    if problem.kind is ProblemKind.GROUPED_MASKED:
        if row_major:
            scale2 = a_scale.view(rows, k_blocks)
        else:
            aligned = get_tma_aligned_a_scale(a_scale)  # [G, max_m, K blocks], per group column-major
            scale2 = aligned.as_strided((problem.num_groups * k_blocks, problem.m), (align4(problem.m), 1))
    elif problem.kind in ROW_MAJOR_A_SCALE_KINDS:  # the offsets kind: tiles start at any row
        scale2 = get_row_major_a_scale(a_scale)  # copied into rows of align4(K blocks) floats when not so
    elif row_major:
        scale2 = a_scale
    else:
        scale2 = get_tma_aligned_a_scale(a_scale)
    operands = (a2, scale2, b2, contiguous(b_scale), out2, info)
    if problem.out_dtype != "bfloat16" or problem.c_dtype is not None:
        operands += (out2 if c is None else c.as_strided((rows, n), (c.stride(-2), 1)),)
    return problem, operands


K_GROUPED_LAYOUTS = ("rows", "blocks")
"""The operand layouts of the K-grouped GEMM: ``"rows"``, ``a`` [m, k] and ``b`` [n, k] with the
groups' tokens side by side; ``"blocks"``, DeepGEMM's NT layout: flat buffers holding each group's
[m, size] (and [n, size]) block row-major, one after another (:func:`k_grouped_blocks_views`)."""


def run_k_grouped(a, a_scale, b, b_scale, group_sizes, out=None, c=None, out_dtype=None, accumulate=False,
                  config=None, extra_defines=None, layout="rows"):
    """The K-grouped GEMM (:func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d`) on the Python host
    path: checked (:func:`deep_tile.gemm.checks.check_k_grouped_args`; ``accumulate``: C is ``out``),
    ``out`` allocated when None, a host list of sizes copied to the device, then launched; with
    an optional forced KernelConfig (its tile, made K-grouped) and extra defines; ``layout`` one of
    :data:`K_GROUPED_LAYOUTS` (``"blocks"``: ``a`` and ``b`` flat, :func:`k_grouped_blocks_views`;
    no extra defines). Returns ``out``."""
    if layout not in K_GROUPED_LAYOUTS:
        raise ValueError(f"{K_GROUPED_FN}: layout must be one of {K_GROUPED_LAYOUTS}; got {layout!r}")
    if layout == "rows":
        problem, out, operands = prepare_k_grouped(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype,
                                                   accumulate=accumulate)
        if operands is not None:
            with torch.cuda.device(a.device):
                _plan_and_launch(problem, operands, a.device, config, extra_defines)
        return out
    if extra_defines:
        raise ValueError(f"{K_GROUPED_FN}: layout='blocks' takes no extra defines")
    a, b = k_grouped_blocks_views(a, a_scale, b, b_scale)
    problem, sizes = check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype,
                                          accumulate=accumulate)
    if isinstance(sizes, tuple) and any(size % 16 for size in sizes):
        raise ValueError(f"{K_GROUPED_FN}: with layout='blocks' every group size must be a multiple of 16 (a "
                         f"block's row pitch for TMA); got {list(sizes)}")
    if out is None:
        out = new_output(problem, a)
    if problem.m == 0:
        return out
    if isinstance(sizes, tuple):
        sizes = torch.tensor(sizes, dtype=torch.int32, device=a.device)
    launch_k_grouped_blocks(problem, a, a_scale, b, b_scale, sizes, out, out if c is None else c, config)
    return out


def prepare_k_grouped(a, a_scale, b, b_scale, group_sizes, out=None, c=None, out_dtype=None,
                      accumulate=False) -> tuple:
    """:func:`prepare` of a K-grouped call (the arguments of :func:`run_k_grouped`)."""
    problem, sizes = check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype,
                                          accumulate=accumulate)
    if out is None:
        out = new_output(problem, a)
    if problem.m == 0:
        return problem, out, None
    if isinstance(sizes, tuple):
        sizes = torch.tensor(sizes, dtype=torch.int32, device=a.device)
    return problem, out, k_grouped_operands(problem, a, a_scale, b, b_scale, sizes, out, out if c is None else c)


def k_grouped_blocks_views(a, a_scale, b, b_scale) -> tuple:
    """DeepGEMM's NT layout of the K-grouped operands as the [m, k] and [n, k] views the checks and
    the tensor maps' templates take (no copy): ``a`` a contiguous float8_e4m3fn buffer of ``m * k``
    elements (any shape; group g's [m, sizes[g]] block row-major from element ``m * sum(sizes[:g])``
    on), ``m`` the rows of ``a_scale``; ``b`` likewise with ``n``, the rows of ``b_scale``; ``k`` the
    tokens of all groups. Non-tensors pass through (the checks name them)."""
    fn = K_GROUPED_FN
    if not all(isinstance(x, torch.Tensor) for x in (a, a_scale, b, b_scale)):
        return a, b
    if a_scale.dim() != 2 or b_scale.dim() != 2:
        raise ValueError(f"{fn}: with layout='blocks', a_scale and b_scale must be 2-D [m, ceil(k/128)] and "
                         f"[n, ceil(k/128)]; got {tuple(a_scale.shape)} and {tuple(b_scale.shape)}")
    m, n = a_scale.shape[0], b_scale.shape[0]
    if n == 0 or b.numel() % n:
        raise ValueError(f"{fn}: with layout='blocks', b must hold n * k elements (n = b_scale rows = {n}); got "
                         f"{b.numel()}")
    k = b.numel() // n
    views = []
    for name, x, rows in (("a", a, m), ("b", b, n)):
        if not x.is_contiguous() or x.numel() != rows * k:
            raise ValueError(f"{fn}: with layout='blocks', {name} must be a contiguous buffer of {rows} * k = "
                             f"{rows * k} elements (each group's [{rows}, size] block row-major, one after another); "
                             f"got shape {tuple(x.shape)}{'' if x.is_contiguous() else ' (not contiguous)'}")
        views.append(x.view(rows, k))
    return tuple(views)


def launch_k_grouped_blocks(problem, a, a_scale, b, b_scale, sizes, out, c, config=None) -> None:
    """Launch the K-grouped GEMM in DeepGEMM's NT layout (``a`` and ``b`` the [m, k] and [n, k]
    views of :func:`k_grouped_blocks_views`; the rest as :func:`launch_k_grouped`): the map-table
    kernel writes each group's maps of A and B into a fresh [2 G] table from the device sizes, then
    the GEMM reads through them (both on the current stream: nothing read on the host, so a CUDA
    graph replays it with new sizes)."""
    device = a.device
    with torch.cuda.device(device):
        forced = config is not None
        plan = planner.plan_k_grouped_blocks(problem, get_num_sms(), config)
        maps = torch.empty(2 * problem.num_groups * moe_layout.MAP_BYTES, dtype=torch.uint8, device=device)
        operands = k_grouped_operands(problem, a, a_scale, b, b_scale, sizes, out, c) + (maps,)
        templates = [spec.value(operands, encode_2d) for spec in plan.args[:2]]  # A's and B's maps over the views
        launch_small_kernel(moe_layout.ENTRY, moe_layout.MAPS_SYMBOL, moe_layout.MAPS_ARGUMENT_KINDS,
                            (*templates, a.data_ptr(), b.data_ptr(), sizes.data_ptr(), problem.num_groups, problem.k,
                             problem.m, problem.n, maps.data_ptr()), 1, moe_layout.MAPS_THREADS, device)
        launch(plan, operands, device, report=not forced)


def launch_k_grouped(problem, a, a_scale, b, b_scale, sizes, out, c, config=None, extra_defines=None) -> None:
    """Launch the K-grouped GEMM (checked ``problem``, :func:`deep_tile.gemm.checks.check_k_grouped_args`)
    over its tensors: both scales read in the TMA-aligned column-major layout (copied into it when
    not so), ``out`` and ``c`` ([G, m, n], ``c`` may be ``out``) as 2-D [G * m, n] views, ``sizes``
    the int32 group sizes on the device (operands: GROUPED_OPERANDS, then C)."""
    device = a.device
    with torch.cuda.device(device):
        _plan_and_launch(problem, k_grouped_operands(problem, a, a_scale, b, b_scale, sizes, out, c), device, config,
                         extra_defines)


def k_grouped_operands(problem, a, a_scale, b, b_scale, sizes, out, c) -> tuple:
    """The K-grouped kernel's operands (:data:`deep_tile.kernels.fp8_gemm.GROUPED_OPERANDS`, then
    C) of checked arguments: both scales in the TMA-aligned column-major layout (copied into it
    when not so), ``out`` and ``c`` as 2-D [G * m, n] views, ``sizes`` as it is."""
    rows = problem.num_groups * problem.m

    def flat(x):
        return x.as_strided((rows, problem.n), (x.stride(1), 1))

    return (a, get_tma_aligned_a_scale(a_scale), b, get_tma_aligned_a_scale(b_scale), flat(out), sizes, flat(c))


def launch_small_kernel(entry: str, symbol: str, kinds: tuple, values: tuple, grid, block: int, device,
                        smem_bytes: int = 0) -> None:
    """Launch ``symbol`` of the define-free JIT entry ``entry`` (the MoE layout, SwiGLU and MQA
    logits kernels: no cluster; ``smem_bytes`` of dynamic shared memory) on ``device``'s current
    stream, with PDL as :func:`deep_tile.set_pdl` says; ``values`` are its parameters, of
    :class:`deep_tile.jit.runtime.KernelArgs` ``kinds``."""
    kernel = get_kernel(entry, {}, symbol)
    with torch.cuda.device(device):
        kernel.launch(grid=grid, block=block, smem_bytes=smem_bytes, stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(kinds, values))), device=device.index, pdl=get_pdl())


def launch(plan: planner.Plan, operands: tuple, device, report: bool = True) -> None:
    """Launch ``plan`` on ``device``'s current stream, its parameters made from ``operands`` (the
    family contract's ``OPERANDS``, in order) by walking the plan's argument specs. ``report``:
    time the first launch of the plan for :mod:`deep_tile.phases` (``DEEP_TILE_DEBUG``)."""
    first = report and id(plan) not in _launched
    start = time.perf_counter()
    args = KernelArgs(pack_values(plan.args, operands, encode_2d))
    mapped = time.perf_counter()
    plan.kernel.launch(grid=plan.grid, block=plan.block, smem_bytes=plan.smem,
                       stream=torch.cuda.current_stream(device).cuda_stream, args=args,
                       device=device.index, cluster=plan.cluster, pdl=get_pdl())
    if first:
        _launched.add(id(plan))
        phases.report_first_launch(f"{plan.problem} (python path, {plan.config.label})", mapped - start,
                                   time.perf_counter() - mapped)

