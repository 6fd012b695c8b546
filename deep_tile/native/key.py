"""The build key of the native extension and where its build lives in the cache.

The key is the sha256 of everything the built library depends on that can change under it:
the C++ sources (``csrc/``), the build flags, torch's version, git revision and C++ ABI flag,
the Python ABI, and the identity of the compiler and of cuda.h (resolved path, size, mtime; no
compiler is run). On disk, next to the kernels in ``DEEP_TILE_CACHE_DIR``::

    <cache>/native/<key>/deep_tile_native_<key[:16]>.so
                        /meta.json        (key inputs, compiler version, build seconds, and the
                                           library's size and sha256, checked before every load)
    <cache>/native/<key>.lock             (held by the one process building this key; contents unused)
    <cache>/native/<key>.log              (the last build's output)
    <cache>/native/<key>.failed           (a compile error: not retried for this key)

A damaged entry (see :func:`deep_tile.native.build.entry_problem`) is discarded and rebuilt; a
directory or unreadable file where the lock, log or marker belongs is removed when in the way.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from deep_tile import env

__all__ = ["FORMAT_VERSION", "SOURCE_DIR", "SOURCE_SUFFIXES", "CFLAGS", "LDFLAGS", "source_files", "source_digest",
           "key_inputs", "build_key", "module_name", "native_dir", "entry_dir", "library_path"]

FORMAT_VERSION = 1
"""Bumped when the layout on disk or the key recipe changes."""
SOURCE_DIR = Path(__file__).resolve().parent / "csrc"
"""The C++ sources of the extension."""
CFLAGS = ("-O3", "-fvisibility=hidden")
"""Extra compiler flags (torch.utils.cpp_extension adds its own, the C++ standard included)."""
LDFLAGS = ("-ldl",)
"""Extra linker flags: libdl for dlopen of libcuda.so.1 (no libcuda at link time)."""

SOURCE_SUFFIXES = (".cpp", ".h")
"""What a source of the extension is: every such file of :data:`SOURCE_DIR` is hashed, and the
``.cpp`` ones are compiled (the wheel ships the same: pyproject.toml's package data)."""

_source_digest: str | None = None


def source_files() -> list[Path]:
    """The extension's sources: the files of :data:`SOURCE_DIR` with a :data:`SOURCE_SUFFIXES`
    suffix, sorted by name (the build compiles the ``.cpp`` ones of this list)."""
    return sorted(path for path in SOURCE_DIR.iterdir() if path.suffix in SOURCE_SUFFIXES)


def source_digest() -> str:
    """sha256 over the names and contents of :func:`source_files` (once per process)."""
    global _source_digest
    if _source_digest is None:
        h = hashlib.sha256()
        for path in source_files():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        _source_digest = h.hexdigest()
    return _source_digest


def _identity(path: str | None) -> list:
    """A file's resolved path, size and mtime: changes when the file is replaced or upgraded."""
    if not path:
        return [None]
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return [real]
    return [real, st.st_size, st.st_mtime_ns]


def key_inputs(toolchain) -> dict:
    """What the key hashes, for ``toolchain`` (a :class:`deep_tile.native.toolchain.Toolchain`)."""
    import torch

    cuda_h = os.path.join(toolchain.cuda_include, "cuda.h") if toolchain.cuda_include else None
    return {
        "format": FORMAT_VERSION,
        "sources": source_digest(),
        "cflags": list(CFLAGS),
        "ldflags": list(LDFLAGS),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", ""),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "python": sys.implementation.cache_tag,
        "compiler": [env.cxx()] + _identity(toolchain.compiler),
        "cuda_h": _identity(cuda_h),
    }


def build_key(toolchain) -> tuple[str, dict]:
    """The key (hex sha256) of a build with ``toolchain``, and its inputs."""
    inputs = key_inputs(toolchain)
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest(), inputs


def module_name(key: str) -> str:
    """The extension's module name (``TORCH_EXTENSION_NAME``): unique per key."""
    return f"deep_tile_native_{key[:16]}"


def native_dir() -> Path:
    """``<DEEP_TILE_CACHE_DIR>/native``."""
    return env.cache_dir() / "native"


def entry_dir(key: str) -> Path:
    """The published build of ``key``."""
    return native_dir() / key


def library_path(key: str) -> Path:
    """The shared library of the published build of ``key``."""
    return entry_dir(key) / f"{module_name(key)}.so"
