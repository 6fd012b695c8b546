"""Files of the cache directory: :func:`discard` moves a damaged one aside and removes it;
:func:`fsync_path` flushes a published file or directory to disk; :func:`read_entry_meta` reads
an entry's ``meta.json`` (kernel cubins and native builds alike).

Shared by the kernel cache (:mod:`deep_tile.jit.cache`) and the native extension's builds
(:mod:`deep_tile.native.build`): a damaged entry, or whatever stands where a file or directory of
the cache belongs, is renamed out of the way first (so no reader finds half of it) and then
deleted. Imports nothing from deep_tile.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

__all__ = ["discard", "fsync_path", "read_entry_meta"]


def discard(path: Path) -> None:
    """Move ``path`` (a file, a link or a directory tree) aside and remove it; never raises.

    Another process that discarded it first wins quietly; a process that mapped a library from
    it keeps its own copy (the kernel frees the file once both are gone).
    """
    aside = path.with_name(f".corrupt-{path.name[:16]}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another process discarded it first
    except OSError:
        aside = path
    if os.path.isdir(aside) and not os.path.islink(aside):
        shutil.rmtree(aside, ignore_errors=True)
    else:
        try:
            os.unlink(aside)
        except OSError:
            pass


def fsync_path(path: Path) -> None:
    """``fsync`` the file or directory ``path`` (a directory: so a rename in it is on disk);
    best effort, never raises."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_entry_meta(entry: Path, key: str) -> dict | str:
    """The ``meta.json`` of the cache entry directory ``entry`` published under ``key``, or what is
    wrong with it (missing, unreadable, not a JSON object, another key's)."""
    try:
        meta = json.loads((entry / "meta.json").read_bytes())
    except FileNotFoundError:
        return "meta.json missing"
    except (OSError, ValueError) as error:
        return f"meta.json unreadable ({type(error).__name__})"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return "meta.json is not this entry's"
    return meta
