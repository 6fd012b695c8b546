"""``deep_gemm`` as deep_tile: importing this package makes ``deep_gemm`` (and ``deep_gemm.utils``,
``deep_gemm.utils.layout``, ``deep_gemm.utils.math``) the modules of :mod:`deep_tile.compat.deepgemm`,
so an engine that does ``import deep_gemm`` (vLLM, SGLang) runs its DeepGEMM paths on deep_tile
without an edit.

This is a separate distribution (``pip install ./compat/deep_gemm_alias`` in the deep_tile
repository), never part of deep_tile itself: it owns the name ``deep_gemm``, so install it only
where DeepGEMM is not installed (pip would overwrite one package's files with the other's).

Turn it off without uninstalling: ``DEEP_TILE_DEEPGEMM_ALIAS=0`` makes ``import deep_gemm`` raise
ImportError, which both engines take as "DeepGEMM is not installed" (vLLM then uses the copy it
vendors, SGLang disables its DeepGEMM paths). ``pip uninstall deep-tile-deepgemm-alias`` removes it.
docs/deepgemm-compat.md in the deep_tile repository has the details.
"""
import os as _os

if _os.environ.get("DEEP_TILE_DEEPGEMM_ALIAS", "1").strip().lower() in ("0", "false", "off", "no"):
    raise ImportError("deep_gemm: the deep_tile alias is turned off (DEEP_TILE_DEEPGEMM_ALIAS=0); "
                      "unset it to run deep_gemm calls on deep_tile.compat.deepgemm")

import deep_tile.compat.deepgemm as _compat  # noqa: E402

_compat.install_alias(force=True)  # sys.modules["deep_gemm"] (this import's result) and its submodules
