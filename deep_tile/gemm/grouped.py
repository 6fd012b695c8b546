"""Mixture-of-Experts GEMMs: one FP8 weight matrix per expert, each row of the activations
multiplied by its expert's, in one kernel launch.

Three layouts of the rows (M-grouped: the experts share ``n`` and ``k``, the rows differ):

- :func:`m_grouped_fp8_gemm_contiguous`: the rows of all experts in one ``a [M, K]``, each row's
  expert in ``m_indices`` (DeepGEMM's contiguous layout: each expert's rows one run starting at a
  multiple of :func:`get_m_alignment_for_contiguous_layout`, id -1 for padding rows);
- :func:`m_grouped_fp8_gemm_offsets`: the same without padding: expert ``g`` owns rows
  ``offsets[g] .. offsets[g+1]-1``, starting anywhere;
- :func:`m_grouped_fp8_gemm_psum`: DeepGEMM's psum contiguous layout: expert ``g``'s rows end at
  ``expert_ends[g]`` and start at the previous end rounded up to the alignment (padding between);
- :func:`m_grouped_fp8_gemm_masked`: a slab ``a[g]`` of ``max_m`` rows per expert of which the
  first ``masked_m[g]`` are real (DeepGEMM's masked layout, as DeepEP's low-latency dispatch
  fills it); :func:`m_grouped_fp8_gemm_masked_signal` is the same GEMM raising a completion
  counter per block of rows as the kernel writes them (SGLang's single-batch overlap).

The per-expert counts (``m_indices``, ``offsets``, ``masked_m``) are int32 tensors on the GPU,
read by the kernel only: no call synchronises with the host, so a CUDA graph captured once
replays with new counts (same tensors, new contents). ``M`` and the counts are run-time values
of one kernel; the selector picks its tiles from ``M`` (contiguous, offsets) or ``expected_m``
(masked). Rows that belong to no expert (padding, past ``masked_m``, outside the offsets) are
never written: when ``out`` is allocated by the call they hold whatever the allocator gave.

Output variants (training: a MoE layer's gradients in FP32, or a residual added): every function
but :func:`m_grouped_fp8_gemm_masked_signal` takes ``out`` in bf16 or FP32 (``out_dtype`` when it
is allocated) and an optional addend ``c`` (bf16 or FP32, ``out``'s shape): ``out = c + A.B^T``
on the real rows, added in FP32 and rounded once; ``c=out`` accumulates in place. These run the
op pair ``torch.ops.deep_tile.m_grouped_fp8_gemm_acc`` / ``_acc_out`` (the kind an argument).
Each function is a torch custom op (``torch.ops.deep_tile.m_grouped_fp8_gemm_*``, with ``_out``
variants) with a fake implementation, so torch.compile traces it without a graph break; like
:func:`deep_tile.fp8_gemm` it runs on the native host path once that is built
(:mod:`deep_tile.native`), else on the Python one, with the same kernels, results and errors.
"""
from __future__ import annotations

import torch

from deep_tile import ops
from deep_tile.gemm.checks import check_grouped_args, check_int
from deep_tile.kernels.fp8_gemm import CONTIGUOUS_ALIGNMENT
from deep_tile.gemm.problem import ProblemKind

__all__ = ["M_ALIGNMENT", "get_m_alignment_for_contiguous_layout", "m_grouped_fp8_gemm_contiguous",
           "m_grouped_fp8_gemm_offsets", "m_grouped_fp8_gemm_psum", "psum_to_m_indices", "m_grouped_fp8_gemm_masked",
           "m_grouped_fp8_gemm_masked_signal", "SIGNAL_MIN_ROWS"]

M_ALIGNMENT = CONTIGUOUS_ALIGNMENT
"""Row alignment of each expert's run in the contiguous layout (128, as DeepGEMM's)."""


def get_m_alignment_for_contiguous_layout() -> int:
    """The multiple of rows at which each expert's run starts in the contiguous layout of
    :func:`m_grouped_fp8_gemm_contiguous` (128)."""
    return M_ALIGNMENT


def m_grouped_fp8_gemm_contiguous(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                                  m_indices: torch.Tensor, out: torch.Tensor | None = None, *,
                                  c: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``out[i] = (a[i] * a_scale[i]) @ (b[e] * b_scale[e]).T`` with ``e = m_indices[i]``, in bf16
    (or FP32, and ``+ c[i]``: the output variants below).

    Args:
        a: [M, K] float8_e4m3fn, K contiguous, 16-byte rows (as :func:`deep_tile.fp8_gemm`).
        a_scale: [M, ceil(K/128)] float32: zero-copy in the TMA-aligned column-major layout
            (:func:`deep_tile.get_tma_aligned_a_scale`) or row-major with K/128 a multiple of 4;
            other layouts are copied.
        b: [G, N, K] float8_e4m3fn, one weight matrix per expert, K contiguous; N a multiple of 8.
        b_scale: [G, ceil(N/128), ceil(K/128)] float32.
        m_indices: int32 [M] on the GPU: each row's expert. Ids outside ``[0, G)`` (-1) mark
            padding rows. Each expert's rows must be one run starting at a multiple of
            :func:`get_m_alignment_for_contiguous_layout` (a run's padding rows after its real
            ones in the same 128-row block); rows after the last run may be padding.
        out: optional [M, N] bfloat16 or float32, N contiguous, 16-byte rows, 16-byte aligned;
            allocated when None (of ``out_dtype``, default bfloat16).
        c: optional [M, N] bfloat16 or float32 addend laid out as ``out`` must be:
            ``out = c + A.B^T`` on the real rows, added in FP32 and rounded once to out's type.
            ``c=out`` accumulates in place; otherwise ``c`` must not overlap ``out``.
        out_dtype: ``torch.bfloat16`` or ``torch.float32`` when ``out`` is None (given with
            ``out``, it must be ``out.dtype``).

    Returns:
        ``out``. Padding rows are not written (with ``c``, they are not copied from it either).
        An id out of range is padding, never an out-of-bounds read. Bad arguments raise
        TypeError/ValueError naming this function before anything is written; the kernel runs on
        the current stream, without a host sync. With an FP32 ``out`` or ``c`` this is the custom
        op ``torch.ops.deep_tile.m_grouped_fp8_gemm_acc`` / ``_acc_out`` (``c`` that is ``out``
        passed as ``accumulate=True``); ``out`` must then share no memory with the inputs.
    """
    return _call(ProblemKind.GROUPED_CONTIGUOUS, (a, a_scale, b, b_scale, m_indices), (), out, c, out_dtype)


def m_grouped_fp8_gemm_offsets(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                               offsets: torch.Tensor, out: torch.Tensor | None = None, *,
                               c: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`m_grouped_fp8_gemm_contiguous` with the experts' rows given by offsets, no padding.

    ``offsets``: int32 [G + 1] on the GPU; expert ``g`` owns rows ``offsets[g] .. offsets[g+1]-1``
    of ``a`` and ``out`` (any start; an empty range is an expert without rows). Rows outside every
    range are not written. Values are clamped into ``[0, M]`` on the device (never an
    out-of-bounds access); overlapping ranges are the caller's error. At most 512 experts
    (:data:`deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS`). Other arguments (``out``, ``c``,
    ``out_dtype`` included) as the contiguous GEMM.
    """
    return _call(ProblemKind.GROUPED_OFFSETS, (a, a_scale, b, b_scale, offsets), (), out, c, out_dtype)


def psum_to_m_indices(expert_ends: torch.Tensor, m: int, alignment: int = M_ALIGNMENT) -> torch.Tensor:
    """The ``m_indices`` [m] int32 of :func:`m_grouped_fp8_gemm_contiguous` for DeepGEMM's psum
    layout: expert ``g`` owns rows ``[align_up(expert_ends[g-1], alignment), expert_ends[g])``
    (``expert_ends[-1] = 0``; ends clamped into ``[0, m]``), every other row is padding (-1).

    ``expert_ends``: int32 [G], 1-D, contiguous, on the GPU (one small kernel, on the current stream,
    no host sync: graph-safe) or the CPU (torch). ``alignment``: a positive multiple of
    :data:`M_ALIGNMENT` (the contiguous kind's runs start on 128-row boundaries). Ends that decrease
    are the caller's error (some rows get a wrong expert, never an access out of bounds).
    """
    _check_psum_args("psum_to_m_indices", expert_ends, alignment)
    m = check_int("psum_to_m_indices", "m", m)
    if m < 0:
        raise ValueError(f"psum_to_m_indices: m must be >= 0; got {m}.")
    from deep_tile.gemm.moe_layout import psum_to_m_indices_into

    out = torch.empty(m, dtype=torch.int32, device=expert_ends.device)
    return psum_to_m_indices_into(expert_ends, out, alignment)


def m_grouped_fp8_gemm_psum(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                            expert_ends: torch.Tensor, alignment: int = M_ALIGNMENT,
                            out: torch.Tensor | None = None, *, c: torch.Tensor | None = None,
                            out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`m_grouped_fp8_gemm_contiguous` with the experts' rows given as DeepGEMM's psum layout.

    ``expert_ends``: int32 [G] on the GPU, G = ``b.shape[0]``: expert ``g`` owns rows
    ``[align_up(expert_ends[g-1], alignment), expert_ends[g])`` of ``a`` and ``out``
    (``expert_ends[-1] = 0``; ends clamped into ``[0, M]`` on the device); rows between the
    experts' runs and after the last one are padding, never written. Ends that decrease are the
    caller's error (some rows computed for a wrong expert, never an access out of bounds).
    ``alignment``: a positive multiple of 128 (what DeepGEMM's
    ``get_mk_alignment_for_contiguous_layout`` says). At most 512 experts
    (:data:`deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS`).

    With ``alignment`` 128 (DeepGEMM's default) one kernel reads the ends on the device and walks
    each expert's tiles together, as the offsets kind does (``torch.ops.deep_tile.m_grouped_fp8_gemm_psum``);
    other alignments run :func:`psum_to_m_indices` (one small kernel) and the contiguous kernel.
    Either way on the current stream without a host sync, so a CUDA graph replays it with new
    ends. Other arguments (``out``, ``c``, ``out_dtype`` included) and errors as the contiguous GEMM.
    """
    fn = "m_grouped_fp8_gemm_psum"
    _check_psum_args(fn, expert_ends, alignment)
    if isinstance(b, torch.Tensor) and b.dim() == 3 and expert_ends.numel() != b.shape[0]:
        raise ValueError(f"{fn}: expert_ends must have one entry per expert, {b.shape[0]} (b.shape[0]); "
                         f"got {expert_ends.numel()}.")
    if alignment == M_ALIGNMENT:
        return _call(ProblemKind.GROUPED_PSUM, (a, a_scale, b, b_scale, expert_ends), (), out, c, out_dtype)
    if not isinstance(a, torch.Tensor) or a.dim() != 2:
        check_grouped_args(ProblemKind.GROUPED_CONTIGUOUS, a, a_scale, b, b_scale, None, out, data_checks=False)
    from deep_tile.gemm.moe_layout import psum_to_m_indices_into

    m_indices = torch.empty(a.shape[0], dtype=torch.int32, device=expert_ends.device)
    psum_to_m_indices_into(expert_ends, m_indices, alignment)
    return m_grouped_fp8_gemm_contiguous(a, a_scale, b, b_scale, m_indices, out, c=c, out_dtype=out_dtype)


def _check_psum_args(fn: str, expert_ends, alignment) -> None:
    if not isinstance(expert_ends, torch.Tensor):
        raise TypeError(f"{fn}: expert_ends must be a torch.Tensor; got {type(expert_ends).__name__}.")
    if expert_ends.dtype != torch.int32 or expert_ends.dim() != 1 or not expert_ends.is_contiguous():
        raise ValueError(f"{fn}: expert_ends must be a contiguous 1-D torch.int32 tensor; got {expert_ends.dtype} "
                         f"shape {tuple(expert_ends.shape)}.")
    alignment = check_int(fn, "alignment", alignment)
    if alignment <= 0 or alignment % M_ALIGNMENT:
        raise ValueError(f"{fn}: alignment must be a multiple of {M_ALIGNMENT} (the contiguous kernel's runs start "
                         f"on {M_ALIGNMENT}-row boundaries); got {alignment}.")


def m_grouped_fp8_gemm_masked(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                              masked_m: torch.Tensor, expected_m: int,
                              out: torch.Tensor | None = None, *, c: torch.Tensor | None = None,
                              out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``out[g, r] = (a[g, r] * a_scale[g, r]) @ (b[g] * b_scale[g]).T`` for ``r < masked_m[g]``.

    Args:
        a: [G, max_m, K] float8_e4m3fn (the groups one after another, K contiguous).
        a_scale: [G, max_m, ceil(K/128)] float32: zero-copy per group in the TMA-aligned
            column-major layout (strides ``(ceil(K/128) * align4(max_m), 1, align4(max_m))``, what
            :func:`deep_tile.get_tma_aligned_a_scale` makes of the 3-D tensor) or row-major with
            K/128 a multiple of 4; other layouts are copied.
        b, b_scale: as :func:`m_grouped_fp8_gemm_contiguous`. At most 512 experts.
        masked_m: int32 [G] on the GPU: the real rows of each group (clamped to ``[0, max_m]``).
        expected_m: an int >= 0, the rows a group is expected to have: a hint for the selector
            only (no kernel per value).
        out: optional [G, max_m, N] bfloat16 or float32 (the groups one after another); allocated
            when None (of ``out_dtype``, default bfloat16).
        c, out_dtype: as :func:`m_grouped_fp8_gemm_contiguous`, ``c`` [G, max_m, N].

    Returns:
        ``out``; rows ``r >= masked_m[g]`` are not written.
    """
    return _call(ProblemKind.GROUPED_MASKED, (a, a_scale, b, b_scale, masked_m), (expected_m,), out, c, out_dtype)


SIGNAL_MIN_ROWS = 64
"""Fewest rows per completion counter of :func:`m_grouped_fp8_gemm_masked_signal` (the returned
``block_m`` is 64 or 128): ``G * ceil(max_m / 64)`` counters always suffice (SGLang's size)."""


def m_grouped_fp8_gemm_masked_signal(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                                     masked_m: torch.Tensor, expected_m: int, signal: torch.Tensor,
                                     out: torch.Tensor | None = None, max_block_n: int = 256, *,
                                     eager: bool = False) -> tuple:
    """:func:`m_grouped_fp8_gemm_masked` with completion signals, for a consumer on another stream
    that starts on a block of rows as soon as the GEMM has written it (SGLang's single-batch
    overlap: DeepEP's combine sends a block once its counter reaches the threshold).

    The kernel, once each consumer warpgroup's rows of an output tile are stored and visible at GPU
    scope (TMA store waited for, proxy fence, ``red.release.gpu``), adds 1 to
    ``signal[g * ceil(max_m / block_m) + j]``, the counter of rows ``j * block_m ..`` of group
    ``g``; once all ``threshold = ceil(N / block_n)`` tile columns of a block are written its
    counter equals ``threshold``. By default a counter is raised once the warpgroup stores its
    next tile (the wait for its staging buffer then waits for the previous store to complete; the
    last tile's after the loop), by a warp of the producer warpgroup the slab is handed to, so the
    consumers pay no release; ``eager=True`` raises it right after the tile's own store, the
    storing thread waiting for it (earlier signals, slower; fewer tile shapes: its builds at the
    register limit spill, deep_tile.select.selector.select_signal_config). Measured on an H100 the
    default runs 0.98-1.00x of :func:`m_grouped_fp8_gemm_masked` (docs/deepgemm-compat.md). A reader that sees that value with an acquire load sees the
    block's rows. Counters of blocks with no real row (``j * block_m >= masked_m[g]``) are not
    touched. ``signal`` must be zeroed by the caller before each call (the kernel adds).

    Args:
        a, a_scale, b, b_scale, masked_m, expected_m, out: as :func:`m_grouped_fp8_gemm_masked`.
        signal: int32, contiguous, 1-D, on ``a``'s device, at least ``G * ceil(max_m / 64)``
            elements (:data:`SIGNAL_MIN_ROWS`).
        max_block_n: an int >= 16: the widest output tile the kernel may use (SGLang's cap).
        eager: raise each counter right after its tile's store instead of at the next one.

    Returns:
        ``(out, block_m, threshold)``: ``block_m`` (64 or 128) the rows per counter.

    Runs on the Python host path (not a torch custom op). Raises TypeError / ValueError as
    :func:`m_grouped_fp8_gemm_masked`, and for a bad ``signal`` or ``max_block_n``.
    """
    from deep_tile.gemm import launch, planner
    from deep_tile.device import get_num_sms
    from deep_tile.kernels import fp8_gemm as family

    fn = "m_grouped_fp8_gemm_masked_signal"
    problem = check_grouped_args(ProblemKind.GROUPED_MASKED, a, a_scale, b, b_scale, masked_m, out, expected_m)
    max_block_n = check_int(fn, "max_block_n", max_block_n)
    if max_block_n < 16:
        raise ValueError(f"{fn}: max_block_n must be >= 16 (the narrowest tile); got {max_block_n}.")
    if not isinstance(signal, torch.Tensor):
        raise TypeError(f"{fn}: signal must be a torch.Tensor (int32); got {type(signal).__name__}.")
    need = problem.num_groups * -(-problem.m // SIGNAL_MIN_ROWS)
    if signal.dtype != torch.int32 or signal.dim() != 1 or not signal.is_contiguous():
        raise ValueError(f"{fn}: signal must be a contiguous 1-D torch.int32 tensor; got {signal.dtype} "
                         f"shape {tuple(signal.shape)}.")
    if signal.numel() < need or signal.device != a.device:
        raise ValueError(f"{fn}: signal must be on {a.device} with at least G * ceil(max_m / {SIGNAL_MIN_ROWS}) = "
                         f"{need} elements; got {signal.numel()} on {signal.device}.")
    device = a.device
    if out is None:
        out = torch.empty(tuple(a.shape[:-1]) + (problem.n,), dtype=torch.bfloat16, device=device)
    with torch.cuda.device(device):
        problem, operands = launch.grouped_operands(problem, a, a_scale, b, b_scale, masked_m, out)
        mode = family.SIGNAL_AFTER_STORE if eager else family.SIGNAL_AT_NEXT_STORE
        plan = planner.plan_signal(problem, get_num_sms(), max_block_n, mode)
        if problem.rows:
            launch.launch(plan, operands + (signal,), device)
    return out, family.signal_rows(plan.config), family.signal_threshold(plan.config, problem.n)


def _call(kind: ProblemKind, tensors: tuple, hints: tuple, out, c=None, out_dtype=None):
    """Run the custom op of ``kind`` (its ``_out`` form when ``out`` is given), or the output
    variants' ``m_grouped_fp8_gemm_acc`` / ``_acc_out`` when there is a ``c``, an ``out_dtype``
    or an ``out`` that is not bf16 (``c`` that is ``out`` passed as ``accumulate``). Arguments the
    op's schema refuses before any check runs (non-tensors, a non-int expected_m) raise
    deep_tile's own TypeError/ValueError instead of the dispatcher's message."""
    variant = c is not None or out_dtype is not None or (isinstance(out, torch.Tensor) and out.dtype != torch.bfloat16)
    accumulate = variant and c is not None and out is not None and c is out
    addend = None if accumulate else c
    if variant and out is not None and out_dtype is not None:  # the _out op takes no out_dtype: check it here
        check_grouped_args(kind, *tensors, out, *hints, c=addend, accumulate=accumulate, out_dtype=out_dtype,
                           data_checks=False)
    try:
        if variant:
            expected_m = hints[0] if hints else None
            if out is None:
                return ops.m_grouped_fp8_gemm_acc(kind.value, *tensors, expected_m, addend, out_dtype or torch.bfloat16)
            ops.m_grouped_fp8_gemm_acc_out(kind.value, *tensors, expected_m, addend, accumulate, out)
            return out
        name = "m_" + kind.value.replace("grouped_", "grouped_fp8_gemm_")
        if out is None:
            return getattr(ops, name)(*tensors, *hints)
        getattr(ops, name + "_out")(*tensors, *hints, out)
        return out
    except (TypeError, RuntimeError):
        try:
            check_grouped_args(kind, *tensors, out, *hints, c=addend, accumulate=accumulate, out_dtype=out_dtype,
                               data_checks=False)
        except (TypeError, ValueError) as error:
            failure = error
        else:
            raise
    raise failure  # outside the handler: the schema's own message is not chained in
