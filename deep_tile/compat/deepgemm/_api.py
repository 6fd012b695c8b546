"""The functions and state of :mod:`deep_tile.compat.deepgemm` (the package re-exports them; its
submodules import them from here, so the package, its submodules and the ``deep_gemm`` alias share
one state). See the package's docstring."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

import deep_tile
from deep_tile.kernels.fp8_gemm import CONTIGUOUS_ALIGNMENT

__all__ = [
    "fp8_mqa_logits", "fp8_fp4_mqa_logits",
    "fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
    "gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_tensor", "get_col_major_tma_aligned_tensor", "transform_sf_into_required_layout",
    "set_num_sms", "get_num_sms", "set_pdl", "get_pdl",
    "set_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout", "get_tma_aligned_size", "get_compile_mode", "set_compile_mode",
]

Pair = Tuple[torch.Tensor, torch.Tensor]

RECIPE = (1, 128, 128)
"""The one scaling recipe deep_tile runs: (a rows, b rows, k) per scale = 1x128 for a, 128x128 for b."""
RECIPE_A, RECIPE_B = (1, 128), (128, 128)
"""The same recipe given per operand (DeepGEMM's ``recipe_a`` / ``recipe_b``)."""
RECIPE_1D1D = (1, 1, 128)
"""DeepGEMM's recipe of the weight gradient: 1x128 scales for both a and b (fp8_gemm_nt only)."""

SM90_MK_ALIGNMENT = 128
"""The contiguous-layout alignment DeepGEMM starts with and, on SM90, always calls theoretical
(its ``HeuristicsRuntime``: 128 unless the GPU is an SM100)."""

SIGNAL_BLOCK_M = 64
"""The rows per completion flag of the signalling masked GEMM: SGLang sizes its ``signal`` for
blocks of 64 rows (its ``MIN_BLOCK_M``), so every block size it can be told fits the buffer."""

_mk_alignment = CONTIGUOUS_ALIGNMENT  # set_mk_alignment_for_contiguous_layout's value
_compile_mode = 0                  # set_compile_mode's value


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
    if expected_m_for_psum_layout is None:
        return
    if not use_psum_layout:  # DeepGEMM asserts the same
        raise ValueError(f"{fn}: expected_m_for_psum_layout={expected_m_for_psum_layout!r} is given without "
                         "use_psum_layout=True; it is a hint of the psum layout only.")
    if isinstance(expected_m_for_psum_layout, bool) or not isinstance(expected_m_for_psum_layout, int) \
            or expected_m_for_psum_layout < 0:
        raise ValueError(f"{fn}: expected_m_for_psum_layout must be an int >= 0 or None; "
                         f"got {expected_m_for_psum_layout!r}.")


def _check_int(fn: str, name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int; got {type(value).__name__} {value!r}.")
    if value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}; got {value}.")
    return value


# --------------------------------------------------------------------------------------------------
# DeepGEMM's current API
# --------------------------------------------------------------------------------------------------

def fp8_gemm_nt(a: Pair, b: Pair, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                disable_ue8m0_cast: bool = False) -> None:
    """DeepGEMM's ``fp8_gemm_nt``: ``d = c + a[0] @ b[0].T`` with the scales, written into ``d``.

    ``a = (a [M, K] float8_e4m3fn, sfa [M, ceil(K/128)] float32)``, ``b = (b [N, K], sfb)``, ``d``
    [M, N] bfloat16 or float32, ``c`` optional (bfloat16 or float32, [M, N]; it may be ``d`` itself:
    accumulation in place). The recipe picks the kernel:

    - ``None`` or ``(1, 128, 128)`` (``recipe_a=(1, 128)``, ``recipe_b=(128, 128)``): ``sfb``
      [ceil(N/128), ceil(K/128)], run by :func:`deep_tile.fp8_gemm`;
    - ``(1, 1, 128)`` (``recipe_a=recipe_b=(1, 128)``; the weight gradient): ``sfb`` [N, ceil(K/128)],
      one scale per row of ``b``, run by :func:`deep_tile.fp8_gemm_1d1d`. DeepGEMM takes only a
      float32 ``d`` with a ``c`` there; deep_tile also takes bf16 and no ``c``, and reads a ``c`` that
      is not ``d`` directly instead of copying it into ``d`` first (same result).

    Non-float32 scales and other recipes raise NotImplementedError; ``compiled_dims`` and
    ``disable_ue8m0_cast`` are accepted and ignored (see the module docstring).
    """
    fn = "fp8_gemm_nt"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    options = {"out": d} if c is None else {"out": d, "c": c}
    if _is_1d1d(recipe, recipe_a, recipe_b):
        deep_tile.fp8_gemm_1d1d(a_data, sfa, b_data, sfb, **options)
        return
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    deep_tile.fp8_gemm(a_data, sfa, b_data, sfb, **options)


def _k_grouped_checks(fn: str, a: Pair, b: Pair, d, ks_cpu, recipe, use_psum_layout) -> list:
    """DeepGEMM's arguments of a K-grouped GEMM checked as far as the layout change needs (the
    rest is deep_tile's :func:`deep_tile.gemm.checks.check_k_grouped_args`); the host list of sizes."""
    if recipe is None or tuple(recipe) != RECIPE_1D1D:
        raise NotImplementedError(f"{fn}: recipe={None if recipe is None else tuple(recipe)} is not supported; "
                                  f"deep_tile supports only recipe={RECIPE_1D1D} (1x128 scales for a and b).")
    if use_psum_layout:
        raise NotImplementedError(f"{fn}: use_psum_layout=True is not supported (DeepGEMM's SM90 kernel has no psum "
                                  "layout either); pass the sizes in ks_cpu and grouped_layout.")
    _check_scales(fn, **{"a[1]": a[1], "b[1]": b[1]})
    if not isinstance(d, torch.Tensor) or d.dim() != 3:
        raise ValueError(f"{fn}: d must be a 3-D tensor [num_groups, m, n]; got "
                         f"{tuple(d.shape) if isinstance(d, torch.Tensor) else type(d).__name__}.")
    if ks_cpu is None or isinstance(ks_cpu, torch.Tensor) or len(ks_cpu) != d.shape[0]:
        raise ValueError(f"{fn}: ks_cpu must be a host list of num_groups = d.shape[0] = {d.shape[0]} sizes (as "
                         f"DeepGEMM's SM90 kernel needs); got {ks_cpu!r}.")
    ks = [_check_int(fn, f"ks_cpu[{i}]", k, 0) for i, k in enumerate(ks_cpu)]
    if any(k % 128 for k in ks):
        raise ValueError(f"{fn}: every size in ks_cpu must be a multiple of 128 (DeepGEMM's layout: each group's "
                         f"scale rows are its own 128-token blocks); got {ks}. deep_tile.gemm.k_grouped."
                         "k_grouped_fp8_gemm_1d1d takes any sizes.")
    return ks


def _k_grouped_run(a, sfa, b, sfb, d, ks: list, grouped_layout, c, layout: str = "rows") -> None:
    """Run deep_tile's K-grouped GEMM on operands of ``layout`` (``"rows"``: [m, sum_k] / [n, sum_k];
    ``"blocks"``: DeepGEMM's flat per-group blocks as they are), the sizes from the device
    ``grouped_layout`` (or the host list when it is not an int32 tensor); an empty K leaves
    ``d = c`` (zeros without c), as DeepGEMM's early return."""
    from deep_tile.gemm import k_grouped

    if sum(ks) == 0:
        if c is None:
            d.zero_()
        elif c is not d:
            d.copy_(c)
        return
    sizes = grouped_layout if isinstance(grouped_layout, torch.Tensor) and grouped_layout.dtype == torch.int32 else ks
    k_grouped.k_grouped_fp8_gemm_1d1d(a, sfa, b, sfb, sizes, d, c=c, layout=layout)


def _check_blocks(flat: torch.Tensor, ks: list, rows: int, fn: str, name: str) -> torch.Tensor:
    """DeepGEMM's K-major K-grouped operand (group g's [rows, k_g] block row-major, the groups one
    after another in a flat buffer) checked and handed on as it is (1-D, no copy)."""
    if not isinstance(flat, torch.Tensor) or flat.numel() != rows * sum(ks) or not flat.is_contiguous():
        raise ValueError(f"{fn}: {name}[0] must be a contiguous buffer of sum(ks) * {rows} = {rows * sum(ks)} elements "
                         f"(each group's [{rows}, k_g] block K-major, one after another); got "
                         f"{tuple(flat.shape) if isinstance(flat, torch.Tensor) else type(flat).__name__}.")
    return flat.view(-1)


def k_grouped_fp8_gemm_nt_contiguous(a: Pair, b: Pair, d: torch.Tensor, ks_cpu, grouped_layout: torch.Tensor,
                                     c: Optional[torch.Tensor] = None, recipe: Sequence[int] = RECIPE_1D1D,
                                     compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """DeepGEMM's ``k_grouped_fp8_gemm_nt_contiguous`` (MoE weight gradients, SM90):
    ``d[g] = c[g] + a_g @ b_g.T`` over group g's ``ks_cpu[g]`` tokens, written into ``d``.

    DeepGEMM's layout: ``a = (a, sfa)`` with ``a`` a contiguous float8_e4m3fn buffer of
    ``sum(ks) * m`` elements holding each group's [m, k_g] block (tokens contiguous) one after
    another, ``sfa`` float32 [m, sum(ks) / 128] (DeepGEMM passes the transposed [sum(ks)/128, m]
    per-channel scales); ``b = (b, sfb)`` likewise with n; ``d`` float32 [G, m, n]; ``ks_cpu`` the
    host list of sizes (multiples of 128), ``grouped_layout`` the same as an int32 tensor on the
    GPU; ``c`` optional, may be ``d``; ``recipe`` (1, 1, 128).

    Runs :func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d` with ``layout="blocks"``: the kernel
    reads each group's blocks of ``a`` and ``b`` where they are, through one tensor map per group
    and operand (written on the device from ``grouped_layout``), so no operand is copied. Other
    recipes, ``use_psum_layout=True``, non-float32 scales: NotImplementedError; ``compiled_dims``:
    accepted, no effect.
    """
    fn = "k_grouped_fp8_gemm_nt_contiguous"
    ks = _k_grouped_checks(fn, a, b, d, ks_cpu, recipe, use_psum_layout)
    g, m, n = d.shape
    a_flat = _check_blocks(a[0], ks, m, fn, "a")
    b_flat = _check_blocks(b[0], ks, n, fn, "b")
    _k_grouped_run(a_flat, a[1], b_flat, b[1], d, ks, grouped_layout, c, layout="blocks")


def k_grouped_fp8_gemm_tn_contiguous(a: Pair, b: Pair, d: torch.Tensor, ks_cpu, grouped_layout: torch.Tensor,
                                     c: Optional[torch.Tensor] = None, recipe: Sequence[int] = RECIPE_1D1D,
                                     compiled_dims: str = "mn", use_psum_layout: bool = False) -> None:
    """DeepGEMM's ``k_grouped_fp8_gemm_tn_contiguous`` (an SM100 kernel in DeepGEMM; deep_tile runs
    it on SM90): ``d[g] = c[g] + a[K_g].T @ b[K_g]`` over group g's ``ks_cpu[g]`` tokens.

    DeepGEMM's layout: ``a = (a, sfa)`` with ``a`` float8_e4m3fn [sum(ks), m] (tokens are rows:
    ``dY`` as it is), ``sfa`` float32 [sum(ks) / 128, m] (per-channel scales of 128 tokens);
    ``b = (b, sfb)`` likewise with n (``X``); ``d``, ``ks_cpu``, ``grouped_layout``, ``c``,
    ``recipe`` as :func:`k_grouped_fp8_gemm_nt_contiguous`.

    Runs :func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d` on ``a.T`` and ``b.T`` made contiguous
    (FP8 WGMMA reads K-major operands only): both FP8 operands transposed into [m, sum_k] and
    [n, sum_k] by one launch of deep_tile's byte-transposition kernel
    (:func:`deep_tile.gemm.moe_layout.transpose_bytes_into`; ``DEEP_TILE_KGROUPED_TN_TRANSPOSE=torch``:
    torch's copy instead); the scales are read as their transposed views. Refusals as
    :func:`k_grouped_fp8_gemm_nt_contiguous`.
    """
    from deep_tile import env
    from deep_tile.gemm.moe_layout import transpose_bytes_into

    fn = "k_grouped_fp8_gemm_tn_contiguous"
    ks = _k_grouped_checks(fn, a, b, d, ks_cpu, recipe, use_psum_layout)
    use_kernel = env.kgrouped_tn_transpose() == "kernel"
    pairs, operands = [], []
    for name, (data, sf), rows in (("a", a, d.shape[1]), ("b", b, d.shape[2])):
        if not isinstance(data, torch.Tensor) or data.dim() != 2 or tuple(data.shape) != (sum(ks), rows):
            raise ValueError(f"{fn}: {name}[0] must have shape (sum(ks), {rows}) = ({sum(ks)}, {rows}); got "
                             f"{tuple(data.shape) if isinstance(data, torch.Tensor) else type(data).__name__}.")
        if not isinstance(sf, torch.Tensor) or sf.dim() != 2:
            raise ValueError(f"{fn}: {name}[1] must be 2-D [sum(ks) / 128, {rows}].")
        if use_kernel and data.is_cuda:
            rows_major = torch.empty((rows, sum(ks)), dtype=data.dtype, device=data.device)
            pairs.append((data.contiguous(), rows_major))
        else:
            rows_major = data.view(torch.uint8).t().contiguous().view(data.dtype)
        operands += [rows_major, sf.t()]
    if sum(ks) and pairs:
        transpose_bytes_into(pairs)
    _k_grouped_run(operands[0], operands[1], operands[2], operands[3], d, ks, grouped_layout, c)


def _is_1d1d(recipe, recipe_a, recipe_b) -> bool:
    """Whether DeepGEMM's arguments ask for the 1D1D recipe (1x128 scales for both operands)."""
    if recipe is not None:
        return tuple(recipe) == RECIPE_1D1D
    return (recipe_a is not None and tuple(recipe_a) == RECIPE_A
            and recipe_b is not None and tuple(recipe_b) == RECIPE_A)


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
    ``d`` [M, N] bfloat16, written in place. ``grouped_layout`` int32 on the GPU is either

    - (``use_psum_layout=False``) [M]: the group (expert) of each row, each group's rows one run
      starting at a multiple of :func:`get_mk_alignment_for_contiguous_layout`; -1 marks padding
      rows; run by :func:`deep_tile.m_grouped_fp8_gemm_contiguous`;
    - (``use_psum_layout=True``) [G]: entry g is the end of group g's rows, which start at the
      previous entry (0 for g = 0) rounded up to :func:`get_mk_alignment_for_contiguous_layout`;
      rows outside every group are padding; run by :func:`deep_tile.m_grouped_fp8_gemm_psum`,
      whose kernel reads the ends on the device (no host sync, graph-safe).

    Padding rows are left untouched in ``d``. Non-float32 scales, a float32 ``d`` and other
    recipes raise NotImplementedError; ``expected_m_for_psum_layout`` (psum only, as DeepGEMM
    asserts) is a tile-size hint deep_tile does not need; ``compiled_dims``, ``disable_ue8m0_cast``
    and ``ensure_zero_padding`` (an SM100 option) are accepted and ignored.
    """
    fn = "m_grouped_fp8_gemm_nt_contiguous"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    _check_output(fn, "d", d)
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    _check_psum(fn, use_psum_layout, expected_m_for_psum_layout)
    if use_psum_layout:
        deep_tile.m_grouped_fp8_gemm_psum(a_data, sfa, b_data, sfb, grouped_layout, _mk_alignment, out=d)
    else:
        deep_tile.m_grouped_fp8_gemm_contiguous(a_data, sfa, b_data, sfb, grouped_layout, out=d)


def m_grouped_fp8_gemm_nt_masked(a: Pair, b: Pair, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 recipe: Optional[Sequence[int]] = None, recipe_a: Optional[Sequence[int]] = None,
                                 recipe_b: Optional[Sequence[int]] = None, compiled_dims: str = "nk",
                                 disable_ue8m0_cast: bool = False, max_block_n: int = 256,
                                 enable_overlap: bool = False,
                                 signal: Optional[torch.Tensor] = None) -> Optional[Tuple[int, int]]:
    """DeepGEMM's ``m_grouped_fp8_gemm_nt_masked`` (MoE, masked layout), run by
    :func:`deep_tile.m_grouped_fp8_gemm_masked`.

    ``a = (a [G, max_m, K], sfa [G, max_m, ceil(K/128)])``, ``b = (b [G, N, K], sfb [G, ceil(N/128),
    ceil(K/128)])``, ``d`` [G, max_m, N] bfloat16, ``masked_m`` int32 [G] on the GPU (rows of group g
    to compute; rows from ``masked_m[g]`` on are left untouched), ``expected_m`` an int hint of the
    typical ``masked_m``. Non-float32 scales, a float32 ``d`` and other recipes raise
    NotImplementedError; ``compiled_dims`` and ``disable_ue8m0_cast`` are accepted and ignored.

    ``enable_overlap=True`` with ``signal`` (SGLang's single-batch overlap, the keywords of the
    DeepGEMM it ships): ``signal`` is an int32 CUDA tensor, zeroed by the caller, of at least
    ``G * ceil(max_m / 64)`` elements; the call returns ``(block_m, threshold)`` and, once the
    GEMM's rows of block ``j`` (rows ``j * block_m ..``) of group ``g`` are in ``d``,
    ``signal[g * ceil(max_m / block_m) + j]`` reaches ``threshold`` (blocks past ``masked_m[g]``
    stay 0), which the combine kernel waits for (acquire). On CUDA the GEMM kernel itself raises
    them, block by block as it writes them (:func:`deep_tile.m_grouped_fp8_gemm_masked_signal`:
    ``block_m`` 64 or 128, ``threshold = ceil(N / block_n)``, ``block_n <= max_block_n``); CPU
    tensors (recording stand-ins) get the flags by the CPU rule, ``(64, 1)``. ``max_block_n``:
    an int >= 16.
    Without ``enable_overlap`` the call is the plain masked GEMM and returns None.
    """
    fn = "m_grouped_fp8_gemm_nt_masked"
    (a_data, sfa), (b_data, sfb) = a, b
    _check_scales(fn, **{"a[1]": sfa, "b[1]": sfb})
    _check_output(fn, "d", d)
    _check_recipe(fn, recipe, recipe_a, recipe_b)
    if not enable_overlap:
        if signal is not None:
            raise ValueError(f"{fn}: signal is given without enable_overlap=True; it is used only with it.")
        deep_tile.m_grouped_fp8_gemm_masked(a_data, sfa, b_data, sfb, masked_m, expected_m, out=d)
        return None
    _check_int(fn, "max_block_n", max_block_n, 16)
    _check_signal(fn, signal, d)
    if isinstance(d, torch.Tensor) and d.is_cuda:
        _, block_m, threshold = deep_tile.m_grouped_fp8_gemm_masked_signal(
            a_data, sfa, b_data, sfb, masked_m, expected_m, signal, out=d, max_block_n=max_block_n)
        return block_m, threshold
    # CPU tensors (the recording stand-ins of the tests and tools/check_engines.py): the GEMM,
    # then the flags by the CPU rule.
    deep_tile.m_grouped_fp8_gemm_masked(a_data, sfa, b_data, sfb, masked_m, expected_m, out=d)
    return _raise_signals(signal, masked_m, d.shape[1], SIGNAL_BLOCK_M, 1)


def _check_signal(fn: str, signal, d: torch.Tensor) -> None:
    if not isinstance(signal, torch.Tensor):
        raise TypeError(f"{fn}: enable_overlap=True needs signal, an int32 tensor; got {type(signal).__name__}.")
    if signal.dtype != torch.int32 or signal.dim() != 1 or not signal.is_contiguous():
        raise ValueError(f"{fn}: signal must be a contiguous 1-D torch.int32 tensor; got {signal.dtype} "
                         f"shape {tuple(signal.shape)}.")
    if isinstance(d, torch.Tensor) and d.dim() == 3:
        need = d.shape[0] * (-(-d.shape[1] // SIGNAL_BLOCK_M))
        if signal.numel() < need:
            raise ValueError(f"{fn}: signal has {signal.numel()} elements; G * ceil(max_m / {SIGNAL_BLOCK_M}) = "
                             f"{need} are needed.")
        if signal.device != d.device:
            raise ValueError(f"{fn}: signal is on {signal.device}, d on {d.device}; they must share the device.")


def _raise_signals(signal: torch.Tensor, masked_m: torch.Tensor, max_m: int, block_m: int,
                   threshold: int) -> Tuple[int, int]:
    """Raise the flags of the real ``block_m``-row blocks of every group to ``threshold``
    (:func:`deep_tile.gemm.moe_layout.raise_signals`: one small kernel after the GEMM on the current
    stream, no host sync, graph-safe) and return ``(block_m, threshold)``."""
    from deep_tile.gemm.moe_layout import raise_signals

    raise_signals(signal, masked_m, max_m, block_m, threshold)
    return block_m, threshold


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
"""DeepGEMM's older alias of :func:`m_grouped_fp8_gemm_nt_masked` (it still exports it)."""


def get_mk_alignment_for_contiguous_layout() -> int:
    """DeepGEMM's ``get_mk_alignment_for_contiguous_layout``: the row alignment of each group in the
    contiguous layouts, 128 (:func:`deep_tile.get_m_alignment_for_contiguous_layout`) unless
    :func:`set_mk_alignment_for_contiguous_layout` set another multiple of 128."""
    return _mk_alignment


def set_mk_alignment_for_contiguous_layout(new_value: int) -> None:
    """DeepGEMM's ``set_mk_alignment_for_contiguous_layout``: the alignment later contiguous GEMMs
    assume (the psum layout's group starts; for the ``m_indices`` layout, where each group's run
    starts). DeepGEMM takes it as its tile height BLOCK_M; deep_tile supports the multiples of 128
    (its tiles read a group's rows from 128-row boundaries): 128, 256, ... Any other int raises
    NotImplementedError (64 and smaller: use 128), a non-int TypeError, and the setting is unchanged."""
    global _mk_alignment
    fn = "set_mk_alignment_for_contiguous_layout"
    _check_int(fn, "new_value", new_value, 1)
    if new_value % CONTIGUOUS_ALIGNMENT:
        raise NotImplementedError(
            f"{fn}: alignment {new_value} is not supported; deep_tile supports the multiples of "
            f"{CONTIGUOUS_ALIGNMENT} (use {SM90_MK_ALIGNMENT}, what "
            "get_theoretical_mk_alignment_for_contiguous_layout returns on SM90).")
    _mk_alignment = new_value


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: Optional[int] = None,
                                                       num_groups: Optional[int] = None) -> int:
    """DeepGEMM's ``get_theoretical_mk_alignment_for_contiguous_layout``: the alignment it would pick
    for ``expected_m`` rows, which on SM90 is 128 whatever the rows (DeepGEMM shrinks it on SM100
    only). Both calling forms engines use are accepted: ``(per_group_m)`` and ``(expected_m,
    num_groups)``, positional or by keyword; the arguments are checked (ints >= 0, num_groups >= 1)."""
    fn = "get_theoretical_mk_alignment_for_contiguous_layout"
    if expected_m is not None:
        _check_int(fn, "expected_m", expected_m, 0)
    if num_groups is not None:
        _check_int(fn, "num_groups", num_groups, 1)
    return SM90_MK_ALIGNMENT


get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
"""DeepGEMM's alias of :func:`get_mk_alignment_for_contiguous_layout` (for its K-grouped GEMMs)."""


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """DeepGEMM's ``get_tma_aligned_size``: ``x`` elements of ``element_size`` bytes rounded up to a
    16-byte multiple (the TMA's stride alignment), in elements."""
    fn = "get_tma_aligned_size"
    _check_int(fn, "x", x, 0)
    _check_int(fn, "element_size", element_size, 1)
    if 16 % element_size:
        raise ValueError(f"{fn}: element_size must divide 16; got {element_size}.")
    step = 16 // element_size
    return -(-x // step) * step


def get_compile_mode() -> int:
    """The compile mode of SGLang's DeepGEMM (``sgl-deep-gemm``): 0 normal, 1 while its warm-up
    compiles kernels. Set by :func:`set_compile_mode`; 0 at start."""
    return _compile_mode


def set_compile_mode(mode: int) -> None:
    """SGLang's DeepGEMM ``set_compile_mode``: 0 or 1, the warm-up sets 1 around its calls and restores
    the old mode. deep_tile runs every call in either mode (it compiles a kernel on first use, so
    a warm-up call compiles it; the warm-up's buffers are allocated and its masked counts zero).
    Other values raise ValueError."""
    global _compile_mode
    if isinstance(mode, bool) or mode not in (0, 1):
        raise ValueError(f"set_compile_mode: mode must be 0 or 1; got {mode!r}.")
    _compile_mode = mode


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
    """DeepGEMM's older name of :func:`get_mk_alignment_for_contiguous_layout` (128 unless set)."""
    return get_mk_alignment_for_contiguous_layout()


def get_col_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """DeepGEMM 2025's ``get_col_major_tma_aligned_tensor``: the same as :func:`get_mn_major_tma_aligned_tensor`,
    by :func:`deep_tile.get_tma_aligned_a_scale`."""
    return deep_tile.get_tma_aligned_a_scale(x)


# --------------------------------------------------------------------------------------------------
# The lightning indexer (DeepSeek-V3.2)
# --------------------------------------------------------------------------------------------------

def fp8_mqa_logits(q: torch.Tensor, kv: Pair, weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor,
                   cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True, max_seqlen_k: int = 0) -> torch.Tensor:
    """DeepGEMM's ``fp8_mqa_logits``: float32 logits ``[seq_len, seq_len_kv]`` (``[seq_len,
    max_seqlen_k]`` compressed) of FP8 ``q [seq_len, H, 128]`` (H 32 or 64) against ``kv = (FP8
    [seq_len_kv, 128], float32 scales)``, run by :func:`deep_tile.fp8_mqa_logits` (same arguments;
    it raises ValueError / TypeError on what it does not take, head dims other than 128 included)."""
    return deep_tile.fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=clean_logits,
                                    max_seqlen_k=max_seqlen_k)


def fp8_q_of_pair(fn: str, q, logits_dtype: torch.dtype) -> torch.Tensor:
    """The FP8 ``q`` of DeepGEMM's ``fp8_fp4_*`` pair ``(q, None)``: TypeError for anything but a pair,
    NotImplementedError for FP4 ``q`` (a scale tensor in ``q[1]``, SM100-only in DeepGEMM) and for a
    ``logits_dtype`` other than float32."""
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError(f"{fn}: q must be a pair (q, q_scale or None), as in DeepGEMM; got {type(q).__name__}.")
    if q[1] is not None:
        raise NotImplementedError(f"{fn}: FP4 q (q[1] is a scale tensor) is not supported; deep_tile takes FP8 q "
                                  "with q[1] = None.")
    if logits_dtype != torch.float32:
        raise NotImplementedError(f"{fn}: logits_dtype={logits_dtype} is not supported; "
                                  "deep_tile writes float32 logits.")
    return q[0]


def fp8_fp4_mqa_logits(q, kv: Pair, weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor,
                       cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True, max_seqlen_k: int = 0,
                       logits_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """DeepGEMM's ``fp8_fp4_mqa_logits`` with ``q = (q_fp8, None)``: :func:`fp8_mqa_logits`. FP4 ``q``
    (a scale tensor in ``q[1]``, SM100-only in DeepGEMM) and a ``logits_dtype`` other than float32
    raise NotImplementedError.

    An int (not a bool) as the sixth argument is read as DeepGEMM's newer binding reads it, the one
    vLLM vendors and calls: ``(..., max_seqlen_k, schedule_meta=None)``, compressed logits of
    ``max_seqlen_k`` columns, the tail not cleaned; ``schedule_meta`` must then be None."""
    fn = "fp8_fp4_mqa_logits"
    if isinstance(clean_logits, int) and not isinstance(clean_logits, bool):
        if not (max_seqlen_k is None or (type(max_seqlen_k) is int and max_seqlen_k == 0)):  # schedule_meta there
            raise NotImplementedError(f"{fn}: with max_seqlen_k as the sixth argument (DeepGEMM's newer binding) "
                                      "the seventh, schedule_meta, must be None.")
        clean_logits, max_seqlen_k = False, clean_logits
    return fp8_mqa_logits(fp8_q_of_pair(fn, q, logits_dtype), kv, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                          clean_logits, max_seqlen_k)
