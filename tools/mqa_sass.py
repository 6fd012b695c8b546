#!/usr/bin/env python3
"""SASS counts of the indexer logits kernels (csrc/entry/mqa_logits.cu, or with --paged the paged
ones, csrc/entry/paged_mqa_logits.cu), no GPU needed.

    python tools/mqa_sass.py                        # NVRTC and NVCC, plain and watchdog builds
    python tools/mqa_sass.py --compilers nvrtc --watchdog 0 --dump /tmp/mqa_sass
    python tools/mqa_sass.py --rev main                 # a git revision's include/ and csrc/
    python tools/mqa_sass.py --paged --kernels tma_lean --ops

For every kernel of the entry: ptxas registers, stack frame and spills, SASS instructions, and
for the wgmma designs the kv-block loop: the smallest backward branch's range holding every
QGMMA of the kernel (its instructions, static: every path of the body once), with the opcode
counts of the body under ``--ops``. ``--dump DIR`` writes each build's SASS and ptxas log there.
Exit status 1 when any kernel spills or has a stack frame.
"""
from __future__ import annotations

import argparse
import collections
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deep_tile.jit import compiler, paths  # noqa: E402
from deep_tile.kernels import mqa_logits as contract  # noqa: E402
from deep_tile.kernels import paged_mqa_logits as paged_contract  # noqa: E402

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRA = re.compile(r"\bBRA\b(?:\s+[!]?U?P\w+,)?\s+(0x[0-9a-f]+)")


def functions(sass: str) -> dict:
    """Kernel name -> [(address, instruction text)] of a ``cuobjdump -sass`` listing."""
    out, name = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = _LINE.search(line)
        if name and m:
            out[name].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text: str) -> str:
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def loop_body(code: list) -> list | None:
    """The instructions of the smallest loop (backward branch) whose range holds every QGMMA."""
    mma = [a for a, t in code if opcode(t) in ("QGMMA", "HGMMA")]
    if not mma:
        return None
    best = None
    for addr, text in code:
        m = _BRA.search(text)
        if opcode(text) == "BRA" and m:
            target = int(m.group(1), 16)
            if target <= min(mma) and addr >= max(mma) and (best is None or addr - target < best[1] - best[0]):
                best = (target, addr)
    return None if best is None else [(a, t) for a, t in code if best[0] <= a <= best[1]]


def ptxas_info(log: str) -> dict:
    """Kernel name -> (registers, stack bytes, spill stores, spill loads) from a ptxas -v log."""
    out, name = {}, None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            out[name] = [0, *map(int, m.groups())]
        m = re.search(r"Used (\d+) registers", line)
        if m and name in out:
            out[name][0] = int(m.group(1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compilers", nargs="+", default=["nvrtc", "nvcc"])
    parser.add_argument("--watchdog", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--kernels", default="", help="substring of the kernel names to report")
    parser.add_argument("--ops", action="store_true", help="opcode counts of each loop body")
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--rev", help="build this git revision's include/ and csrc/ instead of the working tree")
    parser.add_argument("--paged", action="store_true", help="the paged logits' entry instead")
    args = parser.parse_args()
    entry, include = paths.entry_path(paged_contract.ENTRY if args.paged else contract.ENTRY), None
    if args.rev:
        tmp = Path(tempfile.mkdtemp(prefix="mqa_sass-"))
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev, "include", "csrc"], check=True,
                             capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(tmp)
        entry, include = tmp / entry.relative_to(ROOT), tmp / "include"
    bad = False
    symbol = paged_contract.symbol(2, 64) if args.paged else contract.symbol(64, "persistent")
    for comp in args.compilers:
        for wd in args.watchdog:
            result = compiler.compile_cubin(entry, {"DT_WATCHDOG": wd}, symbol, comp, include_dir=include)
            sass = compiler.disassemble(result.cubin) or ""
            if args.dump:
                args.dump.mkdir(parents=True, exist_ok=True)
                (args.dump / f"{comp}_wd{wd}.sass").write_text(sass)
                (args.dump / f"{comp}_wd{wd}.log").write_text(result.log)
            info = ptxas_info(result.log)
            print(f"== {comp} DT_WATCHDOG={wd}")
            print(f"{'kernel':40s} {'regs':>4s} {'stack':>5s} {'spill':>5s} {'instrs':>6s} {'loop':>5s}")
            for name, code in sorted(functions(sass).items()):
                if args.kernels not in name:
                    continue
                regs, stack, st, ld = info.get(name, [-1, -1, -1, -1])
                body = loop_body(code)
                bad |= stack > 0 or st > 0 or ld > 0
                print(f"{name:40s} {regs:4d} {stack:5d} {st + ld:5d} {len(code):6d} "
                      f"{len(body) if body else '-':>5}")
                if args.ops and body:
                    ops = collections.Counter(opcode(t) for _, t in body)
                    print("    " + " ".join(f"{k}:{v}" for k, v in ops.most_common()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
