"""Find, build and load the native extension; one state per process.

:func:`module` is asked on every call the Python kernels of :mod:`deep_tile.ops` run (that is,
until the extension is loaded: then its C++ kernels take the ops over). Its first call with
``start_build`` computes the build key (:mod:`deep_tile.native.key`: no compiler is run) and
loads the published library when there is one; otherwise it starts
``python -m deep_tile.native.build`` -- in the background (``DEEP_TILE_NATIVE=auto``; the Python
host path runs meanwhile and the library is loaded as soon as it is published) or waiting for it
(``wait``). Without a compiler, ninja or cuda.h, with an unusable cache directory, or after a
failed build, it warns once, saying what to install, what to set or where the log is, and the
Python host path runs.

A published library is verified before it is loaded (``deep_tile.native.build.published``:
its size and sha256 against ``meta.json``; once per process and key, about 1 ms); a damaged one
is discarded, never loaded, and built again like a missing one (in ``wait`` mode within the same
call). Every ``DEEP_TILE_*`` value is checked (:func:`deep_tile.env.validate`) before a build
writes anything.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

from deep_tile import device, env, pdl, phases
from deep_tile.errors import CacheError
from deep_tile.disk import discard as _discard
from deep_tile.native.build import in_progress as _build_in_progress, published as _published
from deep_tile.native import key as _key
from deep_tile.native import toolchain as _toolchain

__all__ = ["NativeUnavailableWarning", "module", "build", "status", "reset", "push_sms_limit", "push_pdl"]

POLL_SECONDS = 0.2
"""How often a process whose build runs in the background looks for the published library."""
WAIT_TIMEOUT = 1800
"""Longest wait (seconds) for a build in ``wait`` mode."""
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding deep_tile/


class NativeUnavailableWarning(RuntimeWarning):
    """The native host path cannot be used in this process; the GEMMs run on the Python host path."""


class _State:
    """This process's view of the extension (mutated under ``_lock``)."""

    def __init__(self):
        self.state = "idle"  # idle | building | loaded | unavailable | failed | off
        self.key: str | None = None
        self.reason = ""
        self.module = None
        self.process: subprocess.Popen | None = None
        self.next_poll = 0.0
        self.warned = False


_s = _State()
_lock = threading.Lock()
_loaded_modules: dict = {}  # key -> module: a library can be loaded only once per process


def _warn(message: str) -> None:
    """Warn once per process (whatever the warning filters say about repeats)."""
    if _s.warned:
        return
    _s.warned = True
    warnings.warn(message, NativeUnavailableWarning, stacklevel=4)


def _give_up(state: str, reason: str) -> None:
    _s.state, _s.reason = state, reason
    _warn(f"deep_tile: the native host path is not used ({reason}); the GEMMs run on the slower "
          "Python host path. Set DEEP_TILE_NATIVE=off to silence this.")


def _load(key: str):
    """Load the published library of ``key``, install the bridge and register its kernels."""
    start = time.perf_counter()
    loaded = _loaded_modules.get(key)
    if loaded is None:
        from deep_tile.native import bridge

        name = _key.module_name(key)
        spec = importlib.util.spec_from_file_location(name, _key.library_path(key))
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        if loaded.BRIDGE_VERSION != bridge.VERSION:
            raise ImportError(f"{_key.library_path(key)} speaks bridge version {loaded.BRIDGE_VERSION}, "
                              f"deep_tile.native.bridge speaks {bridge.VERSION}")
        loaded.install_bridge(bridge)
        loaded.set_sms_limit(bridge.sms_limit())
        device.add_sms_limit_listener(push_sms_limit)
        loaded.set_pdl(pdl.get_pdl())
        pdl.add_pdl_listener(push_pdl)
        _loaded_modules[key] = loaded
    loaded.register_ops()
    phases.add("native", time.perf_counter() - start)
    return loaded


def _try_load(key: str) -> bool:
    """Load the build of ``key`` when a whole one is published (a damaged one is discarded)."""
    if key not in _loaded_modules and not _published(key):
        return False
    try:
        _s.module = _load(key)
    except Exception as error:  # noqa: BLE001 - a library that does not load is a failed build
        _give_up("failed", f"{_key.library_path(key)} does not load: {error}")
        return False
    _s.state, _s.reason = "loaded", str(_key.library_path(key))
    return True


def _failure(key: str) -> str | None:
    """Why the build of ``key`` is not retried: its ``.failed`` marker (a regular file; its
    contents do not matter), or None. Something else in the marker's place is no marker."""
    marker = _key.native_dir() / f"{key}.failed"
    try:
        if not marker.is_file():
            return None
    except OSError:
        return None
    return (f"its build failed, see {_key.native_dir() / (key + '.log')}; delete {marker} to retry")


def _unusable(path: Path, error: OSError) -> CacheError:
    return CacheError(f"the cache directory {env.cache_dir()} is not usable ({path}: "
                      f"{error.strerror or error}); set DEEP_TILE_CACHE_DIR to a writable directory")


def _native_dir() -> Path:
    """``<cache>/native``, created; a file in its place (damage inside a usable cache) is removed.

    Raises:
        CacheError: the cache directory is not usable.
    """
    directory = _key.native_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError as error:
        try:
            usable_parent = directory.parent.is_dir()
        except OSError:
            usable_parent = False
        if not usable_parent:
            raise _unusable(directory, error) from None
        _discard(directory)
        try:
            directory.mkdir()
        except OSError as again:
            raise _unusable(directory, again) from None
    except OSError as error:
        raise _unusable(directory, error) from None
    return directory


def _open_log(path: Path):
    """``path`` opened for appending; whatever stands in its way (a directory, an unreadable
    file: the log is only for people) is removed once.

    Raises:
        CacheError: it cannot be opened even then.
    """
    try:
        return open(path, "ab")  # noqa: SIM115 - handed to the child
    except OSError:
        pass
    _discard(path)
    try:
        return open(path, "ab")  # noqa: SIM115
    except OSError as error:
        raise _unusable(path, error) from None


def _spawn(key: str, wait: bool, tools) -> subprocess.Popen:
    """Start the builder process (its output goes to ``<key>.log``); it imports this deep_tile.

    Raises:
        CacheError: the cache directory is not usable (nothing was started).
        OSError: the builder process could not be started.
    """
    directory = _native_dir()
    log = _open_log(directory / f"{key}.log")
    child_env = env.subprocess_env(tools.extra_path)
    root = str(_PACKAGE_ROOT)
    child_env["PYTHONPATH"] = os.pathsep.join([root] + ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
    try:
        args = [sys.executable, "-m", "deep_tile.native.build", key] + (["--wait"] if wait else [])
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=not wait, env=child_env)
    finally:
        log.close()


def _first_look(start_build: bool, mode: str) -> None:
    """The idle state's work: key, then load, or start a build.

    Raises:
        ValueError: a ``DEEP_TILE_*`` variable has a bad value (nothing was looked at or written).
    """
    env.validate()
    tools = _toolchain.find()
    if tools.missing:
        hints = "; ".join(_toolchain.INSTALL_HINTS[name] for name in tools.missing)
        _give_up("unavailable", f"building it needs {hints}")
        return
    start = time.perf_counter()
    _s.key, _ = _key.build_key(tools)
    phases.add("native", time.perf_counter() - start)
    if _try_load(_s.key) or _s.state == "failed":
        return
    failure = _failure(_s.key)
    if failure:
        _give_up("failed", failure)
        return
    if not start_build:
        return
    try:
        _s.process = _spawn(_s.key, mode == "wait", tools)
    except CacheError as error:
        _give_up("unavailable", str(error))
        return
    except OSError as error:
        _give_up("failed", f"its builder could not be started: {error}")
        return
    _s.state, _s.reason = "building", f"building {_key.entry_dir(_s.key)}"
    if mode == "wait":
        _wait_for_build()


def _wait_for_build() -> None:
    try:
        _s.process.wait(timeout=WAIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        _give_up("failed", f"its build took more than {WAIT_TIMEOUT} s")
        return
    _poll(force=True)


def _poll(force: bool = False) -> None:
    """The building state's work: load the library once it is published."""
    now = time.monotonic()
    if not force and now < _s.next_poll:
        return
    _s.next_poll = now + POLL_SECONDS
    if _try_load(_s.key):
        return
    finished = _s.process is None or _s.process.poll() is not None
    if finished and _s.state == "building":
        failure = _failure(_s.key)
        if not failure and _build_in_progress(_s.key):
            # NOTES: our builder found another process's builder at work (it exits at once then);
            # keep polling for the library that one publishes.
            return
        # _try_load found no whole library: none was published, or a damaged one was discarded.
        _give_up("failed", failure or f"its builder exited without publishing {_key.entry_dir(_s.key)}; "
                                      f"see {_key.native_dir() / (_s.key + '.log')}")


def module(start_build: bool = True):
    """The loaded extension module, or None while the Python host path must run.

    Args:
        start_build: whether this call may start a build (the ops pass True only for CUDA
            tensors, so CPU-only processes never build anything).
    """
    if _s.module is not None:
        return _s.module
    state = _s.state
    if state in ("unavailable", "failed", "off") or (state == "idle" and not start_build and _s.key is None):
        return None
    with _lock:
        if _s.state == "idle":
            mode = env.native()
            if mode == "off":
                _s.state, _s.reason = "off", "DEEP_TILE_NATIVE=off"
                return None
            _first_look(start_build, mode)
        elif _s.state == "building":
            _poll()
    return _s.module


def build(wait: bool = True) -> bool:
    """Build (when needed) and load the extension now, whatever ``DEEP_TILE_NATIVE`` says.

    Returns whether it is loaded. With ``wait=False`` the build runs in the background and the
    next :func:`module` call that finds it published loads it.
    """
    with _lock:
        if _s.module is not None:
            return True
        if _s.state in ("off", "idle"):
            _s.state = "idle"
            _first_look(True, "wait" if wait else "auto")
        elif _s.state == "building" and wait:
            _wait_for_build()
    return _s.module is not None


def push_sms_limit(limit: int | None) -> None:
    """Hand the :func:`deep_tile.set_num_sms` limit (None or 0: none) to every loaded library
    (registered with :func:`deep_tile.device.add_sms_limit_listener` when a library loads)."""
    for loaded in _loaded_modules.values():
        loaded.set_sms_limit(limit or 0)


def push_pdl(enabled: bool) -> None:
    """Hand the :func:`deep_tile.set_pdl` setting to every loaded library (registered with
    :func:`deep_tile.pdl.add_pdl_listener` when a library loads)."""
    for loaded in _loaded_modules.values():
        loaded.set_pdl(enabled)


def status() -> dict:
    """This process's view: ``state`` (idle, building, loaded, unavailable, failed, off), ``key``,
    ``reason``, ``library`` (its path once the key is known) and ``warned``."""
    library = str(_key.library_path(_s.key)) if _s.key else None
    return {"state": _s.state, "key": _s.key, "reason": _s.reason, "library": library, "warned": _s.warned}


def reset() -> None:
    """Forget this process's state (tests): deregister the native kernels, keep loaded libraries."""
    global _s
    with _lock:
        if _s.module is not None:
            _s.module.deregister_ops()
        _s = _State()
