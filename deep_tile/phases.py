"""Where the time of a first call goes: import, select, key, load, module, native, tensor maps, launch.

The cold paths (imports on first use, selection, the kernel cache, loading a cubin or the native
extension, a plan's first launch) add their wall time here; the first launch of each new plan
prints the phases gathered since the previous report to stderr when ``DEEP_TILE_DEBUG`` is set::

    deep_tile: first call 64x2112x7168 (native path): import 9.1 ms, select 6.0 ms, key 0.4 ms, ...

Nothing here runs on a warm call.
"""
from __future__ import annotations

import sys
import time

from deep_tile import env

__all__ = ["PHASES", "add", "timed", "take", "report", "report_first_launch", "last_report"]

PHASES = ("import", "select", "key", "load", "compile", "module", "native", "tensor maps", "launch")
"""The phases, in the order they are printed."""

_seconds: dict[str, float] = {}
_last: dict = {}


def add(phase: str, seconds: float) -> None:
    """Add ``seconds`` to ``phase`` (one of :data:`PHASES`)."""
    _seconds[phase] = _seconds.get(phase, 0.0) + seconds


class timed:
    """``with timed("key"): ...`` adds the block's wall time to a phase."""

    __slots__ = ("phase", "start")

    def __init__(self, phase: str):
        self.phase = phase
        self.start = 0.0

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        add(self.phase, time.perf_counter() - self.start)
        return False


def take() -> dict[str, float]:
    """The seconds per phase gathered since the last call, in :data:`PHASES` order; resets them."""
    taken = {phase: _seconds[phase] for phase in PHASES if phase in _seconds}
    _seconds.clear()
    return taken


def report(what: str) -> dict[str, float]:
    """Take the phases and, under ``DEEP_TILE_DEBUG``, print them as ``deep_tile: <what>: ...``."""
    taken = take()
    _last.clear()
    _last.update(what=what, seconds=dict(taken))
    if env.debug():
        total = sum(taken.values())
        parts = ", ".join(f"{phase} {seconds * 1e3:.2f} ms" for phase, seconds in taken.items())
        print(f"deep_tile: {what}: {parts} (total {total * 1e3:.2f} ms)", file=sys.stderr, flush=True)
    return taken


def report_first_launch(what: str, maps_s: float, launch_s: float) -> dict[str, float]:
    """Add a plan's first tensor-map encoding and launch times (seconds) and :func:`report` them as
    ``first call <what>`` (both host paths, on the first launch of each plan)."""
    add("tensor maps", maps_s)
    add("launch", launch_s)
    return report(f"first call {what}")


def last_report() -> dict:
    """The last :func:`report`: ``{"what": ..., "seconds": {phase: seconds}}`` (empty before any)."""
    return dict(_last)
