"""The selector's launch plans, remembered on disk so a warm process skips the selector.

Choosing a configuration imports :mod:`deep_tile.select` and ranks every candidate: about 20 ms
on the first call of a process, for an answer that only changes when the selector's sources or
the device change. The native path's plans (:mod:`deep_tile.native.bridge`) are stored as small
JSON records::

    <DEEP_TILE_CACHE_DIR>/plans/<fingerprint>/<m>x<n>x<k>-<num_sms>.json

where the fingerprint hashes what ``os.stat`` says of the modules the choice depends on
(:data:`SOURCES`: path, size, mtime, inode) and the device (name, SMs, shared memory, compute
capability). Editing the selector changes its mtime, so the fingerprint, so the records are not
used. As in :mod:`deep_tile.jit.source_index`, records are written only when every fingerprinted
file is older than :data:`SETTLE_NS`. ``DEEP_TILE_PRINT_CONFIGS`` bypasses the records (the
selector prints each new choice).
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from deep_tile import env, json_records
from deep_tile.json_records import SETTLE_NS

__all__ = ["SOURCES", "SETTLE_NS", "plans_dir", "lookup", "store"]

_PACKAGE = Path(__file__).resolve().parent
SOURCES = ("select", "arch.py", "common.py", "device.py", "gemm.py", "kernels/fp8_gemm.py", "native/bridge.py")
"""The package's files and folders (relative) whose code decides a plan."""

_fingerprints: dict = {}  # device index -> (fingerprint, newest mtime ns)


def plans_dir() -> Path:
    """``<DEEP_TILE_CACHE_DIR>/plans``."""
    return env.cache_dir() / "plans"


def _fingerprint(device_index: int) -> tuple[str, int]:
    cached = _fingerprints.get(device_index)
    if cached is not None:
        return cached
    from deep_tile.device import device_facts

    facts = device_facts(device_index)
    major, minor = facts.capability
    h = hashlib.sha256(f"deep_tile plan index 1\0{facts.name}\0{facts.num_sms}\0{facts.max_smem_per_block}\0"
                       f"{major}.{minor}\0".encode())
    newest = 0
    for source in SOURCES:
        path = _PACKAGE / source
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            st = os.stat(file)
            h.update(f"{file.relative_to(_PACKAGE)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}\0".encode())
            newest = max(newest, st.st_mtime_ns)
    cached = _fingerprints[device_index] = (h.hexdigest(), newest)
    return cached


def _path(device_index: int, m: int, n: int, k: int, num_sms: int, variant: str = "") -> tuple[Path, int]:
    digest, newest = _fingerprint(device_index)
    return plans_dir() / digest[:32] / f"{m}x{n}x{k}-{num_sms}{variant}.json", newest


def lookup(device_index: int, m: int, n: int, k: int, num_sms: int, variant: str = "") -> dict | None:
    """The stored record of this plan (``variant``: a suffix naming a kernel variant of the same
    problem, e.g. ``"-rm"`` for a row-major a_scale), or None (absent, unreadable, or
    DEEP_TILE_PRINT_CONFIGS)."""
    if env.print_configs() or env.disable_cache():
        return None
    path, _ = _path(device_index, m, n, k, num_sms, variant)
    return json_records.read(path)


def store(device_index: int, m: int, n: int, k: int, num_sms: int, record: dict, variant: str = "") -> None:
    """Remember ``record`` (JSON-able) for this plan; failures only cost speed."""
    if env.disable_cache():
        return
    path, newest = _path(device_index, m, n, k, num_sms, variant)
    if time.time_ns() - newest < SETTLE_NS:
        return  # the selector's sources are being edited: do not remember
    json_records.write(path, record)
