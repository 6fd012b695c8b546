#!/usr/bin/env python3
"""Register use against setmaxnreg in a cubin's SASS, no GPU needed.

    python tools/maxnreg_check.py kernel.cubin [more.cubin ...] [--launch-regs N] [-v]

A kernel that reconfigures its registers (``setmaxnreg``, SASS ``USETMAXREG``) must not touch a
register at or above the count a warp holds after it. For every kernel of each cubin this walks
the control-flow graph from the entry and from each ``USETMAXREG`` and reports, per regime (the
entry's launch count, then each ``USETMAXREG`` site with its new count): the instructions it
reaches, the highest register index they use, the spill loads and stores (``LDL``/``STL``) among
them, any use at or above the count, and any instruction reached under two regimes (code shared
by roles of different counts); and any instruction touching a WGMMA accumulator before the
``WARPGROUP.DEPBAR`` that waits for it (or after the ``WARPGROUP.ARRIVE`` before it; address
order, and any DEPBAR ends the window, so overlapped two-buffer loops are under-checked). Exit
status 1 when either is flagged.

Register widths: ``.64`` / ``.128`` memory ops, ``.WIDE`` multiplies, ``LDSM``/``STSM`` ``.x2/.x4``
and the WGMMA accumulators (``N / 2`` registers of an F32 ``m64 x N``) count every register they
touch; the analysis is static (every path, taken or not).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deep_tile.jit import compiler  # noqa: E402

_FUNC = re.compile(r"^\.text\.(\S+):")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_REG = re.compile(r"(?<![\w.])R(\d+)(\.64|\.128)?(?![\w])")
_MAXREG = re.compile(r"USETMAXREG\.(\w+)(?:\.\w+)*\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+|\d+)")
_MMA = re.compile(r"^[HQI]GMMA\.64x(\d+)x\d+\.(\w+)")
_MEM = re.compile(r"^(?:LD|LDG|LDS|LDL|LDC|ST|STG|STS|STL|ATOM|ATOMS|ATOMG|RED|REDG)\b")


def disassemble(cubin: Path) -> str:
    """``nvdisasm -c`` of ``cubin``: the ``.text.<kernel>:`` sections and ``.L_x_`` labels that
    :func:`parse` reads (``deep_tile.jit.compiler.disassemble`` prints ``cuobjdump -sass``'s format)."""
    nvdisasm = compiler.find_tool("nvdisasm")
    if nvdisasm is None:
        raise SystemExit("nvdisasm not found")
    return subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


def resource_usage(cubin: Path) -> dict:
    """Kernel name -> (registers at launch, stack bytes) from ``cuobjdump -res-usage``."""
    cuobjdump = compiler.find_tool("cuobjdump")
    if cuobjdump is None:
        return {}
    text = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"Function (\S+):\s*REG:(\d+) STACK:(\d+)", text)}


def parse(sass: str) -> dict:
    """Kernel name -> [(address, text, labels before it)]."""
    out, name, labels = {}, None, []
    for line in sass.splitlines():
        if m := _FUNC.match(line.strip()):
            name, labels = m.group(1), []
            out[name] = []
        elif name and (m := _LABEL.match(line.strip())):
            labels.append(m.group(1))
        elif name and (m := _INSN.search(line)):
            out[name].append((int(m.group(1), 16), m.group(2), labels))
            labels = []
    return out


def split(text: str) -> tuple:
    """(predicate or '', opcode with modifiers, operand text)."""
    words = text.split(None, 1)
    pred = ""
    if words[0].startswith("@"):
        pred, text = words[0], words[1] if len(words) > 1 else ""
        words = text.split(None, 1)
    return pred, words[0], words[1] if len(words) > 1 else ""


def registers(op: str, operands: str) -> list:
    """[(first, count)] of the general registers an instruction touches."""
    found = []
    base = op.split(".")[0]
    data_width = 1
    if _MEM.match(op):
        data_width = 4 if ".128" in op else (2 if ".64" in op else 1)
    elif base in ("LDSM", "STSM", "LDSM_T", "MOVM"):
        data_width = 4 if op.endswith(".4") else (2 if op.endswith(".2") else 1)
    mma = _MMA.match(op)
    in_brackets = 0
    first_data = True
    for part in re.split(r"(\[|\])", operands):
        if part == "[":
            in_brackets += 1
            continue
        if part == "]":
            in_brackets -= 1
            continue
        for m in _REG.finditer(part):
            index = int(m.group(1))
            if m.group(2):  # an explicit width: R30.64
                width = 4 if m.group(2) == ".128" else 2
            elif in_brackets:
                width = 1
            elif mma:  # the accumulator: N/2 32-bit registers, or N/4 of packed 16-bit pairs
                width = int(mma.group(1)) // 2 if mma.group(2).endswith("32") else int(mma.group(1)) // 4
            elif ".WIDE" in op and first_data:
                width = 2
            else:
                width = data_width
            found.append((index, width))
            first_data = False
    return found


def blocks(code: list) -> tuple:
    """Basic blocks: (starts, successors), index-based."""
    label_at = {}
    for i, (_, _, labels) in enumerate(code):
        for label in labels:
            label_at[label] = i
    leaders = {0}
    targets = {}
    for i, (_, text, _) in enumerate(code):
        pred, op, rest = split(text)
        base = op.split(".")[0]
        if base in ("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BREAK", "BSYNC", "KILL"):
            if i + 1 < len(code):
                leaders.add(i + 1)
            t = _TARGET.search(rest)
            if t and t.group(1) in label_at:
                leaders.add(label_at[t.group(1)])
                targets[i] = label_at[t.group(1)]
    for label, i in label_at.items():
        leaders.add(i)
    starts = sorted(leaders)
    succ = {}
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(code)
        last = end - 1
        pred, op, rest = split(code[last][1])
        base = op.split(".")[0]
        nxt = [end] if end < len(code) else []
        if base in ("EXIT", "RET", "KILL") and not pred:
            out = []
        elif base in ("BRA", "JMP") and not pred and ".DIV" not in op:
            out = [targets[last]] if last in targets else []
        elif base in ("BRX", "JMX"):  # indirect: unknown targets, every label
            out = sorted(set(label_at.values()))
        else:
            out = nxt + ([targets[last]] if last in targets else [])
        succ[s] = (end, out)
    return starts, succ


def analyse(code: list, launch_regs: int) -> dict:
    """Regime key -> {limit, insns, max_reg, max_at, spills, over}; plus 'shared'."""
    starts, succ = blocks(code)
    regime_of = {}  # instruction index -> set of regime keys
    limits = {"entry": launch_regs}
    work = [(0, "entry")]
    seen = set()
    while work:
        start, regime = work.pop()
        if (start, regime) in seen:
            continue
        seen.add((start, regime))
        end, out = succ[start]
        for i in range(start, end):
            text = code[i][1]
            if m := _MAXREG.search(text):
                regime = f"{code[i][0]:#x} {m.group(1)}"
                limits[regime] = int(m.group(2), 0)
            regime_of.setdefault(i, set()).add(regime)
        for s in out:
            work.append((s, regime))
    report = {}
    for key, limit in limits.items():
        report[key] = {"limit": limit, "insns": 0, "max_reg": -1, "max_at": None, "spills": [], "over": []}
    shared = []
    for i, regimes in sorted(regime_of.items()):
        addr, text, _ = code[i]
        _, op, rest = split(text)
        regs = registers(op, rest)
        top = max((r + w - 1 for r, w in regs), default=-1)
        if len(regimes) > 1 and not _MAXREG.search(text):
            shared.append((addr, text, sorted(regimes)))
        for key in regimes:
            entry = report[key]
            entry["insns"] += 1
            if top > entry["max_reg"]:
                entry["max_reg"], entry["max_at"] = top, addr
            if op.startswith(("LDL", "STL")):
                entry["spills"].append(addr)
            if top >= entry["limit"]:
                entry["over"].append((addr, text))
    report["shared"] = shared
    report["inflight"] = inflight_touches(code)
    return report


def inflight_touches(code: list) -> list:
    """[(address, text)] of non-WGMMA instructions touching a WGMMA's accumulator after the
    WARPGROUP.ARRIVE before it or before the WARPGROUP.DEPBAR after it, in address order (the
    hardware does not interlock them)."""
    out, busy, window = [], [], None
    for addr, text, _ in code:
        _, op, rest = split(text)
        if op.startswith("WARPGROUP.DEPBAR"):
            busy, window = [], None
            continue
        if op.startswith("WARPGROUP.ARRIVE"):
            busy, window = [], []
            continue
        regs = registers(op, rest)
        if _MMA.match(op):
            span = [range(r, r + w) for r, w in regs[:1]]
            if window:  # what ran between the ARRIVE and this first WGMMA
                out += [(a, t) for a, t, rr in window if any(r + k in s for r, w in rr for k in range(w) for s in span)]
            busy, window = busy + span, None
            continue
        if window is not None:
            window.append((addr, text, regs))
        if any(r + k in s for r, w in regs for k in range(w) for s in busy):
            out.append((addr, text))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cubins", nargs="+", type=Path)
    parser.add_argument("--launch-regs", type=int, default=None,
                        help="the entry regime's count (default: cuobjdump -res-usage REG, else 255)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list flagged and shared instructions")
    args = parser.parse_args(argv)
    flagged = False
    for cubin in args.cubins:
        usage = resource_usage(cubin)
        for name, code in parse(disassemble(cubin)).items():
            regs, stack = usage.get(name, (255, -1))
            report = analyse(code, args.launch_regs or regs)
            shared = report.pop("shared")
            inflight = report.pop("inflight")
            print(f"{cubin.name} {name}: REG {regs} STACK {stack}")
            for key, r in report.items():
                mark = "  OVER" if r["over"] else ""
                where = f"{r['max_at']:#x}" if r["max_at"] is not None else "-"
                print(f"  {key:<24} limit {r['limit']:>3}  insns {r['insns']:>5}  max R{r['max_reg']} at {where}  "
                      f"LDL/STL {len(r['spills'])}{mark}")
                if r["over"]:
                    flagged = True
                    for addr, text in r["over"][: None if args.verbose else 5]:
                        print(f"      {addr:#07x}  {text}")
            if inflight:
                flagged = True
                print(f"  touches of an in-flight WGMMA accumulator: {len(inflight)}  OVER")
                for addr, text in inflight[: None if args.verbose else 5]:
                    print(f"      {addr:#07x}  {text}")
            if shared:
                print(f"  instructions under more than one regime: {len(shared)}")
                for addr, text, regimes in shared[: None if args.verbose else 3]:
                    print(f"      {addr:#07x}  {text}   {regimes}")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
