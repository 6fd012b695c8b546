"""tools/ncu_summary.py on synthetic ncu CSV pages (no GPU): the k-loop body per k-block and math
warp, the stall sample shares without the once-per-warp instructions, and the whole report for
two kernels side by side."""
from __future__ import annotations

import csv
import importlib.util

from conftest import ROOT

spec = importlib.util.spec_from_file_location("ncu_summary", ROOT / "tools" / "ncu_summary.py")
ncu_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_summary)

SASS_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
               "Instructions Executed", "stall_barrier", "stall_wait", "stall_barrier (Not Issued)"]


def write_sass(path, body: list) -> None:
    """`body`: (source text, executions, samples, barrier samples, wait samples) per instruction."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(SASS_HEADER)
        for i, (src, e, s, sb, sw) in enumerate(body):
            w.writerow([hex(i * 16), src, s, s, e, sb, sw, sb])


def write_raw(path, duration: float) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "gpu__time_duration.sum", "launch__grid_size", "launch__block_size"])
        w.writerow(["", "ms", "", ""])
        w.writerow(["k", str(duration), "132", "384"])


def loop(wgmma: str, qgmmas: int, ffmas: int, times: int, extra: int = 0) -> list:
    """A prologue run 10 times, then a k-loop body executed `times` times."""
    body = [("MOV R1, c[0x0][0x28]", 10, 1, 0, 1)]
    body += [(f"QGMMA.{wgmma}.F32.E4M3.E4M3 R24, gdesc[UR20], R24", times, 5, 0, 5)] * qgmmas
    body += [("FFMA R88, R24, R2, R88", times, 1, 0, 0)] * ffmas
    body += [("@!P0 UIADD3 UR4, UR4, 0x1, URZ", times, 0, 0, 0)] * extra
    body += [("WARPGROUP.DEPBAR.LE gsb0, 0x0", times, 9, 9, 0)]
    return body


def test_loop_body_per_k_block_counts_one_part_and_two_parts(tmp_path):
    write_sass(tmp_path / "one.csv", loop("64x192x32", 4, 96, 1000, extra=3))
    mix, k_blocks = ncu_summary.loop_body_per_k_block(ncu_summary.sass_rows(tmp_path / "one.csv"))
    assert k_blocks == 1000  # four WGMMAs of k = 32 per k-block, one column part
    assert mix["FFMA"] / k_blocks == 96 and mix["UIADD3"] / k_blocks == 3 and "MOV" not in mix
    write_sass(tmp_path / "two.csv", loop("64x128x32", 8, 128, 500))
    mix, k_blocks = ncu_summary.loop_body_per_k_block(ncu_summary.sass_rows(tmp_path / "two.csv"))
    assert k_blocks == 500  # 128x256 /128: two column parts of four WGMMAs each
    assert mix["FFMA"] / k_blocks == 128 and mix["QGMMA"] / k_blocks == 8


def test_shares_leave_out_what_each_warp_runs_once(tmp_path):
    # 132 CTAs x 12 warps = 1584: the idle warps' final cluster barrier, executed once per warp,
    # carries most samples and is left out; so is the prologue (10 executions).
    body = loop("64x192x32", 4, 96, 10000) + [("UCGABAR_WAIT", 1584, 1000, 1000, 0)]
    write_sass(tmp_path / "s.csv", body)
    shares = ncu_summary.repeated_shares(ncu_summary.sass_rows(tmp_path / "s.csv"), 1584)
    assert "UCGABAR_WAIT" not in shares and "MOV" not in shares
    assert abs(shares["WARPGROUP.DEPBAR"] - 9 / 125) < 1e-12  # 4 QGMMA x 5 + 96 FFMA x 1 + 9
    assert abs(shares["FFMA"] - 96 / 125) < 1e-12 and abs(sum(shares.values()) - 1) < 1e-12


def test_main_prints_both_kernels(tmp_path, capsys):
    for name, duration, extra in (("a", 2.1, 0), ("b", 2.2, 5)):
        write_raw(tmp_path / f"ncucmp_raw_{name}.csv", duration)
        write_sass(tmp_path / f"ncucmp_sass_{name}.csv", loop("64x192x32", 4, 96, 10000, extra=extra))
    assert ncu_summary.main([str(tmp_path), "a", "b"]) == 0
    out = capsys.readouterr().out
    assert "gpu__time_duration.sum" in out and "2.1" in out and "2.2" in out
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert total.split()[1:] == ["101.0", "106.0"]  # 4 QGMMA + 96 FFMA + 1 DEPBAR (+ 5 UIADD3)
    barrier = next(line for line in out.splitlines() if line.strip().startswith("barrier"))
    assert barrier.split()[1:] == ["9", "9"]  # samples per instruction, not per execution
    depbar = [line for line in out.splitlines() if line.strip().startswith("WARPGROUP.DEPBAR")]
    assert depbar[-1].split()[1:] == ["7.2", "7.2"]  # 9 of the 125 samples of the repeated code
    assert ncu_summary.main([]) == 2
