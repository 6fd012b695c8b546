"""DeepSeek-V3-style FP8 (e4m3fn) quantisation: 1x128 activation groups and 128x128 weight blocks.

Both casts follow one formula per group G (a 1x128 row segment, or a 128x128 block), with
every step in float32 and every division a correctly rounded IEEE division::

    amax  = max(max_{x in G} |x|, 1e-4)          # tails are zero-padded for the amax only
    inv   = 448 / amax                           # float32 division (not reciprocal-then-multiply)
    q     = float8_e4m3fn(float32(x) * inv)      # round to nearest even; |x * inv| <= 448
    scale = amax / 448                           # float32 division

so that ``q * scale`` approximates ``x``. The casts run as the custom ops of :mod:`deep_tile.ops`,
whose kernels are in :mod:`deep_tile.casts.quant_impl` (torch on CPU, the JIT kernels of
:mod:`deep_tile.casts.quant_kernels` on CUDA, the same bytes).
"""
import torch

from deep_tile.casts.quant_impl import AMAX_MIN, FP8_MAX, check_cast_input
from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["FP8_MAX", "AMAX_MIN", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "dequantize_per_token",
           "dequantize_per_block"]

def per_token_cast_to_fp8(x: torch.Tensor):
    """Quantise activations ``x [M, K]`` to FP8 with one scale per row per 128-wide K group.

    For each row ``i`` and group ``g`` (columns ``128g .. 128g+127``; a tail group is
    zero-padded for the amax only), in float32::

        amax[i, g] = max(max_j |x[i, j]|, 1e-4)
        q[i, j]    = float8_e4m3fn(float32(x[i, j]) * (448 / amax[i, g]))   # RNE
        s[i, g]    = amax[i, g] / 448

    both divisions being correctly rounded float32 divisions, so ``x ~= q * s``. An all-zero
    group gives ``s = 1e-4 / 448`` and ``q = 0`` exactly.

    Args:
        x: 2-D float32 / bfloat16 / float16 tensor [M, K], K >= 1, any strides. CPU tensors use
            torch; CUDA tensors use the JIT kernel of :mod:`deep_tile.casts.quant_kernels`.

    Returns:
        ``(q, s)``: q float8_e4m3fn [M, K] contiguous; s float32 [M, ceil(K/128)] contiguous
        (row-major). M = 0 gives empty tensors of those shapes.

    Runs as the custom op ``torch.ops.deep_tile.per_token_cast_to_fp8`` (traceable by
    torch.compile; see :mod:`deep_tile.ops`).

    Raises:
        TypeError, ValueError: bad type, dtype, rank or K = 0.
    """
    if not isinstance(x, torch.Tensor):  # the op's schema would reject it first, with its own words
        check_cast_input("per_token_cast_to_fp8", "x", x)
    from deep_tile import ops

    return ops.per_token_cast_to_fp8(x)  # checks the rest


def per_block_cast_to_fp8(w: torch.Tensor):
    """Quantise weights ``w [N, K]`` to FP8 with one scale per 128x128 block.

    For each block ``(p, g)`` (rows ``128p ..``, columns ``128g ..``; tail blocks are
    zero-padded in both dimensions for the amax only), in float32::

        amax[p, g] = max(max_{i, j in block} |w[i, j]|, 1e-4)
        q[i, j]    = float8_e4m3fn(float32(w[i, j]) * (448 / amax[p, g]))   # RNE
        s[p, g]    = amax[p, g] / 448

    both divisions being correctly rounded float32 divisions, so ``w ~= q * s`` (block-expanded).
    An all-zero block gives ``s = 1e-4 / 448`` and ``q = 0`` exactly.

    Args:
        w: 2-D float32 / bfloat16 / float16 tensor [N, K], K >= 1, any strides. CPU tensors use
            torch; CUDA tensors use the JIT kernel of :mod:`deep_tile.casts.quant_kernels`.

    Returns:
        ``(q, s)``: q float8_e4m3fn [N, K] contiguous; s float32 [ceil(N/128), ceil(K/128)]
        contiguous. N = 0 gives empty tensors of those shapes.

    Runs as the custom op ``torch.ops.deep_tile.per_block_cast_to_fp8`` (traceable by
    torch.compile; see :mod:`deep_tile.ops`).

    Raises:
        TypeError, ValueError: bad type, dtype, rank or K = 0.
    """
    if not isinstance(w, torch.Tensor):  # the op's schema would reject it first, with its own words
        check_cast_input("per_block_cast_to_fp8", "w", w)
    from deep_tile import ops

    return ops.per_block_cast_to_fp8(w)  # checks the rest


def _check_dequant(fn: str, q, s, group_rows: int):
    """Validate (q, s) of a dequantisation; return the expected ``s`` shape."""
    if not isinstance(q, torch.Tensor) or q.dim() != 2:
        raise ValueError(
            f"{fn}: q must be a 2-D tensor [rows, k]; got {getattr(q, 'shape', type(q).__name__)}."
        )
    rows, k = q.shape
    expected = (ceil_div(rows, group_rows), ceil_div(k, SCALE_GROUP))
    if not isinstance(s, torch.Tensor) or tuple(s.shape) != expected:
        raise ValueError(
            f"{fn}: s must have shape {expected} for q of shape {tuple(q.shape)}; "
            f"got {tuple(getattr(s, 'shape', ()))}."
        )


def dequantize_per_token(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Float32 ``q[i, j] * s[i, j // 128]`` for a per-token cast (``q [M, K]``, ``s [M, ceil(K/128)]``)."""
    _check_dequant("dequantize_per_token", q, s, 1)
    s_cols = s.float().repeat_interleave(SCALE_GROUP, dim=1)[:, : q.shape[1]]
    return q.float() * s_cols


def dequantize_per_block(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Float32 ``q[i, j] * s[i // 128, j // 128]`` for a per-block cast (``s [ceil(N/128), ceil(K/128)]``)."""
    _check_dequant("dequantize_per_block", q, s, SCALE_GROUP)
    s_full = s.float().repeat_interleave(SCALE_GROUP, dim=0).repeat_interleave(SCALE_GROUP, dim=1)
    return q.float() * s_full[: q.shape[0], : q.shape[1]]
