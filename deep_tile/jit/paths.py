"""Where the device sources live: ``include/`` (headers) and ``csrc/`` (kernel entry files).

Two layouts are supported, tried in this order:

1. a checkout (or editable install): the repository root is the parent of the ``deep_tile``
   package directory and holds ``include/deep_tile/`` and ``csrc/``;
2. an installed wheel: ``setup.py`` copied both trees to ``deep_tile/_data/include`` and
   ``deep_tile/_data/csrc``.

The checkout wins so that a stale ``deep_tile/_data`` left in a checkout never shadows live edits.

Tests point the JIT at other trees by monkeypatching :func:`include_dir` / :func:`csrc_dir` on
this module (the compiler and the cache always call them through the module).
"""
from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["data_root", "include_dir", "csrc_dir", "entry_path"]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../deep_tile


def _candidates() -> list[tuple[str, Path]]:
    return [("checkout", _PACKAGE_DIR.parent), ("installed wheel", _PACKAGE_DIR / "_data")]


@functools.lru_cache(maxsize=None)
def data_root() -> Path:
    """The directory holding ``include/deep_tile/`` and ``csrc/`` (checkout root or ``_data``).

    Raises:
        FileNotFoundError: neither layout is present (a broken install).
    """
    for _, root in _candidates():
        if (root / "include" / "deep_tile").is_dir():
            return root
    tried = "; ".join(f"{what}: {root / 'include' / 'deep_tile'}" for what, root in _candidates())
    raise FileNotFoundError(
        "deep_tile.jit.paths: cannot find the deep_tile CUDA headers (include/deep_tile/). "
        f"Tried {tried}. Reinstall deep_tile (a wheel must be built by its setup.py, which "
        "copies include/ and csrc/ into deep_tile/_data/) or run from a full checkout.")


def include_dir() -> Path:
    """The include root passed to the compiler as ``-I`` (it contains ``deep_tile/``)."""
    return data_root() / "include"


def csrc_dir() -> Path:
    """The ``csrc/`` directory (kernel entry files are under ``csrc/entry/``)."""
    return data_root() / "csrc"


def entry_path(name: str) -> Path:
    """The kernel entry file ``csrc/entry/<name>.cu``.

    Args:
        name: the entry's base name, e.g. ``"fp8_gemm_sm90"`` (no directory, no ``.cu``).

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: ``name`` is empty or contains a path separator.
        FileNotFoundError: the file does not exist (the message lists the available entries).
    """
    if not isinstance(name, str):
        raise TypeError(f"entry_path: name must be a str; got {type(name).__name__} {name!r}")
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"entry_path: name must be a bare entry name like 'fp8_gemm_sm90'; got {name!r}")
    entry_dir = csrc_dir() / "entry"
    path = entry_dir / f"{name}.cu"
    if not path.is_file():
        available = sorted(p.stem for p in entry_dir.glob("*.cu")) if entry_dir.is_dir() else []
        raise FileNotFoundError(
            f"entry_path: no kernel entry file {path} for name={name!r}; available: {available}")
    return path
