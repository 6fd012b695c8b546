"""Kernel cache: an in-process memo in front of an on-disk cache of compiled cubins.

``get_cubin(entry_name, defines, kernel_name)`` returns the cubin of ``csrc/entry/<entry_name>.cu``
built with ``defines``. A repeated call is a dict lookup (no file I/O, no hashing). Otherwise the
key is the sha256 of: the entry file, every file under ``paths.include_dir()`` (relative paths +
contents), the sorted defines, the compiler flags, the compiler name and version, and the arch.
The expensive parts (the hashes of the sources, which compiler, its version) come from
:mod:`deep_tile.jit.source_index`: once per process, and from a disk index keyed by a stat
fingerprint of the same files, so a warm process neither re-hashes the headers nor loads NVRTC
(nor runs nvcc) to find a cached kernel. On disk::

    <DEEP_TILE_CACHE_DIR>/kernels/<key[:2]>/<key>/kernel.cubin
                                                 /meta.json     (key inputs, cubin sha256, command, log)
                                                 /kernel.ptx, kernel.sass   (DEEP_TILE_DUMP_ASM only)

An entry is built in a temp dir next to its final place, fsync'ed, then renamed into place, so
readers see a whole entry or none; when another process published first, its entry is used.
Entries whose cubin does not match meta.json's sha256 are moved aside and rebuilt, never served;
so are entries whose meta.json is missing, empty, truncated, garbage or of the wrong types, and a
file standing where an entry (or the cache's own ``kernels/<xx>`` folder) belongs. An unusable
cache directory (not writable, a file in its place or above it) raises one :class:`CacheError`
naming ``DEEP_TILE_CACHE_DIR`` before anything is compiled; the source index only costs speed and
is skipped silently then. Environment variables are all checked (:func:`deep_tile.env.validate`)
before a miss writes anything.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping

from deep_tile import env, phases
from deep_tile.disk import discard, fsync_path, read_entry_meta
from deep_tile.errors import CacheError, CompileError
from deep_tile.jit import compiler as _compiler
from deep_tile.jit import paths, source_index

__all__ = ["FORMAT_VERSION", "get_cubin", "cache_key", "kernels_dir", "cache_stats",
           "reset_stats", "clear_memo"]

#: Bumped when the on-disk layout or the key recipe changes (old entries are then ignored).
FORMAT_VERSION = 1

_memo: dict[tuple, bytes] = {}
_stats: collections.Counter = collections.Counter()
_key_locks: dict[tuple, threading.Lock] = {}
_key_locks_guard = threading.Lock()
_STAT_NAMES = ("memo_hits", "disk_hits", "misses", "compiles", "corrupt")
_warned_no_sass = False  # DEEP_TILE_DUMP_ASM warns once per process when kernel.sass cannot be made


def cache_stats() -> dict[str, int]:
    """Counters of this process: ``memo_hits``, ``disk_hits``, ``hits`` (both), ``misses``
    (disk misses that compiled), ``compiles`` (all compiles, cache disabled included),
    ``corrupt`` (entries discarded) and ``index_hits`` (keys whose source hashes and compiler
    version came from the disk index, see :mod:`deep_tile.jit.source_index`)."""
    stats = {name: _stats[name] for name in _STAT_NAMES}
    stats["hits"] = stats["memo_hits"] + stats["disk_hits"]
    stats["index_hits"] = source_index.stats()["index_hits"]
    return stats


def reset_stats() -> None:
    """Zero the :func:`cache_stats` counters (and the source index's)."""
    _stats.clear()
    source_index.reset_stats()


def clear_memo() -> None:
    """Forget the in-process memo and the per-process source records and header hashes (the
    disk cache and its index stay)."""
    _memo.clear()
    source_index.clear()


def kernels_dir() -> Path:
    """``<DEEP_TILE_CACHE_DIR>/kernels``: where the entries live."""
    return env.cache_dir() / "kernels"


def _debug(message: str) -> None:
    if env.debug():
        print(message, file=sys.stderr, flush=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key_inputs(entry_sha256: str, include_sha256: str, defines, compiler: str, compiler_version: str) -> dict:
    return {
        "format": FORMAT_VERSION,
        "entry_sha256": entry_sha256,
        "include_sha256": include_sha256,
        "defines": dict(_compiler.normalize_defines(defines)),
        "flags": list(_compiler.flags(compiler)),
        "compiler": compiler,
        "compiler_version": compiler_version,
        "arch": _compiler.ARCH,
    }


def _hash_inputs(inputs: dict) -> str:
    return _sha256(json.dumps(inputs, sort_keys=True).encode())


def cache_key(entry_source: bytes, include_dir: Path, defines: Mapping[str, int | str | bool],
              compiler: str) -> tuple[str, dict]:
    """The cache key (hex sha256) of one build, and the summary of its inputs (kept in meta.json).

    Computed from the contents (headers hashed once per process, compiler asked its version);
    :func:`get_cubin` gets the same key through the source index without either.
    """
    inputs = _key_inputs(_sha256(entry_source), source_index.include_digest(Path(include_dir)), defines,
                         compiler, _compiler.compiler_version(compiler))
    return _hash_inputs(inputs), inputs


def get_cubin(entry_name: str, defines: Mapping[str, int | str | bool], kernel_name: str,
              *, compiler: str | None = None) -> bytes:
    """The sm_90a cubin of ``csrc/entry/<entry_name>.cu`` built with ``defines``, holding ``kernel_name``.

    ``compiler`` (``"nvrtc"`` or ``"nvcc"``) overrides ``DEEP_TILE_COMPILER`` for this call; None
    uses ``deep_tile.jit.compiler.default_compiler()``. The compiler is part of the cache key.

    Raises:
        ValueError: ``compiler`` is not ``"nvrtc"``, ``"nvcc"`` or None.
        CompileError: the build failed or the ptxas check rejected it.
        CacheError: the cache directory is not usable (see ``DEEP_TILE_CACHE_DIR``).
    """
    if compiler is None:
        compiler = env.compiler() or "auto"  # "auto" is resolved only when a build needs it
    elif compiler not in _compiler.COMPILERS:
        raise ValueError(f"get_cubin: compiler must be one of {', '.join(_compiler.COMPILERS)} or None; "
                         f"got {compiler!r}")
    frozen = _compiler.normalize_defines(defines)
    if env.disable_cache():
        env.validate()
        return _compile_uncached(entry_name, frozen, kernel_name, compiler)
    memo_key = (entry_name, frozen, kernel_name, compiler, env.ptxas_check())
    cubin = _memo.get(memo_key)
    if cubin is None:
        with _key_locks_guard:
            lock = _key_locks.setdefault(memo_key, threading.Lock())
        with lock:  # one build per key per process; other threads wait, then hit the memo
            cubin = _memo.get(memo_key)
            if cubin is None:
                cubin = _memo[memo_key] = _load_or_build(entry_name, frozen, kernel_name, compiler)
                return cubin
    _stats["memo_hits"] += 1
    return cubin


def _describe(entry_name: str, frozen) -> str:
    return f"{entry_name} {','.join(f'{k}={v}' for k, v in frozen) or '(no defines)'}"


def _compile_uncached(entry_name, frozen, kernel_name, compiler) -> bytes:
    if compiler == "auto":
        compiler = _compiler.default_compiler()
    result = _compiler.compile_cubin(paths.entry_path(entry_name), dict(frozen), kernel_name, compiler)
    _stats["compiles"] += 1
    _debug(f"deep_tile: compile {_describe(entry_name, frozen)} with {compiler} in "
           f"{result.seconds:.2f}s (cache disabled)\ndeep_tile:   command: {result.command}")
    if env.dump_asm():
        _debug("deep_tile: DEEP_TILE_DUMP_ASM ignored: DEEP_TILE_DISABLE_CACHE leaves no cache dir to write to")
    return result.cubin


def _load_or_build(entry_name, frozen, kernel_name, request) -> bytes:
    env.validate()  # a bad DEEP_TILE_* value fails here, before the index or an entry is written
    start = time.perf_counter()
    entry = paths.entry_path(entry_name)
    include_dir = paths.include_dir()
    with phases.timed("key"):
        record = source_index.source_record(entry, include_dir, request)
        compiler = record["compiler"]
        inputs = _key_inputs(record["entry_sha256"], record["include_sha256"], dict(frozen), compiler,
                             record["compiler_version"])
        key = _hash_inputs(inputs)
    final = kernels_dir() / key[:2] / key
    with phases.timed("load"):
        found = _read_entry(final, key)
        if found is not None:
            _check_hit(final, found[0], found[1], kernel_name)
    if found is not None:
        cubin, meta = found
        _stats["disk_hits"] += 1
        _debug(f"deep_tile: compile {_describe(entry_name, frozen)} with {compiler} in "
               f"{time.perf_counter() - start:.2f}s (cache hit: {final})")
        if env.dump_asm():
            _dump_asm(final, cubin, "")
        return cubin
    _make_dir(final.parent)
    with phases.timed("compile"):
        result = _compiler.compile_cubin(entry, dict(frozen), kernel_name, compiler,
                                         include_dir=include_dir, want_ptx=env.dump_asm())
    _stats["compiles"] += 1
    _stats["misses"] += 1
    _debug(f"deep_tile: compile {_describe(entry_name, frozen)} with {compiler} in "
           f"{result.seconds:.2f}s (cache miss)\ndeep_tile:   command: {result.command}")
    meta = {"key": key, "inputs": inputs, "entry": entry_name, "entry_path": str(entry),
            "kernel_name": kernel_name, "cubin_sha256": _sha256(result.cubin),
            "cubin_bytes": len(result.cubin), "compiler": compiler, "command": result.command,
            "log": result.log, "seconds": round(result.seconds, 3), "created": time.time(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return _publish(final, result, meta)


def _check_hit(final: Path, cubin: bytes, meta: dict, kernel_name: str) -> None:
    """A verified entry may still lack this kernel name, or fail the ptxas check."""
    log, command = meta.get("log", ""), meta.get("command", "")
    if not _compiler.has_symbol(cubin, kernel_name):
        raise CompileError(f"cached cubin {final / 'kernel.cubin'} has no kernel symbol {kernel_name!r}",
                           command=command, log=log, source_path=meta.get("entry_path", ""))
    if env.ptxas_check():
        _compiler.check_ptxas(_compiler.CompiledKernel(cubin, log, meta.get("compiler", ""), command, 0.0),
                              meta.get("entry_path", final))


# ---- disk -------------------------------------------------------------------------------------

def _cache_error(path: Path, exc: OSError) -> CacheError:
    return CacheError(
        f"deep_tile: the kernel cache directory {env.cache_dir()} is not usable ({path}: {exc.strerror or exc}). "
        "Set DEEP_TILE_CACHE_DIR to a writable directory, or DEEP_TILE_DISABLE_CACHE=1 to compile "
        "without a disk cache.")


def _first_non_directory(path: Path) -> Path | None:
    """The deepest existing ancestor of ``path`` (itself included) when it is not a directory."""
    for candidate in (path, *path.parents):
        try:
            mode = os.stat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        return None if stat.S_ISDIR(mode) else candidate
    return None


def _make_dir(path: Path) -> None:
    """Create ``path`` (a folder of the cache). A file standing where one of the cache's own
    folders belongs is damage: it is removed. Anything else raises :class:`CacheError`."""
    for attempt in range(2):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return
        except (FileExistsError, NotADirectoryError) as exc:
            blocker = _first_non_directory(path)
            root = env.cache_dir()
            if attempt or blocker is None or blocker == root or root not in blocker.parents:
                raise _cache_error(path, exc) from None
            _debug(f"deep_tile: removing {blocker}: a file where a cache folder belongs")
            discard(blocker)
        except OSError as exc:
            raise _cache_error(path, exc) from None


_META_STRINGS = ("log", "command", "compiler", "entry_path", "kernel_name")


def _entry_problem(final: Path, key: str) -> tuple[bytes, dict] | str:
    """The (cubin, meta) of the entry directory ``final``, or what is wrong with it."""
    meta = read_entry_meta(final, key)
    if isinstance(meta, str):
        return meta
    if not all(isinstance(meta.get(name, ""), str) for name in _META_STRINGS):
        return "meta.json has members of the wrong type"
    try:
        cubin = (final / "kernel.cubin").read_bytes()
    except OSError as exc:
        return f"kernel.cubin unreadable: {type(exc).__name__}"
    if cubin[:4] != b"\x7fELF" or meta.get("cubin_sha256") != _sha256(cubin):
        return "kernel.cubin does not match the sha256 in meta.json"
    return cubin, meta


def _read_entry(final: Path, key: str) -> tuple[bytes, dict] | None:
    """The verified (cubin, meta) of entry ``final``; None when absent. Bad entries are discarded.

    Raises:
        CacheError: the cache directory cannot even be looked into (e.g. no search permission).
    """
    try:
        mode = os.stat(final).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # absent (a file above it is dealt with by _make_dir)
    except OSError as exc:
        raise _cache_error(final, exc) from None
    found = _entry_problem(final, key) if stat.S_ISDIR(mode) else "not a directory"
    if not isinstance(found, str):
        return found
    _stats["corrupt"] += 1
    _debug(f"deep_tile: discarding corrupt cache entry {final} ({found})")
    discard(final)
    return None


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _publish(final: Path, result, meta: dict) -> bytes:
    """Build the entry in a temp dir beside ``final`` and rename it into place."""
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name[:16]}-", dir=final.parent))
    except OSError as exc:
        raise _cache_error(final.parent, exc) from None
    try:
        _write(staging / "kernel.cubin", result.cubin)
        if env.dump_asm():
            _dump_asm(staging, result.cubin, result.ptx)
        _write(staging / "meta.json", json.dumps(meta, indent=1).encode())
        fsync_path(staging)
        try:
            os.rename(staging, final)
        except OSError:
            if not final.is_dir():
                raise
            # Another process published this key first: use its entry.
            shutil.rmtree(staging, ignore_errors=True)
            found = _read_entry(final, meta["key"])
            return found[0] if found is not None else result.cubin
        fsync_path(final.parent)
        return result.cubin
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise _cache_error(final, exc) from None


def _warn_no_sass(directory: Path) -> None:
    """Tell, once per process and on stderr, why DEEP_TILE_DUMP_ASM wrote no kernel.sass."""
    global _warned_no_sass
    if _warned_no_sass:
        return
    _warned_no_sass = True
    missing = _compiler.missing_sass_tools()
    if missing:
        why = (f"{' and '.join(missing)} not found (looked on PATH, in the CUDA toolkit and in the "
               f"nvidia pip wheels); install with: {_compiler.SASS_TOOLS_INSTALL}")
    else:
        why = f"cuobjdump -sass failed on {directory / 'kernel.cubin'}"
    print(f"deep_tile: warning: DEEP_TILE_DUMP_ASM: kernel.sass not written: {why} "
          "(this warning is printed once per process)", file=sys.stderr, flush=True)


def _dump_asm(directory: Path, cubin: bytes, ptx: str) -> None:
    """DEEP_TILE_DUMP_ASM: write missing kernel.ptx / kernel.sass; never fatal. Missing SASS
    tools print one warning to stderr (:func:`_warn_no_sass`)."""
    try:
        if ptx and not (directory / "kernel.ptx").exists():
            _write(directory / "kernel.ptx", ptx.encode())
        elif not (directory / "kernel.ptx").exists():
            _debug(f"deep_tile: no PTX for {directory} (only written when the kernel is compiled)")
        if not (directory / "kernel.sass").exists():
            sass = _compiler.disassemble(cubin)
            if sass is None:
                _warn_no_sass(directory)
            else:
                _write(directory / "kernel.sass", sass.encode())
    except OSError as exc:
        _debug(f"deep_tile: DEEP_TILE_DUMP_ASM could not write into {directory}: {exc}")
