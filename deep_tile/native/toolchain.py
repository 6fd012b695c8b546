"""What building the native host path needs, and where it is: a C++ compiler, ninja and cuda.h.

Only looks (``shutil.which``, ``os.stat``): runs no compiler, imports no torch, so it is cheap
enough for the first call of a process. :func:`find` says what is missing in words that tell
what to install; :func:`deep_tile.native.loader` prints that once and uses the Python host path.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from deep_tile import env

__all__ = ["Toolchain", "find", "cuda_header_candidates", "ninja_dirs"]

INSTALL_HINTS = {
    "compiler": "a C++17 compiler (`apt-get install g++`, or set CXX)",
    "ninja": "ninja (`pip install ninja`)",
    "cuda.h": "the CUDA headers (a CUDA toolkit, found through CUDA_HOME, nvcc or /usr/local/cuda; "
              "or `pip install nvidia-cuda-runtime`)",
}
"""What to install for each missing piece (the words of the fallback warning)."""


class Toolchain:
    """The tools found for a build of the native extension (a plain class: cheap to import).

    Attributes:
        compiler: absolute path of the C++ compiler (``CXX``, default ``c++``), or None.
        ninja: absolute path of ninja, or None.
        cuda_include: the directory holding ``cuda.h``, or None.
        extra_path: directories to put on ``PATH`` for the build (so torch finds ninja).
    """

    __slots__ = ("compiler", "ninja", "cuda_include", "extra_path")

    def __init__(self, compiler: str | None, ninja: str | None, cuda_include: str | None, extra_path: tuple = ()):
        self.compiler, self.ninja, self.cuda_include, self.extra_path = compiler, ninja, cuda_include, tuple(extra_path)

    def __repr__(self) -> str:
        return (f"Toolchain(compiler={self.compiler!r}, ninja={self.ninja!r}, cuda_include={self.cuda_include!r}, "
                f"extra_path={self.extra_path!r})")

    @property
    def missing(self) -> list[str]:
        """The keys of :data:`INSTALL_HINTS` that were not found (empty: a build can start)."""
        return [name for name, found in (("compiler", self.compiler), ("ninja", self.ninja),
                                         ("cuda.h", self.cuda_include)) if not found]


def _nvidia_wheel_dirs() -> list[Path]:
    """The directories of the ``nvidia`` namespace package (pip's CUDA wheels), without importing it."""
    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def cuda_header_candidates() -> list[Path]:
    """Where cuda.h is looked for, in order: ``$CUDA_HOME/include``, next to nvcc, /usr/local/cuda,
    pip's nvidia wheels, triton's bundled copy."""
    dirs = []
    if env.cuda_home():
        dirs.append(env.cuda_home() / "include")
    nvcc = env.nvcc_path()
    if nvcc:
        root = Path(nvcc).resolve().parent.parent
        dirs += [root / "include", root / "targets" / "x86_64-linux" / "include"]
    dirs.append(Path("/usr/local/cuda/include"))
    for base in _nvidia_wheel_dirs():
        dirs += sorted(base.glob("*/include"))
    triton = importlib.util.find_spec("triton")
    if triton and triton.submodule_search_locations:
        for base in triton.submodule_search_locations:
            dirs.append(Path(base) / "backends" / "nvidia" / "include")
    return dirs


def ninja_dirs() -> list[str]:
    """Directories that may hold pip's ``ninja`` when it is not on PATH (the interpreter's bin)."""
    return [os.path.dirname(sys.executable)]


def find() -> Toolchain:
    """Look for the compiler, ninja and cuda.h now."""
    compiler = shutil.which(env.cxx())
    extra = [d for d in ninja_dirs() if os.path.isfile(os.path.join(d, "ninja"))]
    ninja = shutil.which("ninja") or (os.path.join(extra[0], "ninja") if extra else None)
    include = next((str(d) for d in cuda_header_candidates() if (d / "cuda.h").is_file()), None)
    return Toolchain(compiler, ninja, include, tuple(extra))
