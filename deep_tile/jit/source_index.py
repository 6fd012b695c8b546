"""The expensive inputs of a kernel cache key, found without re-hashing or asking a compiler.

A cache key (:func:`deep_tile.jit.cache.cache_key`) hashes the entry file, every header under
the include directory, and the compiler's name and version. Computing those costs a read and a
hash of every header and, for the version, loading NVRTC or running ``nvcc --version`` -- tens of
milliseconds on the first call of every process. This module remembers them, as a *source
record* ``{"entry_sha256", "include_sha256", "compiler", "compiler_version"}``:

1. per process, by (entry, include dir, compiler request);
2. on disk, in ``<cache>/kernels/index/<fingerprint>.json``, where the fingerprint is a sha256
   over what ``os.stat`` says of the same files -- the entry, every header (relative path, size,
   mtime, inode) and the compiler's files (nvcc, the NVRTC libraries, the cuda-bindings module) --
   and the compiler request (``nvrtc``, ``nvcc`` or ``auto``).

A header edit changes its mtime (and usually its size), so the fingerprint, so the record is
recomputed from the contents and the key changes. Against edits that keep size and mtime (two
writes within one timestamp tick), a record is only written when every fingerprinted file is
older than :data:`SETTLE_NS`; a tree that is still being edited is hashed in full each process.

A damaged record (truncated, garbage, empty, a wrong checksum or wrong types: see
:mod:`deep_tile.json_records`) is ignored, recomputed from the contents and written again; an
index that cannot be written (an unusable cache directory) is skipped silently.
"""
from __future__ import annotations

import collections
import hashlib
import importlib.util
import os
import time
from pathlib import Path

from deep_tile import env, json_records
from deep_tile.json_records import SETTLE_NS

__all__ = ["SETTLE_NS", "source_record", "include_digest", "fingerprint", "index_dir", "clear", "stats",
           "reset_stats"]


_records: dict[tuple, dict] = {}
_include_digests: dict[str, str] = {}
_stats: collections.Counter = collections.Counter()


def index_dir() -> Path:
    """``<DEEP_TILE_CACHE_DIR>/kernels/index``."""
    return env.cache_dir() / "kernels" / "index"


def clear() -> None:
    """Forget this process's records and header digests (the disk index stays)."""
    _records.clear()
    _include_digests.clear()


def stats() -> dict[str, int]:
    """``index_hits`` (records read from disk), ``index_writes``, ``full`` (records computed from
    the contents) in this process."""
    return {name: _stats[name] for name in ("index_hits", "index_writes", "full")}


def reset_stats() -> None:
    """Zero the :func:`stats` counters."""
    _stats.clear()


def include_digest(include_dir: Path) -> str:
    """sha256 over every file under ``include_dir`` (sorted relative paths + contents); memoised."""
    digest = _include_digests.get(str(include_dir))
    if digest is None:
        h = hashlib.sha256()
        for path in sorted(p for p in include_dir.rglob("*") if p.is_file()):
            data = path.read_bytes()
            h.update(path.relative_to(include_dir).as_posix().encode() + b"\0")
            h.update(len(data).to_bytes(8, "little") + data)
        digest = _include_digests[str(include_dir)] = h.hexdigest()
    return digest


def _walk(root: str, prefix: str = ""):
    """(relative path, stat) of every file under ``root``, sorted, without pathlib."""
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    for entry in entries:
        rel = prefix + entry.name
        if entry.is_dir(follow_symlinks=True):
            yield from _walk(entry.path, rel + "/")
        elif entry.is_file(follow_symlinks=True):
            yield rel, entry.stat()


def _compiler_files(request: str) -> list[str]:
    """The files whose change may change which compiler ``request`` resolves to, or its version."""
    files = []
    if request in ("nvcc", "auto"):
        files.append(env.nvcc_path() or "<no nvcc>")
    if request in ("nvrtc", "auto"):
        dirs = []
        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations or []) if spec else []:
            dirs += [os.path.join(base, name, "lib") for name in sorted(os.listdir(base))]
        if env.cuda_home():
            dirs.append(str(env.cuda_home() / "lib64"))
        dirs.append("/usr/local/cuda/lib64")
        for directory in dirs:
            if os.path.isdir(directory):
                files += sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith("libnvrtc"))
        bindings = importlib.util.find_spec("cuda.bindings")
        for base in (bindings.submodule_search_locations or []) if bindings else []:
            files += sorted(os.path.join(base, f) for f in os.listdir(base) if f.startswith(("nvrtc", "_version")))
    return files


def fingerprint(entry: Path, include_dir: Path, request: str) -> tuple[str, int]:
    """The stat fingerprint of the sources and the compiler, and the newest mtime (ns) in it."""
    h = hashlib.sha256(f"deep_tile source index 1\0{request}\0".encode())
    newest = 0
    st = os.stat(entry)
    listing = [(f"entry:{os.path.abspath(entry)}", st)]
    listing += [(f"include:{rel}", s) for rel, s in _walk(str(include_dir))]
    for path in _compiler_files(request):
        try:
            listing.append((f"compiler:{path}", os.stat(path)))
        except OSError:
            listing.append((f"compiler:{path}", None))
    for name, s in listing:
        h.update(name.encode() + b"\0")
        if s is not None:
            h.update(f"{s.st_size}:{s.st_mtime_ns}:{s.st_ino}\0".encode())
            newest = max(newest, s.st_mtime_ns)
    h.update(str(os.path.abspath(include_dir)).encode())
    return h.hexdigest(), newest


def _compute(entry: Path, include_dir: Path, request: str) -> dict:
    from deep_tile.jit import compiler as _compiler

    name = _compiler.default_compiler() if request == "auto" else request
    _stats["full"] += 1
    return {"entry_sha256": hashlib.sha256(entry.read_bytes()).hexdigest(),
            "include_sha256": include_digest(include_dir),
            "compiler": name, "compiler_version": _compiler.compiler_version(name)}


_RECORD_KEYS = ("entry_sha256", "include_sha256", "compiler", "compiler_version")


def _valid(record: dict) -> bool:
    """A source record: the four members, strings, the digests 64 hex digits."""
    return (all(isinstance(record.get(k), str) and record[k] for k in _RECORD_KEYS)
            and all(len(record[k]) == 64 and not record[k].strip("0123456789abcdef")
                    for k in ("entry_sha256", "include_sha256")))


def _read(path: Path) -> dict | None:
    """The record stored at ``path``; None when absent or damaged (then recomputed and rewritten)."""
    record = json_records.read(path, _valid)
    return {k: record[k] for k in _RECORD_KEYS} if record is not None else None


def _store(path: Path, record: dict) -> None:
    """Write ``record`` atomically; an index that cannot be written only costs speed."""
    if json_records.write(path, record):
        _stats["index_writes"] += 1


def source_record(entry: Path, include_dir: Path, request: str, *, use_disk: bool = True) -> dict:
    """The source record of ``entry`` with the headers of ``include_dir``, compiled by
    ``request`` (``"nvrtc"``, ``"nvcc"``, or ``"auto"`` for :func:`deep_tile.jit.compiler.default_compiler`).

    Raises what :func:`deep_tile.jit.compiler.compiler_version` raises when it must be asked and
    the compiler is missing.
    """
    memo_key = (str(entry), str(include_dir), request)
    record = _records.get(memo_key)
    if record is not None:
        return record
    if not use_disk:
        record = _records[memo_key] = _compute(entry, include_dir, request)
        return record
    digest, newest = fingerprint(entry, include_dir, request)
    path = index_dir() / f"{digest}.json"
    record = _read(path)
    if record is not None:
        _stats["index_hits"] += 1
    else:
        record = _compute(entry, include_dir, request)
        if time.time_ns() - newest >= SETTLE_NS:
            _store(path, record)
    _records[memo_key] = record
    return record
