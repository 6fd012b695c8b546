"""Random FP8 GEMM problems built through deep_tile's own casts."""
import torch

from deep_tile.common import align4  # re-exported: tests and tools import it from here

__all__ = ["A_SCALE_LAYOUTS", "align4", "to_tma_layout", "make_fp8_problem"]

A_SCALE_LAYOUTS = ("row", "tma")
"""Layouts ``make_fp8_problem`` can give a_scale: row-major, or TMA-aligned column-major."""


def to_tma_layout(a_scale: torch.Tensor) -> torch.Tensor:
    """Copy ``a_scale [M, kb]`` into the TMA-aligned column-major layout, strides ``(1, align4(M))``.

    The storage is a ``[kb, align4(M)]`` row-major buffer, transposed and sliced to ``[:M]``
    (the padding rows are zero).
    """
    if a_scale.dim() != 2:
        raise ValueError(f"to_tma_layout: a_scale must be 2-D [M, kb]; got shape {tuple(a_scale.shape)}.")
    m, num_k_blocks = a_scale.shape
    buf = torch.zeros((num_k_blocks, align4(m)), dtype=a_scale.dtype, device=a_scale.device)
    out = buf.t()[:m]
    out.copy_(a_scale)
    return out


def make_fp8_problem(m: int, n: int, k: int, device, seed=None, a_scale_layout: str = "row"):
    """Random ``(a, a_scale, b, b_scale)`` for ``fp8_gemm``, quantised from fresh randn data.

    ``a`` comes from ``per_token_cast_to_fp8`` and ``b`` from ``per_block_cast_to_fp8`` applied to
    bfloat16 ``torch.randn`` tensors ([M, K] and [N, K]) on ``device`` (so the CUDA casts are used
    on CUDA devices).

    Args:
        m, n, k: problem shape (m and n may be 0; k >= 1).
        device: torch device (or string) for every tensor.
        seed: if not None, the data comes from a ``torch.Generator`` seeded with it (reproducible
            per device); None draws from the global RNG.
        a_scale_layout: ``"row"`` (contiguous [M, ceil(K/128)]) or ``"tma"`` (logical shape
            [M, ceil(K/128)] with strides ``(1, align4(M))``, as ``get_tma_aligned_a_scale``).

    Returns:
        ``(a, a_scale, b, b_scale)``: float8_e4m3fn [M, K], float32 [M, ceil(K/128)],
        float8_e4m3fn [N, K], float32 [ceil(N/128), ceil(K/128)].
    """
    from deep_tile.casts.quant import per_block_cast_to_fp8, per_token_cast_to_fp8

    if a_scale_layout not in A_SCALE_LAYOUTS:
        raise ValueError(
            f"make_fp8_problem: a_scale_layout must be one of {A_SCALE_LAYOUTS}; got {a_scale_layout!r}."
        )
    for name, value, low in (("m", m, 0), ("n", n, 0), ("k", k, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"make_fp8_problem: {name} must be an int >= {low}; got {value!r}.")
    device = torch.device(device)
    gen = None
    if seed is not None:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
    x = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    w = torch.randn((n, k), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    a, a_scale = per_token_cast_to_fp8(x)
    b, b_scale = per_block_cast_to_fp8(w)
    if a_scale_layout == "tma":
        a_scale = to_tma_layout(a_scale)
    return a, a_scale, b, b_scale
