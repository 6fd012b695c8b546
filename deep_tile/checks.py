"""Argument validation for fp8_gemm: dtype, then shape, then layout and alignment, then device.

Every failure raises TypeError or ValueError naming the function, the argument, what was
expected and what was passed, before anything is allocated or written. The device is checked
last, so messages about shapes and layouts can be tested with CPU tensors.
"""
from __future__ import annotations

import torch

_FN = "fp8_gemm"


def ceil_div(a: int, b: int) -> int:
    """Smallest integer >= a / b."""
    return (a + b - 1) // b


def _require_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{_FN}: {name} must be a torch.Tensor; got {type(x).__name__}")


def _require_dtype(name: str, x: torch.Tensor, dtype: torch.dtype) -> None:
    if x.dtype != dtype:
        raise TypeError(f"{_FN}: {name} must have dtype {dtype}; got {x.dtype}")


def _require_2d(name: str, x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"{_FN}: {name} must be 2-D; got shape {tuple(x.shape)}")


def _require_shape(name: str, x: torch.Tensor, expected: tuple, why: str) -> None:
    if tuple(x.shape) != expected:
        raise ValueError(f"{_FN}: {name} must have shape {why} = {expected}; got {tuple(x.shape)}")


def _require_aligned(name: str, x: torch.Tensor, row_multiple: int, what: str) -> None:
    if x.shape[0] > 0 and x.shape[1] > 0:
        if x.stride(1) != 1 and x.shape[1] > 1:
            raise ValueError(f"{_FN}: {name} must be contiguous along its last dimension ({what}); "
                             f"got strides {tuple(x.stride())}")
        if x.shape[0] > 1 and x.stride(0) % row_multiple != 0:
            raise ValueError(f"{_FN}: {name} row stride must be a multiple of {row_multiple} elements "
                             f"(16 bytes, for TMA); got stride {x.stride(0)}")
        if x.data_ptr() % 16 != 0:
            raise ValueError(f"{_FN}: {name} base address must be 16-byte aligned (TMA); "
                             f"got address ending in {x.data_ptr() % 16:#x} modulo 16")


def check_fp8_gemm_args(a, a_scale, b, b_scale, out) -> tuple[int, int, int]:
    """Validate fp8_gemm's arguments and return (m, n, k)."""
    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        _require_tensor(name, x)
    if out is not None:
        _require_tensor("out", out)
    _require_dtype("a", a, torch.float8_e4m3fn)
    _require_dtype("b", b, torch.float8_e4m3fn)
    _require_dtype("a_scale", a_scale, torch.float32)
    _require_dtype("b_scale", b_scale, torch.float32)
    if out is not None:
        _require_dtype("out", out, torch.bfloat16)
    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        _require_2d(name, x)

    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"{_FN}: b must have shape (n, k) with k = a.shape[1] = {k}; got {tuple(b.shape)}")
    if k <= 0 or k % 16 != 0:
        raise ValueError(f"{_FN}: k (a.shape[1]) must be a positive multiple of 16; got {k}")
    if n <= 0 or n % 8 != 0:
        raise ValueError(f"{_FN}: n (b.shape[0]) must be a positive multiple of 8; got {n}")
    k_groups = ceil_div(k, 128)
    _require_shape("a_scale", a_scale, (m, k_groups), f"(m, ceil(k/128)) for a of shape {tuple(a.shape)}")
    _require_shape("b_scale", b_scale, (ceil_div(n, 128), k_groups),
                   f"(ceil(n/128), ceil(k/128)) for b of shape {tuple(b.shape)}")
    if out is not None:
        _require_2d("out", out)
        _require_shape("out", out, (m, n), "(m, n)")

    _require_aligned("a", a, 16, "k")
    _require_aligned("b", b, 16, "k")
    if out is not None:
        _require_aligned("out", out, 8, "n")

    devices = {name: x.device for name, x in
               (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("out", out)) if x is not None}
    for name, device in devices.items():
        if device.type != "cuda":
            raise ValueError(f"{_FN}: {name} must be a CUDA tensor; got a tensor on {device}")
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{_FN}: all tensors must be on the same device; got {listing}")
    capability = torch.cuda.get_device_capability(a.device)
    if capability != (9, 0):
        raise ValueError(f"{_FN}: needs an sm_90 (Hopper) GPU; {a.device} is "
                         f"{torch.cuda.get_device_name(a.device)} with compute capability {capability}")
    return m, n, k
