"""Environment variables: the one place deep_tile reads ``os.environ``.

Every variable is declared once in :data:`REGISTRY` (name, type, default, doc) and parsed at
call time, so tests can ``monkeypatch.setenv`` and see the effect on the next call. The README's
``## Environment variables`` table lists the same variables (``tests/test_env.py`` checks).

Types:

- ``bool``: ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case); empty or unset means
  the default (off, except ``DEEP_TILE_PDL``: on).
- ``path``: ``~`` is expanded; empty or unset means the default.
- ``choice``: one of a fixed set (any case); empty or unset means the default.

A bad value raises :class:`EnvValueError` (a ``ValueError``) naming the variable, the allowed
values and the value. Each accessor parses its own variable when it is read; :func:`validate`
parses them all at once, and the code that writes into the cache (a kernel cache miss, a native
build) calls it first, so that a typo fails before anything is written, not half-way through.

This module imports nothing from deep_tile.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping, Sequence

__all__ = [
    "EnvVar", "EnvValueError", "REGISTRY", "get", "validate", "snapshot", "markdown_table", "subprocess_env",
    "cache_dir", "disable_cache", "compiler", "nvcc_path", "cuda_home", "debug",
    "ptxas_check", "dump_asm", "print_configs", "watchdog", "native", "pdl", "cxx", "tp_transport",
    "kgrouped_tn_transpose",
    "bf16_legacy", "bf16_plan",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_TYPES = ("bool", "str", "path", "choice")


class EnvValueError(ValueError):
    """A declared variable has a value that is not allowed; the message names the variable, the
    allowed values and the value (the command line prints it as its one line of error)."""


class EnvVar:
    """One declared environment variable (a plain class: cheap to import; treat as read-only).

    Attributes:
        name: the variable name, e.g. ``DEEP_TILE_CACHE_DIR``.
        type: ``"bool"``, ``"str"``, ``"path"`` or ``"choice"``.
        default: the default as shown in the README (a description when it is computed).
        doc: what the variable does (the README's Effect column).
        choices: the allowed values of a ``choice`` variable.
    """

    __slots__ = ("name", "type", "default", "doc", "choices")

    def __init__(self, name: str, type: str, default: str, doc: str, choices: tuple[str, ...] = ()):
        self.name, self.type, self.default, self.doc, self.choices = name, type, default, doc, tuple(choices)
        if self.type not in _TYPES:
            raise ValueError(f"EnvVar: type must be one of {_TYPES}; got {self.type!r} for {self.name}")
        if (self.type == "choice") != bool(self.choices):
            raise ValueError(f"EnvVar: {self.name}: choices are required for, and only for, type 'choice'")

    def __repr__(self) -> str:
        return f"EnvVar({self.name!r}, {self.type!r}, {self.default!r})"


_VARS = (
    EnvVar("DEEP_TILE_CACHE_DIR", "path", "~/.cache/deep_tile",
           "Directory of the on-disk kernel cache (compiled cubins under `kernels/`)."),
    EnvVar("DEEP_TILE_DISABLE_CACHE", "bool", "off",
           "Never read or write the disk cache (nor the in-process memo): compile on every call."),
    EnvVar("DEEP_TILE_COMPILER", "choice", "`nvrtc` if the NVRTC library loads, else `nvcc`",
           "Which compiler builds kernels: `nvrtc` (in-process, `cuda.bindings.nvrtc`) or `nvcc`.",
           choices=("nvrtc", "nvcc")),
    EnvVar("DEEP_TILE_NVCC", "path",
           "`nvcc` on PATH, then `$CUDA_HOME/bin/nvcc`, then `/usr/local/cuda/bin/nvcc`",
           "Path of the nvcc executable used when the compiler is `nvcc`."),
    EnvVar("DEEP_TILE_DEBUG", "bool", "off",
           "Log each kernel build to stderr: entry, defines, compiler, seconds, cache hit/miss, command. "
           "The command line (`python -m deep_tile`) then also prints the traceback of an error, which it "
           "otherwise reports in one line."),
    EnvVar("DEEP_TILE_PTXAS_CHECK", "bool", "off",
           "Reject (raise `CompileError`) kernels whose ptxas report shows spills, a nonzero stack "
           "frame, or warnings C7508/C7511/C7517/C7519. On a GPU machine with NVRTC 12.9 or later, start "
           "the process with `CUDA_CACHE_DISABLE=1`: a program the driver's compute cache serves comes "
           "back with no report, which the check rejects."),
    EnvVar("DEEP_TILE_DUMP_ASM", "bool", "off",
           "Write `kernel.ptx` (when compiling) and `kernel.sass` (cuobjdump) next to each cached "
           "`kernel.cubin`; never fatal: without `cuobjdump` and `nvdisasm` (the `test` extra has both) "
           "`kernel.sass` is skipped with one warning on stderr."),
    EnvVar("DEEP_TILE_PRINT_CONFIGS", "bool", "off",
           "Print each new kernel configuration choice (once per distinct problem) to stderr."),
    EnvVar("DEEP_TILE_WATCHDOG", "bool", "off",
           "Build kernels whose barrier waits trap after 10 s instead of hanging (a debugging aid: "
           "a hang then surfaces as `unspecified launch failure`); costs 5-10% speed, so off by default."),
    EnvVar("DEEP_TILE_NATIVE", "choice", "auto",
           "The native (C++) host path of the GEMM ops (every one: dense, output variants, 1D1D, "
           "M- and K-grouped): `auto` builds it in a background process on the first CUDA call (the "
           "Python host path runs until it is ready), `wait` builds it on the first CUDA call and waits, `off` always uses the Python host "
           "path.",
           choices=("auto", "wait", "off")),
    EnvVar("DEEP_TILE_PDL", "bool", "on",
           "Launch kernels with programmatic dependent launch, so a kernel's set-up overlaps the end of the "
           "kernel before it on the stream (`deep_tile.set_pdl` changes it at run time); read on the first "
           "launch. Each kernel still waits on the device for its predecessor before it reads or writes "
           "global memory."),
    EnvVar("DEEP_TILE_TP_TRANSPORT", "choice", "`symm`",
           "How `deep_tile.tp`'s overlapped GEMMs move data between GPUs over an NCCL process group: `symm` "
           "copies by the copy engines through torch's symmetric memory (no SMs taken from the GEMMs; falls "
           "back to `nccl` where symmetric memory cannot be set up), `nccl` uses NCCL's collectives and "
           "point-to-point transfers. Read at each call.",
           choices=("symm", "nccl")),
    EnvVar("DEEP_TILE_KGROUPED_TN_TRANSPOSE", "choice", "`kernel`",
           "How the compatible module's `k_grouped_fp8_gemm_tn_contiguous` turns its token-major operands "
           "K-major before the GEMM: `kernel` by deep_tile's byte-transposition kernel (both operands in one "
           "launch), `torch` by torch's `.t().contiguous()` (the earlier, slower copy; kept for comparison). "
           "Read at each call.",
           choices=("kernel", "torch")),
    EnvVar("DEEP_TILE_BH_EINSUM", "choice", "`auto`",
           "How `einsum`'s per-head bf16 expressions (`bhr,hdr->bhd`, `bhd,hdr->bhr`) run on CUDA: `auto` "
           "`batched` from 64 heads and 128 rows a head on, else `bmm`; `bmm` one "
           "`torch.bmm` on head-major views, nothing copied; `heads` deep_tile's BF16 GEMM once per head; "
           "`torch` `torch.einsum` and a copy into `d` (the earlier path); `batched` deep_tile's batched BF16 "
           "GEMM, one launch over every head, nothing copied (`bmm` where its 16-byte rules fail), d stored by TMA "
           "where d's strides allow; `batched_regs` the same with d stored from registers (the earlier epilogue, "
           "for timing). Read at each call.",
           choices=("auto", "bmm", "heads", "torch", "batched", "batched_regs")),
    EnvVar("DEEP_TILE_FP8_EINSUM", "choice", "`auto`",
           "How `fp8_einsum` runs on CUDA: `auto` `strided` where it applies, else by the batch size, `heads` "
           "the dense FP8 GEMM once per head in place, `masked` the masked grouped GEMM between head-major "
           "copies, `diag` one GEMM over every head keeping the diagonal blocks, `copy` the earlier path, "
           "`strided` the masked grouped GEMM reading x and writing d in place (no c, r a multiple of 512, d "
           "of 64; else `masked`). Read at each call.",
           choices=("auto", "heads", "masked", "diag", "copy", "strided")),
    EnvVar("DEEP_TILE_HC_GROUPS", "choice", "unset",
           "Forces the math warpgroups per CTA of `tf32_hc_prenorm_gemm` (1 or 2; unset: one up to 256 rows). "
           "For measurements. Read at each call.",
           choices=("1", "2")),
    EnvVar("DEEP_TILE_HC_SUB_SPLITS", "str", "unset",
           "Forces the pieces each of the caller's K splits of `tf32_hc_prenorm_gemm` is cut into (an int >= 1; "
           "unset: enough to fill the SMs, each at least 4 K blocks). For measurements. Read at each call."),
    EnvVar("DEEP_TILE_HC_VARIANT", "choice", "`default`",
           "The kernel variant of `tf32_hc_prenorm_gemm`: `default`, `prev` (the earlier kernel: the longer "
           "path from one K block's wgmmas to the next, a's loads evict-first), `short_path` / `hint` (one of the "
           "two changes). For measurements. Read at each call.",
           choices=("default", "prev", "short_path", "hint")),
    EnvVar("DEEP_TILE_BF16_LEGACY", "bool", "off",
           "The BF16 GEMMs (`deep_tile.bf16`) take their earlier plan: 64 / 128 / 256-wide tiles, no split K, "
           "no multicast, float32 `d` stored from registers (for side-by-side timing; `deep_tile.bf16.LEGACY` "
           "overrides it at run time). Read at each call."),
    EnvVar("DEEP_TILE_BF16_PLAN", "str", "unset",
           "Force one plan on every BF16 GEMM call: `block_n/splits/box_m/cluster_m/stages/store_all/block_m/k_merge` (trailing "
           "fields may be left out; for tuning, the kernel's limits apply; `deep_tile.bf16.FORCE_PLAN` overrides it). Read "
           "at each call."),
    EnvVar("CXX", "str", "c++",
           "C++ compiler that builds the native host path (through `torch.utils.cpp_extension`); part of "
           "its build key."),
    EnvVar("CUDA_HOME", "path", "unset",
           "CUDA toolkit root; `$CUDA_HOME/bin/nvcc` is tried when `DEEP_TILE_NVCC` is unset and "
           "nvcc is not on PATH."),
)

#: Every declared variable, by name (insertion order is the README order).
REGISTRY: Mapping[str, EnvVar] = {v.name: v for v in _VARS}


def _raw(name: str) -> str | None:
    """The stripped raw value of a declared variable, or None when unset or empty."""
    if name not in REGISTRY:
        raise ValueError(f"deep_tile.env: {name!r} is not a declared variable; declared: {sorted(REGISTRY)}")
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _bad(var: EnvVar, allowed: str, value: str) -> EnvValueError:
    return EnvValueError(f"environment variable {var.name} must be {allowed}; got {value!r}")


def get(name: str):
    """Parse the declared variable ``name`` now.

    Returns a ``bool`` for bool variables (their default when unset: off, or on), a ``Path`` for path variables,
    a lower-case ``str`` for choice variables and a ``str`` for str variables; ``None`` when a
    non-bool variable is unset or empty (its default is then computed by its accessor).

    Raises:
        ValueError: ``name`` is not declared; :class:`EnvValueError` when its value is not allowed.
    """
    raw = _raw(name)
    var = REGISTRY[name]
    if var.type == "bool":
        if raw is None:
            return var.default == "on"
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise _bad(var, "a boolean (1/0, true/false, yes/no, on/off, or empty)", raw)
    if raw is None:
        return None
    if var.type == "path":
        return Path(raw).expanduser()
    if var.type == "choice":
        if raw.lower() not in var.choices:
            raise _bad(var, "one of " + ", ".join(var.choices), raw)
        return raw.lower()
    return raw


def validate() -> None:
    """Parse every declared variable now (cold paths only: before writing into the cache).

    Raises:
        EnvValueError: the first declared variable, in :data:`REGISTRY` order, whose value is not
            allowed (the same message its accessor raises).
    """
    for name in REGISTRY:
        get(name)


def snapshot() -> dict[str, str]:
    """The raw values of every declared variable that is set (for debug reports)."""
    return {name: os.environ[name] for name in REGISTRY if name in os.environ}


def markdown_table(names: Sequence[str] | None = None) -> str:
    """The README's ``Variable | Type | Default | Effect`` table for ``names`` (default: all)."""
    rows = ["| Variable | Type | Default | Effect |", "| --- | --- | --- | --- |"]
    for name in names or REGISTRY:
        var = REGISTRY[name]
        kind = var.type
        if var.choices:
            kind += " (" + ", ".join(f"`{c}`" for c in var.choices) + ")"
        default = var.default if "`" in var.default else f"`{var.default}`"
        rows.append(f"| `{var.name}` | {kind} | {default} | {var.doc} |")
    return "\n".join(rows) + "\n"


def subprocess_env(prepend_path: Sequence[str | os.PathLike] = ()) -> dict[str, str]:
    """A copy of the process environment with ``prepend_path`` put in front of ``PATH``."""
    environ = dict(os.environ)
    parts = [os.fspath(p) for p in prepend_path]
    if environ.get("PATH"):
        parts.append(environ["PATH"])
    environ["PATH"] = os.pathsep.join(parts)
    return environ


# ---- accessors (read at call time) ----------------------------------------------------------
# NOTES: the JIT's hot path reads a few of these per kernel call, so the unset case returns
# after a single os.environ lookup.

def _flag(name: str) -> bool:
    return bool(os.environ.get(name)) and get(name)


def cache_dir() -> Path:
    """``DEEP_TILE_CACHE_DIR``: the kernel cache root (default ``~/.cache/deep_tile``)."""
    return get("DEEP_TILE_CACHE_DIR") or Path("~/.cache/deep_tile").expanduser()


def disable_cache() -> bool:
    """``DEEP_TILE_DISABLE_CACHE``: compile on every call, touch no cache."""
    return _flag("DEEP_TILE_DISABLE_CACHE")


def compiler() -> str | None:
    """``DEEP_TILE_COMPILER``: ``"nvrtc"``, ``"nvcc"``, or None when unset (pick automatically).

    The automatic choice (NVRTC when it loads) lives in ``deep_tile.jit.compiler.default_compiler``.
    """
    return get("DEEP_TILE_COMPILER") if os.environ.get("DEEP_TILE_COMPILER") else None


def cuda_home() -> Path | None:
    """``CUDA_HOME``: the CUDA toolkit root, or None when unset."""
    return get("CUDA_HOME")


def nvcc_path() -> str | None:
    """``DEEP_TILE_NVCC``, else ``nvcc`` on PATH, ``$CUDA_HOME/bin/nvcc``, ``/usr/local/cuda/bin/nvcc``.

    Returns None when none of these exists. An explicit ``DEEP_TILE_NVCC`` is returned as given
    (expanded) even if it does not exist, so the compile error can name it.
    """
    explicit = get("DEEP_TILE_NVCC")
    if explicit is not None:
        return str(explicit)
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = [Path("/usr/local/cuda/bin/nvcc")]
    home = cuda_home()
    if home is not None:
        candidates.insert(0, home / "bin" / "nvcc")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def debug() -> bool:
    """``DEEP_TILE_DEBUG``: log each kernel build to stderr."""
    return _flag("DEEP_TILE_DEBUG")


def ptxas_check() -> bool:
    """``DEEP_TILE_PTXAS_CHECK``: reject kernels with spills, stack frames or C75xx warnings."""
    return _flag("DEEP_TILE_PTXAS_CHECK")


def dump_asm() -> bool:
    """``DEEP_TILE_DUMP_ASM``: write PTX and SASS next to newly cached cubins."""
    return _flag("DEEP_TILE_DUMP_ASM")


def watchdog() -> bool:
    """``DEEP_TILE_WATCHDOG``: compile kernels with the barrier-wait watchdog (DT_WATCHDOG=1)."""
    return _flag("DEEP_TILE_WATCHDOG")


def native() -> str:
    """``DEEP_TILE_NATIVE``: ``"auto"`` (default), ``"wait"`` or ``"off"``."""
    return get("DEEP_TILE_NATIVE") if os.environ.get("DEEP_TILE_NATIVE") else "auto"


def pdl() -> bool:
    """``DEEP_TILE_PDL``: launch kernels with programmatic dependent launch (default on; the
    setting in force is :func:`deep_tile.pdl.get_pdl`)."""
    return get("DEEP_TILE_PDL")


def bf16_legacy() -> bool:
    """``DEEP_TILE_BF16_LEGACY``: the BF16 GEMMs' earlier plan."""
    return get("DEEP_TILE_BF16_LEGACY")


def bf16_plan() -> str | None:
    """``DEEP_TILE_BF16_PLAN``: a forced BF16 GEMM plan (``block_n/splits/box_m/cluster_m/stages/store_all/block_m/k_merge``), or None."""
    return get("DEEP_TILE_BF16_PLAN")


def tp_transport() -> str:
    """``DEEP_TILE_TP_TRANSPORT``: ``"symm"`` (default) or ``"nccl"``."""
    return get("DEEP_TILE_TP_TRANSPORT") if os.environ.get("DEEP_TILE_TP_TRANSPORT", "").strip() else "symm"


def kgrouped_tn_transpose() -> str:
    """``DEEP_TILE_KGROUPED_TN_TRANSPOSE``: ``"kernel"`` (default) or ``"torch"``."""
    return get("DEEP_TILE_KGROUPED_TN_TRANSPOSE") or "kernel"


def bh_einsum() -> str:
    """``DEEP_TILE_BH_EINSUM``: ``"auto"`` (default), ``"bmm"``, ``"heads"``, ``"torch"``, ``"batched"`` or
    ``"batched_regs"``."""
    return get("DEEP_TILE_BH_EINSUM") or "auto"


def fp8_einsum() -> str:
    """``DEEP_TILE_FP8_EINSUM``: ``"auto"`` (default), ``"heads"``, ``"masked"``, ``"diag"``, ``"copy"`` or
    ``"strided"``."""
    return get("DEEP_TILE_FP8_EINSUM") or "auto"


def hc_groups() -> int:
    """``DEEP_TILE_HC_GROUPS``: 1 or 2 math warpgroups forced, 0 when unset."""
    value = get("DEEP_TILE_HC_GROUPS")
    return int(value) if value else 0


def hc_variant() -> str:
    """``DEEP_TILE_HC_VARIANT``: the pre-norm GEMM's kernel variant (``default`` when unset)."""
    return get("DEEP_TILE_HC_VARIANT") or "default"


def hc_sub_splits() -> int:
    """``DEEP_TILE_HC_SUB_SPLITS``: the pieces per split forced (an int >= 1), 0 when unset."""
    raw = get("DEEP_TILE_HC_SUB_SPLITS")
    if raw is None:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise _bad(REGISTRY["DEEP_TILE_HC_SUB_SPLITS"], "an int >= 1", raw)
    return value


def cxx() -> str:
    """``CXX``: the C++ compiler of the native host path (default ``c++``, as torch uses)."""
    return get("CXX") or "c++"


def print_configs() -> bool:
    """``DEEP_TILE_PRINT_CONFIGS``: print each new kernel configuration choice once."""
    return _flag("DEEP_TILE_PRINT_CONFIGS")
