#!/usr/bin/env python
"""Run vLLM's and SGLang's own DeepGEMM wrappers on deep_tile.compat.deepgemm, and report every name
and call that fails (exit status 1 if any does).

A documented manual step (docs/deepgemm-compat.md), not part of CI: it downloads the engines' wheels.

    python tools/check_engines.py                      # vLLM 0.33.*, SGLang 0.5.23, throwaway venv in /tmp
    python tools/check_engines.py --vllm 0.33.0 --sglang 0.5.23 --wheels /tmp/engines
    python tools/check_engines.py --engines-dir DIR    # engine sources already unpacked in DIR (no venv)
    python tools/check_engines.py --export-sources DIR # also copy the engine files the check loaded to DIR

What it does:

1. ``pip download --no-deps`` the two wheels (kept in ``--wheels``), make a throwaway venv
   (``--venv``) that sees this interpreter's packages (torch) and this checkout (deep_tile) through a
   ``.pth`` file, ``pip install --no-deps`` the wheels and the ``deep_gemm`` alias distribution
   (compat/deep_gemm_alias, the switch users install) into it, and run step 2 in it.
2. The engines' ``import deep_gemm`` (and ``deep_gemm.utils.layout``) get deep_tile: through the
   installed alias, or (``--engines-dir``, no venv) ``deep_tile.compat.deepgemm.install_alias()``;
   the engines' other third-party imports that are not
   installed (their dependencies: psutil, orjson, triton, ...) are answered by stub modules, and
   ``packaging``, which they need for real, by the copy setuptools or pip vendors, every one
   listed in the report; a few engine functions that need a running server (vLLM's data-parallel
   group and workspace manager, SGLang's GPU-memory probe and symmetric-memory context) are replaced
   by stand-ins, listed too. Then it imports the engines' DeepGEMM wrapper modules and calls their
   wrapper functions the way their layers do: dense FP8 linear, MoE contiguous (``m_indices``) and
   psum layouts inside the alignment scope, masked (with and without SGLang's overlap signal), the
   alignment and layout helpers, and their warm-up code; SGLang's BF16 entry points (dense with a
   float32 out, contiguous, masked), their warm-ups and its batch-invariant ``bf16_gemm_nn`` (vLLM
   calls no DeepGEMM BF16 name); and
   DeepSeek-V3.2's lightning indexer (H 64, head dim 128, blocks of 64): vLLM's
   ``fp8_fp4_mqa_logits`` (prefill, compressed logits), ``get_paged_mqa_logits_metadata`` and
   ``fp8_fp4_paged_mqa_logits`` (decode, next_n 1 and 2, the schedule copied into the builder's
   buffer), SGLang's ``dsa.utils`` resolvers, ``fp8_mqa_logits`` as its ragged prefill calls it,
   and its paged ``split`` (next_n 1) and ``native`` (target verify, next_n 2) decode paths.

Without a GPU the deep_tile kernels are replaced by recording stand-ins that check the tensors they
get (shapes, dtypes, the psum ends, DeepGEMM's asserts on the logits' arguments) and the check
verifies the recorded calls and the values that reached deep_tile (the flags, ``max_seqlen_k``,
the SM count, the block table, and the schedule: the metadata stand-in makes one no kernel would,
and the logits call must get it unchanged); with a GPU every call runs for real and each output is
compared with deep_tile's float64 reference (NaN-poisoned outputs: rows the GEMM must not write
stay NaN; the logits where the reference has a value). Neither needs more than torch and deep_tile's base install:
without cuda-bindings and NVRTC the CPU run checks all the same. Each check starts from the same
state: the calls an earlier one recorded and the deep_gemm settings it changed, failed or not,
do not reach it.
"""
from __future__ import annotations

import abc
import argparse
import contextlib
import importlib
import importlib.abc
import importlib.util
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VLLM = "0.33.*"
DEFAULT_SGLANG = "0.5.23"
DRIVE_FLAG = "--drive"

# ----------------------------------------------------------------------------------------------
# Step 1: wheels and the throwaway venv
# ----------------------------------------------------------------------------------------------


def _run(cmd: list, **kwargs) -> None:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def _wheel(wheels: Path, name: str) -> Path:
    found = sorted(wheels.glob(f"{name}-*.whl"))
    if not found:
        raise SystemExit(f"check_engines: no {name} wheel in {wheels} after pip download")
    return found[-1]


def prepare(args) -> tuple[Path, list[Path]]:
    """Download the wheels, make the venv, install them; return (venv python, wheels)."""
    wheels = Path(args.wheels)
    wheels.mkdir(parents=True, exist_ok=True)
    specs = [f"vllm=={args.vllm}", f"sglang=={args.sglang}"]
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheels, *specs])
    picked = [_wheel(wheels, "vllm"), _wheel(wheels, "sglang")]
    venv = Path(args.venv)
    if venv.exists():
        shutil.rmtree(venv)
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # this interpreter's packages (torch, numpy, cuda-bindings) and this checkout (deep_tile), after
    # the venv's own site-packages
    (site / "deep_tile_check.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{ROOT}\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet",
          *picked])
    # the switch a user installs: the deep_gemm alias distribution (compat/deep_gemm_alias)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet",
          "--no-build-isolation", ROOT / "compat" / "deep_gemm_alias"])
    return python, picked


# ----------------------------------------------------------------------------------------------
# Step 2 (in the venv): stubs, the alias, the engines' calls
# ----------------------------------------------------------------------------------------------

ENGINE_ROOTS = ("vllm", "sglang")
NEVER_STUB = {"deep_gemm", "deep_tile", "torch", "numpy", "vllm", "sglang", "cuda",
              # platform probes: an import that succeeds means "this hardware is here"
              "libtpu", "tpu_inference", "amdsmi", "intel_extension_for_pytorch", "habana_frameworks",
              "torch_npu", "neuronxcc", "torch_xla", "torch_musa", "mindie_turbo", "vllm_ascend",
              "triton_kernels"}
PROTOCOL_DUNDERS = {
    "__wrapped__", "__signature__", "__origin__", "__args__", "__parameters__", "__path__", "__file__", "__spec__",
    "__loader__", "__all__", "__annotations__", "__dataclass_fields__", "__func__", "__self__", "__code__", "__get__",
    "__set__", "__set_name__", "__len__", "__fspath__", "__index__", "__int__", "__float__", "__instancecheck__",
    "__subclasscheck__", "__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__",
    "__enter__", "__exit__", "__await__", "__aiter__", "__anext__", "__next__", "__length_hint__", "__name__",
    "__qualname__", "__module__", "__doc__", "__dict__", "__slots__", "__class_getitem__", "__objclass__",
    "__isabstractmethod__", "__version__", "__package__", "__builtins__", "__getattr__", "__dir__"}
"""Names Python and the standard library probe with getattr/hasattr: a stub has none of them (any
other dunder, e.g. pydantic's ``__class_validators__``, is a stub like a plain attribute)."""


class _Stub:
    """A value from a module that is not installed: any attribute or item is another stub;
    calling one with a single function returns it (a decorator), otherwise a new stub; a class may
    derive from it (and get :class:`_StubBase`); it is falsy, empty, and an instance of nothing."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name in PROTOCOL_DUNDERS:
            raise AttributeError(name)
        return _Stub(f"{self._name}.{name}")

    def __setattr__(self, name, value):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return _Stub(f"{self._name}()")

    def __repr__(self):
        return f"<stub {self._name}>"

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __getitem__(self, item):
        return self

    def __setitem__(self, item, value):
        pass

    def __contains__(self, item):
        return False

    def __mro_entries__(self, bases):
        return (_StubBase,)

    def __instancecheck__(self, obj):
        return False

    def __subclasscheck__(self, cls):
        return False


class _StubMeta(abc.ABCMeta):
    """The type of :class:`_StubBase`: a missing class attribute is a stub too (pydantic's
    ``Model.model_rebuild()`` at import); an ABCMeta, so a class may also derive from ``ABC``."""

    def __getattr__(cls, name):
        if name in PROTOCOL_DUNDERS:
            raise AttributeError(name)
        return _Stub(f"{cls.__name__}.{name}")


class _StubBase(metaclass=_StubMeta):
    """What a class deriving from a stub derives from: takes any class keywords and any
    constructor arguments; a missing attribute of an instance or of the class is a stub."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name in PROTOCOL_DUNDERS:
            raise AttributeError(name)
        return _Stub(f"{type(self).__name__}().{name}")


STUB_ALIASES = {"regex": "re"}
"""Modules not installed whose API a standard module provides (vLLM validates op names with ``regex``)."""

VENDORED = {"packaging": (("setuptools", "_vendor"), ("pip", "_vendor"))}
"""Modules not installed that the engines need for real, and the packages that vendor a copy: vLLM
and SGLang compare versions with ``packaging.version`` at import (a stub compares with nothing),
and torch's own dependency setuptools, or pip, ships the package whole. The first copy found is
loaded under the module's own name; its submodules come from that copy's folder."""


class _Tqdm:
    """tqdm's progress bar as a type (annotations use ``tqdm | None``) that hands back its iterable."""

    def __new__(cls, iterable=(), *args, **kwargs):
        return iterable


STUB_VALUES = {
    ("dill", "dumps"): lambda obj, *args, **kwargs: b"",  # SGLang serialises logit processors at import
    ("tqdm", "tqdm"): _Tqdm,  # the warm-ups' progress bars
}
"""Attributes of stub modules that must be more than a stub (listed in the report)."""


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if (self.__name__, name) in STUB_VALUES:
            return STUB_VALUES[(self.__name__, name)]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _Stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a module no other finder finds, outside the engines and the packages
    the check needs for real, becomes a stub module (recorded in ``stubbed``)."""

    def __init__(self):
        self.stubbed: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if (top in NEVER_STUB and top not in ENGINE_ROOTS) or top in sys.stdlib_module_names:
            return None
        if top in ENGINE_ROOTS:  # an engine's compiled extension (vllm._C, ...) that is not there
            if not fullname.rsplit(".", 1)[-1].startswith("_"):
                return None
        elif not _imported_by_engine():  # torch's and sympy's optional probes keep their ImportError
            return None
        if fullname in VENDORED:
            spec = _vendored_spec(fullname)
            if spec is not None:
                self.stubbed.append(f"{fullname} (= the copy vendored in {Path(spec.origin).parents[2].name})")
                return spec
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        if spec.name in STUB_ALIASES:
            self.stubbed.append(f"{spec.name} (= {STUB_ALIASES[spec.name]})")
            return importlib.import_module(STUB_ALIASES[spec.name])
        module = _StubModule(spec.name)
        module.__path__ = []
        known = {s.split()[0] if s.split(".")[0] in ENGINE_ROOTS else s.split(".")[0].split()[0] for s in self.stubbed}
        if (spec.name if spec.name.split(".")[0] in ENGINE_ROOTS else spec.name.split(".")[0]) not in known:
            self.stubbed.append(spec.name)
        return module

    def exec_module(self, module):
        pass


def _vendored_spec(name: str) -> "importlib.machinery.ModuleSpec | None":
    """The spec of the first copy of package ``name`` that a package of :data:`VENDORED` ships, or
    None. The vendoring packages are located on sys.path, not imported (their import runs code)."""
    for package, folder in VENDORED.get(name, ()):
        found = importlib.machinery.PathFinder.find_spec(package)
        for location in (found.submodule_search_locations or []) if found is not None else []:
            init = Path(location, folder, name, "__init__.py")
            if init.is_file():
                return importlib.util.spec_from_file_location(name, init,
                                                              submodule_search_locations=[str(init.parent)])
    return None


def _imported_by_engine() -> bool:
    """Whether the import statement running now is in an engine module (the first frame outside
    the import machinery and this file)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name == __name__ or "<frozen" in frame.f_code.co_filename):
            return name.split(".")[0] in ENGINE_ROOTS or type(sys.modules.get(name)) is _StubModule
        frame = frame.f_back
    return False


class Report:
    """Every check's name and outcome; failures carry the error.

    Each check starts as the first did, whatever an earlier one left behind: the recorder's calls
    are dropped before it, and each (get, set) pair of ``state`` (deep_gemm's settings) is read
    before it and set back after it, failed or not."""

    def __init__(self, finder: "StubFinder | None" = None, recorder: "Recorder | None" = None, state=()):
        self.rows: list[tuple[str, str, str]] = []  # (engine, what, "ok" | "FAIL: ..." | "skip: ...")
        self.finder = finder
        self.recorder = recorder
        self.state = tuple(state)

    def _missing_extension(self, engine: str, error: BaseException) -> str | None:
        """The engine's compiled extensions that were stubbed, when ``error`` is a missing custom op
        of ``torch.ops`` (their registrations): the engine's own compiled code is not on this machine
        (a checkout of its sources), which no deep_tile change can supply."""
        if self.finder is None or not isinstance(error, AttributeError) or "_OpNamespace" not in str(error):
            return None
        stubbed = [name for name in self.finder.stubbed if name.startswith(engine + "._")]
        return ", ".join(stubbed) or None

    @contextlib.contextmanager
    def check(self, engine: str, what: str):
        if self.recorder is not None:
            self.recorder.calls.clear()
        saved = [(set_value, get_value()) for get_value, set_value in self.state]
        try:
            try:
                yield
            finally:
                for set_value, value in saved:
                    set_value(value)
        except _Skip as skip:
            self.rows.append((engine, what, f"skip: {skip}"))
        except BaseException as error:  # noqa: BLE001  -- every failure is reported, the run goes on
            if os.environ.get("CHECK_ENGINES_DEBUG"):
                traceback.print_exc()
            missing = self._missing_extension(engine, error)
            if missing:
                self.rows.append((engine, what, f"skip: needs {engine}'s compiled extension, not on this machine "
                                                f"({missing} stubbed; {str(error)[:80]})"))
                return
            tail = traceback.format_exc().strip().splitlines()[-3:]
            self.rows.append((engine, what, f"FAIL: {type(error).__name__}: {error} | " + " / ".join(tail)))
        else:
            self.rows.append((engine, what, "ok"))

    @property
    def failures(self) -> int:
        return sum(row[2].startswith("FAIL") for row in self.rows)


class _Skip(Exception):
    pass


class Recorder:
    """Stand-ins for deep_tile's kernels on a CPU: each call checks its tensors like deep_tile's
    argument checks would (shapes, dtypes) and is recorded as (name, summary); the logits ones
    return DeepGEMM's shapes (NaN), the paged metadata a marked schedule (kept in its summary)."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []

    def install(self, deep_tile):
        import torch

        def fp8_gemm(a, sfa, b, sfb, out=None):
            assert a.dtype == b.dtype == torch.float8_e4m3fn and out.dtype == torch.bfloat16
            assert a.shape[1] == b.shape[1] and out.shape == (a.shape[0], b.shape[0]), (a.shape, b.shape, out.shape)
            assert sfa.dtype == sfb.dtype == torch.float32
            self.calls.append(("fp8_gemm", {"m": a.shape[0], "n": b.shape[0], "k": a.shape[1]}))
            return out

        def contiguous(a, sfa, b, sfb, m_indices, out=None):
            assert m_indices.dtype == torch.int32 and m_indices.shape == (a.shape[0],)
            assert out.shape == (a.shape[0], b.shape[1]) and b.dim() == 3
            self.calls.append(("m_grouped_fp8_gemm_contiguous", {"m": a.shape[0], "groups": b.shape[0]}))
            return out

        def psum(a, sfa, b, sfb, ends, alignment=128, out=None):
            assert ends.dtype == torch.int32 and ends.shape == (b.shape[0],), (ends.shape, b.shape)
            assert int(ends.max()) <= a.shape[0] and alignment % 128 == 0
            m_indices = deep_tile.psum_to_m_indices(ends.cpu(), a.shape[0], alignment)  # the real rule
            self.calls.append(("m_grouped_fp8_gemm_psum", {"m": a.shape[0], "groups": b.shape[0],
                                                           "alignment": alignment,
                                                           "rows": int((m_indices >= 0).sum())}))
            return out

        def masked(a, sfa, b, sfb, masked_m, expected_m, out=None):
            assert a.dim() == 3 and masked_m.shape == (a.shape[0],) and masked_m.dtype == torch.int32
            assert isinstance(expected_m, int) and out.shape == (a.shape[0], a.shape[1], b.shape[1])
            self.calls.append(("m_grouped_fp8_gemm_masked", {"groups": a.shape[0], "expected_m": expected_m}))
            return out

        def mqa_logits(q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0):
            # deep_tile's own type rules (it raises TypeError for a non-bool flag), then DeepGEMM's SM90 asserts
            assert isinstance(clean_logits, bool), (
                f"clean_logits is {type(clean_logits).__name__} {clean_logits!r}, not a bool (DeepGEMM's 6th "
                "parameter is clean_logits, its 7th max_seqlen_k; deep_tile raises TypeError)")
            assert isinstance(max_seqlen_k, int) and not isinstance(max_seqlen_k, bool) and max_seqlen_k >= 0
            assert not (clean_logits and max_seqlen_k), "compressed logits (max_seqlen_k > 0) need clean_logits=False"
            assert q.dtype == torch.float8_e4m3fn and q.dim() == 3 and q.shape[1] in (32, 64) and q.shape[2] == 128
            assert q.is_contiguous(), q.stride()
            kv_fp8, kv_scale = kv
            assert kv_fp8.dtype == torch.float8_e4m3fn and kv_fp8.dim() == 2 and kv_fp8.shape[1] == 128
            assert kv_scale.dtype == torch.float32 and tuple(kv_scale.shape) == (kv_fp8.shape[0],)
            assert kv_fp8.is_contiguous() and kv_scale.is_contiguous()
            m, heads = q.shape[:2]
            assert weights.dtype == torch.float32 and tuple(weights.shape) == (m, heads) and weights.stride(1) == 1
            for t in (ks, ke):
                assert t.dtype == torch.int32 and tuple(t.shape) == (m,) and t.is_contiguous(), (t.dtype, t.shape)
            self.calls.append(("fp8_mqa_logits", {"m": m, "n": kv_fp8.shape[0], "heads": heads,
                                                  "clean_logits": clean_logits, "max_seqlen_k": max_seqlen_k}))
            return torch.full((m, max_seqlen_k or kv_fp8.shape[0]), float("nan"), device=q.device)

        def paged_metadata(context_lens, block_kv, num_sms):
            assert context_lens.dtype == torch.int32 and context_lens.dim() == 2 and context_lens.is_contiguous()
            assert block_kv == 64 and isinstance(num_sms, int) and num_sms >= 1, (block_kv, num_sms)
            # a schedule no kernel would compute: the logits stand-in finds whether it came through unread
            schedule = torch.arange(2 * num_sms + 2, dtype=torch.int32, device=context_lens.device).view(-1, 2) * 7 + 3
            self.calls.append(("get_paged_mqa_logits_metadata", {
                "lens": context_lens.cpu().clone(), "num_sms": num_sms, "schedule": schedule.cpu().clone()}))
            return schedule

        def paged_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False):
            assert isinstance(clean_logits, bool) and isinstance(max_context_len, int) and max_context_len >= 0
            assert q.dtype == torch.float8_e4m3fn and q.dim() == 4 and q.shape[1] in (1, 2, 4)
            assert q.shape[2] in (32, 64) and q.shape[3] == 128 and q.is_contiguous(), (q.shape, q.stride())
            batch, next_n, heads = q.shape[:3]
            assert kv_cache.dtype == torch.uint8 and kv_cache.dim() == 4 and tuple(kv_cache.shape[1:]) == (64, 1, 132)
            assert kv_cache.stride(1) == 132 and kv_cache.stride(3) == 1, kv_cache.stride()
            assert weights.dtype == torch.float32 and tuple(weights.shape) == (batch * next_n, heads)
            assert weights.is_contiguous()
            assert context_lens.dtype == torch.int32 and tuple(context_lens.shape) == (batch, next_n)
            assert block_table.dtype == torch.int32 and block_table.dim() == 2 and block_table.shape[0] == batch
            assert block_table.shape[1] == 1 or block_table.stride(1) == 1, block_table.stride()
            assert schedule_meta.dtype == torch.int32 and schedule_meta.dim() == 2 and schedule_meta.shape[1] == 2
            assert schedule_meta.is_contiguous()
            self.calls.append(("fp8_paged_mqa_logits", {
                "batch": batch, "next_n": next_n, "heads": heads, "max_context_len": max_context_len,
                "clean_logits": clean_logits, "lens": context_lens.cpu().clone(),
                "blocks": block_table.cpu().clone(), "schedule": schedule_meta.cpu().clone()}))
            return torch.full((batch * next_n, max_context_len), float("nan"), device=q.device)

        def bf16_gemm_nt(a, b, d, c=None):
            assert a.dtype == b.dtype == torch.bfloat16 and a.dim() == b.dim() == 2 and a.shape[1] == b.shape[1]
            assert d.dtype in (torch.bfloat16, torch.float32) and tuple(d.shape) == (a.shape[0], b.shape[0])
            self.calls.append(("bf16_gemm_nt", {"m": a.shape[0], "n": b.shape[0], "k": a.shape[1], "d": d.dtype}))

        def bf16_gemm_nn(a, b, d, c=None):
            assert a.dtype == b.dtype == torch.bfloat16 and a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0]
            assert d.dtype in (torch.bfloat16, torch.float32) and tuple(d.shape) == (a.shape[0], b.shape[1])
            self.calls.append(("bf16_gemm_nn", {"m": a.shape[0], "n": b.shape[1], "k": a.shape[1], "d": d.dtype}))

        def bf16_contiguous(a, b, d, m_indices):
            assert a.dtype == b.dtype == d.dtype == torch.bfloat16 and a.dim() == 2 and b.dim() == 3
            assert b.shape[2] == a.shape[1] and tuple(d.shape) == (a.shape[0], b.shape[1])
            assert m_indices.dtype == torch.int32 and tuple(m_indices.shape) == (a.shape[0],)
            self.calls.append(("m_grouped_bf16_gemm_nt_contiguous", {"m": a.shape[0], "groups": b.shape[0]}))

        def bf16_masked(a, b, d, masked_m, expected_m):
            assert a.dtype == b.dtype == d.dtype == torch.bfloat16 and a.dim() == b.dim() == 3
            assert b.shape[0] == a.shape[0] and b.shape[2] == a.shape[2]
            assert tuple(d.shape) == (a.shape[0], a.shape[1], b.shape[1])
            assert masked_m.dtype == torch.int32 and tuple(masked_m.shape) == (a.shape[0],)
            assert isinstance(expected_m, int) and not isinstance(expected_m, bool)
            self.calls.append(("m_grouped_bf16_gemm_nt_masked", {"groups": a.shape[0], "expected_m": expected_m}))

        for name, fn in (("fp8_gemm", fp8_gemm), ("m_grouped_fp8_gemm_contiguous", contiguous),
                         ("m_grouped_fp8_gemm_psum", psum), ("m_grouped_fp8_gemm_masked", masked),
                         ("fp8_mqa_logits", mqa_logits), ("get_paged_mqa_logits_metadata", paged_metadata),
                         ("fp8_paged_mqa_logits", paged_logits), ("bf16_gemm_nt", bf16_gemm_nt),
                         ("bf16_gemm_nn", bf16_gemm_nn),
                         ("m_grouped_bf16_gemm_nt_contiguous", bf16_contiguous),
                         ("m_grouped_bf16_gemm_nt_masked", bf16_masked)):
            vars(deep_tile)[name] = fn

    def take(self) -> list[str]:
        names = [name for name, _ in self.calls]
        self.calls.clear()
        return names


class Inputs:
    """FP8 operands, scales and NaN-poisoned outputs of the engines' calls (on the GPU: random data,
    quantised by deep_tile; on the CPU: zeros, since the stand-ins do not compute)."""

    def __init__(self, device: str):
        import torch

        self.torch, self.device, self.gpu = torch, device, device == "cuda"
        self.gen = torch.Generator(device="cpu").manual_seed(0)

    def act(self, *shape):
        torch = self.torch
        x = torch.randn(*shape, generator=self.gen).to(torch.bfloat16).to(self.device)
        import deep_tile

        q, s = deep_tile.per_token_cast_to_fp8(x.reshape(-1, shape[-1]))
        return q.view(*shape), s.view(*shape[:-1], -1)

    def weights(self, groups, n, k):
        import deep_tile

        torch = self.torch
        pairs = [deep_tile.per_block_cast_to_fp8(torch.randn(n, k, generator=self.gen).to(self.device))
                 for _ in range(max(groups, 1))]
        w, s = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        return (w[0], s[0]) if groups == 0 else (w, s)

    def out(self, *shape, dtype=None):
        return self.torch.full(shape, float("nan"), dtype=dtype or self.torch.bfloat16, device=self.device)

    def bf16(self, *shape):
        """A random bfloat16 operand."""
        return self.torch.randn(*shape, generator=self.gen).to(self.torch.bfloat16).to(self.device)

    def fp8(self, *shape):
        """Random float8_e4m3fn values (the indexer's q and k)."""
        torch = self.torch
        return torch.randn(*shape, generator=self.gen).clamp(-4, 4).to(torch.float8_e4m3fn).to(self.device)

    def f32(self, *shape, low=-1.0):
        """float32 uniform in [low, 1) (indexer weights; scales with low > 0)."""
        torch = self.torch
        return (torch.rand(*shape, generator=self.gen) * (1 - low) + low).to(self.device)

    def paged_cache(self, num_blocks):
        """DeepGEMM's fused indexer cache as the engines allocate it, uint8 [num_blocks, 64 * 132]:
        each block's 64 x 128 FP8 values, then its 64 float32 scales."""
        torch = self.torch
        values = self.fp8(num_blocks, 64 * 128).view(torch.uint8)
        scales = self.f32(num_blocks, 64, low=0.5).view(torch.uint8)
        return torch.cat([values, scales], dim=1).contiguous()


def _verify(inputs: Inputs, recorder: Recorder, want: list[str], got_fn) -> None:
    """CPU: the recorded deep_tile calls are ``want``. GPU: ``got_fn()`` returns (out, ref) pairs;
    each out must match ref (calc_diff < 1e-3) where ref is a number and stay NaN where it is NaN."""
    if not inputs.gpu:
        got = recorder.take()
        assert got == want, f"deep_tile calls {got}, expected {want}"
        return
    inputs.torch.cuda.synchronize()
    from deep_tile.testing.numeric import calc_diff

    for out, ref in got_fn():
        out = out.double()
        real = ~inputs.torch.isnan(ref)
        assert int(inputs.torch.isnan(out[real]).sum()) == 0, "rows the GEMM must write are NaN"
        assert int((~inputs.torch.isnan(out[~real])).sum()) == 0, "rows the GEMM must not write were written"
        diff = calc_diff(out[real], ref[real]) if real.any() else 0.0
        assert diff < 1e-3, f"calc_diff {diff:.2e} against the float64 reference"


def _psum_case(inputs: Inputs, sizes: list, alignment: int):
    """DeepGEMM psum ends of experts with ``sizes`` rows and M (rows of the workspace, + 7 spare)."""
    ends, start = [], 0
    for size in sizes:
        start = -(-start // alignment) * alignment
        ends.append(start + size)
        start += size
    m = -(-ends[-1] // alignment) * alignment + alignment
    return inputs.torch.tensor(ends, dtype=inputs.torch.int32, device=inputs.device), m


def _recorded(inputs: Inputs, recorder: Recorder, want: list[str]) -> "list[dict] | None":
    """CPU: the recorded deep_tile calls must be ``want``; returns their summaries. GPU: None."""
    if inputs.gpu:
        return None
    calls = list(recorder.calls)
    recorder.calls.clear()
    assert [name for name, _ in calls] == want, f"deep_tile calls {[name for name, _ in calls]}, expected {want}"
    return [summary for _, summary in calls]


def _verify_logits(inputs: Inputs, logits, ref_fn, shape: tuple) -> None:
    """The logits have ``shape`` (float32); GPU: where ``ref_fn()`` (float64) is finite they match it
    (calc_diff < 1e-3); entries it leaves -inf are DeepGEMM's unspecified columns, not compared."""
    torch = inputs.torch
    assert tuple(logits.shape) == shape and logits.dtype == torch.float32, (tuple(logits.shape), logits.dtype, shape)
    if not inputs.gpu:
        return
    torch.cuda.synchronize()
    from deep_tile.testing.numeric import calc_diff

    ref = ref_fn()
    real = torch.isfinite(ref)
    assert real.any(), "the reference has no valid entry"
    got = logits.double()[real]
    assert int(torch.isnan(got).sum()) == 0, "valid logits are NaN"
    diff = calc_diff(got, ref[real])
    assert diff < 1e-3, f"calc_diff {diff:.2e} against the float64 reference"


def _schedule_came_through(made: dict, used: dict) -> None:
    """The logits call got the schedule the metadata call made, unread and whole (CPU summaries)."""
    rows = made["schedule"].shape[0]
    assert used["schedule"].shape[0] == rows, f"schedule of {used['schedule'].shape[0]} rows, made {rows}"
    assert _torch_equal(used["schedule"], made["schedule"]), "the schedule reached the logits call changed"


def _brief(summary: dict) -> dict:
    """A recorded call's summary without its tensors (for a failure's message)."""
    return {key: value for key, value in summary.items() if not hasattr(value, "shape")}


def _torch_equal(a, b) -> bool:
    """Same shape and values (CPU tensors)."""
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


INDEXER_HEADS, HEAD_DIM, BLOCK_KV = 64, 128, 64
"""DeepSeek-V3.2's lightning indexer: 64 heads of 128, the paged cache in blocks of 64 tokens."""


def _prefill_ranges(inputs: Inputs, lengths: list):
    """Per query token of sequences with ``lengths`` (causal prefill, sequences' KV rows packed):
    int32 ks, ke, the KV rows in all, the longest range."""
    ks, ke, start = [], [], 0
    for length in lengths:
        ks += [start] * length
        ke += [start + i + 1 for i in range(length)]
        start += length
    t = inputs.torch
    return (t.tensor(ks, dtype=t.int32, device=inputs.device), t.tensor(ke, dtype=t.int32, device=inputs.device),
            start, max(lengths))


def _paged_case(inputs: Inputs, lens: list, next_n: int, num_blocks: int = 24):
    """A decode batch of ``len(lens)`` sequences, ``next_n`` query tokens each: int32 context lengths
    [B, next_n] (token t of a sequence of length L sees L - next_n + t + 1 rows), a block table
    [B, max_blocks] of distinct blocks, the fused cache [num_blocks, 64 * 132]."""
    torch = inputs.torch
    rows = [[length - next_n + t + 1 for t in range(next_n)] for length in lens]
    context = torch.tensor(rows, dtype=torch.int32, device=inputs.device)
    max_blocks = -(-max(lens) // BLOCK_KV) + 1
    order = torch.randperm(num_blocks, generator=inputs.gen)[:len(lens) * max_blocks]
    table = order.view(len(lens), max_blocks).to(torch.int32).to(inputs.device)
    return context, table, inputs.paged_cache(num_blocks)


def _paged_ref(q, kv4, weights, context, table, max_len):
    """The float64 reference of the paged logits (deep_tile's)."""
    from deep_tile.paged_attention import paged_mqa_logits_reference

    import torch

    return paged_mqa_logits_reference(q, kv4, weights, context, table, max_len, dtype=torch.float64)


def _mqa_ref(q, kv, weights, ks, ke, clean_logits, max_seqlen_k):
    """The float64 reference of the prefill logits (deep_tile's)."""
    from deep_tile.attention import mqa_logits_reference

    import torch

    return mqa_logits_reference(q, kv, weights, ks, ke, clean_logits, max_seqlen_k, dtype=torch.float64)


def drive_vllm_indexer(report: Report, inputs: Inputs, recorder: Recorder, vdg) -> None:
    """vLLM's DeepSeek-V3.2 indexer calls: ``vllm.utils.deep_gemm``'s ``fp8_fp4_mqa_logits``
    (prefill, as ``sparse_attn_indexer`` passes it), ``get_paged_mqa_logits_metadata`` (as the
    indexer metadata builder) and ``fp8_fp4_paged_mqa_logits`` (decode, next_n 1 and 2)."""
    torch = inputs.torch
    engine = "vllm"
    sai = None
    with report.check(engine, "import vllm.model_executor.layers.sparse_attn_indexer (the indexer layer)"):
        import vllm.model_executor.layers.sparse_attn_indexer as sai  # noqa: F811

        assert sai.fp8_fp4_mqa_logits is vdg.fp8_fp4_mqa_logits
        assert sai.fp8_fp4_paged_mqa_logits is vdg.fp8_fp4_paged_mqa_logits
    with report.check(engine, "fp8_fp4_mqa_logits (prefill: q=(q, None), compressed logits of max_seqlen_k)"):
        ks, ke, n, max_k = _prefill_ranges(inputs, [37, 21])
        q, kv = inputs.fp8(len(ks), INDEXER_HEADS, HEAD_DIM), (inputs.fp8(n, HEAD_DIM), inputs.f32(n, low=0.5))
        weights = inputs.f32(len(ks), INDEXER_HEADS)
        q_scale, weights = vdg.mqa_logits_mx_inputs(q, None, weights)  # the layer's adaptation (SM100 only)
        logits = vdg.fp8_fp4_mqa_logits((q, q_scale), kv, weights, ks, ke, max_k)
        got = _recorded(inputs, recorder, ["fp8_mqa_logits"])
        if got:
            assert (got[0]["clean_logits"], got[0]["max_seqlen_k"]) == (False, max_k), got[0]
        _verify_logits(inputs, logits, lambda: _mqa_ref(q, kv, weights, ks, ke, False, max_k), (len(ks), max_k))
    num_sms = 132  # the builder's num_compute_units on an H100 / H200
    for next_n in (1, 2):
        with report.check(engine, f"get_paged_mqa_logits_metadata + fp8_fp4_paged_mqa_logits (decode, next_n "
                                  f"{next_n}, the builder's schedule buffer)"):
            lens = [70, 3, 200]
            context, table, cache = _paged_case(inputs, lens, next_n)
            kv4 = (sai.kv_cache_as_quant_view if sai else lambda c, d, f: c.unsqueeze(-2))(
                cache.view(-1, BLOCK_KV, HEAD_DIM + 4), HEAD_DIM, False)
            if next_n == 1:  # a [B, 1] table that is a transposed view: their clone gives it a unit stride
                table = table[:, :1].t().contiguous().t()
                lens = [min(length, BLOCK_KV) for length in lens]
                context = torch.tensor([[length] for length in lens], dtype=torch.int32, device=inputs.device)
            buffer = torch.empty((num_sms + 1, 2), dtype=torch.int32, device=inputs.device)
            made = vdg.get_paged_mqa_logits_metadata(context, BLOCK_KV, num_sms, indices=None)
            schedule = buffer[:made.shape[0]]
            schedule[:] = made
            q = inputs.fp8(len(lens), next_n, INDEXER_HEADS, HEAD_DIM)
            weights = inputs.f32(len(lens) * next_n, INDEXER_HEADS)
            max_len = 256
            logits = vdg.fp8_fp4_paged_mqa_logits((q, None), kv4, weights, context, table, schedule,
                                                  max_model_len=max_len, indices=None)
            got = _recorded(inputs, recorder, ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"])
            if got:
                assert got[0]["num_sms"] == num_sms and _torch_equal(got[0]["lens"], context.cpu()), _brief(got[0])
                _schedule_came_through(got[0], got[1])
                assert (got[1]["next_n"], got[1]["heads"], got[1]["max_context_len"], got[1]["clean_logits"]) == \
                    (next_n, INDEXER_HEADS, max_len, False), _brief(got[1])
                assert _torch_equal(got[1]["blocks"], table.cpu()), "the block table reached deep_tile changed"
            _verify_logits(inputs, logits, lambda: _paged_ref(q, kv4, weights, context, table, max_len),
                           (len(lens) * next_n, max_len))


def drive_vllm(report: Report, inputs: Inputs, recorder: Recorder, stand_ins: list) -> None:
    import deep_tile
    torch = inputs.torch
    engine = "vllm"
    vdg = None
    with report.check(engine, "import vllm.utils.deep_gemm"):
        import vllm.utils.deep_gemm as vdg  # noqa: F811
    if vdg is None:
        return
    with report.check(engine, "has_deep_gemm() and the lazy symbol table resolve deep_gemm to deep_tile"):
        from vllm.utils.import_utils import has_deep_gemm

        assert has_deep_gemm()
        vdg._lazy_init()
        assert vdg._import_deep_gemm() is sys.modules["deep_gemm"]
        for name in ("_fp8_gemm_nt_impl", "_grouped_impl", "_grouped_masked_impl",
                     "_get_mn_major_tma_aligned_tensor_impl", "_get_mk_alignment_for_contiguous_layout_impl",
                     "_get_theoretical_mk_alignment_for_contiguous_layout_impl",
                     "_transform_sf_into_required_layout_impl", "_fp8_fp4_mqa_logits_impl",
                     "_fp8_fp4_paged_mqa_logits_impl", "_get_paged_mqa_logits_metadata_impl"):
            assert getattr(vdg, name) is not None, f"{name} is None"
    k, n = 512, 256
    with report.check(engine, "fp8_gemm_nt (dense FP8 linear)"):
        a, sa = inputs.act(96, k)
        w, ws = inputs.weights(0, n, k)
        d = inputs.out(96, n)
        vdg.fp8_gemm_nt((a, sa), (w, ws), d)
        _verify(inputs, recorder, ["fp8_gemm"], lambda: [(d, deep_tile.ref_fp8_gemm(a, sa, w, ws))])
    with report.check(engine, "get_mk_alignment_for_contiguous_layout / get_theoretical (expected_m, num_groups)"):
        assert vdg.get_mk_alignment_for_contiguous_layout() == [128, 128]
        assert vdg.get_theoretical_mk_alignment_for_contiguous_layout(4096, 8) == 128
        assert vdg.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=64, num_groups=8) == 128
        assert vdg.get_theoretical_mk_alignment_for_contiguous_layout(64) == 128
    align = 128
    with report.check(engine, "fused_moe.deep_gemm_utils.compute_aligned_M_and_alignment"):
        from vllm.model_executor.layers.fused_moe.deep_gemm_utils import compute_aligned_M_and_alignment

        m_sum, align = compute_aligned_M_and_alignment(M=40, num_topk=2, local_num_experts=4, alignment=128,
                                                       expert_tokens_meta=None)
        assert align == 128 and m_sum % 128 == 0, (m_sum, align)
    groups = 4
    w1, w1s = inputs.weights(groups, n, k)
    with report.check(engine, "m_grouped_fp8_gemm_nt_contiguous, m_indices layout, in mk_alignment_scope"):
        m_indices = torch.tensor([0] * 100 + [-1] * 28 + [2] * 128 + [3] * 5 + [-1] * 123, dtype=torch.int32,
                                 device=inputs.device)
        a, sa = inputs.act(384, k)
        d = inputs.out(384, n)
        with vdg.mk_alignment_scope(align):
            vdg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (w1, w1s), d, m_indices)
        assert vdg.get_mk_alignment_for_contiguous_layout() == [128, 128]
        _verify(inputs, recorder, ["m_grouped_fp8_gemm_contiguous"],
                lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, sa, w1, w1s, m_indices))])
    for alignment in (128, 256):
        with report.check(engine, f"m_grouped_fp8_gemm_nt_contiguous(use_psum_layout=True) as DeepGemmExperts.apply, "
                                  f"mk_alignment_scope({alignment})"):
            ends, m = _psum_case(inputs, [100, 0, 300, 1], alignment)
            a, sa = inputs.act(m, k)
            d = inputs.out(m, n)
            with vdg.mk_alignment_scope(alignment):
                vdg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (w1, w1s), d, ends, use_psum_layout=True)
            assert vdg.get_mk_alignment_for_contiguous_layout() == [128, 128]
            m_indices = deep_tile.psum_to_m_indices(ends.cpu(), m, alignment).to(inputs.device)
            _verify(inputs, recorder, ["m_grouped_fp8_gemm_psum"],
                    lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, sa, w1, w1s, m_indices))])
    with report.check(engine, "fp8_m_grouped_gemm_nt_masked (batched / masked MoE)"):
        a, sa = inputs.act(groups, 192, k)
        masked_m = torch.tensor([0, 1, 130, 192], dtype=torch.int32, device=inputs.device)
        d = inputs.out(groups, 192, n)
        vdg.fp8_m_grouped_gemm_nt_masked((a, sa), (w1, w1s), d, masked_m, 80)
        _verify(inputs, recorder, ["m_grouped_fp8_gemm_masked"],
                lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_masked(a, sa, w1, w1s, masked_m))])
    with report.check(engine, "get_col_major_tma_aligned_tensor, transform_sf_into_required_layout, num SMs"):
        sf = torch.ones(301, 7, device=inputs.device)
        t = vdg.get_col_major_tma_aligned_tensor(sf)
        assert t.shape == sf.shape and t.stride() == (1, 304)
        t = vdg.transform_sf_into_required_layout(sf, 301, 896, (1, 128, 128), is_sfa=True)
        assert t.shape == sf.shape and t.stride() == (1, 304)
        sms = vdg.get_num_sms()
        vdg.set_num_sms(sms)
        assert vdg.get_num_sms() == sms
    drive_vllm_indexer(report, inputs, recorder, vdg)
    warm = None
    with report.check(engine, "import vllm.model_executor.warmup.deep_gemm_warmup"):
        import vllm.model_executor.warmup.deep_gemm_warmup as warm  # noqa: F811
    if warm is None:
        return
    if not inputs.gpu:
        warm.num_compute_units = lambda device_id=0: 132
        stand_ins.append("vllm warm-up: num_compute_units (132; the CPU platform has none)")
    with report.check(engine, "warm-up: _deepgemm_fp8_gemm_nt_warmup (their loop over M)"):
        w, ws = inputs.weights(0, n, k)
        warm._deepgemm_fp8_gemm_nt_warmup(w, ws, max_tokens=64)
        calls = recorder.take() if not inputs.gpu else ["fp8_gemm"]
        assert calls and set(calls) == {"fp8_gemm"}, calls
    with report.check(engine, "warm-up: _deepgemm_grouped_fp8_gemm_nt_contiguous_warmup (mk_alignment_scope)"):
        warm.get_dp_group = lambda: types.SimpleNamespace(world_size=1)
        warm.current_workspace_manager = lambda: types.SimpleNamespace(
            get_simultaneous=lambda *specs: [torch.zeros(shape, dtype=dtype, device=inputs.device)
                                             for shape, dtype in specs])
        stand_ins.append("vllm warm-up: get_dp_group (world_size 1), current_workspace_manager (torch.zeros)")
        w2, w2s = inputs.weights(groups, k, n)
        warm._deepgemm_grouped_fp8_gemm_nt_contiguous_warmup(w1, w2, w1s, w2s, num_topk=2, max_tokens=64)
        calls = recorder.take() if not inputs.gpu else ["m_grouped_fp8_gemm_contiguous"]
        assert calls and set(calls) == {"m_grouped_fp8_gemm_contiguous"}, calls
        assert vdg.get_mk_alignment_for_contiguous_layout() == [128, 128]


class _CudaToCpu(types.ModuleType):
    """``torch`` for SGLang's warm-up executors on a CPU: their ``device="cuda"`` allocations land on
    the CPU, ``torch.cuda`` syncs and cache frees do nothing; everything else is torch."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        self.cuda = types.SimpleNamespace(current_stream=lambda *a: types.SimpleNamespace(synchronize=lambda: None),
                                          empty_cache=lambda: None, current_device=lambda: 0)

    def __getattr__(self, name):
        value = getattr(self._torch, name)
        if name in ("empty", "zeros", "ones", "full", "randn"):
            def on_cpu(*args, _f=value, **kwargs):
                kwargs.pop("device", None)
                return _f(*args, **kwargs)
            return on_cpu
        return value


def drive_sglang(report: Report, inputs: Inputs, recorder: Recorder, stand_ins: list) -> None:
    import deep_tile
    torch = inputs.torch
    engine = "sglang"
    entry = None
    with report.check(engine, "import deep_gemm_wrapper.configurer (ENABLE_JIT_DEEPGEMM)"):
        package = "sglang.srt.layers.deep_gemm_wrapper"
        if not inputs.gpu:
            # no SM90 to probe here: load the configurer alone (the package's __init__ imports the
            # entrypoint, which reads the flag at load), force the flag, then load the package
            importlib.import_module("sglang.srt.layers")
            spec = importlib.util.find_spec(package)
            bare = types.ModuleType(package)
            bare.__path__ = list(spec.submodule_search_locations)
            sys.modules[package] = bare
            try:
                configurer = importlib.import_module(package + ".configurer")
                configurer.ENABLE_JIT_DEEPGEMM = True
            finally:  # a failed import must not leave the bare package for the next check
                if sys.modules.get(package) is bare:
                    del sys.modules[package]
            stand_ins.append("sglang configurer.ENABLE_JIT_DEEPGEMM forced True before the wrapper loads "
                             "(CPU: no SM90 to probe)")
        configurer = importlib.import_module(package + ".configurer")
        assert configurer.ENABLE_JIT_DEEPGEMM, "ENABLE_JIT_DEEPGEMM is False with deep_gemm importable"
    with report.check(engine, "import deep_gemm_wrapper.entrypoint (deep_gemm.utils.layout at load)"):
        import sglang.srt.layers.deep_gemm_wrapper.entrypoint as entry  # noqa: F811

        assert entry.deep_gemm is sys.modules["deep_gemm"]
    if entry is None:
        return
    compile_utils = sys.modules["sglang.srt.layers.deep_gemm_wrapper.compile_utils"]
    compile_utils._ENABLE_JIT_DEEPGEMM_PRECOMPILE = False
    stand_ins.append("sglang compile_utils._ENABLE_JIT_DEEPGEMM_PRECOMPILE = False (the first call of a kind would "
                     "warm up M = 1..16384; the warm-up is driven below with a few M)")
    if not inputs.gpu:
        entry._ensure_cuda = lambda pair: pair
        stand_ins.append("sglang entrypoint._ensure_cuda: identity (CPU tensors stay on the CPU)")
    k, n, groups = 512, 256, 4
    with report.check(engine, "gemm_nt_f8f8bf16 (dense FP8 linear)"):
        a, sa = inputs.act(77, k)
        w, ws = inputs.weights(0, n, k)
        d = inputs.out(77, n)
        entry.gemm_nt_f8f8bf16((a, sa), (w, ws), d)
        _verify(inputs, recorder, ["fp8_gemm"], lambda: [(d, deep_tile.ref_fp8_gemm(a, sa, w, ws))])
    with report.check(engine, "get_mn_major_tma_aligned_tensor (their ownership-preserving wrapper)"):
        sf = torch.ones(301, 7, device=inputs.device)
        t = entry.get_mn_major_tma_aligned_tensor(sf)
        assert t.stride() == (1, 304)
        assert entry.get_mn_major_tma_aligned_tensor(t) is t
    with report.check(engine, "get_contiguous_layout_alignment (theoretical, per-group form) and its scope"):
        assert entry.get_contiguous_layout_alignment(4096, 8) == 128
        with entry.contiguous_layout_alignment_scope(256):
            assert entry.deep_gemm.get_mk_alignment_for_contiguous_layout() == 256
        assert entry.deep_gemm.get_mk_alignment_for_contiguous_layout() == 128
    w1, w1s = inputs.weights(groups, n, k)
    with report.check(engine, "grouped_gemm_nt_f8f8bf16_contig (m_indices, -1 padding)"):
        m_indices = torch.tensor([1] * 128 + [0] * 3 + [-1] * 125 + [3] * 128, dtype=torch.int32,
                                 device=inputs.device)
        a, sa = inputs.act(384, k)
        d = inputs.out(384, n)
        entry.grouped_gemm_nt_f8f8bf16_contig((a, sa), (w1, w1s), d, m_indices)
        _verify(inputs, recorder, ["m_grouped_fp8_gemm_contiguous"],
                lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, sa, w1, w1s, m_indices))])
    with report.check(engine, "grouped_gemm_nt_f8f8bf16_masked"):
        a, sa = inputs.act(groups, 128, k)
        masked_m = torch.tensor([5, 0, 128, 64], dtype=torch.int32, device=inputs.device)
        d = inputs.out(groups, 128, n)
        returned = entry.grouped_gemm_nt_f8f8bf16_masked((a, sa), (w1, w1s), d, masked_m, 64)
        assert returned is None
        _verify(inputs, recorder, ["m_grouped_fp8_gemm_masked"],
                lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_masked(a, sa, w1, w1s, masked_m))])
    with report.check(engine, "grouped_gemm_nt_f8f8bf16_masked with single-batch-overlap signal"):
        from sglang.srt.batch_overlap.single_batch_overlap import DownGemmOverlapArgs

        max_m = 200
        a, sa = inputs.act(groups, max_m, k)
        masked_m = torch.tensor([5, 0, 200, 64], dtype=torch.int32, device=inputs.device)
        d = inputs.out(groups, max_m, n)
        signal = torch.zeros(groups * -(-max_m // 64), dtype=torch.int32, device=inputs.device)  # their size
        sms = entry.deep_gemm.get_num_sms()
        overlap = DownGemmOverlapArgs(num_sms=max(1, sms - 3), signal=signal, start_event=None)
        block_m, threshold = entry.grouped_gemm_nt_f8f8bf16_masked((a, sa), (w1, w1s), d, masked_m, 64,
                                                                   overlap_args=overlap, max_block_n=256)
        assert entry.deep_gemm.get_num_sms() == sms  # their configure_deep_gemm_num_sms restored it
        per_group = -(-max_m // block_m)
        for g, rows in enumerate(masked_m.tolist()):
            got = signal[g * per_group:(g + 1) * per_group].tolist()
            want = [threshold if j * block_m < rows else 0 for j in range(per_group)]
            assert got == want, (g, got, want)
        _verify(inputs, recorder, ["m_grouped_fp8_gemm_masked"],
                lambda: [(d, deep_tile.ref_m_grouped_fp8_gemm_masked(a, sa, w1, w1s, masked_m))])
    with report.check(engine, "gemm_nt_bf16bf16f32 (BF16 linear, float32 out: deep_gemm.bf16_gemm_nt)"):
        a, b = inputs.bf16(77, k), inputs.bf16(n, k)
        d = inputs.out(77, n, dtype=torch.float32)
        entry.gemm_nt_bf16bf16f32(a, b, d)
        got = _recorded(inputs, recorder, ["bf16_gemm_nt"])
        if got:
            assert got[0] == {"m": 77, "n": n, "k": k, "d": torch.float32}, got[0]
        _verify(inputs, recorder, [], lambda: [(d, deep_tile.ref_bf16_gemm(a, b))])
    with report.check(engine, "batch_invariant_ops._matmul_persistent_deepgemm (deep_gemm.bf16_gemm_nn, b [k, n])"):
        from sglang.srt.batch_invariant_ops import batch_invariant_ops as bio

        assert bio.deep_gemm is sys.modules["deep_gemm"]
        a, b = inputs.bf16(77, k), inputs.bf16(k, n)
        d = bio._matmul_persistent_deepgemm(a, b, torch.bfloat16)
        got = _recorded(inputs, recorder, ["bf16_gemm_nn"])
        if got:
            assert got[0] == {"m": 77, "n": n, "k": k, "d": torch.bfloat16}, got[0]
        _verify(inputs, recorder, [], lambda: [(d, deep_tile.ref_bf16_gemm(a, b.T))])
    wb = inputs.bf16(groups, n, k)
    with report.check(engine, "grouped_gemm_nt_bf16_contig (m_indices, a -1 block)"):
        m_indices = torch.tensor([2] * 128 + [-1] * 128 + [0] * 128, dtype=torch.int32, device=inputs.device)
        a = inputs.bf16(384, k)
        d = inputs.out(384, n)
        entry.grouped_gemm_nt_bf16_contig(a, wb, d, m_indices)
        got = _recorded(inputs, recorder, ["m_grouped_bf16_gemm_nt_contiguous"])
        if got:
            assert got[0] == {"m": 384, "groups": groups}, got[0]
        _verify(inputs, recorder, [], lambda: [(d, _bf16_contiguous_ref(a, wb, m_indices))])
    with report.check(engine, "grouped_gemm_nt_bf16_masked"):
        a = inputs.bf16(groups, 128, k)
        masked_m = torch.tensor([5, 0, 128, 64], dtype=torch.int32, device=inputs.device)
        d = inputs.out(groups, 128, n)
        entry.grouped_gemm_nt_bf16_masked(a, wb, d, masked_m, 64)
        got = _recorded(inputs, recorder, ["m_grouped_bf16_gemm_nt_masked"])
        if got:
            assert got[0] == {"groups": groups, "expected_m": 64}, got[0]
        _verify(inputs, recorder, [], lambda: [(d, _bf16_masked_ref(a, wb, masked_m))])
    drive_sglang_indexer(report, inputs, recorder)
    kinds = compile_utils.DeepGemmKernelType
    compile_utils.disable_symmetric_memory_context = lambda: None
    compile_utils.restore_symmetric_memory_context = lambda saved: None
    compile_utils.get_available_gpu_memory = lambda **kwargs: 1 << 20
    stand_ins.append("sglang compile_utils: symmetric-memory context no-ops, get_available_gpu_memory (1 TiB)")
    if not inputs.gpu:
        compile_utils.torch = _CudaToCpu(torch)
        stand_ins.append("sglang compile_utils.torch: device='cuda' allocations on the CPU, cuda syncs no-ops")
    for kind, want in ((kinds.GEMM_NT_F8F8BF16, "fp8_gemm"),
                       (kinds.GROUPED_GEMM_NT_F8F8BF16_CONTIG, "m_grouped_fp8_gemm_contiguous"),
                       (kinds.GROUPED_GEMM_NT_F8F8BF16_MASKED, "m_grouped_fp8_gemm_masked"),
                       (kinds.GEMM_NT_BF16BF16F32, "bf16_gemm_nt"),
                       (kinds.GROUPED_GEMM_NT_BF16_CONTIG, "m_grouped_bf16_gemm_nt_contiguous"),
                       (kinds.GROUPED_GEMM_NT_BF16_MASKED, "m_grouped_bf16_gemm_nt_masked")):
        with report.check(engine, f"warm-up: _compile_deep_gemm_one_type_all({kind.name}) with set_compile_mode"):
            contig = kind in (kinds.GROUPED_GEMM_NT_F8F8BF16_CONTIG, kinds.GROUPED_GEMM_NT_BF16_CONTIG)
            m_list = [1, 64, 128, 256] if not contig else [128, 256]
            compile_utils._compile_deep_gemm_one_type_all(kind, n, k, groups, m_list)
            assert entry.deep_gemm.get_compile_mode() == 0  # restored
            if not inputs.gpu:
                calls = recorder.take()
                assert calls == [want] * len(m_list), calls


def _bf16_contiguous_ref(a, b, m_indices):
    """float64 ``a[i] @ b[m_indices[i]].T``; NaN where m_indices is -1 (rows the GEMM leaves)."""
    import torch

    ref = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.float64, device=a.device)
    for g in range(b.shape[0]):
        rows = m_indices == g
        ref[rows] = a[rows].double() @ b[g].double().T
    return ref


def _bf16_masked_ref(a, b, masked_m):
    """float64 ``a[g, :masked_m[g]] @ b[g].T``; NaN past masked_m[g] (rows the GEMM leaves)."""
    import torch

    ref = torch.full((a.shape[0], a.shape[1], b.shape[1]), float("nan"), dtype=torch.float64, device=a.device)
    for g, rows in enumerate(masked_m.tolist()):
        ref[g, :rows] = a[g, :rows].double() @ b[g].double().T
    return ref


def drive_sglang_indexer(report: Report, inputs: Inputs, recorder: Recorder) -> None:
    """SGLang's DeepSeek-V3.2 (DSA / NSA) indexer calls: its resolvers in ``dsa.utils`` (which hand
    out deep_gemm's functions), the prefill ``fp8_mqa_logits`` as ``Indexer._get_topk_ragged``
    calls it, and the decode paths ``deepgemm_paged_mqa_logits_split`` (next_n 1) and
    ``_native`` (target verify, next_n 2) with the schedule of ``get_paged_mqa_logits_metadata``."""
    torch = inputs.torch
    engine = "sglang"
    utils = paged = None
    with report.check(engine, "dsa.utils resolvers: deep_gemm's fp8_mqa_logits, fp8_paged_mqa_logits, metadata, "
                              "get_num_sms"):
        import sglang.srt.layers.attention.dsa.utils as utils  # noqa: F811
        import sglang.kernels.ops.attention.dsa.paged_mqa_logits as paged  # noqa: F811

        dg = sys.modules["deep_gemm"]
        assert not utils._use_torch_mqa_logits(), "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH is set"
        assert utils.resolve_fp8_mqa_logits_fn() is dg.fp8_mqa_logits
        assert utils.resolve_fp8_paged_mqa_logits_fn() is dg.fp8_paged_mqa_logits
        assert utils.resolve_paged_mqa_logits_metadata_fn() is dg.get_paged_mqa_logits_metadata
        assert utils.resolve_num_sms() == dg.get_num_sms()
    if utils is None:
        return
    pad_heads = None
    with report.check(engine, "import dsa.dsa_indexer (Indexer._pad_heads_for_deep_gemm)"):
        from sglang.srt.layers.attention.dsa.dsa_indexer import Indexer

        pad_heads = Indexer._pad_heads_for_deep_gemm
    with report.check(engine, "fp8_mqa_logits as Indexer._get_topk_ragged (prefill, clean_logits=False)"):
        if pad_heads is None:
            raise _Skip("dsa.dsa_indexer did not import")
        ks, ke, n, _ = _prefill_ranges(inputs, [37, 21])
        tokens = len(ks) + 3  # their q and weights carry padding rows past q_offset
        q, kv = inputs.fp8(tokens, INDEXER_HEADS, HEAD_DIM), (inputs.fp8(n, HEAD_DIM), inputs.f32(n, low=0.5))
        weights = inputs.f32(tokens, INDEXER_HEADS, 1).squeeze(-1)
        q_offset = ks.shape[0]
        q_padded, w_padded, _ = pad_heads(q[:q_offset], weights[:q_offset])
        logits = utils.resolve_fp8_mqa_logits_fn()(q_padded, kv, w_padded, ks, ke, clean_logits=False)
        assert logits.shape[0] == q_offset and logits.shape[1] == n  # their asserts
        got = _recorded(inputs, recorder, ["fp8_mqa_logits"])
        if got:
            assert got[0] == {"m": q_offset, "n": n, "heads": INDEXER_HEADS, "clean_logits": False,
                              "max_seqlen_k": 0}, got[0]
        _verify_logits(inputs, logits, lambda: _mqa_ref(q_padded, kv, w_padded, ks, ke, False, 0), (q_offset, n))
    sm_count = utils.resolve_num_sms()
    for next_n, how in ((1, "deepgemm_paged_mqa_logits_split"), (2, "deepgemm_paged_mqa_logits_native")):
        with report.check(engine, f"get_paged_mqa_logits_metadata + {how} (decode, next_n {next_n})"):
            lens = [70, 3, 200]
            batch = len(lens)
            context, table, cache = _paged_case(inputs, lens, next_n)
            tokens = batch * next_n
            q = inputs.fp8(tokens + 2, INDEXER_HEADS, HEAD_DIM)  # [tokens, H, 128] with padding rows
            weights = inputs.f32(tokens + 2, INDEXER_HEADS, 1).squeeze(2)
            kv4 = cache.view(cache.shape[0], BLOCK_KV, 1, HEAD_DIM + 4)  # the layer's view of its 2-D pool
            max_len = table.shape[1] * BLOCK_KV
            if next_n == 1:
                ctx = context.contiguous().view(-1, 1)
                schedule = utils.resolve_paged_mqa_logits_metadata_fn()(ctx, BLOCK_KV, sm_count)
                logits = paged.deepgemm_paged_mqa_logits_split(
                    utils.resolve_fp8_paged_mqa_logits_fn(), q, kv4, weights, ctx, table, schedule, max_len,
                    q_offset=tokens)
                q4, blocks = q[:tokens].unsqueeze(1), table
            else:  # target verify: the table repeated per draft token, de-expanded by their [::next_n]
                ctx = context
                schedule = utils.resolve_paged_mqa_logits_metadata_fn()(ctx, BLOCK_KV, sm_count)
                expanded = table.repeat_interleave(next_n, dim=0)
                logits = paged.deepgemm_paged_mqa_logits_native(
                    utils.resolve_fp8_paged_mqa_logits_fn(), q, kv4, weights, ctx, expanded, schedule, max_len,
                    q_offset=tokens, B=batch, next_n=next_n)
                q4, blocks = q[:tokens].view(batch, next_n, INDEXER_HEADS, HEAD_DIM), expanded[::next_n]
            got = _recorded(inputs, recorder, ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"])
            if got:
                assert got[0]["num_sms"] == sm_count and _torch_equal(got[0]["lens"], ctx.cpu()), _brief(got[0])
                _schedule_came_through(got[0], got[1])
                assert (got[1]["batch"], got[1]["next_n"], got[1]["max_context_len"], got[1]["clean_logits"]) == \
                    (q4.shape[0], next_n, max_len, False), _brief(got[1])
                assert _torch_equal(got[1]["blocks"], blocks.cpu()), "the block table reached deep_tile changed"
            _verify_logits(inputs, logits, lambda: _paged_ref(q4, kv4, weights[:tokens], ctx, blocks, max_len),
                           (tokens, max_len))


def deep_gemm_state(compat) -> list:
    """(get, set) pairs of deep_gemm's settings that a check may change and, failing, leave changed:
    the contiguous layout's alignment, the compile mode, the SM limit (None: none), PDL."""
    from deep_tile import device, pdl

    return [(compat.get_mk_alignment_for_contiguous_layout, compat.set_mk_alignment_for_contiguous_layout),
            (compat.get_compile_mode, compat.set_compile_mode),
            (device.sms_limit, device.set_num_sms),
            (pdl.get_pdl, pdl.set_pdl)]


def drive(args) -> int:
    finder = StubFinder()
    sys.meta_path.append(finder)
    import torch

    import deep_tile
    import deep_tile.compat.deepgemm as compat

    spec = importlib.util.find_spec("deep_gemm")
    if spec is not None:  # the alias distribution is installed (the venv run): the engines' own import
        import deep_gemm

        assert deep_gemm is compat, f"deep_gemm is {deep_gemm!r}, not deep_tile.compat.deepgemm"
        print(f"deep_gemm: the installed alias distribution ({spec.origin}) -> deep_tile.compat.deepgemm")
    elif hasattr(compat, "install_alias"):
        compat.install_alias()
        print("deep_gemm: deep_tile.compat.deepgemm.install_alias()")
    else:  # an older deep_tile: the package alone stands in for deep_gemm
        sys.modules["deep_gemm"] = compat
        print("deep_tile.compat.deepgemm has no install_alias: deep_gemm is the module alone, no submodules")
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    recorder = Recorder()
    if device == "cpu":
        recorder.install(deep_tile)
    inputs = Inputs(device)
    report, stand_ins = Report(finder, recorder, deep_gemm_state(compat)), []
    before = set(sys.modules)
    for engine, fn in (("vllm", drive_vllm), ("sglang", drive_sglang)):
        if engine in args.skip:
            continue
        fn(report, inputs, recorder, stand_ins)
    versions = {}
    for name in ENGINE_ROOTS:
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[name] = version(name)
    print(f"\n== deep_tile.compat.deepgemm under the engines' own DeepGEMM wrappers ({device}; "
          + ", ".join(f"{k} {v}" for k, v in versions.items()) + ") ==")
    if device == "cpu":
        print("kernels: recording stand-ins (each checks its tensors; the calls each wrapper made are verified)")
    else:
        print("kernels: deep_tile on " + torch.cuda.get_device_name() + ", outputs against float64 references")
    width = max(len(what) for _, what, _ in report.rows) if report.rows else 10
    for engine, what, outcome in report.rows:
        print(f"{engine:7s} {what:{width}s}  {outcome}")
    print(f"\nstubbed modules (not installed; engine imports answered by stubs): {', '.join(finder.stubbed) or 'none'}")
    print("stub values: " + ", ".join(f"{m}.{a}" for m, a in STUB_VALUES))
    print("stand-ins for engine functions: " + ("; ".join(stand_ins) or "none"))
    total = len(report.rows)
    skipped = sum(row[2].startswith("skip") for row in report.rows)
    print(f"\n{total - report.failures - skipped} of {total} checks passed, {report.failures} failed, "
          f"{skipped} skipped")
    if args.export_sources:
        dest = Path(args.export_sources)
        loaded = [m for m in set(sys.modules) - before if m.split(".")[0] in ENGINE_ROOTS]
        for name in loaded:
            module = sys.modules.get(name)
            path = getattr(module, "__file__", None)
            if not path or not path.endswith(".py"):
                continue
            rel = Path(*name.split(".")) / ("__init__.py" if path.endswith("__init__.py") else "")
            rel = rel if path.endswith("__init__.py") else Path(*name.split(".")).with_suffix(".py")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)
        for name in ENGINE_ROOTS:  # the package metadata (versions in the report)
            for info in Path(sysconfig.get_paths()["purelib"]).glob(f"{name}-*.dist-info"):
                if (info / "METADATA").exists():
                    (dest / info.name).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(info / "METADATA", dest / info.name / "METADATA")
        print(f"engine sources the check loaded copied to {dest}")
    return 1 if report.failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default=DEFAULT_VLLM, help="vLLM version spec (default %(default)s)")
    parser.add_argument("--sglang", default=DEFAULT_SGLANG, help="SGLang version spec (default %(default)s)")
    parser.add_argument("--wheels", default="/tmp/deep_tile_engines/wheels", help="where the wheels are downloaded")
    parser.add_argument("--venv", default="/tmp/deep_tile_engines/venv", help="the throwaway venv (recreated)")
    parser.add_argument("--engines-dir", help="use engine sources unpacked here (no download, no venv)")
    parser.add_argument("--export-sources", help="copy the engine .py files the check loaded to this directory")
    parser.add_argument("--cpu", action="store_true", help="recording stand-ins even when a GPU is present")
    parser.add_argument("--skip", nargs="*", default=[], choices=ENGINE_ROOTS, help="engines not to check")
    parser.add_argument(DRIVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        return drive(args)
    passthrough = [a for flag in ("--cpu",) if getattr(args, flag[2:]) for a in (flag,)]
    passthrough += ["--skip", *args.skip] if args.skip else []
    passthrough += ["--export-sources", args.export_sources] if args.export_sources else []
    if args.engines_dir:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(args.engines_dir).resolve()), str(ROOT),
                                                           os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, __file__, DRIVE_FLAG, *passthrough], env=env).returncode
    python, _ = prepare(args)
    return subprocess.run([python, __file__, DRIVE_FLAG, *passthrough]).returncode


if __name__ == "__main__":
    sys.exit(main())
