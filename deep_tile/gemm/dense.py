"""The public FP8 GEMM: ``out = (a * a_scale) @ (b * b_scale).T`` in bf16 on Hopper.

:func:`fp8_gemm` calls the custom op ``torch.ops.deep_tile.fp8_gemm`` (or ``fp8_gemm_out``), see
:mod:`deep_tile.ops`. The op runs on one of two host paths that launch the same kernel with the
same arguments, both from the plans of :mod:`deep_tile.gemm.planner`:

- the native path (:mod:`deep_tile.native`, C++): per call a plan looked up by the call's
  signature (planned once by Python, its checks included), cached tensor maps and the launch;
- the Python path, :func:`deep_tile.gemm.launch.run`.

:func:`get_tma_aligned_a_scale` (the zero-copy a_scale layout) lives in :mod:`deep_tile.gemm.layouts`.
The heavy modules (selector, JIT) are imported on first use, not with this module.
"""
from __future__ import annotations

import torch

from deep_tile import ops
from deep_tile.gemm.checks import check_fp8_gemm_acc_args, check_fp8_gemm_args
from deep_tile.gemm.layouts import get_tma_aligned_a_scale

__all__ = ["fp8_gemm", "fp8_gemm_1d1d", "get_tma_aligned_a_scale"]


def fp8_gemm(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
             out: torch.Tensor | None = None, *, c: torch.Tensor | None = None,
             out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """FP8 GEMM with DeepSeek-V3 fine-grained scaling (NT layout), on an sm_90 GPU.

    ``out[i, j] = bf16( sum_k a[i,k] * a_scale[i, k//128] * b[j,k] * b_scale[j//128, k//128] )``
    with the 128-wide partial sums accumulated in FP32; with ``c``, ``out = c + that`` (added in
    FP32, rounded once to out's type); with an FP32 ``out`` (or ``out_dtype=torch.float32``) the
    FP32 sums are stored as they are. ``c=out`` accumulates in place (a weight gradient's
    ``main_grad += A.B^T``).

    Args:
        a: [m, k] float8_e4m3fn, k contiguous, row stride a multiple of 16, 16-byte aligned.
        a_scale: [m, ceil(k/128)] float32. Zero-copy in the TMA-aligned column-major layout
            (strides ``(1, align4(m))``, see :func:`get_tma_aligned_a_scale`); any other layout,
            row-major included, costs one small copy per call.
        b: [n, k] float8_e4m3fn, k contiguous; n a multiple of 8, k a multiple of 16.
        b_scale: [ceil(n/128), ceil(k/128)] float32 (copied if not contiguous).
        out: optional [m, n] bfloat16 or float32, n contiguous, row stride a multiple of 16
            bytes, 16-byte aligned; allocated when None (of ``out_dtype``, default bfloat16).
        c: optional [m, n] bfloat16 or float32 addend, laid out as ``out`` must be; it may be
            ``out`` itself (in-place accumulation), but must not overlap ``out`` otherwise.
        out_dtype: ``torch.bfloat16`` or ``torch.float32`` when ``out`` is None (given with
            ``out``, it must be ``out.dtype``).

    Returns:
        `out`. m == 0 returns at once. Bad arguments raise TypeError/ValueError before anything
        is written. The kernel runs on ``torch.cuda.current_stream()`` and can be captured in a
        CUDA graph. This is the custom op ``torch.ops.deep_tile.fp8_gemm`` (``out`` None) or
        ``torch.ops.deep_tile.fp8_gemm_out``: torch.compile traces it without a graph break.
        With an FP32 output or ``c`` it is ``torch.ops.deep_tile.fp8_gemm_acc`` /
        ``fp8_gemm_acc_out`` (``c`` that is ``out`` passed as ``accumulate=True``); ``out`` must
        then share no memory with the inputs.
    """
    if c is not None or out_dtype is not None or (isinstance(out, torch.Tensor) and out.dtype != torch.bfloat16):
        return _fp8_gemm_acc(a, a_scale, b, b_scale, out, c, out_dtype)
    try:
        if out is None:
            return ops.fp8_gemm(a, a_scale, b, b_scale)
        ops.fp8_gemm_out(a, a_scale, b, b_scale, out)
        return out
    except (TypeError, RuntimeError):
        error = _argument_error(a, a_scale, b, b_scale, out)
        if error is None:
            raise
    raise error  # outside the handler: the schema's own message is not chained in


def fp8_gemm_1d1d(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                  out: torch.Tensor | None = None, *, c: torch.Tensor | None = None,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The 1D1D FP8 GEMM: both operands scaled per row and 128-wide K block (the weight gradient of
    DeepSeek-V3's FP8 recipe, ``dW += dY^T X`` with ``dY^T`` and ``X^T`` re-quantised 1x128 along the
    tokens), on an sm_90 GPU.

    ``out[i, j] = c[i, j] + sum_k a[i,k] * a_scale[i, k//128] * b[j,k] * b_scale[j, k//128]`` with
    the 128-wide partial sums promoted into FP32 (each by ``a_scale[i] * b_scale[j]``), rounded once
    to out's type. ``c=out`` accumulates in place (``main_grad``, FP32).

    Args:
        a: [m, k] float8_e4m3fn, k contiguous, row stride a multiple of 16, 16-byte aligned.
        a_scale: [m, ceil(k/128)] float32 (zero-copy in the TMA-aligned column-major layout of
            :func:`deep_tile.get_tma_aligned_a_scale`, else copied into it).
        b: [n, k] float8_e4m3fn, as a; n a multiple of 8, k a multiple of 16.
        b_scale: [n, ceil(k/128)] float32, per row of b (zero-copy in the same column-major layout,
            strides ``(1, align4(n))``; copied into it otherwise).
        out, c, out_dtype: as :func:`deep_tile.fp8_gemm`: out bf16 or FP32 (allocated of
            ``out_dtype`` when None), c an optional bf16 or FP32 addend, or out itself.

    Returns:
        `out`. Bad arguments raise TypeError/ValueError (naming ``fp8_gemm_1d1d``) before anything
        is written. The custom ops ``torch.ops.deep_tile.fp8_gemm_1d1d`` / ``fp8_gemm_1d1d_out``
        (CUDA graphs and torch.compile as the other ops).
    """
    return _fp8_gemm_acc(a, a_scale, b, b_scale, out, c, out_dtype, b_scale_1d=True)


def _fp8_gemm_acc(a, a_scale, b, b_scale, out, c, out_dtype, b_scale_1d=False):
    """fp8_gemm's output variants through ``fp8_gemm_acc`` / ``fp8_gemm_acc_out`` (``b_scale_1d``:
    ``fp8_gemm_1d1d`` / ``_out``)."""
    accumulate = c is not None and out is not None and c is out
    new, into = (ops.fp8_gemm_1d1d, ops.fp8_gemm_1d1d_out) if b_scale_1d else (ops.fp8_gemm_acc, ops.fp8_gemm_acc_out)
    if out is not None and out_dtype is not None:  # the _out op takes no out_dtype: check it here
        check_fp8_gemm_acc_args(a, a_scale, b, b_scale, None if accumulate else c, accumulate, out, out_dtype,
                                data_checks=False, b_scale_1d=b_scale_1d)
    try:
        if out is None:
            return new(a, a_scale, b, b_scale, c, out_dtype or torch.bfloat16)
        into(a, a_scale, b, b_scale, None if accumulate else c, accumulate, out)
        return out
    except (TypeError, RuntimeError):
        try:
            check_fp8_gemm_acc_args(a, a_scale, b, b_scale, None if accumulate else c, accumulate, out, out_dtype,
                                    data_checks=False, b_scale_1d=b_scale_1d)
        except (TypeError, ValueError) as error:
            failure = error
        else:
            raise
    raise failure


def _argument_error(a, a_scale, b, b_scale, out) -> Exception | None:
    """deep_tile's error for arguments the op's schema refused before any check ran (non-tensors),
    or None when the checks pass (the op failed for another reason)."""
    try:
        check_fp8_gemm_args(a, a_scale, b, b_scale, out, data_checks=False)
    except (TypeError, ValueError) as error:
        return error
    return None
