"""Float64 reference of the block-scaled FP8 GEMM, for tests and benchmark checks.

``ref_fp8_gemm`` dequantises both operands in float64 and multiplies them on the operands'
device, so the only error left is float64 rounding. Memory: one float64 copy of each operand
(``8 * (M + N) * K`` bytes) plus the float64 output; the scales are applied in place on those
copies, never through a scale tensor expanded to ``[M, K]``.
"""
import torch

from deep_tile.common import SCALE_GROUP, ceil_div


def _check(a, a_scale, b, b_scale, fn: str = "ref_fp8_gemm", b_per_row: bool = False) -> None:
    for name, t in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(t).__name__}.")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{fn}: {name} must have a floating dtype; got {t.dtype}.")
        if t.dim() != 2:
            raise ValueError(f"{fn}: {name} must be 2-D; got shape {tuple(t.shape)}.")
        if t.device != a.device:
            raise ValueError(
                f"{fn}: all tensors must be on one device; a is on {a.device}, {name} on {t.device}."
            )
    (m, k), (n, k_b) = a.shape, b.shape
    if k_b != k:
        raise ValueError(
            f"{fn}: b must have shape (n, k) with k = {k} (the k of a of shape {tuple(a.shape)}); "
            f"got {tuple(b.shape)}."
        )
    num_k_blocks = ceil_div(k, SCALE_GROUP)
    expected = {"a_scale": (m, num_k_blocks), "b_scale": (n if b_per_row else ceil_div(n, SCALE_GROUP), num_k_blocks)}
    g = SCALE_GROUP
    unit = {"a": f"row and {g} columns", "b": f"row and {g} columns" if b_per_row else f"{g}x{g} block"}
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        if tuple(t.shape) != expected[name]:
            operand = "a" if name == "a_scale" else "b"
            raise ValueError(
                f"{fn}: {name} must have shape {expected[name]} for a of shape {tuple(a.shape)} "
                f"and b of shape {tuple(b.shape)} (one scale per "
                f"{unit[operand]} of {operand}); "
                f"got {tuple(t.shape)}."
            )


def _scale_groups_(x: torch.Tensor, row_scales: torch.Tensor) -> torch.Tensor:
    """In place: ``x[i, j] *= row_scales[i, j // 128]`` (x float64 [R, K], row_scales [R, ceil(K/128)])."""
    rows, k = x.shape
    num_full = k // SCALE_GROUP
    if num_full:
        body = x[:, : num_full * SCALE_GROUP].view(rows, num_full, SCALE_GROUP)
        body.mul_(row_scales[:, :num_full].unsqueeze(2))
    if k % SCALE_GROUP:
        x[:, num_full * SCALE_GROUP :].mul_(row_scales[:, num_full : num_full + 1])
    return x


def ref_fp8_gemm(
    a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor
) -> torch.Tensor:
    """Float64 ``(a * a_scale) @ (b * b_scale).T`` with DeepSeek-V3 block scales expanded.

    ``out[i, j] = sum_k a[i, k] * a_scale[i, k // 128] * b[j, k] * b_scale[j // 128, k // 128]``
    with every operand converted to float64 first.

    Args:
        a: [M, K] floating tensor (typically float8_e4m3fn), any strides.
        a_scale: [M, ceil(K/128)] floating tensor, any strides (row-major or the TMA-aligned
            column-major layout; it is only indexed logically).
        b: [N, K] floating tensor, any strides.
        b_scale: [ceil(N/128), ceil(K/128)] floating tensor, any strides.

    Returns:
        float64 tensor [M, N] on the device of ``a``.

    Raises:
        TypeError, ValueError: non-tensor or non-floating inputs, wrong ranks or shapes, mixed
            devices.
    """
    _check(a, a_scale, b, b_scale)
    n = b.shape[0]
    a64 = a.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(a64, a_scale.to(torch.float64))
    b_row_scales = b_scale.to(torch.float64).repeat_interleave(SCALE_GROUP, dim=0)[:n]  # [N, kb]
    b64 = b.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(b64, b_row_scales)
    return a64 @ b64.t()


def _ref_rows(a, a_scale, b, b_scale, expert: int, rows) -> torch.Tensor:
    """Float64 product of ``a[rows]`` with expert ``expert``'s weights (``rows``: an index tensor)."""
    return ref_fp8_gemm(a[rows], a_scale[rows], b[expert], b_scale[expert])


def ref_m_grouped_fp8_gemm_contiguous(a, a_scale, b, b_scale, m_indices) -> torch.Tensor:
    """Float64 reference of :func:`deep_tile.m_grouped_fp8_gemm_contiguous`.

    Row ``i`` of the result is ``a[i] @ b[m_indices[i]].T`` (scales applied) when
    ``0 <= m_indices[i] < G``, and NaN for padding rows (id -1 or out of range), which the GEMM
    leaves untouched. ``a`` [M, K], ``a_scale`` [M, ceil(K/128)], ``b`` [G, N, K], ``b_scale``
    [G, ceil(N/128), ceil(K/128)], ``m_indices`` [M] integers. Returns float64 [M, N].
    """
    num_groups, n = b.shape[0], b.shape[1]
    out = torch.full((a.shape[0], n), float("nan"), dtype=torch.float64, device=a.device)
    ids = m_indices.to(device=a.device, dtype=torch.int64)
    for expert in range(num_groups):
        rows = (ids == expert).nonzero().flatten()
        if rows.numel():
            out[rows] = _ref_rows(a, a_scale, b, b_scale, expert, rows)
    return out


def ref_m_grouped_fp8_gemm_offsets(a, a_scale, b, b_scale, offsets) -> torch.Tensor:
    """Float64 reference of :func:`deep_tile.m_grouped_fp8_gemm_offsets`: rows
    ``offsets[g] .. offsets[g+1]-1`` use expert ``g``; every other row is NaN (left untouched by
    the GEMM). ``offsets`` [G + 1] integers. Returns float64 [M, N]."""
    num_groups, n = b.shape[0], b.shape[1]
    out = torch.full((a.shape[0], n), float("nan"), dtype=torch.float64, device=a.device)
    bounds = [int(v) for v in offsets.tolist()]
    for expert in range(num_groups):
        begin, end = bounds[expert], bounds[expert + 1]
        if end > begin:
            rows = torch.arange(begin, end, device=a.device)
            out[rows] = _ref_rows(a, a_scale, b, b_scale, expert, rows)
    return out


def ref_m_grouped_fp8_gemm_masked(a, a_scale, b, b_scale, masked_m) -> torch.Tensor:
    """Float64 reference of :func:`deep_tile.m_grouped_fp8_gemm_masked`: ``a`` [G, max_m, K],
    ``a_scale`` [G, max_m, ceil(K/128)], ``masked_m`` [G]; row ``r`` of group ``g`` is
    ``a[g, r] @ b[g].T`` for ``r < min(masked_m[g], max_m)`` and NaN past it (left untouched by
    the GEMM). Returns float64 [G, max_m, N]."""
    num_groups, max_m = a.shape[0], a.shape[1]
    n = b.shape[1]
    out = torch.full((num_groups, max_m, n), float("nan"), dtype=torch.float64, device=a.device)
    counts = [min(max(int(v), 0), max_m) for v in masked_m.tolist()]
    for expert in range(num_groups):
        rows = counts[expert]
        if rows:
            out[expert, :rows] = ref_fp8_gemm(a[expert, :rows], a_scale[expert, :rows], b[expert], b_scale[expert])
    return out


def ref_fp8_gemm_1d1d(
    a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, c: "torch.Tensor | None" = None
) -> torch.Tensor:
    """Float64 ``c + (a * a_scale) @ (b * b_scale).T`` with both operands scaled per row and
    128-wide K block (the 1D1D weight-gradient GEMM, :func:`deep_tile.fp8_gemm_1d1d`).

    ``out[i, j] = c[i, j] + sum_k a[i, k] * a_scale[i, k // 128] * b[j, k] * b_scale[j, k // 128]``
    with every operand converted to float64 first.

    Args:
        a: [M, K] floating tensor (typically float8_e4m3fn), any strides.
        a_scale: [M, ceil(K/128)] floating tensor, any strides.
        b: [N, K] floating tensor, any strides.
        b_scale: [N, ceil(K/128)] floating tensor, any strides.
        c: optional [M, N] addend (any floating dtype).

    Returns:
        float64 tensor [M, N] on the device of ``a``.

    Raises:
        TypeError, ValueError: non-tensor or non-floating inputs, wrong ranks or shapes, mixed
            devices.
    """
    _check(a, a_scale, b, b_scale, "ref_fp8_gemm_1d1d", b_per_row=True)
    a64 = a.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(a64, a_scale.to(torch.float64))
    b64 = b.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(b64, b_scale.to(torch.float64))
    out = a64 @ b64.t()
    if c is not None:
        if tuple(c.shape) != tuple(out.shape):
            raise ValueError(f"ref_fp8_gemm_1d1d: c must have shape {tuple(out.shape)}; got {tuple(c.shape)}.")
        out += c.to(torch.float64)
    return out


def ref_k_grouped_fp8_gemm_1d1d(
    a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor, group_sizes,
    c: "torch.Tensor | None" = None,
) -> torch.Tensor:
    """Float64 reference of the K-grouped 1D1D GEMM (:func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d`):
    ``out[g] = c[g] + (a * a_scale)[:, K_g] @ ((b * b_scale)[:, K_g]).T`` with
    ``K_g = [sum(sizes[:g]), sum(sizes[:g + 1]))``, each token scaled by the scale of its 128-wide
    block of the whole K axis.

    Args:
        a, a_scale, b, b_scale: as :func:`ref_fp8_gemm_1d1d` (a [M, K], b [N, K], scales per row
            and 128-wide K block).
        group_sizes: the tokens of each group: a list / tuple of ints >= 0 or a 1-D integer
            tensor (any device), summing to at most K.
        c: optional [G, M, N] addend (any floating dtype).

    Returns:
        float64 tensor [G, M, N] on the device of ``a``.

    Raises:
        TypeError, ValueError: as :func:`ref_fp8_gemm_1d1d`; negative sizes, or sizes summing past K.
    """
    _check(a, a_scale, b, b_scale, "ref_k_grouped_fp8_gemm_1d1d", b_per_row=True)
    sizes = [int(v) for v in (group_sizes.tolist() if isinstance(group_sizes, torch.Tensor) else group_sizes)]
    if any(v < 0 for v in sizes) or sum(sizes) > a.shape[1]:
        raise ValueError(f"ref_k_grouped_fp8_gemm_1d1d: group sizes must be >= 0 and sum to at most K = "
                         f"{a.shape[1]}; got {sizes}.")
    a64 = a.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(a64, a_scale.to(torch.float64))
    b64 = b.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    _scale_groups_(b64, b_scale.to(torch.float64))
    out = torch.empty((len(sizes), a.shape[0], b.shape[0]), dtype=torch.float64, device=a.device)
    start = 0
    for g, size in enumerate(sizes):
        torch.matmul(a64[:, start:start + size], b64[:, start:start + size].t(), out=out[g])
        start += size
    if c is not None:
        if tuple(c.shape) != tuple(out.shape):
            raise ValueError(f"ref_k_grouped_fp8_gemm_1d1d: c must have shape {tuple(out.shape)}; got {tuple(c.shape)}.")
        out += c.to(torch.float64)
    return out
