"""Fused FP8 casts for training: one pass over a bf16 tensor writes its FP8 copy and, on request,
its transposed FP8 copy, each with the scales the FP8 GEMMs read without a copy (docs/training.md, "Fused FP8 casts").

- :func:`per_token_cast_transpose_to_fp8` -- activations and gradients ``x [T, D]``: row-wise
  1x128 groups along D (fprop / dgrad operand) and ``x^T [D, T]`` with 1x128 groups along T
  (the weight gradient's operands, ``dY^T`` and ``X^T``, for :func:`deep_tile.fp8_gemm_1d1d`).
  With ``group_offsets`` (an MoE layer's tokens, expert by expert) ``x^T`` gives each group its
  own 128-token blocks (``torch.ops.deep_tile.per_token_cast_transpose_grouped_to_fp8``), and
  :func:`padded_group_sizes` the K-grouped weight gradient's group sizes over it.
- :func:`per_block_cast_transpose_to_fp8` -- weights ``w [N, K]`` (or a stack ``[E, N, K]``):
  128x128 blocks, and ``w^T`` with the transposed scales (bit-exact transposes of ``q`` and ``s``;
  dgrad's b operand).

Both take ``power_of_two_scales``: each scale rounded up to a power of two (as DeepSeek-V3 and
TransformerEngine do). CUDA tensors run the kernels of :mod:`deep_tile.casts.cast_transpose_kernels`;
CPU tensors the torch reference :mod:`deep_tile.casts.cast_transpose_ref`, which they match bitwise.
Each runs as a torch custom op (``torch.ops.deep_tile.per_token_cast_transpose_to_fp8`` /
``per_block_cast_transpose_to_fp8(x, transpose, power_of_two_scales) -> (q, s, qt, st)``, with
empty ``qt``/``st`` without ``transpose``) with a fake implementation, so ``torch.compile`` traces
the casts (and the layers of :mod:`deep_tile.nn` around them) without a graph break.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from deep_tile import ops
from deep_tile.casts.cast_transpose_impl import BLOCK_OP, MAX_BATCH, MAX_ROWS, TOKEN_OP, check, check_group_offsets
from deep_tile.common import SCALE_GROUP

__all__ = ["CastOutputs", "per_token_cast_transpose_to_fp8", "per_block_cast_transpose_to_fp8",
           "padded_group_sizes", "MAX_ROWS", "MAX_BATCH"]


class CastOutputs(NamedTuple):
    """The results of a fused cast: ``q``/``s`` and, when asked for, ``qt``/``st`` (else None)."""

    q: torch.Tensor
    s: torch.Tensor
    qt: Optional[torch.Tensor]
    st: Optional[torch.Tensor]


def per_token_cast_transpose_to_fp8(x: torch.Tensor, *, transpose: bool = True,
                                    power_of_two_scales: bool = False, group_offsets=None) -> CastOutputs:
    """Quantise ``x [T, D]`` (bf16) to FP8 in 1x128 groups along D and, with ``transpose``, its
    transpose in 1x128 groups along T, in one pass over ``x``.

    For each group G (128 consecutive elements of a row of ``x``, or of a column of ``x`` for the
    transposed copy; a tail group is zero-padded for the amax), in float32::

        amax = max(max_{G} |x|, 1e-4);  inv = 448 / amax        # correctly rounded
        power_of_two_scales: inv = 2^floor(log2(inv))           # scale rounded up to 2^n
        q = float8_e4m3fn(x * inv)  (RNE, saturating);  scale = amax / 448  (or 1 / inv)

    Args:
        x: bf16 ``[T, D]``, D a positive multiple of 16, any T >= 0 (any strides: copied to
            contiguous if it is not).
        transpose: also write ``qt``/``st``.
        power_of_two_scales: round every scale up to a power of two.

    Returns:
        :class:`CastOutputs` ``(q, s, qt, st)``, the layouts :func:`deep_tile.fp8_gemm` and
        :func:`deep_tile.fp8_gemm_1d1d` read without a copy:

        - ``q`` e4m3 ``[T, D]`` contiguous; ``s`` float32 ``[T, ceil(D/128)]``, column-major
          with pitch ``align4(T)`` (``deep_tile.get_tma_aligned_a_scale`` returns it as is).
        - ``qt`` e4m3 ``[D, Tp]`` contiguous with ``Tp = align16(T)``; columns ``T .. Tp-1`` are
          zero, so a weight-gradient GEMM over K = Tp equals the one over the T tokens (the GEMMs
          need K % 16 == 0). ``st`` float32 ``[D, ceil(T/128)]`` column-major with pitch
          ``align4(D)``; the last group covers the tokens past the last multiple of 128.
        - without ``transpose``: ``qt = st = None``.
        - with ``group_offsets`` (the tokens of an MoE layer's experts, one group after another):
          ``qt`` e4m3 ``[D, 128 * B]`` and ``st`` ``[D, B]`` (column-major, pitch ``align4(D)``),
          ``B = ceil(T/128) + G``; group g's tokens ``[group_offsets[g], group_offsets[g+1])``
          start at column ``padded[g]`` (the token counts of the groups before it, each rounded
          up to 128, summed) and the columns after them up to the next multiple of 128, and past
          the last group's, are zero: each 128-token scale group holds one group's tokens, so
          the K-grouped weight gradient (:func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d`
          with :func:`padded_group_sizes`) runs whole 128-token blocks. ``q``, ``s`` as above for
          the groups' rows (rows outside every group are left unwritten).

        group_offsets: optional int32 ``[G + 1]`` tensor on x's device, 1 <= G <= 512: the
            groups' row offsets, non-decreasing from 0 to at most T (read by the kernel only;
            each is clamped into [the previous one, T]); needs ``transpose``.

    Raises:
        TypeError, ValueError: not a bf16 2-D tensor, D not a positive multiple of 16, T > MAX_ROWS,
            flags not bools, ``group_offsets`` not as above or without ``transpose`` (nothing written).
    """
    if not _schema_takes(x, transpose, power_of_two_scales):  # the op checks the rest
        check(TOKEN_OP, "x", x, transpose, power_of_two_scales, 1)
    if group_offsets is None:
        return _outputs(ops.per_token_cast_transpose_to_fp8(x, transpose, power_of_two_scales), transpose)
    if not transpose:
        raise ValueError(f"{TOKEN_OP}: group_offsets shape the transposed copy; it needs transpose=True.")
    if not isinstance(group_offsets, torch.Tensor):  # the schema's words otherwise; the op checks the rest
        check_group_offsets(TOKEN_OP, x, group_offsets)
    return _outputs(ops.per_token_cast_transpose_grouped_to_fp8(x, group_offsets, power_of_two_scales), True)


def padded_group_sizes(group_offsets: torch.Tensor) -> torch.Tensor:
    """The token counts of the groups of :func:`per_token_cast_transpose_to_fp8` with
    ``group_offsets``, each rounded up to a multiple of 128: an int32 ``[G]`` tensor on the same
    device (no host sync), the ``group_sizes`` of the K-grouped weight gradient over that cast's
    transposed copies (their zeros past each group's tokens add nothing).

    Args:
        group_offsets: int32 ``[G + 1]``, non-decreasing, as the cast takes them.
    """
    sizes = (group_offsets[1:] - group_offsets[:-1]).clamp(min=0)
    return ((sizes + (SCALE_GROUP - 1)) // SCALE_GROUP * SCALE_GROUP).to(torch.int32)


def per_block_cast_transpose_to_fp8(w: torch.Tensor, *, transpose: bool = True,
                                    power_of_two_scales: bool = False) -> CastOutputs:
    """Quantise ``w [N, K]`` (bf16) to FP8 in 128x128 blocks and, with ``transpose``, write
    ``w^T`` too (the bit-exact transpose of ``q`` and of ``s``), in one pass over ``w``; or each
    matrix of a stack ``w [E, N, K]`` (the experts' weights), all in one launch.

    Per block (tail blocks zero-padded for the amax) the math of
    :func:`per_token_cast_transpose_to_fp8` with G the block.

    Args:
        w: bf16 ``[N, K]``, K a positive multiple of 16; with ``transpose`` N a multiple of 16
            too (``qt`` rows are 16-byte aligned: dgrad's K). Or ``[E, N, K]``, E <= MAX_BATCH:
            each ``w[e]`` cast as a matrix of its own (its blocks start at its row 0), every
            output below gaining the leading E (``qt[e] = q[e].T``, ``st[e] = s[e].T``).
        transpose: also write ``qt``/``st``.
        power_of_two_scales: round every scale up to a power of two.

    Returns:
        :class:`CastOutputs`: ``q`` e4m3 ``[N, K]`` and ``s`` float32 ``[ceil(N/128), ceil(K/128)]``
        (the b / b_scale of :func:`deep_tile.fp8_gemm`), ``qt`` e4m3 ``[K, N]`` = ``q.T`` and
        ``st`` float32 ``[ceil(K/128), ceil(N/128)]`` = ``s.T``, all contiguous (``None`` without
        ``transpose``).

    Raises:
        TypeError, ValueError: as :func:`per_token_cast_transpose_to_fp8` (a 3-D ``w`` allowed),
            N % 16 with ``transpose``, E > MAX_BATCH (nothing written).
    """
    if not _schema_takes(w, transpose, power_of_two_scales):  # the op checks the rest
        check(BLOCK_OP, "w", w, transpose, power_of_two_scales, 16, batched=True)
    return _outputs(ops.per_block_cast_transpose_to_fp8(w, transpose, power_of_two_scales), transpose)


def _schema_takes(x, transpose, power_of_two_scales) -> bool:
    """Whether the op's schema accepts these arguments' types (a tensor, two bools); when it would
    not, :func:`deep_tile.casts.cast_transpose_impl.check` raises first, with deep_tile's own words."""
    return isinstance(x, torch.Tensor) and isinstance(transpose, bool) and isinstance(power_of_two_scales, bool)


def _outputs(results, transpose: bool) -> CastOutputs:
    """The op's four tensors as :class:`CastOutputs` (``qt``/``st`` None without ``transpose``:
    the op returns empty tensors there, a schema has no optional outputs)."""
    q, s, qt, st = results
    return CastOutputs(q, s, qt, st) if transpose else CastOutputs(q, s, None, None)
