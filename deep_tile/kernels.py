"""One loaded kernel per (entry file, defines, symbol): compile or fetch from the cache, then load.

The first call for a key compiles (or reads the disk cache) and loads the cubin; later calls
are a dictionary lookup.
"""
from __future__ import annotations

import threading
from typing import Mapping

from deep_tile import env
from deep_tile.jit.cache import get_cubin
from deep_tile.jit.runtime import Kernel, load_kernel

_loaded: dict = {}
_lock = threading.Lock()


def get_kernel(entry: str, defines: Mapping[str, int], kernel_name: str) -> Kernel:
    """The kernel `kernel_name` of `csrc/entry/<entry>.cu` compiled with `defines`.

    With ``DEEP_TILE_WATCHDOG`` set, kernels are built with ``DT_WATCHDOG=1`` (waits trap instead
    of hanging) unless the caller chose DT_WATCHDOG itself.
    """
    if "DT_WATCHDOG" not in defines and env.watchdog():
        defines = {**defines, "DT_WATCHDOG": 1}
    key = (entry, tuple(sorted(defines.items())), kernel_name)
    kernel = _loaded.get(key)
    if kernel is None:
        with _lock:
            kernel = _loaded.get(key)
            if kernel is None:
                kernel = load_kernel(get_cubin(entry, dict(defines), kernel_name), kernel_name)
                _loaded[key] = kernel
    return kernel
