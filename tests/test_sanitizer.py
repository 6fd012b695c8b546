"""compute-sanitizer racecheck over one small case of every kernel family and kind (GPU).

tools/sanitize_smoke.py runs the cases (each checked against its reference); this test runs it
once without the sanitizer, which builds the kernels and checks the answers, then under
racecheck in a child process with a timeout, and fails on any reported hazard, a family missing
from the output, or a failed case. The full workloads (memcheck, synccheck and initcheck too, and
the edge cases of every kind) are tools/sanitize.sh.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from deep_tile.jit.compiler import find_tool

SMOKE = ROOT / "tools" / "sanitize_smoke.py"
FAMILIES = ("dense", "grouped", "masked_signal", "output_variants", "k_grouped", "casts")


def test_smoke_lists_every_family():
    """The smoke script and this test name the same families (no GPU needed)."""
    text = SMOKE.read_text()
    assert re.search(r"FAMILIES = \(([^)]*)\)", text).group(1).replace('"', "").replace(" ", "").split(",") == \
        list(FAMILIES)


def test_the_training_workload_forces_only_configs_the_kernel_builds():
    """Every forced tile of tools/sanitize_training.py (dense output variants and the K-grouped
    GEMM) is a KernelConfig the host takes, built as the script builds it (no GPU needed): a tile
    the host refuses (say, a build that spills) would stop the sanitizer run."""
    import importlib.util

    from deep_tile.gemm.problem import ProblemKind
    from deep_tile.select import KernelConfig

    spec = importlib.util.spec_from_file_location("sanitize_training", ROOT / "tools" / "sanitize_training.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    c_of = {"none": None, "inplace": "out"}
    for fields, out_dtype, mode, *_ in tool.CASES:
        assert KernelConfig(**{**tool.P, **fields}).with_output(out_dtype, c_of.get(mode, mode)).out_dtype == out_dtype
    for fields, out_dtype, mode, *_ in tool.K_GROUPED_CASES:
        config = KernelConfig(**{**tool.P, **fields}, problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True,
                              out_dtype=out_dtype, c_dtype=c_of.get(mode, mode))
        assert config.problem_kind is ProblemKind.K_GROUPED
    assert len(tool.CASES) >= 18 and len(tool.K_GROUPED_CASES) >= 13


def _run(command: list, timeout: float, env: dict) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command[:3])}: timed out after {timeout:.0f}s (hang?); output:\n"
                    f"{(exc.stdout or '')[-3000:]}")


@pytest.mark.gpu
def test_racecheck_every_family(tmp_path):
    tool = find_tool("compute-sanitizer")
    if tool is None:
        pytest.skip("compute-sanitizer not found (PATH, the CUDA toolkit)")
    env = {**os.environ, "DEEP_TILE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    plain = _run([sys.executable, str(SMOKE)], 600, env)
    assert plain.returncode == 0, plain.stdout[-4000:] + plain.stderr[-4000:]
    checked = _run([tool, "--tool", "racecheck", "--error-exitcode", "99", sys.executable, str(SMOKE)], 900, env)
    out = checked.stdout + checked.stderr
    summary = re.findall(r"RACECHECK SUMMARY: (\d+) hazards", out)
    assert summary, out[-4000:]
    assert summary[-1] == "0", "\n".join(line for line in out.splitlines() if "Race reported" in line)[:4000]
    assert checked.returncode == 0, out[-4000:]
    for name in FAMILIES:
        assert f"family {name} ok" in out, f"{name}: " + out[-4000:]
