"""SwiGLU of the FP8 experts layer (deep_tile.nn), forward and backward, in float32 from bf16.

``swiglu(h13)``: ``h13 [T, 2I]`` bf16 (gate columns, then up columns) -> ``silu(gate) * up`` in
bf16 ``[T, I]``; ``swiglu_backward(h13, dh)`` -> ``[d_gate, d_up]`` in bf16 ``[T, 2I]``. On CUDA
each is one JIT kernel of ``csrc/entry/swiglu.cu`` (contract: :mod:`deep_tile.kernels.swiglu`) on
the current stream; on the CPU the same float32 math in torch (the tests' reference). The kernels
mirror the torch code's float32 operations in order; they replace the six to nine torch kernels
(float32 copies, silu, sigmoid, products, a concatenation) the layer ran before. Inputs must be
contiguous bf16 with I a multiple of 8 (the caller, deep_tile.nn.experts, checks the weights'
shapes).
"""
from __future__ import annotations

import torch

from deep_tile.kernels import swiglu as contract
from deep_tile.gemm.launch import launch_small_kernel

__all__ = ["swiglu", "swiglu_backward", "swiglu_reference", "swiglu_backward_reference"]


def swiglu_reference(h13: torch.Tensor) -> torch.Tensor:
    """The forward in torch (float32, rounded to bf16)."""
    gate, up = h13.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)


def swiglu_backward_reference(h13: torch.Tensor, dh: torch.Tensor) -> torch.Tensor:
    """The backward in torch (float32, rounded to bf16)."""
    gate, up = h13.float().chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    dh = dh.float()
    d_gate = dh * up * sig * (1 + gate * (1 - sig))
    d_up = dh * gate * sig
    return torch.cat([d_gate, d_up], dim=-1).to(torch.bfloat16)


def _launch(symbol: str, kinds: tuple, values: tuple, rows: int, inter: int, device: torch.device) -> None:
    launch_small_kernel(contract.ENTRY, symbol, kinds, values, contract.grid(rows, inter), contract.BLOCK_THREADS,
                        device)


def _check(h13: torch.Tensor, *others: torch.Tensor) -> int:
    inter = h13.shape[-1] // 2
    if h13.dim() != 2 or h13.dtype != torch.bfloat16 or not h13.is_contiguous() or h13.shape[-1] != 2 * inter \
            or inter % contract.COLUMNS_PER_THREAD:
        raise ValueError(f"swiglu: h13 must be a contiguous bf16 [T, 2I] tensor with I a multiple of "
                         f"{contract.COLUMNS_PER_THREAD}; got {h13.dtype} {tuple(h13.shape)}.")
    for t in others:
        if t.shape != (h13.shape[0], inter) or t.dtype != torch.bfloat16 or not t.is_contiguous() \
                or t.device != h13.device:
            raise ValueError(f"swiglu: dh must be a contiguous bf16 [{h13.shape[0]}, {inter}] tensor on h13's device; "
                             f"got {t.dtype} {tuple(t.shape)} on {t.device}.")
    return inter


def swiglu(h13: torch.Tensor) -> torch.Tensor:
    """``silu(h13[:, :I]) * h13[:, I:]`` in bf16 ``[T, I]`` (module doc)."""
    inter = _check(h13)
    if not h13.is_cuda:
        return swiglu_reference(h13)
    rows = h13.shape[0]
    h = torch.empty((rows, inter), dtype=torch.bfloat16, device=h13.device)
    if rows and inter:
        _launch(contract.FORWARD_SYMBOL, contract.FORWARD_ARGUMENT_KINDS, (h13.data_ptr(), h.data_ptr(), rows, inter),
                rows, inter, h13.device)
    return h


def swiglu_backward(h13: torch.Tensor, dh: torch.Tensor) -> torch.Tensor:
    """The gradient of :func:`swiglu` with respect to ``h13``, given ``dh`` (module doc)."""
    inter = _check(h13, dh)
    if not h13.is_cuda:
        return swiglu_backward_reference(h13, dh)
    rows = h13.shape[0]
    d13 = torch.empty_like(h13)
    if rows and inter:
        _launch(contract.BACKWARD_SYMBOL, contract.BACKWARD_ARGUMENT_KINDS,
                (h13.data_ptr(), dh.data_ptr(), d13.data_ptr(), rows, inter), rows, inter, h13.device)
    return d13
