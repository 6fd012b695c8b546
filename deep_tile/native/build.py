"""Build the native extension into the cache: ``python -m deep_tile.native.build KEY [--wait]``.

Run by :mod:`deep_tile.native.loader` as a child process (so a build never blocks or outlives
the caller's interpreter state, and ends cleanly if the caller exits). One process per key
builds: it holds an exclusive ``flock`` on ``<cache>/native/<key>.lock`` (released by the kernel
if it dies); others exit at once, or with ``--wait`` wait for it. The build runs
``torch.utils.cpp_extension.load`` (ninja) in a private directory, then publishes the library
and ``meta.json`` by renaming a complete, fsync'ed directory into place, as the kernel cache does.
``meta.json`` records the library's size and sha256; :func:`published` checks both before anyone
loads the library (a truncated library would kill the process that maps it with SIGBUS) and
discards a damaged entry, which the next build replaces. A failed build leaves ``<key>.failed``
(the error) beside ``<key>.log`` (the output).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from deep_tile import env
from deep_tile.common import usable_cpus
from deep_tile.disk import discard, fsync_path, read_entry_meta
from deep_tile.native import key as _key
from deep_tile.native import toolchain as _toolchain

__all__ = ["build", "translation_units", "publish", "published", "entry_problem", "library_digest", "main", "lock_path",
           "in_progress"]


def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


UNITY_MAX_CPUS = 4
"""Up to this many usable CPUs the build compiles the sources as two combined translation units
(:func:`translation_units`), above it one per source file."""
UNITY_SECOND = ("python_bridge.cpp", "ops.cpp")
"""The sources of the second combined unit (the other pybind11 and torch-library heavy ones
beside ``module.cpp``); every other source is in the first."""


def translation_units(work: Path, cpus: int | None = None) -> list[str]:
    """The files to compile: each ``.cpp`` of the extension, or, with at most
    :data:`UNITY_MAX_CPUS` usable CPUs (``cpus``, default this process's), two files written into
    ``work`` that ``#include`` them: :data:`UNITY_SECOND` in one, the rest in the other.

    NOTES: each source parses the same torch headers again (ATen's and pybind11's headers dominate
    each file's time), so on few cores two combined units build faster than the files one by one;
    with many CPUs the files in parallel are faster.
    Names private to one source must therefore differ from every other source's (the ops'
    ``AccProblem``, ``GemmProblem``, ...): a clash fails the combined build.
    """
    sources = [p for p in _key.source_files() if p.suffix == ".cpp"]
    if (cpus if cpus is not None else usable_cpus()) > UNITY_MAX_CPUS:
        return [str(p) for p in sources]
    groups = ([p for p in sources if p.name not in UNITY_SECOND], [p for p in sources if p.name in UNITY_SECOND])
    units = []
    for index, group in enumerate(g for g in groups if g):
        unit = work / f"unity_{index}.cpp"
        unit.write_text("".join(f"#include {json.dumps(str(p))}\n" for p in group))
        units.append(str(unit))
    return units


def build(key: str, tools, work: Path) -> Path:
    """Compile and link the extension of ``key`` in ``work``; return the library's path."""
    from torch.utils import cpp_extension

    name = _key.module_name(key)
    sources = translation_units(work)
    cpp_extension.load(name=name, sources=sources, extra_cflags=list(_key.CFLAGS),
                       extra_ldflags=list(_key.LDFLAGS), extra_include_paths=[tools.cuda_include],
                       build_directory=str(work), with_cuda=False, verbose=True)
    return work / f"{name}.so"


def library_digest(path: Path) -> tuple[int, str]:
    """The size in bytes and the hex sha256 of the file at ``path`` (about 1 ms for the library)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def publish(key: str, library: Path, meta: dict) -> Path:
    """Move ``library`` and ``meta`` (plus the library's size and sha256) into
    ``<cache>/native/<key>/`` atomically; return the entry.

    When the entry already exists, another builder won: its entry is kept if it verifies
    (:func:`published`), else it is discarded and this one takes its place.
    """
    final = _key.entry_dir(key)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=final.parent))
    try:
        target = staging / _key.library_path(key).name
        shutil.copy2(library, target)
        fsync_path(target)
        size, digest = library_digest(target)
        meta = {**meta, "library": target.name, "library_bytes": size, "library_sha256": digest}
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        fsync_path(staging / "meta.json")
        fsync_path(staging)
        try:
            os.rename(staging, final)
        except OSError:
            # The entry exists: another builder's (kept when whole), or a damaged one, which
            # published() has just discarded: then this one takes its place.
            if not published(key):
                os.rename(staging, final)
        fsync_path(final.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; left over if another won
    return final


def entry_problem(key: str) -> str | None:
    """What is wrong with the published entry of ``key``; None when it is whole or absent.

    Whole means: a directory holding ``meta.json`` (a JSON object naming ``key``, with the
    library's size and sha256) and the library, whose size and sha256 match. Reads the library
    once (about 1 ms); loads nothing.
    """
    entry, library = _key.entry_dir(key), _key.library_path(key)
    try:
        is_dir = entry.is_dir()
        exists = is_dir or os.path.lexists(entry)
    except OSError:
        return None  # cannot even look: the cache directory is unusable (the build says so)
    if not exists:
        return None
    if not is_dir:
        return "not a directory"
    meta = read_entry_meta(entry, key)
    if isinstance(meta, str):
        return meta
    size, digest = meta.get("library_bytes"), meta.get("library_sha256")
    if not isinstance(size, int) or not isinstance(digest, str):
        return "meta.json records no library size and sha256 (published by an older deep_tile)"
    try:
        actual = os.stat(library).st_size
        if actual != size:
            return f"{library.name} has {actual} bytes, meta.json says {size}"
        if library_digest(library)[1] != digest:
            return f"{library.name} does not match the sha256 in meta.json"
    except FileNotFoundError:
        return f"{library.name} missing"
    except OSError as error:
        return f"{library.name} unreadable ({error})"
    return None


def published(key: str) -> bool:
    """Whether a whole build of ``key`` is published (see :func:`entry_problem`). A damaged entry
    is discarded here, so it is never loaded and the next build replaces it (under
    ``DEEP_TILE_DEBUG`` a line on stderr says why)."""
    problem = entry_problem(key)
    if problem is None:
        try:
            return _key.library_path(key).is_file()
        except OSError:
            return False
    try:
        debug = env.debug()
    except ValueError:  # reported by env.validate() where it matters; a discard never fails on it
        debug = False
    if debug:
        print(f"deep_tile: discarding the damaged native build {_key.entry_dir(key)} ({problem}); "
              "it will be rebuilt", file=sys.stderr, flush=True)
    discard(_key.entry_dir(key))
    return False


def _run_build(key: str) -> int:
    tools = _toolchain.find()
    if tools.missing:
        raise RuntimeError("missing: " + "; ".join(_toolchain.INSTALL_HINTS[name] for name in tools.missing))
    computed, inputs = _key.build_key(tools)
    if computed != key:
        raise RuntimeError(f"asked to build {key}, but this environment's key is {computed} (inputs: {inputs})")
    work = Path(tempfile.mkdtemp(prefix=f".build-{key[:16]}-", dir=_key.native_dir()))
    try:
        start = time.perf_counter()
        library = build(key, tools, work)
        meta = {"key": key, "inputs": inputs, "compiler_version": _compiler_version(tools.compiler),
                "cuda_include": tools.cuda_include, "seconds": round(time.perf_counter() - start, 1),
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        final = publish(key, library, meta)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the compiler's output is in <key>.log
    print(f"deep_tile.native.build: published {final} in {meta['seconds']} s", flush=True)
    return 0


def lock_path(key: str) -> Path:
    """The file a builder of ``key`` holds an exclusive ``flock`` on while it runs."""
    return _key.native_dir() / f"{key}.lock"


def in_progress(key: str) -> bool:
    """Whether some process is building ``key`` now (it holds the lock). A lock file that cannot
    be opened (absent, a directory in its place, unreadable) is held by nobody."""
    try:
        fd = os.open(lock_path(key), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock this probe took
    return False


def main(argv: list[str] | None = None) -> int:
    """Build ``KEY`` unless it is published or being built (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m deep_tile.native.build", description=__doc__.split("\n")[0])
    parser.add_argument("key", help="the build key (deep_tile.native.key.build_key)")
    parser.add_argument("--wait", action="store_true", help="wait for another process building the key")
    args = parser.parse_args(argv)
    directory = _key.native_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = _open_lock(lock_path(args.key))
    except OSError as error:
        print(f"deep_tile.native.build: the cache directory {env.cache_dir()} is not usable ({error}); "
              "set DEEP_TILE_CACHE_DIR to a writable directory", flush=True)
        return 1
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if args.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return 0  # another process builds this key
        if published(args.key):
            return 0
        print(f"deep_tile.native.build: building {args.key} (pid {os.getpid()})", flush=True)
        try:
            return _run_build(args.key)
        except BaseException as error:  # noqa: BLE001 - recorded, so no other process retries forever
            _write_failure(directory / f"{args.key}.failed", f"{type(error).__name__}: {error}\n")
            traceback.print_exc()
            return 1
    finally:
        os.close(lock)


def _open_lock(path: Path) -> int:
    """Open (create) the lock file; whatever stands in its way (a directory, an unreadable file:
    its contents never matter) is removed once."""
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        if not os.path.lexists(path):
            raise
        discard(path)
        return os.open(path, os.O_CREAT | os.O_RDWR, 0o644)


def _write_failure(marker: Path, text: str) -> None:
    """Leave the ``.failed`` marker (replacing whatever stands there); a marker that cannot be
    written is reported in the log, and the next process tries the build again."""
    try:
        if os.path.lexists(marker) and not marker.is_file():
            discard(marker)
        marker.write_text(text)
    except OSError as error:
        print(f"deep_tile.native.build: cannot write {marker}: {error}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
