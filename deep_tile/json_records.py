"""Small JSON records on disk, for the indexes that let a warm process skip work
(:mod:`deep_tile.jit.source_index`, :mod:`deep_tile.plan_index`).

A record is a JSON object in its own file. Reading tolerates any damage (a missing, partial or
foreign file reads as None); writing is atomic (temp file + rename) and a failure only costs
speed. Both indexes key their records by ``os.stat`` fingerprints of source files, and write one
only when every fingerprinted file is older than :data:`SETTLE_NS` (a file edited within the same
second might not change its mtime).
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

__all__ = ["SETTLE_NS", "read", "write"]

SETTLE_NS = 2_000_000_000
"""A record is written only when every file its key fingerprints is at least this old (ns)."""


def read(path: Path) -> dict | None:
    """The JSON object stored at ``path``, or None (absent, unreadable, not JSON, not an object)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write(path: Path, record: dict) -> bool:
    """Store ``record`` (JSON-able) at ``path`` atomically; whether it was written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:
        return False
    return True
