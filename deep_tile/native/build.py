"""Build the native extension into the cache: ``python -m deep_tile.native.build KEY [--wait]``.

Run by :mod:`deep_tile.native.loader` as a child process (so a build never blocks or outlives
the caller's interpreter state, and ends cleanly if the caller exits). One process per key
builds: it holds an exclusive ``flock`` on ``<cache>/native/<key>.lock`` (released by the kernel
if it dies); others exit at once, or with ``--wait`` wait for it. The build runs
``torch.utils.cpp_extension.load`` (ninja) in a private directory, then publishes the library
and ``meta.json`` by renaming a complete directory into place, as the kernel cache does. A
failed build leaves ``<key>.failed`` (the error) beside ``<key>.log`` (the output).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from deep_tile.native import key as _key
from deep_tile.native import toolchain as _toolchain

__all__ = ["build", "publish", "main", "lock_path", "in_progress"]


def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"


def build(key: str, tools, work: Path) -> Path:
    """Compile and link the extension of ``key`` in ``work``; return the library's path."""
    from torch.utils import cpp_extension

    name = _key.module_name(key)
    sources = sorted(str(p) for p in _key.SOURCE_DIR.glob("*.cpp"))
    cpp_extension.load(name=name, sources=sources, extra_cflags=list(_key.CFLAGS),
                       extra_ldflags=list(_key.LDFLAGS), extra_include_paths=[tools.cuda_include],
                       build_directory=str(work), with_cuda=False, verbose=True)
    return work / f"{name}.so"


def publish(key: str, library: Path, meta: dict) -> Path:
    """Move ``library`` and ``meta`` into ``<cache>/native/<key>/`` atomically; return the entry."""
    final = _key.entry_dir(key)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=final.parent))
    try:
        shutil.copy2(library, staging / _key.library_path(key).name)
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(staging, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; left over if another won
    return final


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
    """Whether some process is building ``key`` now (it holds the lock)."""
    try:
        fd = os.open(lock_path(key), os.O_RDWR)
    except FileNotFoundError:
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
    directory.mkdir(parents=True, exist_ok=True)
    lock = os.open(lock_path(args.key), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if args.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return 0  # another process builds this key
        if _key.library_path(args.key).is_file():
            return 0
        print(f"deep_tile.native.build: building {args.key} (pid {os.getpid()})", flush=True)
        try:
            return _run_build(args.key)
        except BaseException as error:  # noqa: BLE001 - recorded, so no other process retries forever
            (directory / f"{args.key}.failed").write_text(f"{type(error).__name__}: {error}\n")
            traceback.print_exc()
            return 1
    finally:
        os.close(lock)


if __name__ == "__main__":
    sys.exit(main())
