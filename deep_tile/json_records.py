"""Small JSON records on disk, for the indexes that let a warm process skip work
(:mod:`deep_tile.jit.source_index`, :mod:`deep_tile.gemm.plan_index`).

A record is a JSON object in its own file, stored with a sha256 of its contents (the
:data:`CHECKSUM` member). Reading tolerates any damage: a missing, truncated, empty or garbage
file, a directory in its place, a record whose checksum does not match (a flipped digit still
parses) or that its reader's ``valid`` check rejects all read as None, and the caller recomputes
the value and writes the record again. Writing is atomic (temp file + rename) and a failure only
costs speed: it is never raised. Both indexes key their records by ``os.stat`` fingerprints of
source files, and write one only when every fingerprinted file is older than :data:`SETTLE_NS` (a
file edited within the same second might not change its mtime).
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Callable, Optional

from deep_tile.disk import discard

__all__ = ["SETTLE_NS", "CHECKSUM", "read", "write"]

SETTLE_NS = 2_000_000_000
"""A record is written only when every file its key fingerprints is at least this old (ns)."""
CHECKSUM = "_sha256"
"""The member of a stored record holding the sha256 of the rest (records written without it, or by
an older deep_tile, read as None and are rewritten)."""


def _digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read(path: Path, valid: Optional[Callable[[dict], bool]] = None) -> dict | None:
    """The JSON object stored at ``path`` by :func:`write`, or None when it is absent or damaged:
    unreadable, not JSON, not an object, without a matching checksum, or rejected by ``valid``
    (the reader's check of the members and their types)."""
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(record, dict) or record.pop(CHECKSUM, None) != _digest(record):
        return None
    if valid is not None:
        try:
            if not valid(record):
                return None
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
    return record


def write(path: Path, record: dict) -> bool:
    """Store ``record`` (a JSON-able dict) at ``path`` atomically; whether it was written.

    A directory or a non-directory standing where the record or its folder belongs (damage) is
    removed first. An unusable cache directory, a full disk or a record that is not JSON-able
    return False: the index then only costs speed.
    """
    if CHECKSUM in record:
        return False
    try:
        body = json.loads(json.dumps(record))  # what a reader will see (tuples read back as lists)
        body[CHECKSUM] = _digest(body)
        text = json.dumps(body)
    except (TypeError, ValueError):
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            if not path.parent.parent.is_dir():
                return False  # the damage is above the record's folder: leave it to the cache's owner
            discard(path.parent)
            path.parent.mkdir()
        tmp.write_text(text)
        if path.is_dir():
            discard(path)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
    return True
