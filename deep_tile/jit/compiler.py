"""Compile one kernel entry file to an sm_90a cubin with NVRTC or NVCC. Needs no GPU.

``compile_cubin`` returns the cubin plus the ptxas ``-v`` report; it checks that the cubin holds
the ``extern "C"`` kernel symbol and, when ``DEEP_TILE_PTXAS_CHECK`` is on, that ptxas reported
no spills, no stack frame and none of the warnings C7508/C7511/C7517/C7519. Failures raise
``CompileError`` carrying the command, the full log and a kept copy of the source (the entry
with its defines written out as ``#define`` lines, in a ``deep_tile-failed-*`` temp dir).

The device code includes no system or CUDA headers, so the only include path is
``paths.include_dir()``.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from deep_tile import env
from deep_tile.errors import CompileError
from deep_tile.jit import paths

__all__ = [
    "ARCH", "COMPILERS", "PTXAS_OPTIONS", "NVCC_FLAGS", "NVRTC_FLAGS", "CompiledKernel", "compile_cubin",
    "compiler_version", "available_compilers", "default_compiler", "flags", "normalize_defines",
    "check_ptxas", "ptxas_problems", "elf_functions", "has_symbol", "find_tool", "disassemble",
    "SASS_TOOLS", "SASS_TOOLS_INSTALL", "missing_sass_tools",
]

#: The one target: Hopper with the arch-specific features (wgmma, setmaxnreg).
ARCH = "sm_90a"
#: The supported compilers, in order of preference.
COMPILERS = ("nvrtc", "nvcc")
#: ptxas options of both compilers. ``--register-usage-level=10`` (default 5) lets ptxas spend
#: registers for scheduling: slightly faster on average in an A/B over 16 shapes, and every kernel
#: family still builds spill-free (tests/test_kernel_build.py).
PTXAS_OPTIONS = ("--verbose", "--register-usage-level=10")
#: NVCC flags (``-gencode`` form: ``-arch=sm_90a`` may add a failing compute_90 pass).
NVCC_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", "-std=c++17",
              "--expt-relaxed-constexpr", *(flag for option in PTXAS_OPTIONS for flag in ("-Xptxas", option)))
#: NVRTC options (NVRTC has no --expt-relaxed-constexpr: device functions need annotations).
NVRTC_FLAGS = ("--gpu-architecture=sm_90a", "-std=c++17", *(f"--ptxas-options={option}" for option in PTXAS_OPTIONS))

_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEFINE_VALUE = re.compile(r"[^\s\"'\\]+\Z")
_valid_names: set[str] = set()


@dataclass(frozen=True)
class CompiledKernel:
    """Result of :func:`compile_cubin`.

    Attributes:
        cubin: the sm_90a ELF image.
        log: the compiler output, including the ptxas ``-v`` report.
        compiler: ``"nvrtc"`` or ``"nvcc"``.
        command: the command line (NVCC) or option list (NVRTC), as one string.
        seconds: wall time of the compile.
        ptx: the PTX text when ``want_ptx`` was passed, else ``""``.
    """

    cubin: bytes
    log: str
    compiler: str
    command: str
    seconds: float
    ptx: str = ""


def flags(compiler: str) -> tuple[str, ...]:
    """The fixed flags of ``compiler`` (no ``-I``/``-D``, no paths): part of the cache key."""
    _check_compiler(compiler)
    return NVRTC_FLAGS if compiler == "nvrtc" else NVCC_FLAGS


def normalize_defines(defines: Mapping[str, int | str | bool]) -> tuple[tuple[str, str], ...]:
    """``defines`` as sorted ``(NAME, value)`` string pairs; bools become ``"1"``/``"0"``.

    Raises:
        TypeError: ``defines`` is not a mapping, or a value is not int/str/bool.
        ValueError: a name is not a C identifier, or a str value is empty or has spaces/quotes.
    """
    if type(defines) is not dict and not isinstance(defines, Mapping):
        raise TypeError(f"defines must be a mapping of macro name -> int/str/bool; got {type(defines).__name__}")
    out = []
    for name, value in defines.items():
        if name not in _valid_names:  # NOTES: called on every get_cubin, so names are checked once
            if not isinstance(name, str) or not _DEFINE_NAME.match(name):
                raise ValueError(f"defines: macro names must be C identifiers; got {name!r}")
            _valid_names.add(name)
        if type(value) is int:
            text = str(value)
        elif isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, str):
            if not _DEFINE_VALUE.match(value):
                raise ValueError(f"defines[{name!r}]: str values must be non-empty without spaces, "
                                 f"quotes or backslashes; got {value!r}")
            text = value
        else:
            raise TypeError(f"defines[{name!r}] must be int, str or bool; got {type(value).__name__} {value!r}")
        out.append((name, text))
    out.sort()
    return tuple(out)


# ---- compiler discovery ---------------------------------------------------------------------

def _check_compiler(name) -> None:
    if name not in COMPILERS:
        raise ValueError(f"compiler must be one of {', '.join(COMPILERS)}; got {name!r}")


def _nvrtc_module():
    try:
        from cuda.bindings import nvrtc
    except ImportError:  # cuda-python < 12.6 layout
        from cuda import nvrtc
    return nvrtc


@functools.lru_cache(maxsize=None)
def _nvrtc_version() -> str | None:
    try:
        nvrtc = _nvrtc_module()
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # noqa: BLE001 - missing bindings or libnvrtc that fails to load
        return None
    return f"{major}.{minor}" if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else None


def _nvcc_or_raise() -> str:
    path = env.nvcc_path()
    if path is None:
        raise CompileError("nvcc not found: set DEEP_TILE_NVCC to the nvcc executable, put nvcc on "
                           "PATH or set CUDA_HOME (or use DEEP_TILE_COMPILER=nvrtc)")
    return path


@functools.lru_cache(maxsize=None)
def _nvcc_version(path: str) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise CompileError(f"cannot run nvcc at {path!r} (DEEP_TILE_NVCC / PATH): {exc}") from None
    match = re.search(r"release [\d.]+, V([\d.]+)", proc.stdout)
    if proc.returncode != 0 or not match:
        raise CompileError(f"cannot read the version of nvcc at {path!r}",
                           command=f"{path} --version", log=proc.stdout + proc.stderr)
    return match.group(1)


def compiler_version(name: str) -> str:
    """Version of compiler ``name``: NVRTC's ``"major.minor"``, or nvcc's ``"13.0.88"`` (cached).

    Raises:
        ValueError: ``name`` is not ``"nvrtc"`` or ``"nvcc"``.
        CompileError: the compiler is not available.
    """
    _check_compiler(name)
    if name == "nvcc":
        return _nvcc_version(_nvcc_or_raise())
    version = _nvrtc_version()
    if version is None:
        from deep_tile import cuda_stack

        raise CompileError(f"NVRTC is not available (cuda-bindings {cuda_stack.bindings_version() or 'not installed'}): "
                           f"{cuda_stack.INSTALL_HINT}; or use DEEP_TILE_COMPILER=nvcc")
    return version


def available_compilers() -> list[str]:
    """The compilers usable here, in order of preference (``"nvrtc"`` if it loads, ``"nvcc"`` if found)."""
    found = ["nvrtc"] if _nvrtc_version() is not None else []
    nvcc = env.nvcc_path()
    if nvcc is not None and os.path.isfile(nvcc) and os.access(nvcc, os.X_OK):
        found.append("nvcc")
    return found


def default_compiler() -> str:
    """``DEEP_TILE_COMPILER`` if set, else ``"nvrtc"`` when NVRTC loads, else ``"nvcc"``."""
    return env.compiler() or ("nvrtc" if _nvrtc_version() is not None else "nvcc")


# ---- compile ----------------------------------------------------------------------------------

def compile_cubin(entry_path, defines: Mapping[str, int | str | bool], kernel_name: str,
                  compiler: str | None = None, *, include_dir=None,
                  want_ptx: bool = False) -> CompiledKernel:
    """Compile ``entry_path`` with ``-D`` ``defines`` to an sm_90a cubin holding ``kernel_name``.

    Args:
        entry_path: the ``.cu`` translation unit (see ``paths.entry_path``).
        defines: macro name -> int/str/bool, passed as ``-DNAME=value``.
        kernel_name: the ``extern "C"`` kernel symbol the cubin must contain.
        compiler: ``"nvrtc"``, ``"nvcc"`` or None for :func:`default_compiler`.
        include_dir: the ``-I`` root; default ``paths.include_dir()``.
        want_ptx: also return the PTX (NVCC runs a second ``-ptx`` pass).

    Raises:
        CompileError: the compiler is missing or failed, the symbol is absent, or the ptxas
            check (``DEEP_TILE_PTXAS_CHECK``) rejected the kernel.
    """
    compiler = compiler or default_compiler()
    _check_compiler(compiler)
    if not isinstance(kernel_name, str) or not _DEFINE_NAME.match(kernel_name):
        raise ValueError(f"compile_cubin: kernel_name must be a C identifier; got {kernel_name!r}")
    entry = Path(entry_path).absolute()
    try:
        source = entry.read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"compile_cubin: cannot read entry_path {entry}: {exc}") from None
    options = [f"-I{Path(include_dir or paths.include_dir()).absolute()}"]
    options += [f"-D{name}={value}" for name, value in normalize_defines(defines)]
    start = time.perf_counter()
    if compiler == "nvrtc":
        cubin, log, command, ptx = _run_nvrtc(entry, source, options, want_ptx)
    else:
        cubin, log, command, ptx = _run_nvcc(entry, source, options, want_ptx)
    result = CompiledKernel(cubin, log, compiler, command, time.perf_counter() - start, ptx)
    if not has_symbol(cubin, kernel_name):
        raise CompileError(f"the {compiler} cubin of {entry} has no kernel symbol {kernel_name!r} "
                           "(is it declared extern \"C\" __global__?)", command=command, log=log,
                           source_path=_keep_source(entry, source, options, command, log))
    if env.ptxas_check() and ptxas_problems(log):
        check_ptxas(result, entry, _keep_source(entry, source, options, command, log))
    return result


def check_ptxas(result: CompiledKernel, entry="", source_path: str = "") -> None:
    """Raise ``CompileError`` when :func:`ptxas_problems` finds anything in ``result.log``."""
    problems = ptxas_problems(result.log)
    if problems:
        raise CompileError(f"ptxas check (DEEP_TILE_PTXAS_CHECK) rejected {entry}: " + "; ".join(problems),
                           command=result.command, log=result.log, source_path=source_path or str(entry))


def _fail(what: str, entry: Path, source: bytes, options, command: str, log: str):
    kept = _keep_source(entry, source, options, command, log)
    return CompileError(f"{what} failed to compile {entry}", command=command, log=log, source_path=kept)


def _run_nvrtc(entry: Path, source: bytes, options, want_ptx: bool):
    if _nvrtc_version() is None:
        compiler_version("nvrtc")  # raises the "not available" error
    nvrtc = _nvrtc_module()
    opts = [*NVRTC_FLAGS, *options]
    command = "nvrtc " + shlex.join([*opts, str(entry)])

    def call(fn, *args):
        result = fn(*args)
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{fn.__name__} failed: {result[0]!r}", command=command, source_path=str(entry))
        return result[1] if len(result) > 1 else None

    def fetch(size_fn, get_fn):
        buf = b" " * call(size_fn, prog)
        call(get_fn, prog, buf)
        return buf

    def text(size_fn, get_fn):  # NUL-terminated; the cubin must keep its trailing zero bytes
        return fetch(size_fn, get_fn).rstrip(b"\0").decode(errors="replace")

    prog = call(nvrtc.nvrtcCreateProgram, source, str(entry).encode(), 0, [], [])
    try:
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        log = text(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _fail(f"NVRTC ({status!r})", entry, source, options, command, log)
        cubin = fetch(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        ptx = text(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX) if want_ptx else ""
    finally:
        call(nvrtc.nvrtcDestroyProgram, prog)
    if not cubin:
        raise CompileError("NVRTC produced no cubin (a virtual arch?)", command=command, log=log)
    return cubin, log, command, ptx


def _run_nvcc(entry: Path, source: bytes, options, want_ptx: bool):
    nvcc = _nvcc_or_raise()
    with tempfile.TemporaryDirectory(prefix="deep_tile-nvcc-") as tmp:
        cmd = [nvcc, *NVCC_FLAGS, *options, str(entry), "-o", "kernel.cubin"]  # cwd is tmp
        command = shlex.join(cmd)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        except OSError as exc:
            raise CompileError(f"cannot run nvcc at {nvcc!r} (set DEEP_TILE_NVCC): {exc}", command=command) from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise _fail(f"nvcc (exit code {proc.returncode})", entry, source, options, command, log)
        cubin = Path(tmp, "kernel.cubin").read_bytes()
        ptx = ""
        if want_ptx:
            ptx_cmd = [nvcc, "-gencode=arch=compute_90a,code=compute_90a", "-ptx", "-O3", "-std=c++17",
                       "--expt-relaxed-constexpr", *options, str(entry), "-o", "kernel.ptx"]
            proc = subprocess.run(ptx_cmd, capture_output=True, text=True, cwd=tmp)
            ptx = Path(tmp, "kernel.ptx").read_text() if proc.returncode == 0 else ""
    return cubin, log, command, ptx


def _keep_source(entry: Path, source: bytes, options, command: str, log: str) -> str:
    """Write a self-contained copy of the failing source (defines inlined); return its path."""
    try:
        keep = Path(tempfile.mkdtemp(prefix=f"deep_tile-failed-{entry.stem}-"))
        lines = [f"// deep_tile: failed compile of {entry}", f"// command: {command}"]
        lines += ["#define " + o[2:].replace("=", " ", 1) for o in options if o.startswith("-D")]
        lines.append(f'#line 1 "{entry}"')
        kept = keep / entry.name
        kept.write_bytes("\n".join(lines).encode() + b"\n" + source)
        (keep / "compile.log").write_text(log)
        return str(kept)
    except OSError:
        return str(entry)


# ---- inspecting the result ------------------------------------------------------------------

_FUNC = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_BAD_WARNING = re.compile(r"\bC75(?:08|11|17|19)\b")


def ptxas_problems(log: str) -> list[str]:
    """What the ptxas check rejects in ``log`` (empty list: clean).

    Nonzero stack frames or spills, the warnings C7508/C7511/C7517/C7519, and a log with no
    ``-v`` report at all (the check could not run).
    """
    problems, function, reports = [], "?", 0
    for line in log.splitlines():
        if match := _FUNC.search(line):
            function = match.group(1)
        elif match := _FRAME.search(line):
            reports += 1
            frame, stores, loads = (int(x) for x in match.groups())
            if frame or stores or loads:
                problems.append(f"{function}: {frame} bytes stack frame, {stores} bytes spill stores, "
                                f"{loads} bytes spill loads")
        elif _BAD_WARNING.search(line):
            problems.append(line.strip())
    if not reports:
        # NOTES: NVRTC 12.9+ with a CUDA driver serves a program compiled before (in any process) from
        # the driver's compute cache with an empty log; CUDA_CACHE_DISABLE=1 turns it off only if set at start.
        problems.append("no ptxas -v report (stack frame / spill lines) in the log (NVRTC 12.9+ with a CUDA "
                        "driver returns none for a program its compute cache serves: start the process with "
                        "CUDA_CACHE_DISABLE=1)")
    return problems


def elf_functions(cubin: bytes) -> set[str]:
    """Names of the function symbols (``STT_FUNC``) in the ELF64 ``.symtab`` of ``cubin``.

    Raises:
        ValueError: ``cubin`` is not a complete little-endian ELF64 image.
    """
    try:
        if cubin[:6] != b"\x7fELF\x02\x01":
            raise ValueError("no ELF64 little-endian header")
        phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
        if phoff + phentsize * phnum > len(cubin) or shoff + shentsize * shnum > len(cubin):
            raise ValueError(f"truncated ({len(cubin)} bytes)")
        sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        names = set()
        for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
            if sh_type != 2:  # SHT_SYMTAB
                continue
            strtab_offset = sections[link][4]
            for pos in range(offset, offset + size, entsize or 24):
                st_name, st_info = struct.unpack_from("<IB", cubin, pos)
                if st_info & 0xF == 2:  # STT_FUNC
                    start = strtab_offset + st_name
                    names.add(cubin[start:cubin.index(b"\0", start)].decode())
        return names
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed ELF: {exc}") from None


def has_symbol(cubin: bytes, kernel_name: str) -> bool:
    """True when ``cubin`` is a well-formed ELF image defining the function ``kernel_name``."""
    try:
        return kernel_name in elf_functions(cubin)
    except ValueError:
        return False


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool (``cuobjdump``, ``nvdisasm``): PATH, the CUDA toolkit, pip wheels."""
    found = shutil.which(name)
    if found:
        return found
    dirs = []
    nvcc = env.nvcc_path()
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent)
    if env.cuda_home():
        dirs.append(env.cuda_home() / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    try:
        import nvidia  # pip wheels: nvidia/cu13/bin, nvidia/cuda_cuobjdump/bin, ...
        for base in nvidia.__path__:
            dirs += sorted(Path(base).glob("*/bin"))
    except ImportError:
        pass
    for directory in dirs:
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


SASS_TOOLS = ("cuobjdump", "nvdisasm")
"""The tools :func:`disassemble` needs: ``cuobjdump -sass`` runs ``nvdisasm`` for sm_90a cubins."""

SASS_TOOLS_INSTALL = "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"
"""How to get :data:`SASS_TOOLS` (CUDA 13 pip wheels; also in deep_tile's ``test`` extra)."""


def missing_sass_tools() -> list[str]:
    """The names in :data:`SASS_TOOLS` that :func:`find_tool` does not find (empty: both found)."""
    return [name for name in SASS_TOOLS if find_tool(name) is None]


def disassemble(cubin: bytes) -> str | None:
    """The SASS of ``cubin`` from ``cuobjdump -sass``, or None when the tools are missing or fail."""
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        return None
    nvdisasm = find_tool("nvdisasm")
    extra = [os.path.dirname(nvdisasm)] if nvdisasm else []
    with tempfile.TemporaryDirectory(prefix="deep_tile-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(cubin)
        try:
            proc = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True,
                                  timeout=300, env=env.subprocess_env(extra))
        except (OSError, subprocess.TimeoutExpired):
            return None
    return proc.stdout if proc.returncode == 0 and "Function" in proc.stdout else None
