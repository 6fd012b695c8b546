"""CUDA path of the FP8 casts: JIT-compiled kernels from csrc/entry/cast_fp8.cu.

deep_tile.quant dispatches here for CUDA tensors; the result is bitwise equal to its torch
implementation (same float32 operations, IEEE division, round-to-nearest-even e4m3).
"""
from __future__ import annotations

import torch

from deep_tile.common import SCALE_GROUP, ceil_div
from deep_tile.jit.runtime import KernelArgs
from deep_tile.jit.loader import get_kernel

CAST_ENTRY = "cast_fp8"
"""Kernel entry file (csrc/entry/<name>.cu) of the casting kernels."""
_INPUT_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_THREADS = 256
"""Threads per block of both cast kernels (their ``__launch_bounds__``)."""
_WARP = 32
"""Threads per warp: the per-token kernel gives one warp to each (row, scale group)."""


def _prepare(x: torch.Tensor, fn: str) -> torch.Tensor:
    if x.dtype not in _INPUT_CODES:
        raise TypeError(f"{fn}: x must be float32, bfloat16 or float16; got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{fn}: x must be 2-D; got shape {tuple(x.shape)}")
    return x.contiguous()


def _launch(symbol: str, x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, grid, rows: int, cols: int):
    kernel = get_kernel(CAST_ENTRY, {"DT_IN_DTYPE": _INPUT_CODES[x.dtype]}, symbol)
    args = KernelArgs([("ptr", x.data_ptr()), ("ptr", q.data_ptr()), ("ptr", scales.data_ptr()),
                       ("i32", rows), ("i32", cols)])
    with torch.cuda.device(x.device):
        kernel.launch(grid=grid, block=_THREADS, smem_bytes=0, stream=torch.cuda.current_stream(x.device).cuda_stream,
                      args=args, device=x.device.index)


def per_token_cast_cuda(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, k] on a CUDA device -> (q e4m3 [m, k], scales float32 [m, ceil(k/128)])."""
    x = _prepare(x, "per_token_cast_to_fp8")
    m, k = x.shape
    groups = ceil_div(k, SCALE_GROUP)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((m, groups), dtype=torch.float32, device=x.device)
    if m and k:
        warps = m * groups  # one warp per (row, scale group)
        _launch("deep_tile_per_token_cast", x, q, scales, ceil_div(warps * _WARP, _THREADS), m, k)
    return q, scales


def per_block_cast_cuda(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [n, k] on a CUDA device -> (q e4m3 [n, k], scales float32 [ceil(n/128), ceil(k/128)])."""
    w = _prepare(w, "per_block_cast_to_fp8")
    n, k = w.shape
    q = torch.empty((n, k), dtype=torch.float8_e4m3fn, device=w.device)
    n_blocks, k_blocks = ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)
    scales = torch.empty((n_blocks, k_blocks), dtype=torch.float32, device=w.device)
    if n and k:  # one block per SCALE_GROUP x SCALE_GROUP tile
        _launch("deep_tile_per_block_cast", w, q, scales, (k_blocks, n_blocks), n, k)
    return q, scales
