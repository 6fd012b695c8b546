"""The CUDA stack deep_tile runs on: the CUDA 12 or CUDA 13 builds of cuda-bindings and NVRTC.

deep_tile's base install pulls neither major: a CUDA 12 driver (R535-R575) cannot run the CUDA 13
packages, and one environment cannot hold both builds of ``cuda-bindings``. The user picks one
with an extra, :data:`EXTRAS`; this module is the one place that names them, says how to install
one (:data:`INSTALL_HINT`), and tells which one is installed (:func:`bindings_major`). Needs
neither torch nor CUDA to import.
"""
from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["EXTRAS", "INSTALL_HINT", "MissingCudaStackError", "bindings_version", "bindings_major", "missing_bindings",
           "driver_mismatch"]

EXTRAS = {13: "cu13", 12: "cu12"}
"""CUDA major version -> the pip extra of deep_tile that installs its cuda-bindings and NVRTC."""

INSTALL_HINT = ('pip install "deep_tile[cu13]" (CUDA 13, NVIDIA driver R580 or newer) or '
                'pip install "deep_tile[cu12]" (CUDA 12, driver R535 or newer)')
"""How to install a CUDA stack, in the words of every error that lacks one."""


@functools.lru_cache(maxsize=None)
def bindings_version() -> str | None:
    """The installed ``cuda-bindings`` distribution's version, or None when it is not installed."""
    try:
        return metadata.version("cuda-bindings")
    except metadata.PackageNotFoundError:
        return None


def bindings_major() -> int | None:
    """The CUDA major version of the installed ``cuda-bindings`` (12 or 13), or None."""
    version = bindings_version()
    try:
        return int(version.split(".")[0]) if version else None
    except ValueError:
        return None


class MissingCudaStackError(ImportError):
    """``cuda.bindings`` does not import: no CUDA stack is installed. The message says how to
    install one (:data:`INSTALL_HINT`); the command line prints it as its one line of error."""


def missing_bindings(error: BaseException) -> MissingCudaStackError:
    """The ImportError to raise when ``cuda.bindings`` does not import (``error`` is the cause)."""
    return MissingCudaStackError(f"deep_tile needs cuda-bindings and NVRTC to compile and launch kernels, and "
                       f"`import cuda.bindings` failed ({error}). Install one CUDA stack: {INSTALL_HINT}.")


def driver_mismatch(driver_version: int) -> str | None:
    """Why the installed cuda-bindings cannot run on a driver of CUDA version ``driver_version``
    (``cuDriverGetVersion``'s value, e.g. 12080 for 12.8), or None when it can."""
    major = bindings_major()
    driver_major = driver_version // 1000
    if major is None or driver_major >= major:
        return None
    other = EXTRAS.get(driver_major)
    fix = f'pip install "deep_tile[{other}]"' if other else INSTALL_HINT
    return (f"cuda-bindings {bindings_version()} (CUDA {major}) is installed, but the NVIDIA driver supports "
            f"CUDA {driver_major}.{driver_version % 1000 // 10} only; install the matching stack: {fix}, "
            "or upgrade the driver")
