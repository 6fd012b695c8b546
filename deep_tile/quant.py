"""DeepSeek-V3-style FP8 (e4m3fn) quantisation: 1x128 activation groups and 128x128 weight blocks.

Both casts follow one formula per group G (a 1x128 row segment, or a 128x128 block), with
every step in float32 and every division a correctly rounded IEEE division::

    amax  = max(max_{x in G} |x|, 1e-4)          # tails are zero-padded for the amax only
    inv   = 448 / amax                           # float32 division (not reciprocal-then-multiply)
    q     = float8_e4m3fn(float32(x) * inv)      # round to nearest even; |x * inv| <= 448
    scale = amax / 448                           # float32 division

so that ``q * scale`` approximates ``x``. CPU tensors use the torch code in this module; CUDA
tensors go to the JIT kernels of :mod:`deep_tile.cast_kernels`, which produce the same bytes.

NOTES: the Python expression ``448.0 / tensor`` is ``tensor.reciprocal() * 448`` in torch (two
roundings), so the division is spelled ``torch.div(full(448), amax)`` on purpose.
"""
import torch

from deep_tile.common import SCALE_GROUP, ceil_div

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn value; the cast maps each group's amax onto it."""

AMAX_MIN = 1e-4
"""Lower clamp of a group's amax (so all-zero groups get a finite, non-zero scale)."""

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_input(fn: str, arg: str, x) -> None:
    """Raise TypeError/ValueError unless ``x`` is a 2-D float32/bf16/fp16 tensor with columns.

    Never looks at the row count, so it stays symbolic in the fake implementations of
    :mod:`deep_tile.ops` (torch.compile / torch.export with dynamic rows); a symbolic column count
    is checked with ``torch._check_with`` (the same message), adding no guard when it is a size.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {arg} must be a torch.Tensor; got {type(x).__name__}.")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(
            f"{fn}: {arg} must have dtype float32, bfloat16 or float16 (the values to quantise); "
            f"got {x.dtype}."
        )
    if x.dim() != 2:
        raise ValueError(
            f"{fn}: {arg} must be 2-D [rows, k]; got {x.dim()}-D of shape {_shape_shown(x)}."
        )
    k = x.shape[1]
    if type(k) is not int:  # symbolic (torch.compile / torch.export): no guard, no specialisation
        torch._check_with(ValueError, k != 0, lambda: (
            f"{fn}: {arg} must have at least one column (k >= 1); got shape {_shape_shown(x)}."))
    elif k == 0:
        raise ValueError(
            f"{fn}: {arg} must have at least one column (k >= 1); got shape {_shape_shown(x)}."
        )


def _shape_shown(x: torch.Tensor) -> tuple:
    """``tuple(x.shape)`` for a message, symbolic sizes shown as the values traced with."""
    from deep_tile.checks import _shown

    return _shown(tuple(x.shape))


def _inv_and_scale(amax: torch.Tensor):
    """(448 / amax, amax / 448) as correctly rounded float32 divisions; amax already clamped."""
    fp8_max = torch.full_like(amax, FP8_MAX)
    return torch.div(fp8_max, amax), torch.div(amax, fp8_max)


def _padded_float(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``x`` as float32, zero-padded at the end to ``[rows, cols]`` (no copy when nothing to do)."""
    xf = x.float()
    pad_rows, pad_cols = rows - x.shape[0], cols - x.shape[1]
    if pad_rows or pad_cols:
        xf = torch.nn.functional.pad(xf, (0, pad_cols, 0, pad_rows))
    return xf


def _per_token_cast_torch(x: torch.Tensor):
    """Torch implementation of :func:`per_token_cast_to_fp8` (any device; no validation)."""
    m, k = x.shape
    num_k_blocks = ceil_div(k, SCALE_GROUP)
    xf = _padded_float(x, m, num_k_blocks * SCALE_GROUP).reshape(m, num_k_blocks, SCALE_GROUP)
    amax = xf.abs().amax(dim=2).clamp(min=AMAX_MIN)                   # [m, kb]
    inv, scale = _inv_and_scale(amax)
    q = (xf * inv.unsqueeze(2)).to(torch.float8_e4m3fn)               # [m, kb, 128]
    q = q.reshape(m, num_k_blocks * SCALE_GROUP)[:, :k].contiguous()
    return q, scale


def _per_block_cast_torch(w: torch.Tensor):
    """Torch implementation of :func:`per_block_cast_to_fp8` (any device; no validation)."""
    n, k = w.shape
    num_n_blocks, num_k_blocks = ceil_div(n, SCALE_GROUP), ceil_div(k, SCALE_GROUP)
    wf = _padded_float(w, num_n_blocks * SCALE_GROUP, num_k_blocks * SCALE_GROUP)
    wf = wf.reshape(num_n_blocks, SCALE_GROUP, num_k_blocks, SCALE_GROUP)
    amax = wf.abs().amax(dim=(1, 3)).clamp(min=AMAX_MIN)              # [nb, kb]
    inv, scale = _inv_and_scale(amax)
    q = (wf * inv[:, None, :, None]).to(torch.float8_e4m3fn)          # [nb, 128, kb, 128]
    q = q.reshape(num_n_blocks * SCALE_GROUP, num_k_blocks * SCALE_GROUP)[:n, :k].contiguous()
    return q, scale


def _empty_result(x: torch.Tensor, q_rows: int, s_rows: int):
    k = x.shape[1]
    q = torch.empty((q_rows, k), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((s_rows, ceil_div(k, SCALE_GROUP)), dtype=torch.float32, device=x.device)
    return q, s


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
            torch; CUDA tensors use the JIT kernel of :mod:`deep_tile.cast_kernels`.

    Returns:
        ``(q, s)``: q float8_e4m3fn [M, K] contiguous; s float32 [M, ceil(K/128)] contiguous
        (row-major). M = 0 gives empty tensors of those shapes.

    Runs as the custom op ``torch.ops.deep_tile.per_token_cast_to_fp8`` (traceable by
    torch.compile; see :mod:`deep_tile.ops`).

    Raises:
        TypeError, ValueError: bad type, dtype, rank or K = 0.
    """
    if not isinstance(x, torch.Tensor):  # the op's schema would reject it first, with its own words
        _check_input("per_token_cast_to_fp8", "x", x)
    from deep_tile import ops

    return ops.per_token_cast_to_fp8(x)  # checks the rest


def _per_token_cast(x: torch.Tensor):
    """The implementation of the per-token op: checks, then the CUDA kernel or torch on CPU."""
    _check_input("per_token_cast_to_fp8", "x", x)
    if x.shape[0] == 0:
        return _empty_result(x, 0, 0)
    if x.is_cuda:
        from deep_tile import cast_kernels

        return cast_kernels.per_token_cast_cuda(x)
    return _per_token_cast_torch(x)


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
            torch; CUDA tensors use the JIT kernel of :mod:`deep_tile.cast_kernels`.

    Returns:
        ``(q, s)``: q float8_e4m3fn [N, K] contiguous; s float32 [ceil(N/128), ceil(K/128)]
        contiguous. N = 0 gives empty tensors of those shapes.

    Runs as the custom op ``torch.ops.deep_tile.per_block_cast_to_fp8`` (traceable by
    torch.compile; see :mod:`deep_tile.ops`).

    Raises:
        TypeError, ValueError: bad type, dtype, rank or K = 0.
    """
    if not isinstance(w, torch.Tensor):  # the op's schema would reject it first, with its own words
        _check_input("per_block_cast_to_fp8", "w", w)
    from deep_tile import ops

    return ops.per_block_cast_to_fp8(w)  # checks the rest


def _per_block_cast(w: torch.Tensor):
    """The implementation of the per-block op: checks, then the CUDA kernel or torch on CPU."""
    _check_input("per_block_cast_to_fp8", "w", w)
    if w.shape[0] == 0:
        return _empty_result(w, 0, 0)
    if w.is_cuda:
        from deep_tile import cast_kernels

        return cast_kernels.per_block_cast_cuda(w)
    return _per_block_cast_torch(w)


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
