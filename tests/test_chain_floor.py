"""benchmarks/chain_floor.py: its command line on the CPU; one small run on a GPU (in a child
process under a timeout, as every GPU check)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
chain_floor = pytest.importorskip("chain_floor")
SCRIPT = ROOT / "benchmarks" / "chain_floor.py"


def test_forced_entries():
    assert chain_floor.parse_forced(["64:2112,7168=64x64:k3:ef", "1:24576,1536=64x192"]) == {
        (64, 2112, 7168): "64x64:k3:ef", (1, 24576, 1536): "64x192"}
    for bad in ("64:2112=64x64", "2112,7168=64x64", "64:2112,7168", "x:1,2=64x64"):
        with pytest.raises(ValueError, match="M:N,K=config"):
            chain_floor.parse_forced([bad])


def test_command_line():
    args = chain_floor.parse_args(["--m", "1,16", "--forced", "16:7168,2048=64x128:k2"])
    assert args.forced_map == {(16, 7168, 2048): "64x128:k2"} and args.flush == "write" and args.passes == 3
    for bad in (["--forced", "64x64"], ["--iters", "0"], ["--flush", "none"]):
        with pytest.raises(SystemExit):
            chain_floor.parse_args(bad)
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "read layer" in out.stdout


@pytest.mark.gpu
def test_small_run_checks_its_outputs(tmp_path):
    """One layer at M = 16 with a forced config: deep_tile's outputs of both chains match the
    reference (the exit status says so) and every chain has a time."""
    report = tmp_path / "floor.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--m", "16", "--layers", "1", "--replays", "1", "--iters", "2",
                          "--forced", "16:7168,2048=64x128:k2", "--json", str(report)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record, = json.loads(report.read_text())["records"]
    assert record["ok"] and record["max_calc_diff"] < 1e-3
    assert set(record["chains"]) == {"deep_tile", "deep_tile forced", "read", "read nopdl", "read nowait",
                                     "read layer"}
    assert all(c["us_per_layer"] > 0 for c in record["chains"].values())
