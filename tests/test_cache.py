"""deep_tile.jit.cache: memo, disk entries, keys, corruption, permissions, concurrent writers, and the
source index that lets a warm process find a cached kernel without re-hashing or asking a compiler."""
import builtins
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deep_tile import env
from deep_tile.errors import CacheError, CompileError
from deep_tile.jit import cache, compiler, source_index
from conftest import cache_entries

ROOT = Path(__file__).resolve().parents[1]
AVAILABLE = compiler.available_compilers()
TINY = ("tiny", {"DT_SCALE": 3}, "dt_tiny")

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="neither NVRTC nor nvcc is available")


@pytest.fixture
def tree(data_tree):
    """A private copy of tests/data (include + csrc) and an empty cache dir; memo and stats reset."""
    return data_tree


def test_miss_then_memo_hit_then_disk_hit(tree):
    cubin = cache.get_cubin(*TINY)
    assert compiler.has_symbol(cubin, "dt_tiny")
    assert cache.cache_stats() == {"memo_hits": 0, "disk_hits": 0, "misses": 1, "compiles": 1,
                                "corrupt": 0, "hits": 0, "index_hits": 0}
    assert cache.get_cubin(*TINY) is cubin
    assert cache.cache_stats()["memo_hits"] == 1
    cache.clear_memo()
    assert cache.get_cubin(*TINY) == cubin
    stats = cache.cache_stats()
    assert stats["disk_hits"] == 1 and stats["compiles"] == 1 and stats["hits"] == 2
    assert stats["index_hits"] == 1  # the key's source hashes and compiler version came from the index
    [entry] = cache_entries(tree)
    assert entry.parent.name == entry.name[:2] and len(entry.name) == 64
    assert (entry / "kernel.cubin").read_bytes() == cubin
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["key"] == entry.name and meta["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
    assert meta["compiler"] == AVAILABLE[0] and "sm_90a" in meta["command"]
    assert "dt_tiny" in meta["log"] and meta["inputs"]["defines"] == {"DT_SCALE": "3"}
    assert meta["inputs"]["arch"] == "sm_90a" and meta["created"] > 0


def test_memo_hit_does_no_file_io_and_no_hashing(tree, monkeypatch):
    cubin = cache.get_cubin(*TINY)

    def forbidden(*args, **kwargs):
        raise AssertionError("file I/O or hashing on a memo hit")

    with monkeypatch.context() as m:
        for owner, name in [(builtins, "open"), (io, "open"), (os, "stat"), (os, "open"),
                            (os, "listdir"), (os, "scandir"), (hashlib, "sha256")]:
            m.setattr(owner, name, forbidden)
        for name in ["read_bytes", "read_text", "open", "stat", "exists", "is_dir", "is_file", "rglob"]:
            m.setattr(Path, name, forbidden)
        assert cache.get_cubin(*TINY) is cubin
        assert cache.get_cubin("tiny", {"DT_SCALE": 3}, "dt_tiny") is cubin
    assert cache.cache_stats()["memo_hits"] == 2


def test_key_changes_with_defines_and_headers(tree):
    first = cache.get_cubin(*TINY)
    cache.get_cubin("tiny", {"DT_SCALE": 4}, "dt_tiny")
    assert len(cache_entries(tree)) == 2
    header = tree / "data" / "include" / "dt_test" / "scale.cuh"
    header.write_text(header.read_text().replace("x * scale + 1", "x * scale + 2"))
    cache.clear_memo()  # header hashes are taken once per process
    changed = cache.get_cubin(*TINY)
    assert changed != first and len(cache_entries(tree)) == 3
    (tree / "data" / "include" / "dt_test" / "new.cuh").write_text("// a new, unused header\n")
    cache.clear_memo()
    cache.get_cubin(*TINY)
    assert len(cache_entries(tree)) == 4 and cache.cache_stats()["compiles"] == 4


@pytest.mark.parametrize("damage", ["truncate", "delete_cubin", "bad_meta", "flip_byte"])
def test_corrupt_entry_is_rebuilt(tree, damage):
    good = cache.get_cubin(*TINY)
    [entry] = cache_entries(tree)
    cubin_file, meta_file = entry / "kernel.cubin", entry / "meta.json"
    if damage == "truncate":
        cubin_file.write_bytes(good[: len(good) // 2])
    elif damage == "delete_cubin":
        cubin_file.unlink()
    elif damage == "bad_meta":
        meta_file.write_text("{not json")
    else:
        cubin_file.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    cache.clear_memo()
    assert cache.get_cubin(*TINY) == good
    stats = cache.cache_stats()
    assert stats["corrupt"] == 1 and stats["compiles"] == 2 and stats["disk_hits"] == 0
    [entry_again] = cache_entries(tree)
    assert (entry_again / "kernel.cubin").read_bytes() == good
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]  # nothing left aside
    cache.clear_memo()
    cache.get_cubin(*TINY)
    assert cache.cache_stats()["disk_hits"] == 1


def test_unusable_cache_dir_raises_cache_error(tree, monkeypatch):
    blocker = tree / "file.txt"
    blocker.write_text("a regular file, so even root cannot create a directory below it")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(blocker / "sub"))
    with pytest.raises(CacheError) as info:
        cache.get_cubin(*TINY)
    assert "DEEP_TILE_CACHE_DIR" in str(info.value) and "DEEP_TILE_DISABLE_CACHE" in str(info.value)
    assert str(blocker / "sub") in str(info.value)
    assert cache.cache_stats()["compiles"] == 0  # failed before compiling


def test_disable_cache_compiles_every_time_and_writes_nothing(tree, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_DISABLE_CACHE", "1")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tree / "file.txt" / "sub"))  # would fail if used
    (tree / "file.txt").write_text("x")
    first = cache.get_cubin(*TINY)
    second = cache.get_cubin(*TINY)
    assert compiler.has_symbol(first, "dt_tiny") and compiler.has_symbol(second, "dt_tiny")
    stats = cache.cache_stats()
    assert stats["compiles"] == 2 and stats["hits"] == 0 and stats["misses"] == 0
    assert not (tree / "cache").exists()


def test_debug_log_reports_miss_and_hit(tree, monkeypatch, capsys):
    monkeypatch.setenv("DEEP_TILE_DEBUG", "1")
    cache.get_cubin(*TINY)
    cache.clear_memo()
    cache.get_cubin(*TINY)
    err = capsys.readouterr().err
    compiler_name = AVAILABLE[0]
    assert f"deep_tile: compile tiny DT_SCALE=3 with {compiler_name} in " in err
    assert "s (cache miss)" in err and "(cache hit" in err and "command: " in err


def test_dump_asm_writes_ptx_and_sass(tree, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_DUMP_ASM", "1")
    cache.get_cubin(*TINY)
    [entry] = cache_entries(tree)
    assert ".target sm_90a" in (entry / "kernel.ptx").read_text()
    if compiler.find_tool("cuobjdump") is None:
        assert not (entry / "kernel.sass").exists()
    else:
        assert "dt_tiny" in (entry / "kernel.sass").read_text()


def test_dump_asm_without_tools_does_not_fail(tree, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_DUMP_ASM", "1")
    monkeypatch.setattr(compiler, "find_tool", lambda name: None)
    assert compiler.has_symbol(cache.get_cubin(*TINY), "dt_tiny")
    [entry] = cache_entries(tree)
    assert not (entry / "kernel.sass").exists()


def test_ptxas_check_applies_to_cached_entries(tree, monkeypatch):
    cache.get_cubin("spill", {}, "dt_spill")  # check off: cached
    monkeypatch.setenv("DEEP_TILE_PTXAS_CHECK", "1")
    with pytest.raises(CompileError, match="stack frame"):
        cache.get_cubin("spill", {}, "dt_spill")  # memo key includes the check; disk hit rejected
    assert cache.get_cubin(*TINY)


def test_cached_cubin_without_the_kernel_name_is_an_error(tree):
    cache.get_cubin(*TINY)
    cache.clear_memo()
    with pytest.raises(CompileError, match="cached cubin .* has no kernel symbol 'dt_other'"):
        cache.get_cubin("tiny", {"DT_SCALE": 3}, "dt_other")


def test_compile_errors_propagate_and_are_not_cached(tree):
    with pytest.raises(CompileError, match="DT_SCALE must be defined"):
        cache.get_cubin("tiny", {}, "dt_tiny")
    with pytest.raises(CompileError):
        cache.get_cubin("tiny", {}, "dt_tiny")
    assert cache.cache_stats()["compiles"] == 0 and cache_entries(tree) == []
    with pytest.raises(FileNotFoundError, match="'missing'"):
        cache.get_cubin("missing", {}, "dt_tiny")
    with pytest.raises(ValueError, match="C identifiers"):
        cache.get_cubin("tiny", {"bad name": 1}, "dt_tiny")


@pytest.mark.nvcc
@pytest.mark.skipif("nvcc" not in AVAILABLE, reason="nvcc not found")
def test_compiler_is_part_of_the_key(tree, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_COMPILER", "nvcc")
    cache.get_cubin(*TINY)
    if "nvrtc" in AVAILABLE:
        monkeypatch.setenv("DEEP_TILE_COMPILER", "nvrtc")
        cache.get_cubin(*TINY)
    assert len(cache_entries(tree)) == len(AVAILABLE) and cache.cache_stats()["compiles"] == len(AVAILABLE)


CHILD = r"""
import hashlib, os, sys, time
from pathlib import Path
gate, ready, inc, csrc = sys.argv[1:5]
from deep_tile.jit import cache, compiler, paths, source_index
compiler.compiler_version(compiler.default_compiler())  # load the compiler before the race
paths.include_dir = lambda: Path(inc)
paths.csrc_dir = lambda: Path(csrc)
Path(ready).touch()
while not os.path.exists(gate):
    time.sleep(0.002)
cubin = cache.get_cubin("tiny", {"DT_SCALE": 5}, "dt_tiny")
print(hashlib.sha256(cubin).hexdigest(), cache.cache_stats()["compiles"])
"""


def test_concurrent_processes_publish_one_entry(tree):
    num_procs = 8
    child_env = env.subprocess_env()
    child_env.update({"DEEP_TILE_CACHE_DIR": str(tree / "cache"), "DEEP_TILE_COMPILER": AVAILABLE[0],
                      "PYTHONPATH": os.pathsep.join([str(ROOT), child_env.get("PYTHONPATH", "")])})
    gate = tree / "gate"
    data = tree / "data"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(gate), str(tree / f"ready{i}"),
                               str(data / "include"), str(data / "csrc")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
             for i in range(num_procs)]
    deadline = time.monotonic() + 120
    while sum((tree / f"ready{i}").exists() for i in range(num_procs)) < num_procs:
        if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.01)
    gate.touch()
    results = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
    [entry] = cache_entries(tree)
    published = hashlib.sha256((entry / "kernel.cubin").read_bytes()).hexdigest()
    digests = {out.split()[0] for out, _ in results}
    assert digests == {published}
    assert sum(int(out.split()[1]) for out, _ in results) >= 1
    leftovers = [p for p in entry.parent.iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers


# ---- the source index: a warm process neither re-hashes headers nor asks the compiler -----------

def _forbid_full_key(monkeypatch):
    """Make hashing the headers or asking a compiler for its version fail loudly."""
    def forbidden(*args, **kwargs):
        raise AssertionError("header hashing or a compiler query on an index hit")

    monkeypatch.setattr(source_index, "include_digest", forbidden)
    monkeypatch.setattr(compiler, "compiler_version", forbidden)
    monkeypatch.setattr(compiler, "default_compiler", forbidden)


@pytest.mark.parametrize("request_", ["explicit", "auto"])
def test_index_hit_hashes_no_header_and_asks_no_compiler(tree, monkeypatch, request_):
    if request_ == "auto":
        monkeypatch.delenv("DEEP_TILE_COMPILER")
    cubin = cache.get_cubin(*TINY)
    assert source_index.stats()["index_writes"] >= 1
    cache.clear_memo()
    with monkeypatch.context() as m:
        _forbid_full_key(m)
        assert cache.get_cubin(*TINY) == cubin
    assert cache.cache_stats()["index_hits"] == 1 and cache.cache_stats()["compiles"] == 1


def test_index_key_equals_the_full_key(tree):
    cache.get_cubin(*TINY)
    [entry] = cache_entries(tree)
    entry_source = (tree / "data" / "csrc" / "entry" / "tiny.cu").read_bytes()
    key, _ = cache.cache_key(entry_source, tree / "data" / "include", {"DT_SCALE": 3}, AVAILABLE[0])
    assert entry.name == key


def test_header_edit_changes_the_key_after_the_index_was_written(tree, monkeypatch):
    first = cache.get_cubin(*TINY)
    header = tree / "data" / "include" / "dt_test" / "scale.cuh"
    text = header.read_text()
    header.write_text(text.replace("x * scale + 1", "x * scale + 3"))  # same size, new mtime
    old = time.time_ns() - 10 * source_index.SETTLE_NS
    os.utime(header, ns=(old, old))  # settled, so the new state is indexed too
    cache.clear_memo()
    second = cache.get_cubin(*TINY)
    assert second != first and len(cache_entries(tree)) == 2 and cache.cache_stats()["compiles"] == 2
    cache.clear_memo()
    with monkeypatch.context() as m:
        _forbid_full_key(m)
        assert cache.get_cubin(*TINY) == second  # the edited state is served from the index


def test_a_tree_being_edited_is_not_indexed(tree):
    header = tree / "data" / "include" / "dt_test" / "scale.cuh"
    header.write_text(header.read_text())  # mtime: now
    cache.get_cubin(*TINY)
    assert source_index.stats()["index_writes"] == 0
    assert not list(source_index.index_dir().glob("*.json"))
    header.write_text(header.read_text().replace("x * scale + 1", "x * scale + 4"))  # within the same tick
    cache.clear_memo()
    cache.get_cubin(*TINY)
    assert len(cache_entries(tree)) == 2  # hashed from the contents again: the edit is seen


def test_corrupt_index_record_is_ignored_and_rewritten(tree):
    cubin = cache.get_cubin(*TINY)
    [record] = source_index.index_dir().glob("*.json")
    record.write_text("{not json")
    cache.clear_memo()
    assert cache.get_cubin(*TINY) == cubin
    assert cache.cache_stats()["index_hits"] == 0 and cache.cache_stats()["compiles"] == 1
    assert json.loads(record.read_text())["compiler"] == AVAILABLE[0]


def test_compiler_change_changes_the_fingerprint(tree, tmp_path, monkeypatch):
    include, entry = tree / "data" / "include", tree / "data" / "csrc" / "entry" / "tiny.cu"
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DEEP_TILE_NVCC", str(fake))
    before, _ = source_index.fingerprint(entry, include, "nvcc")
    assert source_index.fingerprint(entry, include, "nvcc")[0] == before
    fake.write_text("#!/bin/sh\n# upgraded\n")
    assert source_index.fingerprint(entry, include, "nvcc")[0] != before
    assert source_index.fingerprint(entry, include, "nvrtc")[0] != before


# ---- damage of every kind, seen by a fresh process: rebuilt or recomputed, never served --------

FRESH = r"""
import hashlib, json, sys
from pathlib import Path
from deep_tile.jit import cache, paths, source_index
paths.include_dir = lambda: Path({inc!r})
paths.csrc_dir = lambda: Path({csrc!r})
cubin = cache.get_cubin("tiny", {{"DT_SCALE": 3}}, "dt_tiny")
print(json.dumps({{"sha256": hashlib.sha256(cubin).hexdigest(), **cache.cache_stats(), **source_index.stats()}}))
"""


def run_fresh(tree: Path, **extra_env) -> dict:
    """get_cubin(*TINY) in a fresh interpreter on ``tree``'s sources and cache: its stats."""
    from conftest import run_python

    code = FRESH.format(inc=str(tree / "data" / "include"), csrc=str(tree / "data" / "csrc"))
    child_env = env.subprocess_env()
    child_env.update({"DEEP_TILE_CACHE_DIR": str(tree / "cache"), "DEEP_TILE_COMPILER": AVAILABLE[0],
                      "PYTHONPATH": str(ROOT), **extra_env})
    result = run_python(code, timeout=120, env=child_env)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def damage(path: Path, how: str, good: bytes = b"") -> None:
    """Damage the file at ``path``: truncated, garbage, empty, missing, or a directory in its place."""
    if how == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(max(len(good), 64)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "missing":
        path.unlink()
    elif how == "directory":
        path.unlink()
        (path / "child").mkdir(parents=True)
    else:
        raise AssertionError(how)


KINDS = ["truncated", "garbage", "empty", "missing"]


@pytest.mark.parametrize("what,how", [("kernel.cubin", how) for how in KINDS]
                         + [("meta.json", how) for how in KINDS + ["directory", "wrong_types", "other_key"]]
                         + [("entry", "file"), ("shard", "file"), ("kernels", "file")])
def test_damaged_entry_is_rebuilt_by_a_fresh_process(tree, what, how):
    good = cache.get_cubin(*TINY)
    [entry] = cache_entries(tree)
    if what in ("kernel.cubin", "meta.json") and how in KINDS + ["directory"]:
        damage(entry / what, how, (entry / what).read_bytes())
    elif how in ("wrong_types", "other_key"):
        meta = json.loads((entry / "meta.json").read_text())
        meta.update({"log": ["not", "a", "str"]} if how == "wrong_types" else {"key": "0" * 64})
        (entry / "meta.json").write_text(json.dumps(meta))
    else:
        target = {"entry": entry, "shard": entry.parent, "kernels": tree / "cache" / "kernels"}[what]
        shutil.rmtree(target)
        target.write_text("a file where a cache folder belongs")
    stats = run_fresh(tree)
    assert stats["sha256"] == hashlib.sha256(good).hexdigest()
    assert stats["compiles"] == 1 and stats["disk_hits"] == 0
    assert stats["corrupt"] == (1 if what in ("kernel.cubin", "meta.json", "entry") else 0)
    [again] = cache_entries(tree)
    assert (again / "kernel.cubin").read_bytes() == good
    assert not [p for p in again.parent.iterdir() if p.name.startswith(".")]  # nothing left aside
    assert run_fresh(tree)["disk_hits"] == 1  # the rebuilt entry is served to the next process


@pytest.mark.parametrize("how", KINDS + ["directory", "wrong_types", "flipped_digit"])
def test_damaged_index_record_is_recomputed_and_rewritten_by_a_fresh_process(tree, how):
    from deep_tile import json_records

    good = cache.get_cubin(*TINY)
    [record] = source_index.index_dir().glob("*.json")
    stored = json.loads(record.read_text())
    if how == "wrong_types":
        stored["compiler_version"] = 13
        stored.pop(json_records.CHECKSUM)
        record.write_text(json.dumps({**stored, json_records.CHECKSUM: json_records._digest(stored)}))
    elif how == "flipped_digit":
        stored["entry_sha256"] = ("1" if stored["entry_sha256"][0] != "1" else "2") + stored["entry_sha256"][1:]
        record.write_text(json.dumps(stored))  # still JSON, still the right types: the checksum catches it
    else:
        damage(record, how, record.read_bytes())
    stats = run_fresh(tree)
    assert stats["sha256"] == hashlib.sha256(good).hexdigest()
    assert stats["index_hits"] == 0 and stats["full"] == 1 and stats["index_writes"] == 1
    assert stats["disk_hits"] == 1 and stats["compiles"] == 0  # the same key: the entry is served
    assert json_records.read(record)["compiler"] == AVAILABLE[0]  # rewritten whole
    assert run_fresh(tree)["index_hits"] == 1


@pytest.mark.parametrize("where", ["below_a_file", "a_file"])
def test_unusable_cache_dir_in_a_fresh_process_is_one_cache_error(tree, where):
    from conftest import run_python

    blocker = tree / "blocker"
    blocker.write_text("a regular file: even root cannot make a directory below it")
    cache_dir = blocker / "cache" if where == "below_a_file" else blocker
    code = FRESH.format(inc=str(tree / "data" / "include"), csrc=str(tree / "data" / "csrc"))
    child_env = dict(env.subprocess_env(), DEEP_TILE_CACHE_DIR=str(cache_dir), DEEP_TILE_COMPILER=AVAILABLE[0],
                     PYTHONPATH=str(ROOT))
    result = run_python(code, timeout=120, env=child_env)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("deep_tile.errors.CacheError: deep_tile: the kernel cache directory "), result.stderr
    assert str(cache_dir) in last and "DEEP_TILE_CACHE_DIR" in last and "DEEP_TILE_DISABLE_CACHE=1" in last
    assert "OSError" not in result.stderr and "NotADirectoryError" not in result.stderr.replace(last, "")
    assert blocker.read_text().startswith("a regular file")


@pytest.mark.parametrize("name", ["DEEP_TILE_DEBUG", "DEEP_TILE_DUMP_ASM", "DEEP_TILE_NATIVE", "DEEP_TILE_PRINT_CONFIGS"])
def test_bad_env_value_fails_before_anything_is_written(tree, monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError, match=rf"environment variable {name} must be .*'maybe'"):
        cache.get_cubin(*TINY)
    assert not (tree / "cache").exists()
    assert cache.cache_stats()["compiles"] == 0
    monkeypatch.setenv("DEEP_TILE_DISABLE_CACHE", "1")
    with pytest.raises(ValueError, match=name):
        cache.get_cubin(*TINY)
    assert cache.cache_stats()["compiles"] == 0


def test_index_is_skipped_silently_when_it_cannot_be_written(tree):
    from deep_tile import json_records

    (tree / "blocker").write_text("x")
    assert json_records.write(tree / "blocker" / "index" / "r.json", {"a": 1}) is False
    assert json_records.write(tree / "ok" / "r.json", {"a": (1, 2)}) is True
    assert json_records.read(tree / "ok" / "r.json") == {"a": [1, 2]}
    assert json_records.read(tree / "ok" / "r.json", lambda r: isinstance(r["a"], str)) is None
    assert json_records.write(tree / "ok" / "s.json", {"a": object()}) is False  # not JSON-able: not raised
