"""One loaded kernel per (entry file, defines, symbol): compile or fetch from the cache, then load.

The first call for a key compiles (or reads the disk cache) and loads the cubin; later calls
are a dictionary lookup.
"""
from __future__ import annotations

import threading
from typing import Mapping

from deep_tile import env, phases
from deep_tile.jit.cache import get_cubin
from deep_tile.jit.runtime import Kernel, load_kernel

_loaded: dict = {}
_lock = threading.Lock()


def build_defines(defines: Mapping[str, int]) -> dict:
    """The defines a kernel is actually built with: ``defines`` plus the environment's additions.

    With ``DEEP_TILE_WATCHDOG`` set, ``DT_WATCHDOG=1`` is added (waits trap instead of hanging)
    unless ``defines`` chose DT_WATCHDOG itself. ``python -m deep_tile warmup`` uses this too, so
    it fills the cache with exactly the builds :func:`get_kernel` looks up.
    """
    if "DT_WATCHDOG" not in defines and env.watchdog():
        return {**defines, "DT_WATCHDOG": 1}
    return dict(defines)


def get_kernel(entry: str, defines: Mapping[str, int], kernel_name: str) -> Kernel:
    """The kernel `kernel_name` of `csrc/entry/<entry>.cu` compiled with `defines`.

    The build uses :func:`build_defines` (``DEEP_TILE_WATCHDOG`` adds ``DT_WATCHDOG=1``).
    """
    defines = build_defines(defines)
    key = (entry, tuple(sorted(defines.items())), kernel_name)
    kernel = _loaded.get(key)
    if kernel is None:
        with _lock:
            kernel = _loaded.get(key)
            if kernel is None:
                cubin = get_cubin(entry, dict(defines), kernel_name)
                with phases.timed("module"):  # cuLibraryLoadData + cuLibraryGetKernel
                    kernel = load_kernel(cubin, kernel_name)
                _loaded[key] = kernel
    return kernel
