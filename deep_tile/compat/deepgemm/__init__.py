"""DeepGEMM's FP8 GEMM API over deep_tile: a stand-in for the ``deep_gemm`` package on SM90.

::

    import deep_tile.compat.deepgemm as deep_gemm

    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, expert_ends, use_psum_layout=True)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_tensor, c=d, recipe=(1, 1, 128))
    logits = deep_gemm.fp8_mqa_logits(q, (kv, kv_scale), weights, ks, ke)

The names, parameter names, order and defaults are DeepGEMM's (its current API, the keywords of
the SGLang single-batch-overlap masked GEMM, and the 2025 API, ``gemm_fp8_fp8_bf16_nt`` and
friends); every GEMM writes its result into ``d`` (``out``) and returns None, as DeepGEMM does
(the masked GEMM with ``enable_overlap=True`` returns ``(block_m, threshold)``). Each function
forwards to public deep_tile functions, looked up on the package at call time; deep_tile checks
the tensors. The package has DeepGEMM's module layout: :mod:`.utils`, :mod:`.utils.layout` and
:mod:`.utils.math` hold the helpers engines import from there, and :func:`install_alias` makes
``import deep_gemm`` (and its submodules) resolve to these modules, for an engine that imports
``deep_gemm`` itself (docs/deepgemm-compat.md says how to switch an engine and back).

Supported: DeepGEMM's SM90 FP8 format -- float8_e4m3fn operands, float32 scales, 1x128 for ``a``
and 128x128 for ``b`` (recipe ``(1, 128, 128)``, the default), NT layout, bfloat16 output; and for
the dense ``fp8_gemm_nt`` also a float32 ``d``, ``c`` (``d = c + a @ b.T``, ``c`` may be ``d``) and
the weight gradient's recipe ``(1, 1, 128)`` (1x128 scales for both operands). The
scale of ``a`` may come in any layout: deep_tile reads the TMA-aligned column-major one
(:func:`get_mn_major_tma_aligned_tensor`) without a copy and copies any other once per call.

Not supported (raises NotImplementedError naming the argument, before anything is launched):
packed UE8M0 or any other non-float32 scales; for the grouped GEMMs ``c``, a float32 ``d`` and
recipes other than ``(1, 128, 128)``; a contiguous-layout alignment that is not a multiple of 128. Accepted and
ignored, because they only steer DeepGEMM's compilation or its SM100 kernels: ``compiled_dims``,
``disable_ue8m0_cast`` (deep_tile always uses the float32 scales as given, which is what DeepGEMM
does on SM90 whatever this flag says), ``ensure_zero_padding`` and ``expected_m_for_psum_layout``
(a tile-size hint). The K-grouped weight-gradient GEMMs (``k_grouped_fp8_gemm_nt_contiguous``, and
``k_grouped_fp8_gemm_tn_contiguous``, SM100-only in DeepGEMM) run deep_tile's K-grouped kernel
after one layout copy of each FP8 operand. The lightning indexer's ``fp8_mqa_logits`` (and
``fp8_fp4_mqa_logits`` with FP8 ``q``) returns its logits as DeepGEMM does, and so do the paged
(decode) ones, ``get_paged_mqa_logits_metadata`` and ``fp8_paged_mqa_logits`` (its schedule
tensor is deep_tile's format: pass it on unread); the hyper-connection ``tf32_hc_prenorm_gemm``
and the SM90 expressions of ``einsum`` / ``fp8_einsum`` write their outputs as DeepGEMM does. The
BF16 GEMMs (``bf16_gemm_{nt,nn,tn,tt}``, ``m_grouped_bf16_gemm_{nt,nn}_contiguous``,
``m_grouped_bf16_gemm_nt_masked``, ``k_grouped_bf16_gemm_tn_contiguous``) run deep_tile's BF16
kernel (:mod:`._bf16`). DeepGEMM's other kernels (FP8 NN/TN/TT layouts, FP4, other attention,
mega MoE) are not provided here; an engine finds them missing (``getattr`` gives None)
and uses its own fallback. docs/deepgemm-compat.md lists every name and its status.
"""
from deep_tile.compat.deepgemm._api import *  # noqa: F401,F403
from deep_tile.compat.deepgemm._api import (  # noqa: F401
    RECIPE, RECIPE_A, RECIPE_B, SIGNAL_BLOCK_M, SM90_MK_ALIGNMENT,
)
from deep_tile.compat.deepgemm._api import __all__ as _api_all
from deep_tile.compat.deepgemm._paged_attention import *  # noqa: F401,F403,E402
from deep_tile.compat.deepgemm._hc_einsum import *  # noqa: F401,F403
from deep_tile.compat.deepgemm._bf16 import *  # noqa: F401,F403
from deep_tile.compat.deepgemm._bf16 import __all__ as _bf16_all
from deep_tile.compat.deepgemm import utils  # noqa: E402,F401  (DeepGEMM's deep_gemm.utils)
# DeepGEMM's package also hands its utils' helpers on at the top level (vLLM looks them up there)
from deep_tile.compat.deepgemm.utils import (  # noqa: E402,F401
    align, ceil_div, get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_packed_ue8m0_tensor, pack_ue8m0_to_int, per_block_cast_to_fp8, per_token_cast_to_fp8,
)

__all__ = [*_api_all, *_bf16_all, "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits",
           "fp8_fp4_paged_mqa_logits", "tf32_hc_prenorm_gemm", "einsum", "fp8_einsum", "install_alias"]

# --------------------------------------------------------------------------------------------------
# The module layout of the deep_gemm package, and the alias
# --------------------------------------------------------------------------------------------------

ALIAS_SUBMODULES = ("utils", "utils.layout", "utils.math")
"""The submodules of ``deep_gemm`` this package provides (DeepGEMM's paths, below the package)."""


def install_alias(force: bool = False) -> None:
    """Make ``import deep_gemm`` and ``import deep_gemm.utils[.layout|.math]`` give these modules
    (the same objects: one state), by entries in ``sys.modules``.

    Refuses (RuntimeError) when another ``deep_gemm`` is importable or already imported, unless
    ``force``: the alias never hides a real DeepGEMM silently. Calling it again is harmless. The
    ``deep_gemm`` alias distribution (compat/deep_gemm_alias/ in the deep_tile repository) calls it
    when an engine imports ``deep_gemm``; docs/deepgemm-compat.md.
    """
    import importlib
    import importlib.util
    import sys

    this = sys.modules[__name__]
    present = sys.modules.get("deep_gemm")
    if present is not None and present is not this and not force:
        raise RuntimeError(f"install_alias: a deep_gemm module is already imported ({present!r}); "
                           "pass force=True to replace it.")
    if present is None and not force:
        try:
            spec = importlib.util.find_spec("deep_gemm")
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            raise RuntimeError(f"install_alias: a deep_gemm package is installed ({spec.origin}); deep_tile will not "
                               "hide it. Uninstall it, or pass force=True.")
    sys.modules["deep_gemm"] = this
    for name in ALIAS_SUBMODULES:
        sys.modules["deep_gemm." + name] = importlib.import_module(__name__ + "." + name)
