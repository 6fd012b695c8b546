"""Host side of benchmarks/probes/ldg_gemm.cu (GPU): an FP8 decode GEMM that streams its weights with
plain 16-byte loads, as the read kernel does, for benchmarks/probes/chain_floor.py's ``--ldg`` chain.

A probe, not a product path: M <= 16, N a multiple of 16, K of 128, bf16 out, the operands of
bench_decode.make_operands. :func:`plan` picks the kernel variant and the work split from the
shape alone; :func:`ldg_call` returns a zero-argument launch on the current stream.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from deep_tile.common import ceil_div
from deep_tile.jit import compiler, runtime

SOURCE = Path(__file__).resolve().parent / "ldg_gemm.cu"
SYMBOL = "deep_tile_ldg_gemm"
MAX_WARPS = 16
"""Warps per CTA at most (512 threads; the kernel's launch bound)."""


@dataclass(frozen=True)
class Plan:
    """tokens, unroll: the compiled variant (TOKENS, UNROLL); groups: 16-row groups per CTA;
    warps_per_group: warps splitting a group's K slices; ctas: the grid."""

    tokens: int
    unroll: int
    groups: int
    warps_per_group: int
    ctas: int

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        return 32 * self.groups * self.warps_per_group


def plan(m: int, n: int, k: int) -> Plan:
    """The variant and split for an ``m x n x k`` GEMM: 8 tokens and 4 K blocks per slice for
    m <= 8 (16 and 2 for m <= 16, which fit 128 registers without spills); a group's warps are the
    largest divisor of its slice count up to :data:`MAX_WARPS` (each warp then loads all its
    slices' bytes in as few rounds as possible); groups fill a CTA to 8 warps when one group has
    fewer (two CTAs per SM)."""
    if not 1 <= m <= 16 or n % 16 or k % 128:
        raise ValueError(f"ldg_probe.plan: needs 1 <= m <= 16, n % 16 == 0, k % 128 == 0; got {m}x{n}x{k}")
    tokens, unroll = (8, 4) if m <= 8 else (16, 2)
    slices = ceil_div(k // 128, unroll)
    warps = max(d for d in range(1, MAX_WARPS + 1) if slices % d == 0)
    groups = max(1, 8 // warps)
    return Plan(tokens, unroll, groups, warps, ceil_div(n // 16, groups))


@functools.lru_cache(maxsize=None)
def kernel(tokens: int, unroll: int):
    """The loaded kernel of one variant (deep_tile's default compiler)."""
    cubin = compiler.compile_cubin(SOURCE, {"TOKENS": tokens, "UNROLL": unroll}, SYMBOL).cubin
    return runtime.load_kernel(cubin, SYMBOL)


def ldg_call(ops: dict, out: torch.Tensor, *, pdl: bool = True):
    """A zero-argument launch computing ``out`` from bench_decode operands ``ops`` (dense)."""
    a, sa, b, sb = ops["a"], ops["a_scale"], ops["b"], ops["b_scale"]
    m, k = a.shape
    n = b.shape[0]
    p = plan(m, n, k)
    if not (a.is_contiguous() and b.is_contiguous() and sb.is_contiguous() and out.is_contiguous()):
        raise ValueError("ldg_probe: a, b, b_scale and out must be contiguous")
    if sa.dtype != torch.float32 or sb.dtype != torch.float32 or out.dtype != torch.bfloat16:
        raise ValueError("ldg_probe: fp32 scales and a bf16 out expected")
    fn = kernel(p.tokens, p.unroll)
    args = runtime.KernelArgs([("ptr", a.data_ptr()), ("ptr", sa.data_ptr()), ("ptr", sa.stride(0)),
                               ("ptr", sa.stride(1)), ("ptr", b.data_ptr()), ("ptr", sb.data_ptr()),
                               ("ptr", out.data_ptr()), ("i32", m), ("i32", n), ("i32", k), ("i32", p.groups),
                               ("i32", p.warps_per_group), ("i32", int(pdl))])
    device = a.device.index
    return lambda: fn.launch(grid=p.ctas, block=p.threads, smem_bytes=0,
                             stream=torch.cuda.current_stream().cuda_stream, args=args, device=device, pdl=pdl)
