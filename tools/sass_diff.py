#!/usr/bin/env python3
"""Build the SASS of a list of FP8 GEMM kernel configs into a directory, and diff two such directories.

For refactors of the device code that must not change the generated code: build the configs
from a git revision (the baseline) and from the working tree, then diff. No GPU needed.

    python tools/sass_diff.py configs -o /tmp/sass/configs.json          # which kernels (JSON)
    python tools/sass_diff.py build /tmp/sass/base --configs /tmp/sass/configs.json --rev HEAD  # HEAD's include/, csrc/
    python tools/sass_diff.py build /tmp/sass/new --configs /tmp/sass/configs.json              # the working tree
    python tools/sass_diff.py diff /tmp/sass/base /tmp/sass/new

A define renamed between the two sides is mapped with ``--rename OLD=NEW`` on the side that
spells it differently from the JSON, e.g. ``--rev HEAD~1 --rename DT_RASTER_ALONG_M=DT_GROUP_ALONG_M``
for a revision from before that rename. ``configs --sweep`` adds every kernel of the
``--kernel-sweep`` set (about 810 kernels; some 10 minutes per compiler on 2 cores).

``configs`` writes ``[{"name": ..., "defines": {...}}, ...]``: the kernels of
tests/test_kernel_build.py SMOKE_FAMILIES (when that module imports) and the selector's pick for
each ``--shape`` (132 SMs), each pick also with a row-major a_scale, plus any ``--config`` text
(deep_tile.testing.configs syntax, e.g. ``128x256:gM``). ``build`` compiles each with
``compile_cubin`` (parallel processes) and writes ``NAME.sass`` (cuobjdump -sass), ``NAME.ptxas``
(the compiler log) and ``index.json``; ``--rename OLD=NEW`` renames a define for sources that
spell it differently from the Python side. ``diff`` compares the instruction text (addresses and
encodings stripped) and, separately, the encodings (scheduling/control bits), and reports the
ptxas registers, stack frame and spills of both sides. Exit status 1 when anything differs.

Dependency-free apart from deep_tile (and, for the smoke list, the test modules and pytest).
"""
from __future__ import annotations

import argparse
import difflib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deep_tile.jit import paths  # noqa: E402
from deep_tile.kernels import fp8_gemm as family  # noqa: E402
from deep_tile.gemm.problem import ProblemKind  # noqa: E402
from deep_tile.testing.build_check import FUNCTION, BuildJob, run_builds  # noqa: E402
from deep_tile.testing.configs import defines_label  # noqa: E402

ENTRY = paths.entry_path(family.ENTRY).relative_to(ROOT)
"""The GEMM's entry file, relative to a source tree (the checkout or an exported revision)."""
DEFAULT_SHAPES = ((4096, 7168, 2048), (64, 4096, 7168), (128, 2112, 7168), (4096, 24576, 1536), (256, 7168, 16384))

# ---- which kernels ----------------------------------------------------------------------------


def collect_configs(shapes, texts, smoke: bool, sweep: bool = False) -> list:
    from deep_tile.select import api
    from deep_tile.testing.configs import parse_config

    families = []
    if smoke:
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            import test_kernel_build  # noqa: E402 - needs pytest and the tests' conftest
            families += [dict(fam) for fam in test_kernel_build.SMOKE_FAMILIES]
            if sweep:
                families += [dict(fam) for fam in test_kernel_build.FAMILIES]
        except Exception as error:  # noqa: BLE001
            print(f"warning: no SMOKE_FAMILIES ({type(error).__name__}: {error})", file=sys.stderr)
    for m, n, k in shapes:
        config = api.get_config(m, n, k, num_sms=132)
        families.append(family.defines(config))
        families.append(family.defines(config.with_row_major_a_scale()))
    for text in texts:
        families.append(family.defines(parse_config(text, 4096, 4096, 132)))
    out, seen = [], set()
    for defines in families:
        key = tuple(sorted(defines.items()))
        if key not in seen:
            seen.add(key)
            name = defines_label(defines)
            while any(entry["name"] == name for entry in out):  # a label that misses a define
                name += "+"
            out.append({"name": name, "defines": dict(key)})
    return out


# ---- building ---------------------------------------------------------------------------------


def export_rev(rev: str, dest: Path) -> Path:
    """``include/`` and ``csrc/`` of git revision ``rev`` extracted under ``dest``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "include", "csrc"],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest)
    return dest


def ptxas_summary(log: str) -> dict:
    from deep_tile.jit import compiler

    regs = re.findall(r"Used (\d+) registers", log)
    return {"registers": int(regs[-1]) if regs else None, "problems": compiler.ptxas_problems(log)}


def build(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = json.loads(Path(args.configs).read_text()) if args.configs else collect_configs(
        DEFAULT_SHAPES, [], smoke=True)
    renames = dict(item.split("=", 1) for item in args.rename)
    with tempfile.TemporaryDirectory(prefix="sass_diff-") as tmp:
        source = export_rev(args.rev, Path(tmp)) if args.rev else ROOT
        jobs = []
        for entry in configs:
            defines = {renames.get(key, key): value for key, value in entry["defines"].items()}
            code = int(entry["defines"].get("DT_PROBLEM_KIND", 0))
            # the K-grouped kind over DeepGEMM's blocks layout is the K-grouped kernel's symbol
            kind = family.kind_of_code(family.PROBLEM_KIND_CODES[ProblemKind.K_GROUPED]
                                       if code == family.K_GROUPED_BLOCKS_CODE else code)
            # the signalling masked kernel has its own symbol
            symbol = family.SIGNAL_SYMBOL if entry["defines"].get(family.SIGNAL_DEFINE) else family.symbol(kind)
            jobs.append(BuildJob(str(source / ENTRY), tuple(sorted(defines.items())), symbol, args.compiler,
                                 include_dir=str(source / "include"), sass_path=str(out / f"{entry['name']}.sass")))
        results = []
        for entry, report in zip(configs, run_builds(jobs, args.jobs or None)):
            (out / f"{entry['name']}.ptxas").write_text(report.log or report.error)
            error = report.error or ("" if report.sass is not None else
                                     "cuobjdump -sass failed (deep_tile.jit.compiler.SASS_TOOLS missing?)")
            result = {"name": entry["name"], "defines": dict(report.job.defines), "error": error,
                      "compiler": report.compiler, "seconds": round(report.seconds, 1), "ptxas": ptxas_summary(report.log)}
            status = error or f"{result['ptxas']['registers']} registers, " + (
                "; ".join(result["ptxas"]["problems"]) or "no spills, no stack frame")
            print(f"{result['name']:<28} {status}", flush=True)
            results.append(result)
    index = {"rev": args.rev or "working tree", "compiler": args.compiler, "renames": renames, "kernels": results}
    (out / "index.json").write_text(json.dumps(index, indent=1))
    bad = [r["name"] for r in results if r["error"] or r["ptxas"]["problems"]]
    print(f"{len(results)} kernels into {out}; {len(bad)} with errors or ptxas problems {bad if bad else ''}")
    return 1 if bad else 0


# ---- diffing ----------------------------------------------------------------------------------

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_ENCODING = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")


def parse_sass(text: str) -> dict:
    """function -> (instruction texts, encoding words) from cuobjdump -sass output."""
    functions, current = {}, None
    for line in text.splitlines():
        if match := FUNCTION.search(line):
            current = functions.setdefault(match.group(1), ([], []))
        elif current is not None:
            if match := _INSTRUCTION.match(line):
                current[0].append(match.group(2).rstrip(" ;"))
                current[1].append(match.group(3))
            elif match := _ENCODING.match(line):
                current[1].append(match.group(1))
    return functions


def diff(args) -> int:
    a, b = Path(args.a), Path(args.b)
    index_a = {k["name"]: k for k in json.loads((a / "index.json").read_text())["kernels"]}
    index_b = {k["name"]: k for k in json.loads((b / "index.json").read_text())["kernels"]}
    names = sorted(set(index_a) | set(index_b))
    differing = 0
    for name in names:
        if name not in index_a or name not in index_b:
            print(f"{name:<28} only in {a if name in index_a else b}")
            differing += 1
            continue
        ka, kb = index_a[name], index_b[name]
        if ka["error"] or kb["error"]:
            print(f"{name:<28} build error: {ka['error'] or kb['error']}")
            differing += 1
            continue
        pa, pb = ka["ptxas"], kb["ptxas"]
        ptxas = f"regs {pa['registers']}" + (f"->{pb['registers']}" if pb["registers"] != pa["registers"] else "")
        ptxas += "" if not (pa["problems"] or pb["problems"]) else f" PTXAS {pa['problems']} -> {pb['problems']}"
        fa, fb = parse_sass((a / f"{name}.sass").read_text()), parse_sass((b / f"{name}.sass").read_text())
        lines = []
        for function in sorted(set(fa) | set(fb)):
            ia, ea = fa.get(function, ([], []))
            ib, eb = fb.get(function, ([], []))
            if ia == ib and ea == eb:
                continue
            if ia == ib:
                words = sum(x != y for x, y in zip(ea, eb))
                lines.append(f"  {function}: same {len(ia)} instructions, {words} encoding words differ")
                continue
            lines.append(f"  {function}: {len(ia)} -> {len(ib)} instructions")
            text = list(difflib.unified_diff(ia, ib, f"{a.name}/{name}", f"{b.name}/{name}", n=args.context,
                                             lineterm=""))
            lines += ["    " + line for line in text[:args.max_lines]]
            if len(text) > args.max_lines:
                lines.append(f"    ... {len(text) - args.max_lines} more diff lines")
        count = sum(len(v[0]) for v in fa.values())
        print(f"{name:<28} {'DIFFERS' if lines else 'identical'} ({count} instructions, {ptxas})")
        for line in lines:
            print(line)
        differing += bool(lines) or pa["problems"] != pb["problems"]
    print(f"{len(names) - differing} of {len(names)} kernels identical")
    return 1 if differing else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("configs", help="write the kernel list (JSON)")
    p.add_argument("-o", "--output", default="-")
    p.add_argument("--shape", action="append", default=[], help="M,N,K: add the selector's pick (default: "
                   "the five shapes of DEFAULT_SHAPES when no --shape is given)")
    p.add_argument("--config", action="append", default=[], help="a deep_tile.testing.configs text, e.g. 128x256:gM")
    p.add_argument("--no-smoke", action="store_true", help="leave out tests/test_kernel_build.py SMOKE_FAMILIES")
    p.add_argument("--sweep", action="store_true", help="also every kernel of tests/test_kernel_build.py FAMILIES "
                   "(the --kernel-sweep set, hundreds of kernels)")
    p = sub.add_parser("build", help="compile the kernels into OUT (NAME.sass, NAME.ptxas, index.json)")
    p.add_argument("out")
    p.add_argument("--configs", help="the JSON of `configs` (default: its default list, computed now)")
    p.add_argument("--rev", help="build include/ and csrc/ of this git revision instead of the working tree")
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="rename a define")
    p.add_argument("--compiler", default="nvcc", choices=("nvcc", "nvrtc"))
    p.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: CPUs)")
    p = sub.add_parser("diff", help="compare the SASS of two build directories")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--context", type=int, default=2)
    p.add_argument("--max-lines", type=int, default=60, help="diff lines shown per function")
    args = parser.parse_args(argv)
    if args.command == "configs":
        shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] or DEFAULT_SHAPES
        configs = collect_configs(shapes, args.config, smoke=not args.no_smoke or args.sweep, sweep=args.sweep)
        text = json.dumps(configs, indent=1)
        if args.output == "-":
            print(text)
        else:
            Path(args.output).write_text(text + "\n")
            print(f"{len(configs)} kernels: {', '.join(c['name'] for c in configs)}", file=sys.stderr)
        return 0
    return build(args) if args.command == "build" else diff(args)


if __name__ == "__main__":
    sys.exit(main())
