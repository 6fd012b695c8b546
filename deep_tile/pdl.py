"""Programmatic dependent launch (PDL): whether deep_tile's kernels let the next kernel start early.

A kernel launched with programmatic stream serialization may begin while its stream predecessor
still runs: it sets up (barriers, tensor maps, an L2 prefetch of its first weight tiles) and then
waits on the device (``griddepcontrol.wait``) until the predecessor has completed and its writes
are visible, before it touches global memory; a deep_tile kernel in turn lets its successor start
once it has issued its last loads. In a chain of GEMMs (a decoding layer, replayed in a CUDA
graph: stream capture keeps the programmatic edges) each kernel's prologue and its predecessor's
tail overlap. Kernels that are not launched this way (torch's, a copy, an event from another
stream) are waited for in full, as without PDL.

On by default; ``DEEP_TILE_PDL=0`` turns it off for the process (read on the first launch), and
:func:`set_pdl` changes it at any time for later launches. It changes how kernels are launched,
not which kernels: the same cubins run either way.
"""
from __future__ import annotations

from typing import Callable, Optional

from deep_tile import env

__all__ = ["set_pdl", "get_pdl", "add_pdl_listener"]

_enabled: Optional[bool] = None  # None: not decided yet (DEEP_TILE_PDL is read on the first get_pdl)
_listeners: list = []


def get_pdl() -> bool:
    """Whether later kernels are launched with programmatic dependent launch: the last
    :func:`set_pdl`, else ``DEEP_TILE_PDL`` (on unless set to a false value), read once.

    Raises:
        ValueError: ``DEEP_TILE_PDL`` is not a boolean.
    """
    global _enabled
    if _enabled is None:
        _enabled = env.pdl()
    return _enabled


def set_pdl(enabled: bool) -> None:
    """Launch later kernels with programmatic dependent launch (``True``) or without (``False``).

    Useful to compare the two, or around code that launches kernels of its own with PDL whose
    early start it cannot tolerate (every deep_tile kernel waits for its predecessor whatever
    this says). Calls already launched or captured into a CUDA graph keep their launch mode.

    Raises:
        TypeError: ``enabled`` is not a bool.
    """
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_pdl: enabled must be a bool; got {type(enabled).__name__}")
    _enabled = enabled
    for listener in tuple(_listeners):
        listener(enabled)


def add_pdl_listener(listener: Callable[[bool], None]) -> None:
    """Call ``listener(enabled)`` on every later :func:`set_pdl`.

    The native host path keeps a copy that its C++ launches read without the GIL; it registers
    here when it loads (:mod:`deep_tile.native.loader`). Registering twice is a no-op.
    """
    if listener not in _listeners:
        _listeners.append(listener)
