"""The built wheel is a working install: everything the package reads from disk ships in it.

An editable install reads the checkout, so it hides files a wheel lacks (the native extension's
C++ sources were missing from every wheel until 2026-11-23, and every GPU call of a regular
install failed). This builds the wheel from the checkout, installs it into a fresh directory
outside the checkout (``pip install --target``), and runs this interpreter from another such
directory with only that install on ``PYTHONPATH``, so the dependencies (torch, cuda-bindings, the
NVIDIA library wheels) come from the environment the tests run in, a virtual environment or not.
It checks that:

- ``deep_tile`` is imported from that install, not from the checkout;
- every file of the checkout's ``deep_tile/`` package, ``include/`` and ``csrc/`` trees is in the
  installed package (``_data/`` for the kernel sources), plus ``py.typed`` and the licence;
- the code that names files on disk finds them: the kernel entry files and headers
  (:mod:`deep_tile.jit.paths`), the native extension's sources and build key
  (:mod:`deep_tile.native.key`), the plan index's fingerprinted modules;
- a kernel compiles from the installed sources (NVRTC, into a fresh cache), the command line
  runs, and the native extension builds and loads from the installed package (when a C++
  compiler, ninja and cuda.h are here).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from deep_tile.jit import compiler
from deep_tile.native import toolchain

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _setuptools_builds_here() -> bool:
    """Whether this interpreter's setuptools can build the wheel without build isolation (the
    licence metadata needs setuptools >= 77); else pip builds in an isolated environment."""
    try:
        import setuptools
        return int(setuptools.__version__.split(".")[0]) >= 77
    except (ImportError, ValueError):
        return False


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from the checkout and installed into a fresh directory. Yields (wheel path,
    install directory, work dir).

    Not a child venv: ``venv --system-site-packages`` made from inside a venv exposes the base
    interpreter's packages rather than this environment's, and a venv that lists this
    environment's directories on its path still reports only its own ``site.getsitepackages()``,
    where cuda.pathfinder looks for the NVIDIA library wheels (NVRTC)."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    # Built from a clean copy: pip builds a local directory in place, and a stale build/ left in the
    # checkout would both dirty it and could put files into the wheel that the sources no longer ship.
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".*"))
    isolation = [] if _setuptools_builds_here() else ["--use-pep517"]
    no_isolation = ["--no-build-isolation"] if not isolation else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *no_isolation, *isolation, "-q", "-w", str(dist),
          str(source)], cwd=base)
    [wheel] = dist.glob("deep_tile-*.whl")
    target = base / "installed"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)])
    work = base / "elsewhere"
    work.mkdir()
    yield wheel, target, work


def _child_env(target: Path, work: Path, env: dict | None = None) -> dict:
    """This process's environment with only the install on PYTHONPATH (never the checkout), no
    DEEP_TILE_* settings, and a fresh cache under ``work``."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("DEEP_TILE_")}
    child_env.update({"PYTHONPATH": str(target), "DEEP_TILE_CACHE_DIR": str(work / "cache"), **(env or {})})
    return child_env


def _child(target: Path, work: Path, code: str, env: dict | None = None, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=work, capture_output=True, text=True,
                          timeout=timeout, env=_child_env(target, work, env))
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout


def _checkout_files() -> dict[str, Path]:
    """Installed path (relative to site-packages) -> checkout file, for every file a wheel must hold."""
    files = {}
    for path in (ROOT / "deep_tile").rglob("*"):
        rel = path.relative_to(ROOT)
        if path.is_file() and "__pycache__" not in rel.parts and rel.parts[1] != "_data" and path.suffix != ".pyc":
            files[rel.as_posix()] = path
    for tree in ("include", "csrc"):
        for path in (ROOT / tree).rglob("*"):
            if path.is_file():
                files[f"deep_tile/_data/{path.relative_to(ROOT).as_posix()}"] = path
    return files


def test_the_wheel_holds_every_file_of_the_package(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        licences = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    missing = sorted(set(_checkout_files()) - names)
    assert not missing, f"the wheel lacks files of the checkout: {missing}"
    assert "deep_tile/py.typed" in names
    assert licences, "no LICENSE in the wheel's dist-info"
    assert "License-Expression: MIT" in metadata
    for extra in ("cu12", "cu13", "test"):
        assert f"Provides-Extra: {extra}" in metadata
    # the base install pulls no CUDA-major-specific package: that is the extras' job
    base = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [line for line in base if "cuda" in line.lower()], base


def test_the_installed_package_finds_its_files(installed):
    _, target, work = installed
    out = _child(target, work, """
        import json, os
        import deep_tile
        from deep_tile.gemm import plan_index
        from deep_tile.jit import paths
        from deep_tile.kernels import cast_fp8, fp8_gemm
        from deep_tile.native import key, toolchain
        package = os.path.dirname(deep_tile.__file__)
        checks = {
            "package": package,
            "data_root": str(paths.data_root()),
            "entries": [str(paths.entry_path(fp8_gemm.ENTRY)), str(paths.entry_path(cast_fp8.ENTRY))],
            "native_sources": sorted(p.name for p in key.SOURCE_DIR.iterdir()),
            "source_digest": key.source_digest(),
            "plan_sources": [os.path.exists(os.path.join(package, s)) for s in plan_index.SOURCES],
            "build_key": key.build_key(toolchain.find())[0] if not toolchain.find().missing else None,
            "typed": os.path.isfile(os.path.join(package, "py.typed")),
        }
        print(json.dumps(checks))
    """)
    facts = json.loads(out.strip().splitlines()[-1])
    assert Path(facts["package"]) == target / "deep_tile", facts["package"]
    assert Path(facts["data_root"]) == Path(facts["package"]) / "_data"
    assert all(Path(entry).is_relative_to(facts["package"]) for entry in facts["entries"])
    assert facts["native_sources"] == sorted(p.name for p in (ROOT / "deep_tile" / "native" / "csrc").iterdir())
    from deep_tile.native import key
    assert facts["source_digest"] == key.source_digest()  # the same sources as the checkout
    assert all(facts["plan_sources"]) and facts["typed"]


@pytest.mark.skipif("nvrtc" not in compiler.available_compilers(), reason="NVRTC does not load here")
def test_the_installed_package_compiles_and_runs_its_command_line(installed):
    _, target, work = installed
    out = _child(target, work, """
        from deep_tile.jit import cache
        from deep_tile.kernels import cast_fp8
        cubin = cache.get_cubin(cast_fp8.ENTRY, cast_fp8.defines("bfloat16"), cast_fp8.PER_TOKEN_SYMBOL,
                                compiler="nvrtc")
        print("cubin", len(cubin), cache.cache_stats()["compiles"])
    """)
    assert out.startswith("cubin ") and int(out.split()[2]) == 1
    # the same environment as the import check, so ``-m deep_tile`` runs the installed package
    proc = subprocess.run([sys.executable, "-m", "deep_tile", "warmup", "--shape", "64,2112,7168", "--num-sms", "132",
                           "--compiler", "nvrtc"], cwd=work, capture_output=True, text=True, timeout=600,
                          env=_child_env(target, work))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 compiled, 0 cache hits, 0 errors" in proc.stdout, proc.stdout


@pytest.mark.skipif(bool(toolchain.find().missing), reason="no C++ compiler, ninja or cuda.h here")
def test_the_native_extension_builds_from_the_installed_package(installed):
    _, target, work = installed
    out = _child(target, work, """
        from deep_tile import native
        assert native.build(wait=True), native.status()
        status = native.status()
        print(status["state"], status["library"])
    """, env={"DEEP_TILE_CACHE_DIR": str(work / "native-cache")})
    state, library = out.split()[-2:]
    assert state == "loaded" and Path(library).is_relative_to(work / "native-cache"), out
