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
