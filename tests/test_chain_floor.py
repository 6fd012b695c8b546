"""benchmarks/probes/chain_floor.py: its command line on the CPU; one small run on a GPU (in a child
process under a timeout, as every GPU check)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "probes"))
chain_floor = pytest.importorskip("chain_floor")
SCRIPT = ROOT / "benchmarks" / "probes" / "chain_floor.py"


def test_forced_entries():
    assert chain_floor.parse_forced(["64:2112,7168=64x64:k3:ef", "1:24576,1536=64x192"]) == {
        "deep_tile forced": {(64, 2112, 7168): "64x64:k3:ef", (1, 24576, 1536): "64x192"}}
    named = chain_floor.parse_forced(["w@16:7168,16384=64x128:k2:sw16", "w@1:7168,16384=64x128:k2:sw8",
                                      "n@16:32768,512=64x128:gM", "16:2112,7168=64x32:k2"])
    assert named == {"forced w": {(16, 7168, 16384): "64x128:k2:sw16", (1, 7168, 16384): "64x128:k2:sw8"},
                     "forced n": {(16, 32768, 512): "64x128:gM"},
                     "deep_tile forced": {(16, 2112, 7168): "64x32:k2"}}
    for bad in ("64:2112=64x64", "2112,7168=64x64", "64:2112,7168", "x:1,2=64x64", "w@64x64"):
        with pytest.raises(ValueError, match="M:N,K=config"):
            chain_floor.parse_forced([bad])


def test_command_line():
    args = chain_floor.parse_args(["--m", "1,16", "--forced", "16:7168,2048=64x128:k2"])
    assert args.forced_map == {"deep_tile forced": {(16, 7168, 2048): "64x128:k2"}}
    assert args.flush == "write" and args.passes == 3 and args.warm is None
    assert chain_floor.parse_args(["--warm", "3/8"]).warm == "3/8"
    assert args.sustained == 0 and chain_floor.parse_args(["--sustained", "2.5"]).sustained == 2.5
    for bad in (["--forced", "64x64"], ["--iters", "0"], ["--flush", "none"], ["--warm", "3"], ["--warm", "1/0"],
                ["--sustained", "-1"]):
        with pytest.raises(SystemExit):
            chain_floor.parse_args(bad)
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "read layer" in out.stdout


@pytest.mark.gpu
def test_small_run_checks_its_outputs(tmp_path):
    """One layer at M = 16 with a forced config and a named set: deep_tile's outputs of every chain
    match the reference (the exit status says so) and every chain has a time, and a sustained run
    with the clock and power it ran at."""
    report = tmp_path / "floor.json"
    forced = ["16:7168,2048=64x128:k2", "w@16:24576,1536=64x192:ef:sw16"]
    warm = subprocess.run([sys.executable, str(SCRIPT), "--m", "16", "--warm", "0/1", "--forced", *forced],
                          capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0 and warm.stdout.count("warm ") == 2, warm.stdout[-3000:] + warm.stderr[-3000:]
    out = subprocess.run([sys.executable, str(SCRIPT), "--m", "16", "--layers", "1", "--replays", "1", "--iters", "2",
                          "--sustained", "1", "--forced", *forced, "--json", str(report)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record, = json.loads(report.read_text())["records"]
    assert record["ok"] and record["max_calc_diff"] < 1e-3
    assert set(record["chains"]) == {"deep_tile", "deep_tile forced", "forced w", "read", "read nopdl", "read nowait",
                                     "read layer"}
    assert "forced w" in record["timelines"]
    assert all(c["us_per_layer"] > 0 for c in record["chains"].values())
    sustained = [c["sustained"] for c in record["chains"].values()]
    assert all(s["us_per_layer"] > 0 and s["mhz"] > 0 and s["watts"] > 0 for s in sustained), sustained
    assert "sustained (1 s back to back" in out.stdout
