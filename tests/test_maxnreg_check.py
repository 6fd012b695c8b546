"""tools/maxnreg_check.py on synthetic SASS (no GPU, no nvdisasm): per-regime register maxima,
uses above a setmaxnreg count, widths of vector and WGMMA operands, and touches of an in-flight
accumulator."""
from __future__ import annotations

import importlib.util

from conftest import ROOT

spec = importlib.util.spec_from_file_location("maxnreg_check", ROOT / "tools" / "maxnreg_check.py")
maxnreg_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(maxnreg_check)


def sass(lines: list) -> str:
    """An nvdisasm -c listing of one kernel `k`: labels as given, instructions numbered."""
    out, addr = [".text.k:"], 0
    for line in lines:
        if line.endswith(":"):
            out.append(line)
        else:
            out.append(f"        /*{addr:04x}*/                   {line} ;")
            addr += 16
    return "\n".join(out) + "\n"


KERNEL = [
    "S2R R0, SR_TID.X",
    "ISETP.NE.AND P0, PT, R0, 0x100, PT",
    "@!P0 BRA `(.L_x_1)",
    ".L_x_0:",
    "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8",
    "PLOP3.LUT P0, PT, PT, PT, UP0, 0x80, 0x0",
    "@!P0 BRA `(.L_x_0)",
    "WARPGROUP.ARRIVE",
    "QGMMA.64x192x32.F32.E4M3.E4M3 R24, gdesc[UR12], R24, gsb0",
    "WARPGROUP.DEPBAR.LE gsb0, 0x0",
    "STG.E.128 desc[UR4][R2.64], R200",
    "EXIT",
    ".L_x_1:",
    "USETMAXREG.DEALLOC.CTAPOOL 0x28",
    "STG.E.64 desc[UR4][R2.64], R38",
    "EXIT",
]


def regimes(lines, launch=168):
    code = maxnreg_check.parse(sass(lines))["k"]
    return maxnreg_check.analyse(code, launch)


def test_regimes_and_widths():
    report = regimes(KERNEL)
    assert report["0xb0 DEALLOC"]["limit"] == 40 and report["0xb0 DEALLOC"]["max_reg"] == 39  # R38 .64
    assert report["0x30 TRY_ALLOC"]["limit"] == 232 and report["0x30 TRY_ALLOC"]["max_reg"] == 203  # R200 .128
    assert report["entry"]["max_reg"] == 0
    assert not any(r["over"] for k, r in report.items() if k not in ("shared", "inflight"))
    assert report["inflight"] == []


def test_use_above_the_producer_count_is_flagged():
    lines = KERNEL[:-1] + ["MOV R40, R3", "EXIT"]
    over = regimes(lines)["0xb0 DEALLOC"]["over"]
    assert [text for _, text in over] == ["MOV R40, R3"]


def test_wgmma_accumulator_width():
    lines = KERNEL[:9] + ["FADD R119, R3, R4"] + KERNEL[9:]
    report = regimes(lines)
    assert [text for _, text in report["inflight"]] == ["FADD R119, R3, R4"]  # R24 + 96 - 1
    lines = KERNEL[:9] + ["FADD R120, R3, R4"] + KERNEL[9:]
    assert regimes(lines)["inflight"] == []


def test_accumulator_written_after_the_arrive_is_flagged():
    lines = KERNEL[:8] + ["MOV R30, RZ"] + KERNEL[8:]
    assert [text for _, text in regimes(lines)["inflight"]] == ["MOV R30, RZ"]
    lines = KERNEL[:7] + ["MOV R30, RZ"] + KERNEL[7:]  # before the ARRIVE: ordered by it
    assert regimes(lines)["inflight"] == []
