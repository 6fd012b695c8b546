"""The K-grouped 1D1D FP8 GEMM: Mixture-of-Experts weight gradients in one kernel launch.

Each expert ``g`` of an MoE layer ``Y_g = X_g W_g^T`` has its own tokens; its weight gradient is
``dW_g (+)= dY_g^T X_g``, a GEMM over that expert's tokens only. With the tokens of all experts
in one buffer, one after another (``T`` tokens in all, expert ``g``'s ``sizes[g]`` from
``sum(sizes[:g])`` on), and both operands transposed so the tokens are the reduction axis K,
:func:`k_grouped_fp8_gemm_1d1d` computes every expert's gradient in one launch:

    out[g] = c[g] + sum over the tokens t of group g of dY^T[:, t] X^T[:, t]^T

with ``a = dY^T`` [N_out, T] and ``b = X^T`` [K_in, T], both quantised 1x128 along the tokens
(:func:`deep_tile.per_token_cast_to_fp8` of the whole [*, T] tensor: a 128-token block may hold
the tokens of two experts; each token is scaled by its block's scale).

DeepGEMM's own NT layout (each group's [m, size] block row-major, the groups one after another in a
flat buffer) is read as it is with ``layout="blocks"`` (one tensor map per group and operand).

What it does beyond DeepGEMM's ``k_grouped_fp8_gemm_nt_contiguous``: the sizes are an int32
tensor on the GPU (no host list needed, so a CUDA graph replays with new sizes; a host list is
accepted too), any size (0, 1, 127, 129: a group's first and last 128-token blocks are masked to
its own tokens in shared memory), FP32 or bf16 output, with or without ``c`` (``c=out``
accumulates in place), and a tile schedule over every SM whatever the sizes.

With a device ``group_sizes`` it is the custom op ``torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d`` (or
``k_grouped_fp8_gemm_1d1d_out``; fake implementations, so torch.compile traces it), on either host
path (docs/host-paths.md), on the current stream without a host sync. Kernel and schedule:
docs/training.md.
"""
from __future__ import annotations

import torch

from deep_tile import ops
from deep_tile.gemm.checks import check_k_grouped_args
from deep_tile.gemm.launch import run_k_grouped

__all__ = ["k_grouped_fp8_gemm_1d1d", "run_k_grouped"]


def k_grouped_fp8_gemm_1d1d(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                            group_sizes, out: torch.Tensor | None = None, *, c: torch.Tensor | None = None,
                            out_dtype: torch.dtype | None = None, layout: str = "rows") -> torch.Tensor:
    """K-grouped 1D1D FP8 GEMM (MoE weight gradients), on an sm_90 GPU.

    ``out[g, i, j] = c[g, i, j] + sum_{t in K_g} a[i, t] * a_scale[i, t//128] * b[j, t] *
    b_scale[j, t//128]``, the 128-wide partial sums promoted into FP32, rounded once to out's type,
    where ``K_g = [sum(sizes[:g]), sum(sizes[:g+1]))`` (clamped into ``[0, k)``).

    Args:
        a: [m, k] float8_e4m3fn (``dY^T``: m output rows, k tokens of all groups), k contiguous,
            row stride a multiple of 16, 16-byte aligned; k a positive multiple of 16 (tokens
            past the groups' sum are ignored).
        a_scale: [m, ceil(k/128)] float32, one scale per row and 128-token block (zero-copy in
            the TMA-aligned column-major layout of :func:`deep_tile.get_tma_aligned_a_scale`,
            else copied into it).
        b: [n, k] float8_e4m3fn (``X^T``), as a; n a positive multiple of 8.
        b_scale: [n, ceil(k/128)] float32, as a_scale.
        group_sizes: the tokens of each group: an int32 [G] tensor on a's device (1-D,
            contiguous; read by the kernel only: negative values count as 0 and the running sum
            is clamped to k, never an access out of bounds), or a list / tuple of G ints >= 0
            summing to at most k (copied to the device). 1 <= G <= 512.
        out: optional [G, m, n] float32 or bfloat16, n contiguous, row stride a multiple of 16
            bytes, 16-byte aligned, the groups one after another; allocated when None (of
            ``out_dtype``, default float32).
        c: optional addend: ``out`` itself (in-place accumulation, ``main_grad += ...``) or a
            [G, m, n] bfloat16 / float32 tensor laid out as out must be, overlapping nothing.
        out_dtype: ``torch.float32`` or ``torch.bfloat16`` when ``out`` is None.
        layout: ``"rows"`` (default): ``a`` and ``b`` as above, the groups' tokens side by side.
            ``"blocks"``: DeepGEMM's NT layout, read as it is (no copy): ``a`` a contiguous
            float8_e4m3fn buffer of ``m * k`` elements (any shape) holding group g's [m, sizes[g]]
            block row-major (tokens contiguous) from element ``m * sum(sizes[:g])`` on, ``m`` the
            rows of ``a_scale``; ``b`` likewise with ``n`` (the rows of ``b_scale``); the scales
            and everything else as for ``"rows"`` (column ``t // 128`` of token ``t``). Each size
            must be a multiple of 16 (a block's row pitch for TMA; a host list is checked; a group
            of a device tensor whose token range starts or ends off a multiple of 16 runs as an
            empty group, out[g] = c[g]). Runs on the Python host path, not as a custom op: each call launches a
            one-CTA kernel that writes the groups' tensor maps from the device sizes (graph-safe),
            then the GEMM (docs/training.md).

    Returns:
        ``out``. A group of no tokens gets ``c[g]`` (zeros without ``c``; left as it is when
        accumulating in place). ``m == 0`` returns at once. Bad arguments raise TypeError /
        ValueError naming this function before anything is written.
    """
    if layout != "rows":  # DeepGEMM's NT layout: the Python host path (its map table, launch.py)
        return run_k_grouped(a, a_scale, b, b_scale, group_sizes, out, None if c is out else c, out_dtype,
                             accumulate=out is not None and c is out, layout=layout)
    # the checks that need no data first (a host list of sizes checked and copied to the device)
    _, sizes = check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype, data_checks=False)
    if isinstance(sizes, tuple):
        group_sizes = torch.tensor(sizes, dtype=torch.int32, device=a.device)
    if out is None:
        return ops.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, c, out_dtype or torch.float32)
    accumulate = c is out
    ops.k_grouped_fp8_gemm_1d1d_out(a, a_scale, b, b_scale, group_sizes, None if accumulate else c, accumulate, out)
    return out
