"""The selector's launch plans, remembered on disk so a warm process skips the selector.

Choosing a configuration imports :mod:`deep_tile.select` and ranks every candidate: about 20 ms
on the first call of a process, for an answer that only changes when the selector's sources or
the device change. The native path's plans (:mod:`deep_tile.native.bridge`) are stored as small
JSON records::

    <DEEP_TILE_CACHE_DIR>/plans/<fingerprint>/<kind>-<m>x<n>x<k>[-g<groups>-e<expected_m>]-<num_sms>[-rm].json

(``-rm``: the kernel reads a row-major a_scale; the file name spells every field of the
:class:`deep_tile.gemm.problem.Problem`).

where the fingerprint hashes what ``os.stat`` says of the modules the choice depends on
(:data:`SOURCES`: path, size, mtime, inode) and the device (name, SMs, shared memory, compute
capability). Editing the selector changes its mtime, so the fingerprint, so the records are not
used. As in :mod:`deep_tile.jit.source_index`, records are written only when every fingerprinted
file is older than :data:`SETTLE_NS`. ``DEEP_TILE_PRINT_CONFIGS`` bypasses the records (the
selector prints each new choice).

A damaged record (truncated, garbage, empty, a wrong checksum, a missing member or one of the
wrong type: :func:`valid_record`) reads as absent: the plan is computed by the selector and the
record written again. Records that cannot be written only cost speed.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from deep_tile import env, json_records
from deep_tile.gemm.kernel_args import CODE_LENGTHS
from deep_tile.json_records import SETTLE_NS

__all__ = ["SOURCES", "SETTLE_NS", "plans_dir", "valid_record", "lookup", "store"]

_PACKAGE = Path(__file__).resolve().parents[1]
SOURCES = ("select", "arch.py", "common.py", "device.py", "gemm/planner.py", "gemm/layouts.py", "gemm/problem.py",
           "gemm/kernel_args.py", "kernels/fp8_gemm.py", "native/bridge.py")
"""The package's files and folders (relative) whose code decides a plan."""

_fingerprints: dict = {}  # device index -> (fingerprint, newest mtime ns)


_POSITIVE_INTS = ("grid", "block", "smem", "cluster")


def _is_int(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 2 ** 31


def _valid_spec(spec) -> bool:
    return (isinstance(spec, list) and bool(spec) and all(_is_int(v, -1) for v in spec)
            and CODE_LENGTHS.get(spec[0]) == len(spec))


def valid_record(record: dict) -> bool:
    """Whether ``record`` has every member of a plan (``deep_tile.native.bridge``'s record) with
    the type the native path casts it to: what a stored record must pass before it is used."""
    defines, args = record.get("defines"), record.get("args")
    return (isinstance(defines, dict) and bool(defines)
            and all(isinstance(k, str) and isinstance(v, (int, str)) for k, v in defines.items())
            and all(_is_int(record.get(name), 1) for name in _POSITIVE_INTS)
            and isinstance(args, list) and bool(args) and all(_valid_spec(spec) for spec in args)
            and isinstance(record.get("label"), str))


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
    h = hashlib.sha256(f"deep_tile plan index 2\0{facts.name}\0{facts.num_sms}\0{facts.max_smem_per_block}\0"
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


def _path(device_index: int, problem, num_sms: int) -> tuple[Path, int]:
    digest, newest = _fingerprint(device_index)
    groups = f"-g{problem.num_groups}-e{problem.expected_m}" if problem.num_groups != 1 else ""
    layout = "-rm" if problem.a_scale_row_major else ""
    # the output variants and the 1D1D GEMM are kernels of their own (the default output keeps its name)
    if problem.out_dtype != "bfloat16" or problem.c_dtype is not None:
        layout += f"-{problem.out_dtype}-c{problem.c_dtype or 'none'}"
    if problem.b_scale_1d:
        layout += "-1d1d"
    name = f"{problem.kind.value}-{problem.m}x{problem.n}x{problem.k}{groups}-{num_sms}{layout}.json"
    return plans_dir() / digest[:32] / name, newest


def lookup(device_index: int, problem, num_sms: int) -> dict | None:
    """The stored record of the plan of ``problem`` (a :class:`deep_tile.gemm.problem.Problem`) with
    ``num_sms`` SMs, or None (absent, damaged, or DEEP_TILE_PRINT_CONFIGS)."""
    if env.print_configs() or env.disable_cache():
        return None
    path, _ = _path(device_index, problem, num_sms)
    return json_records.read(path, valid_record)


def store(device_index: int, problem, num_sms: int, record: dict) -> None:
    """Remember ``record`` (JSON-able) for this plan; failures only cost speed."""
    if env.disable_cache():
        return
    path, newest = _path(device_index, problem, num_sms)
    if time.time_ns() - newest < SETTLE_NS:
        return  # the selector's sources are being edited: do not remember
    json_records.write(path, record)
