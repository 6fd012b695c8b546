"""DeepGEMM's FP8 GEMM API over deep_tile: switch a serving engine with one import.

::

    import deep_tile.compat.deepgemm as deep_gemm

    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)

The names, parameter names, order and defaults are DeepGEMM's (its current API and the 2025 one,
``gemm_fp8_fp8_bf16_nt`` and friends); every call writes its result into ``d`` (``out``) and
returns None, as DeepGEMM does. Each function forwards to one public deep_tile function
(:func:`deep_tile.fp8_gemm`, :func:`deep_tile.m_grouped_fp8_gemm_contiguous`,
:func:`deep_tile.m_grouped_fp8_gemm_masked`, :func:`deep_tile.get_tma_aligned_a_scale`,
:func:`deep_tile.set_num_sms`, :func:`deep_tile.set_pdl`), looked up on the package at call time; deep_tile checks the tensors.

Supported: DeepGEMM's SM90 FP8 format -- float8_e4m3fn operands, float32 scales, 1x128 for ``a``
and 128x128 for ``b`` (recipe ``(1, 128, 128)``, the default), NT layout, bfloat16 output. The
scale of ``a`` may come in any layout: deep_tile reads the TMA-aligned column-major one
(:func:`get_mn_major_tma_aligned_tensor`) without a copy and copies any other once per call.

Not supported (raises NotImplementedError naming the argument, before anything is launched):
packed UE8M0 or any other non-float32 scales; ``c`` (accumulation); a float32 ``d``; recipes other
than ``(1, 128, 128)``; ``use_psum_layout=True`` and ``expected_m_for_psum_layout``. Accepted and
ignored, because they only steer DeepGEMM's compilation or its SM100 kernels: ``compiled_dims``,
``disable_ue8m0_cast`` (deep_tile always uses the float32 scales as given, which is what DeepGEMM
does on SM90 whatever this flag says) and ``ensure_zero_padding``. DeepGEMM's other kernels (NN/TN/TT
layouts, FP4, BF16, K-grouped, attention, einsum) are not provided here.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

import deep_tile

__all__ = [
    "fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked",
    "gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_tensor", "get_col_major_tma_aligned_tensor", "transform_sf_into_required_layout",
    "set_num_sms", "get_num_sms", "set_pdl", "get_pdl",
]

Pair = Tuple[torch.Tensor, torch.Tensor]

RECIPE = (1, 128, 128)
"""The one scaling recipe deep_tile runs: (a rows, b rows, k) per scale = 1x128 for a, 128x128 for b."""
RECIPE_A, RECIPE_B = (1, 128), (128, 128)
"""The same recipe given per operand (DeepGEMM's ``recipe_a`` / ``recipe_b``)."""


# --------------------------------------------------------------------------------------------------
# What deep_tile does not run
# --------------------------------------------------------------------------------------------------

def _check_scales(fn: str, **scales) -> None:
    for name, sf in scales.items():
        if isinstance(sf, torch.Tensor) and sf.dtype != torch.float32:
            raise NotImplementedError(
                f"{fn}: the scale factors {name} have dtype {sf.dtype}; deep_tile supports only float32 scales "
                "(1x128 for a, 128x128 for b), not packed UE8M0 (torch.int32) or other scale formats.")


def _check_output(fn: str, name: str, d) -> None:
    if isinstance(d, torch.Tensor) and d.dtype == torch.float32:
        raise NotImplementedError(
            f"{fn}: {name} has dtype torch.float32; deep_tile supports only a torch.bfloat16 {name} (no FP32 output).")


def _check_recipe(fn: str, recipe, recipe_a, recipe_b) -> None:
    if recipe is not None and tuple(recipe) != RECIPE:
        raise NotImplementedError(
            f"{fn}: recipe={tuple(recipe)} is not supported; deep_tile supports only recipe=None or {RECIPE} "
            "(1x128 scales for a, 128x128 for b).")
    for name, value, supported in (("recipe_a", recipe_a, RECIPE_A), ("recipe_b", recipe_b, RECIPE_B)):
        if value is not None and tuple(value) != supported:
            raise NotImplementedError(
                f"{fn}: {name}={tuple(value)} is not supported; deep_tile supports only {name}=None or {supported}.")


def _check_psum(fn: str, use_psum_layout, expected_m_for_psum_layout) -> None:
    if use_psum_layout:
        raise NotImplementedError(
            f"{fn}: use_psum_layout=True is not supported; deep_tile supports only use_psum_layout=False "
            "(grouped_layout holds the group of each row of a, -1 for padding rows).")
    if expected_m_for_psum_layout is not None:
        raise NotImplementedError(
            f"{fn}: expected_m_for_psum_layout={expected_m_for_psum_layout!r} is not supported (it belongs to "
            "use_psum_layout=True); deep_tile supports only expected_m_for_psum_layout=None.")


# --------------------------------------------------------------------------------------------------
# DeepGEMM's current API
# --------------------------------------------------------------------------------------------------

def fp8_gemm_nt(a: Pair, b: Pair, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                disable_ue8m0_cast: bool = False) -> None:
    """DeepGEMM's ``fp8_gemm_nt``: ``d = a[0] @ b[0].T`` with the block scales, run by :func:`deep_tile.fp8_gemm`.

    ``a = (a [M, K] float8_e4m3fn, sfa [M, ceil(K/128)] float32)``, ``b = (b [N, K], sfb
    [ceil(N/128), ceil(K/128)] float32)``, ``d`` [M, N] bfloat16, written in place. ``c``, a float32
    ``d``, non-float32 scales and recipes other than ``(1, 128, 128)`` raise NotImplementedError;
    ``compiled_dims`` and ``disable_ue8m0_cast`` are accepted and ignored (see the module docstring).
    """
    fn = "fp8_gemm_nt"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    _check_output(fn, "d", d)
    if c is not None:
        raise NotImplementedError(
            f"{fn}: c (accumulation, d = a @ b.T + c) is not supported; deep_tile supports only c=None "
            "(d = a @ b.T).")
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    deep_tile.fp8_gemm(a_data, sfa, b_data, sfb, out=d)


def m_grouped_fp8_gemm_nt_contiguous(a: Pair, b: Pair, d: torch.Tensor, grouped_layout: torch.Tensor,
                                     recipe: Optional[Sequence[int]] = None,
                                     recipe_a: Optional[Sequence[int]] = None,
                                     recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False, use_psum_layout: bool = False,
                                     ensure_zero_padding: bool = True,
                                     expected_m_for_psum_layout: Optional[int] = None) -> None:
    """DeepGEMM's ``m_grouped_fp8_gemm_nt_contiguous`` (MoE, contiguous layout), run by
    :func:`deep_tile.m_grouped_fp8_gemm_contiguous`.

    ``a = (a [M, K], sfa [M, ceil(K/128)])``, ``b = (b [G, N, K], sfb [G, ceil(N/128), ceil(K/128)])``,
    ``d`` [M, N] bfloat16, ``grouped_layout`` int32 [M] on the GPU: the group (expert) of each row,
    each group's rows one run starting at a multiple of :func:`get_mk_alignment_for_contiguous_layout`;
    -1 marks padding rows, which are left untouched in ``d``. Non-float32 scales, a float32 ``d``,
    other recipes, ``use_psum_layout=True`` and ``expected_m_for_psum_layout`` raise
    NotImplementedError; ``compiled_dims``, ``disable_ue8m0_cast`` and ``ensure_zero_padding`` (an
    SM100 option) are accepted and ignored.
    """
    fn = "m_grouped_fp8_gemm_nt_contiguous"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    _check_output(fn, "d", d)
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    _check_psum(fn, use_psum_layout, expected_m_for_psum_layout)
    deep_tile.m_grouped_fp8_gemm_contiguous(a_data, sfa, b_data, sfb, grouped_layout, out=d)


def m_grouped_fp8_gemm_nt_masked(a: Pair, b: Pair, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                                 recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                 disable_ue8m0_cast: bool = False) -> None:
    """DeepGEMM's ``m_grouped_fp8_gemm_nt_masked`` (MoE, masked layout), run by
    :func:`deep_tile.m_grouped_fp8_gemm_masked`.

    ``a = (a [G, max_m, K], sfa [G, max_m, ceil(K/128)])``, ``b = (b [G, N, K], sfb [G, ceil(N/128),
    ceil(K/128)])``, ``d`` [G, max_m, N] bfloat16, ``masked_m`` int32 [G] on the GPU (rows of group g
    to compute; rows from ``masked_m[g]`` on are left untouched), ``expected_m`` an int hint of the
    typical ``masked_m``. Non-float32 scales, a float32 ``d`` and other recipes raise
    NotImplementedError; ``compiled_dims`` and ``disable_ue8m0_cast`` are accepted and ignored.
    """
    fn = "m_grouped_fp8_gemm_nt_masked"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    _check_output(fn, "d", d)
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    deep_tile.m_grouped_fp8_gemm_masked(a_data, sfa, b_data, sfb, masked_m, expected_m, out=d)


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
"""DeepGEMM's older alias of :func:`m_grouped_fp8_gemm_nt_masked` (it still exports it)."""


def get_mk_alignment_for_contiguous_layout() -> int:
    """DeepGEMM's ``get_mk_alignment_for_contiguous_layout``: the row alignment of each group in the
    contiguous layout (128 on SM90), from :func:`deep_tile.get_m_alignment_for_contiguous_layout`."""
    return deep_tile.get_m_alignment_for_contiguous_layout()


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's ``get_mn_major_tma_aligned_tensor``: ``sf`` [M, kb] or [G, M, kb] in the
    TMA-aligned column-major layout (each group column-major, column stride a multiple of 4), made
    (or returned as is when already so) by :func:`deep_tile.get_tma_aligned_a_scale`. Optional with
    deep_tile, which reads this layout without a copy and copies any other once per call."""
    return deep_tile.get_tma_aligned_a_scale(sf)


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int, recipe: Sequence[int],
                                      num_groups: Optional[int] = None, is_sfa: Optional[bool] = None,
                                      disable_ue8m0_cast: bool = False,
                                      psum_layout: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DeepGEMM's ``transform_sf_into_required_layout``, for its SM90 cases: float32 1x128 scales
    (``a``'s) go through :func:`get_mn_major_tma_aligned_tensor`, float32 128x128 scales (``b``'s)
    come back as they are.

    ``recipe`` is ``(1, 128, 128)`` with ``is_sfa`` saying which operand ``sf`` scales, or ``(1, 128)``
    / ``(128, 128)``. Other recipes, dtypes and ``psum_layout`` raise NotImplementedError;
    a shape other than ``([num_groups,] ceil(mn/gran_mn), ceil(k/gran_k))`` raises ValueError.
    """
    fn = "transform_sf_into_required_layout"
    _check_scales(fn, sf=sf)
    if psum_layout is not None:
        raise NotImplementedError(f"{fn}: psum_layout is not supported; deep_tile supports only psum_layout=None.")
    recipe = tuple(recipe)
    if len(recipe) == 3 and is_sfa is None:
        raise ValueError(f"{fn}: a 3-element recipe {recipe} needs is_sfa=True or False.")
    if recipe not in (RECIPE, RECIPE_A, RECIPE_B):
        raise NotImplementedError(
            f"{fn}: recipe={recipe} is not supported; deep_tile supports only {RECIPE} (with is_sfa), "
            f"{RECIPE_A} (a's 1x128 scales) or {RECIPE_B} (b's 128x128 scales).")
    gran_mn, gran_k = (recipe[0] if is_sfa else recipe[1], recipe[2]) if len(recipe) == 3 else recipe
    expected = (-(-mn // gran_mn), -(-k // gran_k))
    if num_groups is not None:
        expected = (num_groups,) + expected
    if tuple(sf.shape) != expected:
        raise ValueError(f"{fn}: sf must have shape {expected} for mn={mn}, k={k}, recipe={recipe}; "
                         f"got {tuple(sf.shape)}.")
    return get_mn_major_tma_aligned_tensor(sf) if gran_mn == 1 else sf


def set_num_sms(new_num_sms: int) -> None:
    """DeepGEMM's ``set_num_sms``: limit later GEMMs to ``new_num_sms`` SMs, by :func:`deep_tile.set_num_sms`."""
    deep_tile.set_num_sms(new_num_sms)


def get_num_sms() -> int:
    """DeepGEMM's ``get_num_sms``: the SMs GEMMs may use, from :func:`deep_tile.get_num_sms`."""
    return deep_tile.get_num_sms()


def set_pdl(new_enable_pdl: bool) -> None:
    """DeepGEMM's ``set_pdl``: launch later GEMMs with programmatic dependent launch or not, by
    :func:`deep_tile.set_pdl` (deep_tile's default is on; DeepGEMM's is off)."""
    deep_tile.set_pdl(new_enable_pdl)


def get_pdl() -> bool:
    """DeepGEMM's ``get_pdl``: whether GEMMs are launched with programmatic dependent launch."""
    return deep_tile.get_pdl()


# --------------------------------------------------------------------------------------------------
# DeepGEMM's 2025 API (lhs/rhs/out; always recipe (1, 128, 128), bfloat16 out, no accumulation)
# --------------------------------------------------------------------------------------------------

def gemm_fp8_fp8_bf16_nt(lhs: Pair, rhs: Pair, out: torch.Tensor) -> None:
    """DeepGEMM 2025's ``gemm_fp8_fp8_bf16_nt``: ``out = lhs[0] @ rhs[0].T`` with the block scales,
    run by :func:`deep_tile.fp8_gemm` (shapes as :func:`fp8_gemm_nt`)."""
    fn = "gemm_fp8_fp8_bf16_nt"
    (a_data, sfa), (b_data, sfb) = lhs, rhs
    _check_scales(fn, **{"lhs[1]": sfa, "rhs[1]": sfb})
    _check_output(fn, "out", out)
    deep_tile.fp8_gemm(a_data, sfa, b_data, sfb, out=out)


def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs: Pair, rhs: Pair, out: torch.Tensor,
                                              m_indices: torch.Tensor) -> None:
    """DeepGEMM 2025's ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous``, run by
    :func:`deep_tile.m_grouped_fp8_gemm_contiguous` (``m_indices`` as :func:`m_grouped_fp8_gemm_nt_contiguous`'s
    ``grouped_layout``)."""
    fn = "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"
    (a_data, sfa), (b_data, sfb) = lhs, rhs
    _check_scales(fn, **{"lhs[1]": sfa, "rhs[1]": sfb})
    _check_output(fn, "out", out)
    deep_tile.m_grouped_fp8_gemm_contiguous(a_data, sfa, b_data, sfb, m_indices, out=out)


def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs: Pair, rhs: Pair, out: torch.Tensor, masked_m: torch.Tensor,
                                          expected_m: int) -> None:
    """DeepGEMM 2025's ``m_grouped_gemm_fp8_fp8_bf16_nt_masked``, run by
    :func:`deep_tile.m_grouped_fp8_gemm_masked` (shapes as :func:`m_grouped_fp8_gemm_nt_masked`)."""
    fn = "m_grouped_gemm_fp8_fp8_bf16_nt_masked"
    (a_data, sfa), (b_data, sfb) = lhs, rhs
    _check_scales(fn, **{"lhs[1]": sfa, "rhs[1]": sfb})
    _check_output(fn, "out", out)
    deep_tile.m_grouped_fp8_gemm_masked(a_data, sfa, b_data, sfb, masked_m, expected_m, out=out)


def get_m_alignment_for_contiguous_layout() -> int:
    """DeepGEMM 2025's ``get_m_alignment_for_contiguous_layout`` (128), from
    :func:`deep_tile.get_m_alignment_for_contiguous_layout`."""
    return deep_tile.get_m_alignment_for_contiguous_layout()


def get_col_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """DeepGEMM 2025's ``get_col_major_tma_aligned_tensor``: the same as :func:`get_mn_major_tma_aligned_tensor`,
    by :func:`deep_tile.get_tma_aligned_a_scale`."""
    return deep_tile.get_tma_aligned_a_scale(x)
