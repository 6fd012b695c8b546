"""The einsum kernels' contract: entry file, symbol, defines, shared memory, tensor-map boxes,
launch geometry, arguments.

``csrc/entry/einsum.cu`` (include/deep_tile/kernels/bmk_bnk_mn.cuh) computes ``'bmk,bnk->mn'``:
``d[m, n] += sum_s a[s] @ b[s]^T`` for bf16 a ``[s, m, k]`` and b ``[s, n, k]`` into float32 d,
one CTA per 128 x 128 tile of d and :func:`split_factor` consecutive 64-wide blocks of the
(batch, K) reduction axis (BF16 wgmma, results added with vector reductions in L2). Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "SYMBOL", "BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "THREADS", "SWIZZLE", "ARGUMENT_KINDS",
           "defines", "smem_bytes", "split_factor", "grid", "HEAD_MAJOR_SYMBOL", "HEAD_MAJOR_THREADS",
           "HEAD_MAJOR_ARGUMENT_KINDS", "head_major_grid"]

ENTRY = "einsum"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
SYMBOL = "deep_tile_einsum_bmk_bnk_mn"
"""The ``'bmk,bnk->mn'`` kernel."""
BLOCK_M = 128
"""Rows of d per CTA (``kBmkBlockM``: two warpgroups of 64)."""
BLOCK_N = 128
"""Columns of d per CTA (``kBmkBlockN``: the wgmma's N)."""
BLOCK_K = 64
"""K per stage (``kBmkBlockK``): 128 bytes of bf16, one 128B-swizzle row; k must be a multiple."""
STAGES = 4
"""Reduction blocks in flight per CTA (``DT_EINSUM_STAGES``)."""
THREADS = 288
"""Threads per CTA (``kBmkThreads``): two math warpgroups and one TMA warp."""
SWIZZLE = 128
"""The 128B swizzle of both operands' tiles."""
ARGUMENT_KINDS = ("tensormap", "tensormap", "ptr", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the parameters: (map_a, map_b, d,
num_batches, m, n, k, split)."""


HEAD_MAJOR_SYMBOL = "deep_tile_einsum_head_major"
"""fp8_einsum's copy of up to three ``[b, h, row]`` tensors to contiguous ``[h, b, row]`` in one
launch (include/deep_tile/kernels/head_major.cuh): rows of 16-byte chunks."""
HEAD_MAJOR_THREADS = 256
"""Threads per CTA of the copy (``kHeadMajorThreads``)."""
HEAD_MAJOR_ARGUMENT_KINDS = ("ptr", "ptr", "i32", "i32", "i32") * 3 + ("i32", "i32")
"""Parameter kinds of the copy: (src, dst, chunks per row, b stride, h stride) per tensor, strides
in chunks (chunks 0: no tensor), then (b, h)."""


def head_major_grid(total_chunks: int, num_sms: int) -> int:
    """CTAs of the copy: one chunk per thread up to eight CTAs per SM (a grid-stride loop beyond)."""
    return max(1, min(ceil_div(total_chunks, HEAD_MAJOR_THREADS), 8 * max(1, num_sms)))


def defines() -> dict:
    """The entry's ``-D`` defines."""
    return {"DT_EINSUM_STAGES": STAGES}


def smem_bytes() -> int:
    """Dynamic shared memory (``BmkSmem::kBytes``): per stage an a and a b tile of 128 x 64 bf16,
    then a full and an empty barrier per stage."""
    return STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 + 2 * STAGES * 8


def split_factor(s: int, m: int, n: int, k: int, num_sms: int) -> int:
    """Reduction blocks per CTA: the (batch, K) blocks spread so that the tiles of d times the
    splits fill about one wave of ``num_sms`` CTAs (DeepGEMM's rule for this kernel)."""
    tiles = ceil_div(m, BLOCK_M) * ceil_div(n, BLOCK_N)
    blocks = s * (k // BLOCK_K)
    return max(1, ceil_div(blocks, max(num_sms // tiles, 1)))


def grid(s: int, m: int, n: int, k: int, split: int) -> int:
    """CTAs: the tiles of d times the reduction splits (tile index fastest)."""
    tiles = ceil_div(m, BLOCK_M) * ceil_div(n, BLOCK_N)
    return tiles * ceil_div(s * (k // BLOCK_K), split)
