"""CUDA path of the FP8 casts: the JIT kernels of csrc/entry/cast_fp8.cu, launched as their
contract (:mod:`deep_tile.kernels.cast_fp8`) says.

deep_tile.casts.quant dispatches here for CUDA tensors it has already checked (2-D, float32/bf16/fp16,
K >= 1); the result is bitwise equal to its torch implementation (same float32 operations, IEEE
division, round-to-nearest-even e4m3).
"""
from __future__ import annotations

import torch

from deep_tile.common import SCALE_GROUP, ceil_div
from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernels import cast_fp8
from deep_tile.pdl import get_pdl


def _launch(symbol: str, x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, grid, rows: int, cols: int):
    x_dtype = str(x.dtype).removeprefix("torch.")
    kernel = get_kernel(cast_fp8.ENTRY, cast_fp8.defines(x_dtype), symbol)
    values = (x.data_ptr(), q.data_ptr(), scales.data_ptr(), rows, cols)
    args = KernelArgs(list(zip(cast_fp8.ARGUMENT_KINDS, values)))
    with torch.cuda.device(x.device):
        kernel.launch(grid=grid, block=cast_fp8.BLOCK_THREADS, smem_bytes=0,
                      stream=torch.cuda.current_stream(x.device).cuda_stream, args=args, device=x.device.index,
                      pdl=get_pdl())


def per_token_cast_cuda(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, k] on a CUDA device -> (q e4m3 [m, k], scales float32 [m, ceil(k/128)])."""
    x = x.contiguous()
    m, k = x.shape
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((m, ceil_div(k, SCALE_GROUP)), dtype=torch.float32, device=x.device)
    if m and k:
        _launch(cast_fp8.PER_TOKEN_SYMBOL, x, q, scales, cast_fp8.per_token_grid(m, k), m, k)
    return q, scales


def per_block_cast_cuda(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [n, k] on a CUDA device -> (q e4m3 [n, k], scales float32 [ceil(n/128), ceil(k/128)])."""
    w = w.contiguous()
    n, k = w.shape
    q = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=w.device)
    scales = torch.empty((ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)), dtype=torch.float32, device=w.device)
    if n and k:
        _launch(cast_fp8.PER_BLOCK_SYMBOL, w, q, scales, cast_fp8.per_block_grid(n, k), n, k)
    return q, scales
