"""Compile kernels and read what the checks need, many at once: the ptxas report and the SASS.

Used by ``tests/test_kernel_build.py``: one :class:`BuildJob` per (kernel entry, defines,
compiler); :func:`run_builds` compiles them in worker processes (``spawn``: NVRTC runs in-process
and holds the GIL, so threads would not overlap) and returns one :class:`BuildReport` each, in
the order given. A worker compiles with :func:`deep_tile.jit.compiler.compile_cubin` (no cache,
so the compiler really runs) and disassembles with :func:`deep_tile.jit.compiler.disassemble`;
the report keeps the ptxas log, the cubin's function symbols and the SASS facts, not the cubin,
so a sweep of hundreds of kernels holds little memory. No GPU needed.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import re
from dataclasses import dataclass, field
from pathlib import Path

from deep_tile.common import usable_cpus

__all__ = ["SASS_MARKERS", "FUNCTION", "BuildJob", "BuildReport", "build_and_inspect", "in_workers", "run_builds"]

SASS_MARKERS = ("QGMMA", "USETMAXREG", "LDG.E.128", "STG.E.128", "LDGSTS.E.BYPASS.128")
"""SASS mnemonics whose count per function a report keeps (FP8 WGMMA, setmaxnreg, 128-bit loads
and stores, 16-byte cp.async.cg)."""

FUNCTION = re.compile(r"Function : (\S+)")
"""A function's header line in ``cuobjdump -sass`` text; group 1 is its name."""


@dataclass(frozen=True)
class BuildJob:
    """One compile: ``entry`` (a path to a ``.cu`` file), its defines (sorted pairs), the symbol
    the cubin must hold, the compiler (``"nvrtc"`` / ``"nvcc"``), and whether to disassemble;
    ``include_dir`` (default: the package's headers) and ``sass_path`` (where the worker writes the
    whole ``cuobjdump -sass`` text, for tools/sass_diff.py; the report keeps only its facts)."""

    entry: str
    defines: tuple
    symbol: str
    compiler: str
    sass: bool = True
    include_dir: str = ""
    sass_path: str = ""


@dataclass
class BuildReport:
    """What one :class:`BuildJob` produced.

    Attributes:
        job: the job.
        error: ``""``, or the exception (type and message, then the compiler log) that stopped it.
        log: the compiler output with the ptxas ``-v`` report.
        compiler: the compiler that ran (from the result, not the job).
        elf: whether the cubin starts with the ELF magic.
        functions: the function symbols of the cubin's ELF symbol table.
        sass: None when the SASS tools are missing or failed; else function name ->
            {marker: count} for :data:`SASS_MARKERS`.
        seconds: compile time.
    """

    job: BuildJob
    error: str = ""
    log: str = ""
    compiler: str = ""
    elf: bool = False
    functions: list = field(default_factory=list)
    sass: dict | None = None
    seconds: float = 0.0


def _sass_facts(sass: str) -> dict:
    """function name -> {marker: count} from ``cuobjdump -sass`` text."""
    facts, current = {}, None
    for line in sass.splitlines():
        match = FUNCTION.search(line)
        if match:
            current = facts.setdefault(match.group(1), {marker: 0 for marker in SASS_MARKERS})
        elif current is not None:
            for marker in SASS_MARKERS:
                if marker in line:
                    current[marker] += 1
    return facts


def build_and_inspect(job: BuildJob) -> BuildReport:
    """Compile ``job`` and inspect the result (runs in a worker of :func:`run_builds`)."""
    from deep_tile.jit import compiler

    report = BuildReport(job)
    try:
        result = compiler.compile_cubin(job.entry, dict(job.defines), job.symbol, job.compiler,
                                        include_dir=job.include_dir or None)
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails with it
        report.error = f"{type(error).__name__}: {error}\n{getattr(error, 'log', '')}"
        return report
    report.log, report.compiler, report.seconds = result.log, result.compiler, result.seconds
    report.elf = result.cubin[:4] == b"\x7fELF"
    try:
        report.functions = sorted(compiler.elf_functions(result.cubin))
    except ValueError as error:
        report.error = f"malformed cubin: {error}"
    if job.sass:
        text = compiler.disassemble(result.cubin)
        report.sass = None if text is None else _sass_facts(text)
        if text is not None and job.sass_path:
            Path(job.sass_path).write_text(text)
    return report


def in_workers(fn, items: list, workers: int | None = None, chunksize: int = 1) -> list:
    """``[fn(item) for item in items]`` in order, run by ``workers`` spawned processes (default: one
    per usable CPU, :func:`deep_tile.common.usable_cpus`; 1 runs in this process); ``fn`` must be
    importable by name. An exception in ``fn`` is raised here."""
    workers = usable_cpus() if workers is None else workers
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=context) as pool:
        return list(pool.map(fn, items, chunksize=chunksize))


def run_builds(jobs: list[BuildJob], workers: int | None = None) -> list[BuildReport]:
    """Reports of ``jobs`` in their order, built by ``workers`` processes (:func:`in_workers`)."""
    return in_workers(build_and_inspect, jobs, workers)
