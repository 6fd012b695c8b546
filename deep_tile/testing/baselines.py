"""The DeepGEMM the benchmarks time deep_tile beside (a baseline, never a dependency: see
../shared/baselines)."""
from __future__ import annotations

__all__ = ["load_deepgemm"]


def load_deepgemm(name: str, without: str = "timing deep_tile alone"):
    """DeepGEMM's module when ``import deep_gemm`` finds DeepGEMM itself with ``name``; None (saying
    why, then ``without``) when it is missing, broken, deep_tile's alias or lacks ``name``."""
    try:
        import deep_gemm
    except Exception as exc:  # noqa: BLE001 (a broken build is as good as none here)
        print(f"# deep_gemm not importable ({type(exc).__name__}: {exc}); {without}")
        return None
    if hasattr(deep_gemm, "install_alias") or not hasattr(deep_gemm, name):
        print(f"# deep_gemm is deep_tile's alias or lacks {name}; {without}")
        return None
    return deep_gemm
