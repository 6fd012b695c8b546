"""The FP8 casts' implementations: input checks, the torch code (CPU), dispatch to the CUDA kernels.

The public functions :func:`deep_tile.per_token_cast_to_fp8` / :func:`deep_tile.per_block_cast_to_fp8`
(:mod:`deep_tile.casts.quant`, which documents the formula) call the custom ops of :mod:`deep_tile.ops`;
the ops' real kernels are :func:`per_token_cast` / :func:`per_block_cast` here and their fake
kernels check with :func:`check_cast_input`. CPU tensors use :func:`per_token_cast_torch` /
:func:`per_block_cast_torch`; CUDA tensors go to the JIT kernels of :mod:`deep_tile.casts.quant_kernels`,
which produce the same bytes.

NOTES: the Python expression ``448.0 / tensor`` is ``tensor.reciprocal() * 448`` in torch (two
roundings), so the division is spelled ``torch.div(full(448), amax)`` on purpose.
"""
import torch

from deep_tile.gemm.checks import shown
from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["FP8_MAX", "AMAX_MIN", "INPUT_DTYPES", "check_cast_input", "per_token_cast", "per_block_cast",
           "per_token_cast_torch", "per_block_cast_torch"]

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn value; the cast maps each group's amax onto it."""

AMAX_MIN = 1e-4
"""Lower clamp of a group's amax (so all-zero groups get a finite, non-zero scale)."""

INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The dtypes the casts quantise."""


def check_cast_input(fn: str, arg: str, x) -> None:
    """Raise TypeError/ValueError unless ``x`` is a 2-D float32/bf16/fp16 tensor with columns.

    Never looks at the row count, so it stays symbolic in the fake implementations of
    :mod:`deep_tile.ops` (torch.compile / torch.export with dynamic rows); a symbolic column count
    is checked with ``torch._check_with`` (the same message), adding no guard when it is a size.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {arg} must be a torch.Tensor; got {type(x).__name__}.")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(
            f"{fn}: {arg} must have dtype float32, bfloat16 or float16 (the values to quantise); "
            f"got {x.dtype}."
        )
    if x.dim() != 2:
        raise ValueError(
            f"{fn}: {arg} must be 2-D [rows, k]; got {x.dim()}-D of shape {_shape_shown(x)}."
        )
    k = x.shape[1]
    if type(k) is not int:  # symbolic (torch.compile / torch.export): no guard, no specialisation
        torch._check_with(ValueError, k != 0, lambda: (
            f"{fn}: {arg} must have at least one column (k >= 1); got shape {_shape_shown(x)}."))
    elif k == 0:
        raise ValueError(
            f"{fn}: {arg} must have at least one column (k >= 1); got shape {_shape_shown(x)}."
        )


def _shape_shown(x: torch.Tensor) -> tuple:
    """``tuple(x.shape)`` for a message, symbolic sizes shown as the values traced with."""
    return shown(tuple(x.shape))


def _inv_and_scale(amax: torch.Tensor):
    """(448 / amax, amax / 448) as correctly rounded float32 divisions; amax already clamped."""
    fp8_max = torch.full_like(amax, FP8_MAX)
    return torch.div(fp8_max, amax), torch.div(amax, fp8_max)


def _padded_float(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``x`` as float32, zero-padded at the end to ``[rows, cols]`` (no copy when nothing to do)."""
    xf = x.float()
    pad_rows, pad_cols = rows - x.shape[0], cols - x.shape[1]
    if pad_rows or pad_cols:
        xf = torch.nn.functional.pad(xf, (0, pad_cols, 0, pad_rows))
    return xf


def per_token_cast_torch(x: torch.Tensor):
    """Torch implementation of :func:`deep_tile.casts.quant.per_token_cast_to_fp8` (any device; no validation)."""
    m, k = x.shape
    num_k_blocks = ceil_div(k, SCALE_GROUP)
    xf = _padded_float(x, m, num_k_blocks * SCALE_GROUP).reshape(m, num_k_blocks, SCALE_GROUP)
    amax = xf.abs().amax(dim=2).clamp(min=AMAX_MIN)                   # [m, kb]
    inv, scale = _inv_and_scale(amax)
    q = (xf * inv.unsqueeze(2)).to(torch.float8_e4m3fn)               # [m, kb, 128]
    q = q.reshape(m, num_k_blocks * SCALE_GROUP)[:, :k].contiguous()
    return q, scale


def per_block_cast_torch(w: torch.Tensor):
    """Torch implementation of :func:`deep_tile.casts.quant.per_block_cast_to_fp8` (any device; no validation)."""
    n, k = w.shape
    num_n_blocks, num_k_blocks = ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)
    wf = _padded_float(w, num_n_blocks * SCALE_GROUP, num_k_blocks * SCALE_GROUP)
    wf = wf.reshape(num_n_blocks, SCALE_GROUP, num_k_blocks, SCALE_GROUP)
    amax = wf.abs().amax(dim=(1, 3)).clamp(min=AMAX_MIN)              # [nb, kb]
    inv, scale = _inv_and_scale(amax)
    q = (wf * inv[:, None, :, None]).to(torch.float8_e4m3fn)          # [nb, 128, kb, 128]
    q = q.reshape(num_n_blocks * SCALE_GROUP, num_k_blocks * SCALE_GROUP)[:n, :k].contiguous()
    return q, scale


def _empty_result(x: torch.Tensor, q_rows: int, s_rows: int):
    k = x.shape[1]
    q = torch.empty((q_rows, k), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((s_rows, ceil_div(k, SCALE_GROUP)), dtype=torch.float32, device=x.device)
    return q, s


def per_token_cast(x: torch.Tensor):
    """The implementation of the per-token op: checks, then the CUDA kernel or torch on CPU."""
    return _cast("per_token_cast_to_fp8", "x", x, "per_token_cast_cuda", per_token_cast_torch)


def per_block_cast(w: torch.Tensor):
    """The implementation of the per-block op: checks, then the CUDA kernel or torch on CPU."""
    return _cast("per_block_cast_to_fp8", "w", w, "per_block_cast_cuda", per_block_cast_torch)


def _cast(func: str, name: str, x: torch.Tensor, cuda_kernel: str, torch_impl):
    """Check ``x``, then an empty result for no rows, ``deep_tile.casts.quant_kernels.<cuda_kernel>`` on
    CUDA (imported on first use), else ``torch_impl``."""
    check_cast_input(func, name, x)
    if x.shape[0] == 0:
        return _empty_result(x, 0, 0)
    if x.is_cuda:
        from deep_tile.casts import quant_kernels as cast_kernels

        return getattr(cast_kernels, cuda_kernel)(x)
    return torch_impl(x)
