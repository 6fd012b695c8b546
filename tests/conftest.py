"""Shared pytest setup: GPU/nvcc markers that skip cleanly, and isolated GPU runs.

GPU checks run in a child Python process under a timeout (see `run_gpu_cases`): a kernel that
traps or hangs poisons its whole CUDA context, so it must fail one test, not the whole pytest run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deep_tile.testing.numeric import DIFF_TOL, REL_TOL  # noqa: F401 -- the GPU tests' accuracy bar, imported from here

ROOT = Path(__file__).resolve().parents[1]

# The build tests read each kernel's ptxas -v report. On a GPU machine NVRTC 12.9+ serves a
# program compiled before (in any process) from the driver's compute cache, with an empty log;
# the variable must be set before CUDA starts (deep_tile/jit/compiler.py ptxas_problems). The GPU
# tests' child processes inherit it.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")


def has_sm90() -> bool:
    """True when a CUDA device of compute capability 9.0 is visible."""
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
    except Exception:  # pragma: no cover - broken CUDA install
        return False


def pytest_addoption(parser):
    parser.addoption("--kernel-sweep", action="store_true", default=False,
                     help="tests/test_kernel_build.py: compile every kernel variant the selector can emit "
                          "(README, 'Full kernel sweep'), not one kernel per code path; and run the tests "
                          "marked nvcc, which the suite skips")
    parser.addoption("--sweep-nvcc", action="store_true", default=False,
                     help="with --kernel-sweep: build every variant with nvcc too, not only the smoke set "
                          "(about twice the time)")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs an sm_90 (Hopper) GPU")
    nvcc_path = os.environ.get("DEEP_TILE_NVCC") or shutil.which("nvcc")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc (PATH or DEEP_TILE_NVCC)")
    # nvcc builds run in the kernel sweep (README, 'Full kernel sweep'): the suite builds with NVRTC only,
    # its time on 2 cores
    sweep = config.getoption("--kernel-sweep")
    skip_nvcc_in_suite = pytest.mark.skip(reason="nvcc builds run in the kernel sweep (--kernel-sweep)")
    gpu_ok = None
    for item in items:
        if "gpu" in item.keywords:
            if gpu_ok is None:
                gpu_ok = has_sm90()
            if not gpu_ok:
                item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not nvcc_path:
            item.add_marker(skip_nvcc)
        elif "nvcc" in item.keywords and not sweep:
            item.add_marker(skip_nvcc_in_suite)


@pytest.fixture
def no_deep_tile_env(monkeypatch):
    """No DEEP_TILE_* variable set except DEEP_TILE_NVCC (compile tests check the ptxas report
    themselves, and must not inherit a cache, compiler or watchdog choice from the shell)."""
    from deep_tile import env

    for name in env.REGISTRY:
        if name.startswith("DEEP_TILE_") and name != "DEEP_TILE_NVCC":
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_tree(tmp_path, monkeypatch, no_deep_tile_env):
    """tests/data (a tiny include + csrc tree) copied into ``tmp_path`` as the kernel sources, an
    empty cache in ``tmp_path/cache``, the first available compiler; the in-process memo and cache
    statistics reset before and the memo after. Yields ``tmp_path``."""
    import tempfile

    from deep_tile.jit import cache, compiler, paths

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # kept failing sources land here
    shutil.copytree(ROOT / "tests" / "data", tmp_path / "data")
    monkeypatch.setattr(paths, "include_dir", lambda: tmp_path / "data" / "include")
    monkeypatch.setattr(paths, "csrc_dir", lambda: tmp_path / "data" / "csrc")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DEEP_TILE_COMPILER", compiler.available_compilers()[0])
    cache.clear_memo()
    cache.reset_stats()
    yield tmp_path
    cache.clear_memo()


def cache_entries(tmp_path: Path) -> list[Path]:
    """The published kernel entry directories of the ``data_tree`` cache (no temp or discarded ones)."""
    root = tmp_path / "cache" / "kernels"
    return sorted(p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith("."))


def assert_spill_free(log: str, reports: int | None = None) -> None:
    """Every ptxas ``-v`` report in ``log`` says 0 bytes of stack frame and spills; ``reports``: how
    many reports (functions) there must be (None: at least one)."""
    lines = [line for line in log.splitlines() if "bytes stack frame" in line]
    assert len(lines) == reports if reports is not None else lines, log
    for line in lines:
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in line, log


def compiler_params() -> list:
    """``pytest.param("nvrtc")`` and ``pytest.param("nvcc")``, each skipped when that compiler is
    not available here (nvcc also marked ``nvcc``: it runs in the kernel sweep, not the suite):
    parametrize compile tests with it."""
    from deep_tile.jit import compiler

    available = compiler.available_compilers()
    return [
        pytest.param("nvrtc", marks=pytest.mark.skipif("nvrtc" not in available, reason="NVRTC does not load")),
        pytest.param("nvcc", marks=[pytest.mark.nvcc, pytest.mark.skipif(
            "nvcc" not in available, reason="nvcc not found (DEEP_TILE_NVCC / PATH / CUDA_HOME)")]),
    ]


def accuracy_problems(metrics: dict, label: str = "", nan_what: str = "NaN") -> list:
    """What fails the accuracy bar in ``metrics`` (``nan``: NaN count, ``diff``: calc_diff,
    ``rel``: max relative error), each phrase prefixed by ``label``."""
    problems = []
    if metrics["nan"]:
        problems.append(f"{label}{metrics['nan']} {nan_what}")
    if not metrics["diff"] < DIFF_TOL:
        problems.append(f"{label}calc_diff {metrics['diff']:.2e}")
    if not metrics["rel"] < REL_TOL:
        problems.append(f"{label}max rel err {metrics['rel']:.2e}")
    return problems


def run_python(code: str, timeout: float = 120.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter (from the repository root, output captured): for
    checks of what an import loads or starts, which an already-warm test process cannot show."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def run_child_cases(script: str, function: str, cases: list, timeout: float, env: dict | None = None) -> list[dict]:
    """Run ``tests/<script>::<function>(**case)`` for each case in one child process (the child
    serves them with ``gpu_cases.serve``), with ``env`` added to its environment.

    Returns one result dict per case. A child that crashes or times out fails the calling test
    with the cases it completed and the tail of its output.
    """
    payload = json.dumps({"function": function, "cases": cases})
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    child_env.update(env or {})
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / script)], input=payload,
                              capture_output=True, text=True, timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")
        out = out.decode() if isinstance(out, bytes) else out
        pytest.fail(f"{function}: child timed out after {timeout:.0f}s (hang?); output:\n{out[-4000:]}")
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or len(results) != len(cases):
        pytest.fail(f"{function}: child exited {proc.returncode} after {len(results)}/{len(cases)} cases\n"
                    f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return results


def run_gpu_cases(function: str, cases: list, timeout: float = 600.0) -> list[dict]:
    """The kernel checks of tests/gpu_cases.py, in a child process (see :func:`run_child_cases`)."""
    return run_child_cases("gpu_cases.py", function, cases, timeout)


def run_host_cases(function: str, cases: list, timeout: float = 900.0, env: dict | None = None) -> list[dict]:
    """The host-path checks of tests/gpu_host_cases.py (custom ops, native extension), in a child
    process (see :func:`run_child_cases`)."""
    return run_child_cases("gpu_host_cases.py", function, cases, timeout, env)
