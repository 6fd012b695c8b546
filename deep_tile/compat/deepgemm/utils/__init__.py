"""DeepGEMM's ``deep_gemm.utils``: its layout and math helpers and the contiguous-layout alignment
functions, as DeepGEMM's package exports them there (SGLang imports ``align`` and
``get_tma_aligned_size`` from here). Each name is the one of :mod:`deep_tile.compat.deepgemm`
(the same function object), so the alias and the package share one state."""
from deep_tile.compat.deepgemm._api import (  # noqa: F401
    get_k_alignment_for_contiguous_layout, get_m_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout, get_theoretical_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size, set_mk_alignment_for_contiguous_layout,
)
from deep_tile.compat.deepgemm.utils import layout, math  # noqa: F401
from deep_tile.compat.deepgemm.utils.layout import *  # noqa: F401,F403
from deep_tile.compat.deepgemm.utils.math import *  # noqa: F401,F403

__all__ = ["layout", "math", "get_tma_aligned_size", "set_mk_alignment_for_contiguous_layout",
           "get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
           "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
           *layout.__all__, *math.__all__]
