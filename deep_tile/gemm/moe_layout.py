"""The MoE layout kernels' host side: DeepGEMM's psum contiguous layout turned into the contiguous
kind's ``m_indices``, the completion flags of a masked GEMM (SGLang's single-batch overlap), and
the byte transposition of the K-grouped GEMM's token-major (TN) operands.

Each function runs one JIT kernel of ``csrc/entry/moe_layout.cu`` (contract:
:mod:`deep_tile.kernels.moe_layout`) for CUDA tensors, on the current stream, without a host
sync (a CUDA graph replays it with new contents), and the same rule in torch for CPU tensors (the
tests' reference). The callers (:mod:`deep_tile.gemm.grouped`, :mod:`deep_tile.compat.deepgemm`) check
the arguments.
"""
from __future__ import annotations

import torch

from deep_tile.kernels import moe_layout

__all__ = ["psum_to_m_indices_into", "raise_signals", "transpose_bytes_into", "transposable"]


def _launch(symbol: str, kinds: tuple, values: tuple, elements: int, device: torch.device) -> None:
    # imported at the first launch: the launcher needs the CUDA stack; the CPU tensors' torch rule does not
    from deep_tile.gemm.launch import launch_small_kernel

    launch_small_kernel(moe_layout.ENTRY, symbol, kinds, values, moe_layout.grid(elements), moe_layout.BLOCK_THREADS,
                        device)


def psum_to_m_indices_into(ends: torch.Tensor, m_indices: torch.Tensor, alignment: int) -> torch.Tensor:
    """Fill ``m_indices`` [M] int32 from ``ends`` [G] int32 (DeepGEMM's psum layout: expert e owns
    rows ``[align_up(ends[e-1], alignment), ends[e])``, ``ends[-1] = 0``; ends clamped into
    ``[0, M]``): each row's expert, -1 for rows of no expert. Returns ``m_indices``."""
    m, groups = m_indices.numel(), ends.numel()
    if m_indices.is_cuda:
        if m:
            _launch(moe_layout.PSUM_SYMBOL, moe_layout.PSUM_ARGUMENT_KINDS,
                    (ends.data_ptr(), m_indices.data_ptr(), groups, m, alignment), m, m_indices.device)
        return m_indices
    end = ends.to(torch.int64).clamp(0, m)
    rows = torch.arange(m, dtype=torch.int64)
    expert = torch.searchsorted(end, rows, right=True) if groups else torch.zeros_like(rows)
    prev = torch.cat([end.new_zeros(1), end])[expert.clamp(max=groups)]
    start = (prev + alignment - 1) // alignment * alignment
    real = (expert < groups) & (rows >= start)
    m_indices.copy_(torch.where(real, expert, torch.full_like(expert, -1)).to(torch.int32))
    return m_indices


def raise_signals(signal: torch.Tensor, masked_m: torch.Tensor, max_m: int, block_m: int, threshold: int) -> None:
    """Set ``signal[g * ceil(max_m / block_m) + j] = threshold`` for the blocks ``j <
    ceil(min(masked_m[g], max_m) / block_m)`` of every group ``g``; the other entries keep their
    values. On CUDA, after the kernels before it on the stream (each flag written with a fence
    first, so a reader that sees it sees those kernels' stores)."""
    groups = masked_m.numel()
    blocks = -(-max_m // block_m)
    if signal.is_cuda:
        if groups * blocks:
            _launch(moe_layout.SIGNAL_SYMBOL, moe_layout.SIGNAL_ARGUMENT_KINDS,
                    (signal.data_ptr(), masked_m.data_ptr(), groups, blocks, max_m, block_m, threshold),
                    groups * blocks, signal.device)
        return
    flags = signal[: groups * blocks].view(groups, blocks)
    real = -(-masked_m.to(torch.int64).clamp(0, max_m) // block_m)
    index = torch.arange(blocks, dtype=torch.int64)
    flags.copy_(torch.where(index[None, :] < real[:, None], torch.full_like(flags, threshold), flags))


def transposable(src: torch.Tensor) -> bool:
    """Whether :func:`transpose_bytes_into` runs its kernel on ``src`` (a contiguous 2-D CUDA tensor of
    one-byte elements, both sizes and the address multiples of 16, fewer than 2**31 tiles);
    otherwise it copies with torch."""
    align = moe_layout.TRANSPOSE_ALIGN
    return (src.is_cuda and src.dim() == 2 and src.element_size() == 1 and src.is_contiguous()
            and src.shape[0] % align == 0 and src.shape[1] % align == 0 and src.data_ptr() % align == 0
            and src.shape[0] < 2 ** 31 and src.shape[1] < 2 ** 31)


def transpose_bytes_into(pairs) -> None:
    """``dst.copy_(src.t())`` for each ``(src, dst)`` of ``pairs`` (one or two; ``src`` [rows, cols]
    and ``dst`` [cols, rows] contiguous, one-byte elements, the same rows for both pairs). CUDA
    tensors that :func:`transposable` accepts go through one launch of the byte-transposition kernel
    on the current stream (both matrices' tiles in one grid); anything else through torch."""
    pairs = list(pairs)
    if not 1 <= len(pairs) <= 2:
        raise ValueError(f"transpose_bytes_into: one or two (src, dst) pairs; got {len(pairs)}")
    for src, dst in pairs:
        if src.dim() != 2 or tuple(dst.shape) != (src.shape[1], src.shape[0]) or src.element_size() != 1 \
                or dst.element_size() != 1 or not dst.is_contiguous():
            raise ValueError(f"transpose_bytes_into: src [rows, cols] and a contiguous dst [cols, rows] of one-byte "
                             f"elements; got {tuple(src.shape)} {src.dtype} -> {tuple(dst.shape)} {dst.dtype}")
    rows = pairs[0][0].shape[0]
    fast = all(transposable(src) and dst.data_ptr() % moe_layout.TRANSPOSE_ALIGN == 0 and src.shape[0] == rows
               for src, dst in pairs)
    if not fast:
        for src, dst in pairs:
            dst.view(torch.uint8).copy_(src.view(torch.uint8).t())
        return
    (s0, d0), (s1, d1) = pairs if len(pairs) == 2 else (pairs[0], (pairs[0][0], pairs[0][1][:0]))
    cols0, cols1 = s0.shape[1], s1.shape[1] if len(pairs) == 2 else 0
    blocks = moe_layout.transpose_grid(rows, cols0, cols1)
    if blocks == 0:
        return
    from deep_tile.gemm.launch import launch_small_kernel

    launch_small_kernel(moe_layout.ENTRY, moe_layout.TRANSPOSE_SYMBOL, moe_layout.TRANSPOSE_ARGUMENT_KINDS,
                        (s0.data_ptr(), d0.data_ptr(), cols0, s1.data_ptr(), d1.data_ptr(), cols1, rows),
                        blocks, moe_layout.TRANSPOSE_THREADS, s0.device)
