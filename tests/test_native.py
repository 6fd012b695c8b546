"""deep_tile.native: toolchain discovery, the build key, the one fallback warning, the build into
the cache (on this machine when a compiler, ninja and cuda.h are here), and the same errors on the
native and Python paths. With the extension built here (CPU tensors, the device rule and the
kernel left out): the native path takes exactly the calls Python takes over a fuzz of argument
signatures (a signature planned once never lets a call Python refuses through), repeats the
plan's overlap tests on every call, and makes the operands Python makes. GPU tests (marker
``gpu``): native vs Python bitwise (every op family), repeated calls, errors on CUDA tensors,
CUDA graphs replayed with new counts and group sizes, the DEEP_TILE_DEBUG first-call phases."""
import concurrent.futures
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import deep_tile
from deep_tile import native
from deep_tile.gemm.launch import run
from deep_tile.native import key as native_key
from deep_tile.native import bridge, loader, toolchain
from deep_tile.native.build import lock_path
from conftest import DIFF_TOL, run_child_cases, run_host_cases, run_python
from test_ops import bad_cases, check_message, operands

ROOT = Path(__file__).resolve().parents[1]
TOOLS = toolchain.find()
needs_toolchain = pytest.mark.skipif(bool(TOOLS.missing), reason=f"cannot build the extension here: {TOOLS.missing}")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache dir and a native loader that has not looked yet (restored afterwards)."""
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DEEP_TILE_NATIVE", raising=False)
    loader.reset()
    yield tmp_path
    loader.reset()


def no_spawn(monkeypatch):
    monkeypatch.setattr(loader, "_spawn", lambda *a, **k: pytest.fail("a build was started"))


def test_missing_tools_warn_once_with_what_to_install(fresh, monkeypatch):
    monkeypatch.setattr(toolchain, "find", lambda: toolchain.Toolchain(None, None, None))
    no_spawn(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert native.module(start_build=True) is None
    [warning] = [w for w in caught if issubclass(w.category, native.NativeUnavailableWarning)]
    text = str(warning.message)
    for hint in toolchain.INSTALL_HINTS.values():
        assert hint in text
    assert "Python host path" in text and "DEEP_TILE_NATIVE=off" in text
    assert native.status()["state"] == "unavailable" and native.status()["warned"]


def test_missing_cuda_header_alone_is_named(fresh, monkeypatch):
    monkeypatch.setattr(toolchain, "find", lambda: toolchain.Toolchain("/usr/bin/c++", "/usr/bin/ninja", None))
    with pytest.warns(native.NativeUnavailableWarning, match="the CUDA headers") as caught:
        native.module(start_build=True)
    assert "C++17 compiler" not in str(caught[0].message)


def test_off_builds_nothing_and_stays_silent(fresh, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_NATIVE", "off")
    no_spawn(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.module(start_build=True) is None
    assert native.status()["state"] == "off"


def test_cpu_calls_never_start_a_build(fresh, monkeypatch):
    no_spawn(monkeypatch)
    monkeypatch.setattr(toolchain, "find", lambda: pytest.fail("CPU calls must not even look for tools"))
    a, a_scale, b, b_scale = operands("cpu")
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    assert native.module(start_build=False) is None and native.status()["state"] == "idle"


def test_failed_build_is_not_retried_and_warns_with_the_log(fresh, monkeypatch):
    tools = toolchain.Toolchain("/usr/bin/c++", "/usr/bin/ninja", "/usr/local/cuda/include")
    monkeypatch.setattr(toolchain, "find", lambda: tools)
    no_spawn(monkeypatch)
    key, _ = native_key.build_key(tools)
    native_key.native_dir().mkdir(parents=True)
    (native_key.native_dir() / f"{key}.failed").write_text("CalledProcessError: boom\n")
    with pytest.warns(native.NativeUnavailableWarning, match=rf"{key}\.log"):
        assert native.module(start_build=True) is None
    assert native.status()["state"] == "failed"


def test_a_build_running_in_another_process_is_waited_for(fresh, monkeypatch):
    """Our builder exits at once when another process's builder holds the key's lock: keep polling
    (found on the device: a second process gave up while the first one's build ran)."""
    import fcntl

    tools = toolchain.Toolchain("/usr/bin/c++", "/usr/bin/ninja", "/usr/local/cuda/include")
    monkeypatch.setattr(toolchain, "find", lambda: tools)
    key, _ = native_key.build_key(tools)
    native_key.native_dir().mkdir(parents=True)
    monkeypatch.setattr(loader, "_spawn", lambda *a, **k: subprocess.Popen([sys.executable, "-c", "pass"]))
    holder = os.open(lock_path(key), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # "another process" builds this key
        with warnings.catch_warnings():
            warnings.simplefilter("error", native.NativeUnavailableWarning)
            assert native.module(start_build=True) is None
            loader._s.process.wait(timeout=60)
            loader._poll(force=True)
        assert native.status()["state"] == "building"
    finally:
        os.close(holder)  # that build ends without publishing anything
    with pytest.warns(native.NativeUnavailableWarning, match="exited without publishing"):
        loader._poll(force=True)
    assert native.status()["state"] == "failed"


def test_key_covers_sources_torch_abi_and_compiler(monkeypatch, tmp_path):
    tools = toolchain.Toolchain("/usr/bin/c++", "/usr/bin/ninja", "/usr/local/cuda/include")
    base, inputs = native_key.build_key(tools)
    assert native_key.build_key(tools)[0] == base and len(base) == 64
    assert inputs["torch"] == torch.__version__ and inputs["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    with monkeypatch.context() as m:
        m.setattr(torch, "__version__", "0.0.1")
        assert native_key.build_key(tools)[0] != base
    with monkeypatch.context() as m:
        m.setattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", not torch._C._GLIBCXX_USE_CXX11_ABI)
        assert native_key.build_key(tools)[0] != base
    with monkeypatch.context() as m:
        m.setattr(native_key, "_source_digest", "0" * 64)
        assert native_key.build_key(tools)[0] != base
    with monkeypatch.context() as m:
        m.setenv("CXX", "clang++")
        assert native_key.build_key(tools)[0] != base
    fake = tmp_path / "g++"
    fake.write_text("v1")
    first = native_key.build_key(toolchain.Toolchain(str(fake), "/usr/bin/ninja", "/usr/local/cuda/include"))[0]
    fake.write_text("v2, upgraded")
    second = native_key.build_key(toolchain.Toolchain(str(fake), "/usr/bin/ninja", "/usr/local/cuda/include"))[0]
    assert first != second  # the compiler's identity (size, mtime), without running it


def test_source_digest_covers_every_source(monkeypatch, tmp_path):
    """Every file of csrc/ is a source (hashed into the key; the .cpp ones compiled), and a change
    to any of them (a new one included) changes the digest."""
    files = native_key.source_files()
    assert files == sorted(native_key.SOURCE_DIR.iterdir())  # nothing in csrc/ escapes the key
    names = {p.name for p in files}
    assert {"call.cpp", "driver.cpp", "launch.cpp", "module.cpp", "ops.cpp", "python_bridge.cpp", "signature.cpp",
            "tensor_maps.cpp"} <= names
    assert len(native_key.source_digest()) == 64
    copy = tmp_path / "csrc"
    shutil.copytree(native_key.SOURCE_DIR, copy)
    monkeypatch.setattr(native_key, "SOURCE_DIR", copy)
    digests = set()
    for change in (None, "edit", "new"):
        if change == "edit":
            (copy / "call.h").write_text((copy / "call.h").read_text() + "\n")
        elif change == "new":
            (copy / "extra.h").write_text("#pragma once\n")
        monkeypatch.setattr(native_key, "_source_digest", None)
        digests.add(native_key.source_digest())
    assert len(digests) == 3



def test_small_machines_compile_every_source_once_in_two_combined_units(tmp_path):
    """With few CPUs the build compiles two files that #include the sources (each once, the
    pybind11-heavy UNITY_SECOND apart); with many, each source on its own."""
    from deep_tile.native.build import UNITY_MAX_CPUS, UNITY_SECOND, translation_units

    cpp = sorted(str(p) for p in native_key.source_files() if p.suffix == ".cpp")
    assert translation_units(tmp_path / "many", cpus=UNITY_MAX_CPUS + 1) == cpp
    units = [Path(u) for u in translation_units(tmp_path, cpus=2)]
    assert [u.parent for u in units] == [tmp_path, tmp_path]
    included = [[json.loads(line.removeprefix("#include ")) for line in u.read_text().splitlines()] for u in units]
    assert sorted(path for unit in included for path in unit) == cpp
    assert {Path(path).name for path in included[1]} == set(UNITY_SECOND)
def test_every_spec_of_the_contract_encodes_to_what_the_native_side_reads():
    from deep_tile.gemm import kernel_args
    from deep_tile.kernels import fp8_gemm as family
    from deep_tile.testing.configs import parse_config

    import dataclasses

    from deep_tile.gemm.problem import Problem, ProblemKind

    for text in ("128x128", "64x32:k2", "256x128:mcA", "128x160:mcB", "64x64:k4:b2"):
        config = parse_config(text, 64, 2112, 132)
        for config in (config, config.with_row_major_a_scale()):
            specs = family.argument_specs(config, Problem(64, 2112, 7168))
            assert [spec.kind for spec in specs] == list(family.ARGUMENT_KINDS), text
            for code in kernel_args.encode(specs):
                assert kernel_args.CODE_LENGTHS[code[0]] == len(code), (text, code)
    for kind in (ProblemKind.GROUPED_CONTIGUOUS, ProblemKind.GROUPED_MASKED, ProblemKind.GROUPED_OFFSETS):
        config = dataclasses.replace(parse_config("128x128", 64, 2112, 132), problem_kind=kind)
        for config in (config, config.with_row_major_a_scale()):
            specs = family.argument_specs(config, Problem(64, 2112, 7168, kind=kind, num_groups=8))
            assert [spec.kind for spec in specs] == list(family.GROUPED_ARGUMENT_KINDS), kind
            for code in kernel_args.encode(specs):
                assert kernel_args.CODE_LENGTHS[code[0]] == len(code), (text, code)


# ---- with the extension built on this machine ------------------------------------------------

@pytest.fixture(scope="session")
def native_cache(tmp_path_factory):
    """A cache dir holding a build of the extension (built once per pytest run; about 35 s on 2 cores)."""
    if TOOLS.missing:
        pytest.skip(f"cannot build the extension here: {TOOLS.missing}")
    directory = tmp_path_factory.mktemp("native-cache")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DEEP_TILE_CACHE_DIR", str(directory))
        loader.reset()
        start = time.perf_counter()
        assert native.build(wait=True), native.status()
        print(f"native build: {time.perf_counter() - start:.1f} s")
        loader.reset()
    return directory


@pytest.fixture
def extension(native_cache, monkeypatch):
    """The loaded extension (its kernels registered for this test, deregistered after)."""
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(native_cache))
    loader.reset()
    assert native.build(wait=True), native.status()
    yield native.module()
    loader.reset()


@needs_toolchain
def test_build_is_published_in_the_cache(extension, native_cache):
    status = native.status()
    assert status["state"] == "loaded" and status["library"].startswith(str(native_cache / "native"))
    entry = Path(status["library"]).parent
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["key"] == entry.name == status["key"]
    assert meta["inputs"]["torch"] == torch.__version__ and meta["compiler_version"]
    assert not [p for p in (native_cache / "native").iterdir() if p.name.startswith((".build-", ".tmp-"))]
    assert extension.ops_registered() and extension.BRIDGE_VERSION == bridge.VERSION == 10


@needs_toolchain
@pytest.mark.parametrize("label,args,out", bad_cases(), ids=[c[0] for c in bad_cases()])
def test_native_errors_equal_python_errors(extension, label, args, out):
    expected = check_message(*args, out)
    paths = [("python", lambda: run(*args, out)), ("public", lambda: deep_tile.fp8_gemm(*args, out=out))]
    if all(isinstance(x, torch.Tensor) for x in args) and (out is None or isinstance(out, torch.Tensor)):
        paths.append(("native", lambda: extension.fp8_gemm(*args, out)))
        if out is None:
            paths.append(("op", lambda: torch.ops.deep_tile.fp8_gemm(*args)))
        else:
            paths.append(("op_out", lambda: torch.ops.deep_tile.fp8_gemm_out(*args, out)))
    before = extension.stats()["python_calls"]
    for name, call in paths:
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert (info.type, str(info.value)) == expected, name
    assert extension.stats()["python_calls"] > before or len(paths) == 2  # the C++ path handed them over


@needs_toolchain
def test_names_the_cpp_side_holds_equal_pythons(extension):
    """The names the native library and Python share (spec kinds, tensor-map elements, the op
    names, the op families and call slots of the bridge) agree: a disagreement fails here, not at
    a launch. No rule of the checks is stated in C++ (they are Python's alone)."""
    from deep_tile import ops
    from deep_tile.gemm import kernel_args

    assert dict(extension.SPEC_KINDS) == kernel_args.SPEC_KINDS
    assert dict(extension.ELEMENTS) == {name: code for name, (code, _) in kernel_args.ELEMENTS.items()}
    assert extension.MAX_OPERANDS == kernel_args.MAX_OPERANDS
    gemm_ops = tuple(f"{ops.NAMESPACE}::{name}" for name in ops.SCHEMAS if "gemm" in name)
    assert sorted(extension.OP_NAMES) == sorted(gemm_ops) and len(gemm_ops) == 18  # every GEMM op, training ones too
    assert tuple(extension.OP_FAMILIES) == bridge.OPS and tuple(extension.SLOTS) == bridge.SLOTS
    assert sorted(extension.OP_NAMES) == sorted(f"{ops.NAMESPACE}::{family}{suffix}" for family in bridge.OPS
                                                for suffix in ("", "_out"))
    for name in ("SCALE_GROUP", "N_MULTIPLE", "K_MULTIPLE", "MAX_TABLE_GROUPS", "a_scale_layout", "fast_check_reason"):
        assert not hasattr(extension, name), name  # rules of the Python checks are not restated


@needs_toolchain
def test_every_kinds_plan_fits_what_the_native_side_fills(extension):
    """The argument specs of every problem kind and output variant (the most: the K-grouped kernel
    with C and its 1D1D b_scale map) fit the C++ side's parameter and tensor-map storage, and name
    no operand past the ones its op passes (OPERANDS, GROUPED_OPERANDS, then C)."""
    from deep_tile.kernels import fp8_gemm as family
    from deep_tile.gemm.problem import Problem, ProblemKind
    from deep_tile.select.api import get_problem_config

    dense = Problem(256, 512, 1024)
    problems = [dense, dense.with_a_scale_row_major(), dense.with_output("float32"),
                dense.with_output("float32", "out"), dense.with_output("bfloat16", "float32"),
                dense.with_output("float32", "bfloat16").with_b_scale_1d(), dense.with_output("float32").with_b_scale_1d()]
    problems += [Problem(256, 512, 1024, kind=kind, num_groups=4) for kind in
                 (ProblemKind.GROUPED_CONTIGUOUS, ProblemKind.GROUPED_MASKED, ProblemKind.GROUPED_OFFSETS,
                  ProblemKind.GROUPED_PSUM)]
    problems += [Problem(256, 512, 1024, kind=ProblemKind.K_GROUPED, num_groups=4, b_scale_1d=True, out_dtype=out,
                         c_dtype=c) for out in ("float32", "bfloat16") for c in (None, "out", "float32")]
    most = 0
    for problem in problems:
        config = get_problem_config(problem, 132).for_problem(problem)
        specs = family.argument_specs(config, problem)
        maps = sum(spec.kind in ("tensormap", "zeromap") for spec in specs)
        operands = len(family.GROUPED_OPERANDS if problem.kind.grouped else family.OPERANDS) + 1
        assert len(specs) <= extension.MAX_ARGS and maps <= extension.MAX_MAPS, problem
        assert all(getattr(spec, "operand", 0) < operands for spec in specs), problem
        most = max(most, len(specs))
    assert most > 16  # the K-grouped kernel with C: more than the dense kernel's storage once held


def a_scale_layouts():
    """a_scale tensors of many layouts: (label, tensor) -- column-major with several pitches,
    row-major, transposed views, offsets that break the 16-byte alignment, one row, one block."""
    cases = []
    for m in (1, 2, 3, 64, 97):
        for k_blocks in (1, 2, 4, 8, 12, 13):
            base = torch.zeros((k_blocks + 4) * (m + 8) * 2 + 8)
            for pitch in (m, (m + 3) // 4 * 4, m + 8):
                cases.append((f"col m={m} kb={k_blocks} pitch={pitch}", base[:k_blocks * pitch].view(k_blocks, pitch).t()[:m]))
            cases.append((f"row m={m} kb={k_blocks}", base[:m * k_blocks].view(m, k_blocks)))
            cases.append((f"row+1 m={m} kb={k_blocks}", base[1:1 + m * k_blocks].view(m, k_blocks)))
            cases.append((f"row+4 m={m} kb={k_blocks}", base[4:4 + m * k_blocks].view(m, k_blocks)))
            wide = base[:m * (k_blocks + 4)].view(m, k_blocks + 4)[:, :k_blocks]
            cases.append((f"row pitch+4 m={m} kb={k_blocks}", wide))
            cases.append((f"col+1 m={m} kb={k_blocks}", base[1:1 + k_blocks * 4 * ((m + 3) // 4)].view(
                k_blocks, 4 * ((m + 3) // 4)).t()[:m]))
    return cases



M_ROWS = 96


# ---- the grouped ops on the native path (CPU: checks, errors, plan key, operands, a_scale) ------

FP8 = torch.float8_e4m3fn
GROUPED_KINDS = ("grouped_contiguous", "grouped_offsets", "grouped_masked")


def grouped_args(kind: str, m: int = 96, n: int = 256, k: int = 640, groups: int = 3, expected_m: int = 40,
                 scale: str = "row") -> dict:
    """A grouped call of ``kind`` (a ProblemKind value) on the CPU that check_grouped_args accepts
    but for the device: a, a_scale (``scale``: row-major, or "tma": the aligned layout), b,
    b_scale, info, expected_m (None unless masked) and out."""
    from deep_tile.gemm.layouts import get_tma_aligned_a_scale

    masked = kind == "grouped_masked"
    k_blocks = -(-k // 128)
    lead = (groups, m) if masked else (m,)
    a_scale = torch.rand(lead + (k_blocks,))
    if scale == "tma":
        a_scale = get_tma_aligned_a_scale(a_scale)
    info_size = {"grouped_contiguous": m, "grouped_offsets": groups + 1, "grouped_masked": groups}[kind]
    return dict(a=torch.empty(lead + (k,), dtype=FP8), a_scale=a_scale, b=torch.empty(groups, n, k, dtype=FP8),
                b_scale=torch.rand(groups, -(-n // 128), k_blocks), info=torch.zeros(info_size, dtype=torch.int32),
                expected_m=expected_m if masked else None, out=torch.empty(lead + (n,), dtype=torch.bfloat16))


def _off_by(shape: tuple, dtype: torch.dtype, offset: int) -> torch.Tensor:
    """An empty tensor whose base address is ``offset`` bytes past a 16-byte boundary."""
    nbytes = torch.empty(shape, dtype=dtype).nbytes
    raw = torch.empty(nbytes + 32, dtype=torch.uint8)
    start = (-raw.data_ptr()) % 16 + offset
    return raw[start:start + nbytes].view(dtype).view(shape)


def _overlapping_pair(shape: tuple) -> dict:
    """``out`` and ``c`` of ``shape`` (bf16) in one buffer, ``c`` 8 elements (16 bytes) past ``out``."""
    numel = torch.Size(shape).numel()
    buffer = torch.empty(numel + 8, dtype=torch.bfloat16)
    return {"out": buffer[:numel].view(shape), "c": buffer[8:].view(shape)}


def _variant(args: dict) -> dict:
    """The output-variant arguments of a case (``c``, ``accumulate``, ``out_dtype``; defaults: none)."""
    return {"c": args.get("c"), "accumulate": args.get("accumulate", False), "out_dtype": args.get("out_dtype")}


def grouped_cases() -> list:
    """(label, kind, args) of grouped calls: valid ones (on the CPU every one is refused for its
    device alone) and bad ones from every family of check_grouped_args' rules."""
    cases = []
    for kind in GROUPED_KINDS:
        masked, table = kind == "grouped_masked", kind != "grouped_contiguous"
        base = grouped_args(kind)
        a, a_scale, b, b_scale, info, out = (base[name] for name in ("a", "a_scale", "b", "b_scale", "info", "out"))
        lead = tuple(a.shape[:-1])
        flip = (lambda x: x[0]) if masked else (lambda x: x[None])
        variants = {
            "valid": {}, "valid_tma": grouped_args(kind, scale="tma"), "valid_no_out": {"out": None},
            "valid_k_tail": grouped_args(kind, k=208), "valid_one_row": grouped_args(kind, m=1),
            "valid_no_rows": grouped_args(kind, m=0),
            "a_dtype": {"a": torch.empty(a.shape)}, "b_dtype": {"b": torch.empty(b.shape)},
            "a_scale_dtype": {"a_scale": a_scale.double()}, "b_scale_dtype": {"b_scale": b_scale.half()},
            "info_dtype": {"info": info.long()}, "out_dtype": {"out": out.half()},
            # the output variants (the m_grouped_fp8_gemm_acc ops)
            "valid_out_fp32": {"out": out.float()}, "valid_new_fp32": {"out": None, "out_dtype": torch.float32},
            "valid_c_fp32": {"c": torch.empty(out.shape)}, "valid_c_bf16": {"c": torch.empty_like(out)},
            "valid_fp32_c_bf16": {"out": out.float(), "c": torch.empty_like(out)},
            "valid_accumulate": {"accumulate": True}, "valid_accumulate_fp32": {"out": out.float(), "accumulate": True},
            "c_is_out": {"c": out}, "c_overlaps_out": _overlapping_pair(out.shape),
            "c_dtype": {"c": out.half()}, "c_shape": {"c": torch.empty(out.shape)[..., :128]},
            "c_rank": {"c": flip(torch.empty(out.shape))}, "accumulate_with_c": {"accumulate": True, "c": out.clone()},
            "accumulate_no_out": {"accumulate": True, "out": None},
            "out_dtype_mismatch": {"out_dtype": torch.float32}, "out_dtype_bad": {"out": None, "out_dtype": torch.half},
            "c_row_stride": {"c": torch.empty(lead + (258,))[..., :256]},
            "a_rank": {"a": flip(a)}, "a_scale_rank": {"a_scale": flip(a_scale)}, "b_rank": {"b": b[0]},
            "b_scale_rank": {"b_scale": b_scale[0]}, "info_rank": {"info": info[None]}, "out_rank": {"out": flip(out)},
            "no_groups": {"b": b[:0], "b_scale": b_scale[:0]},
            "513_groups": {"b": b[:1].expand(513, -1, -1), "b_scale": b_scale[:1].expand(513, -1, -1)},
            "k_mismatch": {"b": b[..., :512]}, "n_not_multiple": {"b": b[:, :250]},
            "a_scale_shape": {"a_scale": a_scale[..., :2]}, "b_scale_shape": {"b_scale": b_scale[:, :1]},
            "info_shape": {"info": info[:-1]}, "out_shape": {"out": out[..., :128]},
            "a_row_stride": {"a": torch.empty(lead + (648,), dtype=FP8)[..., :640]},
            "a_k_strided": {"a": torch.empty(lead[:-1] + (640, lead[-1]), dtype=FP8).transpose(-1, -2)},
            "b_row_stride": {"b": torch.empty(3, 256, 648, dtype=FP8)[..., :640]},
            "out_row_stride": {"out": torch.empty(lead + (260,), dtype=torch.bfloat16)[..., :256]},
            "a_misaligned": {"a": _off_by(a.shape, FP8, 1)}, "b_misaligned": {"b": _off_by(b.shape, FP8, 8)},
            "out_misaligned": {"out": _off_by(out.shape, torch.bfloat16, 2)},
            "info_strided": {"info": torch.zeros(2 * info.numel(), dtype=torch.int32)[::2]},
            "b_groups_apart": {"b": torch.empty(3, 257, 640, dtype=FP8)[:, :256]},
        }
        if masked:
            variants.update({
                "group_count": {"a": a[:2]},
                "a_groups_apart": {"a": torch.empty(3, 97, 640, dtype=FP8)[:, :96]},
                "out_groups_apart": {"out": torch.empty(3, 97, 256, dtype=torch.bfloat16)[:, :96]},
                "expected_m_negative": {"expected_m": -1}, "valid_expected_m_0": {"expected_m": 0},
                "valid_expected_m_large": {"expected_m": 10 ** 6}, "valid_max_m_1": grouped_args(kind, m=1),
            })
        if table:
            variants["valid_512_groups"] = grouped_args(kind, n=8, k=16, groups=512, m=4)
            variants["513_groups_small"] = grouped_args(kind, n=8, k=16, groups=513, m=4)
        else:
            variants["valid_513_groups"] = grouped_args(kind, n=8, k=16, groups=513, m=4)  # no table, no limit
            variants["valid_one_info"] = grouped_args(kind, m=1) | {
                "info": torch.zeros(2, dtype=torch.int32)[::2]}  # a single m_index may have any stride
        for label, change in variants.items():
            cases.append((f"{kind}-{label}", kind, {**base, **change}))
    return cases


def _tensors(args: dict) -> tuple:
    return tuple(args[name] for name in ("a", "a_scale", "b", "b_scale", "info"))


def python_grouped_verdict(kind: str, args: dict):
    """check_grouped_args on a CPU call: None when only the device is wrong, else (type, message)."""
    from deep_tile.gemm.checks import check_grouped_args
    from deep_tile.gemm.problem import ProblemKind

    with pytest.raises((TypeError, ValueError)) as info:
        check_grouped_args(ProblemKind(kind), *_tensors(args), args["out"], args["expected_m"], **_variant(args))
    if str(info.value).endswith("must be a CUDA tensor; got a tensor on cpu"):
        return None
    return info.type, str(info.value)


@needs_toolchain
def test_grouped_native_errors_equal_python_errors(extension):
    """Every grouped CPU call -- bad, or good but for its device -- raises Python's exception
    through the ops (their C++ kernels hand it over), the public functions and the extension."""
    from deep_tile.gemm.checks import GROUPED_FUNCTIONS, check_grouped_args
    from deep_tile.gemm.problem import ProblemKind

    before = extension.stats()["python_calls"]
    calls = 0
    for label, kind, args in grouped_cases():
        variant = _variant(args)
        with pytest.raises((TypeError, ValueError)) as info:
            check_grouped_args(ProblemKind(kind), *_tensors(args), args["out"], args["expected_m"], **variant)
        expected = (info.type, str(info.value))
        name = GROUPED_FUNCTIONS[kind]
        hint = () if args["expected_m"] is None else (args["expected_m"],)
        out = args["out"]
        if variant == _variant({}):
            paths = {
                "op": lambda: (getattr(torch.ops.deep_tile, name)(*_tensors(args), *hint) if out is None else
                               getattr(torch.ops.deep_tile, name + "_out")(*_tensors(args), *hint, out)),
                "public": lambda: getattr(deep_tile, name)(*_tensors(args), *hint, out=out),
                "native": lambda: extension.m_grouped_fp8_gemm(kind, *_tensors(args), args["expected_m"], out),
            }
        elif label.endswith("c_is_out"):  # the public functions pass c=out as accumulate; the ops refuse it
            paths = {"op": lambda: torch.ops.deep_tile.m_grouped_fp8_gemm_acc_out(
                kind, *_tensors(args), args["expected_m"], out, False, out)}
        else:  # the extension, and the ops and the public function where their arguments can say it
            paths = {"native": lambda: extension.m_grouped_fp8_gemm_acc(kind, *_tensors(args), args["expected_m"],
                                                                        out=out, **variant)}
            if out is not None and variant["out_dtype"] is None:
                paths["op"] = lambda: torch.ops.deep_tile.m_grouped_fp8_gemm_acc_out(
                    kind, *_tensors(args), args["expected_m"], variant["c"], variant["accumulate"], out)
            elif out is None and not variant["accumulate"]:
                paths["op"] = lambda: torch.ops.deep_tile.m_grouped_fp8_gemm_acc(
                    kind, *_tensors(args), args["expected_m"], variant["c"], variant["out_dtype"] or torch.bfloat16)
            if not (variant["accumulate"] and (variant["c"] is not None or out is None)):
                c_arg = out if variant["accumulate"] else variant["c"]
                paths["public"] = lambda: getattr(deep_tile, name)(*_tensors(args), *hint, out=out, c=c_arg,
                                                                   out_dtype=variant["out_dtype"])
                # an out_dtype given with out is checked before the op (the _out op takes none)
                calls -= out is not None and variant["out_dtype"] is not None
        calls += _raise_as(paths, expected, label)
    assert extension.stats()["python_calls"] - before == calls  # the C++ kernels handed every call over


def _raise_as(paths: dict, expected: tuple, label: str) -> int:
    """Each of ``paths`` (name -> zero-argument call) raises ``expected`` ((type, message));
    returns how many calls were made."""
    for path, call in paths.items():
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert (info.type, str(info.value)) == expected, (label, path)
    return len(paths)


def grouped_layout_cases() -> list:
    """(label, kind, args) of valid grouped calls over a_scale layouts: zero-copy (row-major,
    TMA-aligned), copied (K blocks not a multiple of 4, odd pitches, misaligned), a strided b_scale,
    and the masked kind's expected_m hints."""
    cases = []
    for kind in GROUPED_KINDS:
        masked = kind == "grouped_masked"
        for k in (512, 640, 128):
            for scale in ("row", "tma"):
                cases.append((f"{kind}-k{k}-{scale}", kind, grouped_args(kind, k=k, scale=scale)))
        base = grouped_args(kind, k=512)
        lead = tuple(base["a"].shape[:-1])
        wide = torch.rand(lead + (8,))[..., :4]  # row-major rows of 8 floats
        cases.append((f"{kind}-row-pitch8", kind, base | {"a_scale": wide}))
        cases.append((f"{kind}-row+1", kind, base | {"a_scale": torch.rand(base["a_scale"].numel() + 1)[1:].view(
            base["a_scale"].shape)}))
        cases.append((f"{kind}-b_scale-strided", kind, base | {"b_scale": torch.rand(3, 4, 2).transpose(1, 2)}))
        cases.append((f"{kind}-one-row", kind, grouped_args(kind, m=1, k=512)))
        if masked:
            for hint in (0, 1, 40, 96, 97, 10 ** 6):
                cases.append((f"{kind}-expected_m={hint}", kind, grouped_args(kind, expected_m=hint)))
        else:
            groups = 200 if kind == "grouped_contiguous" else 7
            cases.append((f"{kind}-many-groups", kind, grouped_args(kind, groups=groups)))
    return cases


def a_scale_layouts_3d():
    """[groups, m, K blocks] a_scale tensors of many layouts: row-major (aligned or not),
    per-group column-major with several pitches, groups apart."""
    cases = []
    for groups in (1, 3):
        for m in (1, 2, 5, 64):
            for k_blocks in (1, 4, 5, 8):
                pitch = (m + 3) // 4 * 4
                base = torch.zeros(groups * (k_blocks + 1) * (pitch + 4) + 8)
                size = groups * m * k_blocks
                for offset in (0, 1, 4):
                    cases.append((f"row+{offset} g={groups} m={m} kb={k_blocks}",
                                  base[offset:offset + size].view(groups, m, k_blocks)))
                for p in (m, pitch, pitch + 4):
                    cases.append((f"col pitch={p} g={groups} m={m} kb={k_blocks}",
                                  base[:groups * k_blocks * p].view(groups, k_blocks, p).transpose(1, 2)[:, :m]))
                apart = base[:groups * (k_blocks + 1) * pitch].view(groups, k_blocks + 1, pitch).transpose(1, 2)
                cases.append((f"col apart g={groups} m={m} kb={k_blocks}", apart[:, :m, :k_blocks]))
    return cases


@needs_toolchain
def test_a_warm_process_loads_the_build_without_building(native_cache):
    code = ("import time, torch\n"
            "from deep_tile import native\n"
            "from deep_tile.native import loader\n"
            "loader._spawn = lambda *a, **k: (_ for _ in ()).throw(AssertionError('spawned'))\n"
            "start = time.perf_counter()\n"
            "assert native.module(start_build=True) is not None, native.status()\n"
            "print(f'{(time.perf_counter() - start) * 1e3:.1f}')\n")
    env = dict(os.environ, DEEP_TILE_CACHE_DIR=str(native_cache), PYTHONPATH=str(ROOT))
    result = run_python(code, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip()) < 2000  # found and loaded, not built (a build takes a minute)


@needs_toolchain
def test_a_second_builder_of_the_same_key_exits_at_once(native_cache, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(native_cache))
    key, _ = native_key.build_key(TOOLS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "deep_tile.native.build", key], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0 and "building" not in result.stdout  # already published
    assert time.perf_counter() - start < 60


# ---- damage: a bad library is discarded and rebuilt, never loaded; an unusable dir warns once ----

def _tools_here(monkeypatch):
    """A toolchain that needs nothing installed (the key is computed, nothing is built), with a key
    no other test loads (a library loaded once stays loaded for its key in this process)."""
    tools = toolchain.Toolchain("/usr/bin/c++", "/usr/bin/ninja", "/nonexistent/cuda/include")
    monkeypatch.setattr(toolchain, "find", lambda: tools)
    return tools


@pytest.mark.parametrize("where", ["below_a_file", "a_file"])
@pytest.mark.parametrize("mode", ["auto", "wait"])
def test_unusable_cache_dir_warns_once_and_uses_the_python_path(fresh, monkeypatch, where, mode):
    _tools_here(monkeypatch)
    blocker = fresh / "blocker"
    blocker.write_text("a regular file: even root cannot make a directory below it")
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(blocker / "cache" if where == "below_a_file" else blocker))
    monkeypatch.setenv("DEEP_TILE_NATIVE", mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert native.module(start_build=True) is None
        assert native.build(wait=True) is False
    [warning] = [w for w in caught if issubclass(w.category, native.NativeUnavailableWarning)]
    text = str(warning.message)
    assert "is not usable" in text and "DEEP_TILE_CACHE_DIR" in text and "Python host path" in text, text
    assert native.status()["state"] == "unavailable"
    assert blocker.is_file() and blocker.read_text().startswith("a regular file")


def test_bad_env_value_fails_before_the_native_path_writes(fresh, monkeypatch):
    _tools_here(monkeypatch)
    no_spawn(monkeypatch)
    monkeypatch.setenv("DEEP_TILE_DEBUG", "maybe")
    with pytest.raises(ValueError, match="environment variable DEEP_TILE_DEBUG must be .*'maybe'"):
        native.module(start_build=True)
    assert not (fresh / "cache").exists() and native.status()["state"] == "idle"


def test_a_lock_or_marker_that_is_a_directory_is_not_a_build(fresh, monkeypatch):
    native_build = importlib.import_module("deep_tile.native.build")  # native.build is the function

    tools = _tools_here(monkeypatch)
    key, _ = native_key.build_key(tools)
    (native_key.native_dir() / f"{key}.lock").mkdir(parents=True)
    (native_key.native_dir() / f"{key}.failed").mkdir()
    assert not native_build.in_progress(key)
    assert loader._failure(key) is None
    assert native_build.entry_problem(key) is None and not native_build.published(key)  # absent


# A fresh process asks for the extension (the builder's compile replaced by a copy of the pytest
# run's build when STUB is set: everything else -- discard, lock, publish with its sha256, load -- is real).
NATIVE_FRESH = r"""
import json, subprocess, sys, time, warnings
import torch
import deep_tile
from deep_tile import native
from deep_tile.native import loader
from deep_tile.testing.data import make_fp8_problem
STUB = {stub!r}
if STUB:
    real_popen = subprocess.Popen
    def popen(args, **kwargs):
        if list(args[1:3]) == ["-m", "deep_tile.native.build"]:
            args = [args[0], "-c", STUB, *args[3:]]
        return real_popen(args, **kwargs)
    loader.subprocess.Popen = popen
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = native.module(start_build=True)
    deadline = time.monotonic() + 600
    while module is None and native.status()["state"] == "building" and time.monotonic() < deadline:
        time.sleep(0.05)
        module = native.module(start_build=True)
result = {{"state": native.status()["state"], "warnings": [str(w.message) for w in caught]}}
if module is not None:
    a, a_scale, b, b_scale = make_fp8_problem(96, 256, 256, "cpu", seed=0)
    before = module.stats()["python_calls"]
    try:
        torch.ops.deep_tile.fp8_gemm(a, a_scale, b, b_scale)  # the C++ CPU kernel hands it to Python
        raised = "nothing"
    except ValueError as error:
        raised = str(error)
    result.update(bridge=module.BRIDGE_VERSION, registered=module.ops_registered(), raised=raised,
                  handed_over=module.stats()["python_calls"] - before, plans=module.stats()["plans"])
print("RESULT " + json.dumps(result))
"""


def _stub_builder(native_cache: Path) -> str:
    """``python -c`` code of a builder whose compile copies the pytest run's library (see NATIVE_FRESH)."""
    [library] = (native_cache / "native").glob("*/*.so")
    return ("import importlib, shutil, sys\nfrom pathlib import Path\nb = importlib.import_module('deep_tile.native.build')\n"
            f"b.build = lambda key, tools, work: Path(shutil.copy({str(library)!r}, work))\n"
            "sys.exit(b.main(sys.argv[1:]))\n")


def _damage_native(cache_dir: Path, key: str, what: str) -> None:
    """Damage the copied build of ``key`` in ``cache_dir`` (``what``: ``<file>-<how>`` or a name)."""
    entry = cache_dir / "native" / key
    library, meta = entry / native_key.module_name(key), entry / "meta.json"
    library = library.with_suffix(".so")
    target_name, _, how = what.partition("-")
    if target_name in ("so", "meta"):
        target = library if target_name == "so" else meta
        data = target.read_bytes()
        if how == "truncated":
            os.truncate(target, len(data) // 2)  # in place, as the user's truncation: the SIGBUS case
        elif how == "garbage":
            target.write_bytes(os.urandom(len(data)))
        elif how == "empty":
            os.truncate(target, 0)
        elif how == "missing":
            target.unlink()
        elif how == "wrong_types":
            record = json.loads(data)
            record["library_bytes"] = str(record["library_bytes"])
            target.write_text(json.dumps(record))
        elif how == "old_format":
            record = json.loads(data)
            del record["library_sha256"], record["library_bytes"]
            target.write_text(json.dumps(record))
        else:
            raise AssertionError(what)
    elif what == "entry_is_a_file":
        shutil.rmtree(entry)
        entry.write_text("a file where the build belongs")
    elif what == "native_dir_is_a_file":
        shutil.rmtree(cache_dir / "native")
        (cache_dir / "native").write_text("a file where the native folder belongs")
    elif what in ("lock_is_a_dir", "log_is_a_dir", "failed_is_a_dir"):
        os.truncate(library, 1000)
        suffix = what.split("_")[0]
        path = cache_dir / "native" / f"{key}.{suffix}"
        if path.exists():
            path.unlink()
        (path / "child").mkdir(parents=True)
    else:
        raise AssertionError(what)


def _run_native_fresh(cache_dir: Path, mode: str, stub: str) -> tuple[dict, str]:
    env = dict(os.environ, DEEP_TILE_CACHE_DIR=str(cache_dir), DEEP_TILE_NATIVE=mode, DEEP_TILE_DEBUG="1",
               PYTHONPATH=str(ROOT))
    result = run_python(NATIVE_FRESH.format(stub=stub), timeout=600, env=env)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), result.stderr


def _publishes(cache_dir: Path, key: str) -> int:
    """How many builds the log of ``key`` says were published."""
    log = cache_dir / "native" / f"{key}.log"
    return log.read_text().count("deep_tile.native.build: published") if log.is_file() else 0


def _check_recovered(result: dict, cache_dir: Path, key: str, monkeypatch, publishes_before: int) -> None:
    native_build = importlib.import_module("deep_tile.native.build")  # native.build is the function

    assert result["state"] == "loaded" and result["warnings"] == [], result
    assert result["bridge"] == bridge.VERSION and result["registered"] and result["plans"] == 0, result
    assert "must be a CUDA tensor" in result["raised"] and result["handed_over"] == 1, result
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(cache_dir))
    assert native_build.entry_problem(key) is None and native_build.published(key)  # rebuilt whole
    assert not [p for p in (cache_dir / "native").iterdir() if p.name.startswith(".")]  # nothing left aside
    assert _publishes(cache_dir, key) == publishes_before + 1  # rebuilt by this process's builder


DAMAGE = ([f"so-{how}" for how in ("truncated", "garbage", "empty", "missing")]
          + [f"meta-{how}" for how in ("truncated", "garbage", "empty", "missing", "wrong_types", "old_format")]
          + ["entry_is_a_file", "native_dir_is_a_file", "lock_is_a_dir", "log_is_a_dir", "failed_is_a_dir"])


DAMAGED_AT_ONCE = 4
"""Fresh processes of :func:`damaged_runs` running at a time (each mostly imports torch)."""


@pytest.fixture(scope="module")
def damaged_runs(native_cache, tmp_path_factory):
    """Each DAMAGE case's fresh process, :data:`DAMAGED_AT_ONCE` at a time from the first test that
    asks (16 processes one after another took 100 s of the suite's time on 2 cores): per case a
    future of (its cache dir, the builds published before, the process's result and stderr)."""
    key, _ = native_key.build_key(TOOLS)
    stub = _stub_builder(native_cache)

    def one(what: str):
        cache_dir = tmp_path_factory.mktemp(f"damaged-{what}") / "cache"
        shutil.copytree(native_cache, cache_dir)
        _damage_native(cache_dir, key, what)
        before = _publishes(cache_dir, key)
        mode = "auto" if what == "so-garbage" else "wait"  # auto: the Python path runs until the rebuild is loaded
        return cache_dir, before, _run_native_fresh(cache_dir, mode, stub)

    with concurrent.futures.ThreadPoolExecutor(max_workers=DAMAGED_AT_ONCE) as pool:
        yield {what: pool.submit(one, what) for what in DAMAGE}


@needs_toolchain
@pytest.mark.parametrize("what", DAMAGE)
def test_damaged_build_is_discarded_and_rebuilt_by_a_fresh_process(damaged_runs, monkeypatch, what):
    """A fresh process finds the build damaged (``what``), discards it and loads a rebuild. The
    user's report behind ``so-truncated``: DEEP_TILE_NATIVE=wait and a truncated library killed the
    next process (SIGBUS, exit -7) when it mapped the library. The builder's compile is a copy
    (NATIVE_FRESH); the real compile runs in ``native_cache`` and in tests/test_wheel.py."""
    key, _ = native_key.build_key(TOOLS)
    cache_dir, before, (result, stderr) = damaged_runs[what].result()
    _check_recovered(result, cache_dir, key, monkeypatch, before)
    if what.startswith(("so-", "meta-")) and what not in ("so-missing",):
        assert "discarding the damaged native build" in stderr, stderr
    if what == "so-truncated":
        assert "meta.json says" in stderr, stderr


# ---- the training ops on the native path (CPU: checks, errors, plan key, operands) ------------

def _no_device_rule(monkeypatch):
    """deep_tile.gemm.checks without its device rule: a CPU call's verdict is then every other rule's."""
    from deep_tile.gemm import checks

    monkeypatch.setattr(checks, "_require_device", lambda fn, named: None)


def acc_args(m: int = 96, n: int = 256, k: int = 640, out=torch.float32, c=None, accumulate: bool = False,
             one_d: bool = False, scale: str = "row") -> dict:
    """An output-variant call on the CPU (``one_d``: the 1D1D GEMM) that check_fp8_gemm_acc_args
    accepts but for the device: ``out`` the output dtype (None: the op allocating one, of
    float32), ``c`` the addend's dtype (None: none), ``scale`` row-major or "tma" scales."""
    from deep_tile.gemm.layouts import get_tma_aligned_a_scale

    k_blocks = -(-k // 128)
    a_scale = torch.rand(m, k_blocks)
    b_scale = torch.rand(n if one_d else -(-n // 128), k_blocks)
    if scale == "tma":
        a_scale, b_scale = get_tma_aligned_a_scale(a_scale), get_tma_aligned_a_scale(b_scale)
    return dict(a=torch.empty(m, k, dtype=FP8), a_scale=a_scale, b=torch.empty(n, k, dtype=FP8), b_scale=b_scale,
                c=None if c is None else torch.rand(m, n).to(c), accumulate=accumulate,
                out=None if out is None else torch.empty(m, n, dtype=out),
                out_dtype=torch.float32 if out is None else None, b_scale_1d=one_d)


def acc_cases() -> list:
    """(label, args) of output-variant calls (dense and 1D1D): valid ones (on the CPU refused for
    their device alone) and bad ones from every family of check_fp8_gemm_acc_args' rules."""
    cases = []
    for one_d in (False, True):
        base = acc_args(one_d=one_d)
        a, a_scale, b, b_scale, out = (base[name] for name in ("a", "a_scale", "b", "b_scale", "out"))
        shared = torch.empty(97 * 256)  # out and an addend one row apart in one buffer
        variants = {
            "valid": {}, "valid_bf16": acc_args(out=torch.bfloat16, one_d=one_d),
            "valid_c_bf16": acc_args(c=torch.bfloat16, one_d=one_d), "valid_c_f32": acc_args(c=torch.float32, one_d=one_d),
            "valid_bf16_c_f32": acc_args(out=torch.bfloat16, c=torch.float32, one_d=one_d),
            "valid_accumulate": {"accumulate": True}, "valid_tma": acc_args(one_d=one_d, scale="tma"),
            "valid_new": acc_args(out=None, one_d=one_d), "valid_new_c": acc_args(out=None, c=torch.bfloat16, one_d=one_d),
            "valid_new_bf16": acc_args(out=None, one_d=one_d) | {"out_dtype": torch.bfloat16},
            "valid_k_tail": acc_args(k=208, one_d=one_d), "valid_one_row": acc_args(m=1, one_d=one_d),
            "valid_no_rows": acc_args(m=0, one_d=one_d), "valid_out_pitch": {"out": torch.empty(96, 260)[:, :256]},
            "out_half": {"out": out.half()}, "new_half": acc_args(out=None, one_d=one_d) | {"out_dtype": torch.float16},
            "out_dtype_differs": {"out_dtype": torch.bfloat16}, "c_half": {"c": torch.rand(96, 256).half()},
            "accumulate_with_c": acc_args(c=torch.float32, one_d=one_d) | {"accumulate": True},
            "accumulate_no_out": acc_args(out=None, one_d=one_d) | {"accumulate": True},
            "c_is_out": {"c": out}, "c_same_view": {"c": out[:]},
            "c_overlaps_out": {"out": shared[:96 * 256].view(96, 256), "c": shared[256:].view(96, 256)},
            "out_overlaps_a_scale": {"out": shared[:96 * 256].view(96, 256), "a_scale": shared[:96 * 5].view(96, 5)},
            "a_dtype": {"a": torch.empty(a.shape)}, "a_scale_dtype": {"a_scale": a_scale.double()},
            "a_rank": {"a": a[None]}, "out_rank": {"out": out[None]}, "c_rank": {"c": torch.rand(1, 96, 256)},
            "k_mismatch": {"b": b[:, :512]}, "n_not_multiple": {"b": b[:250]},
            "a_scale_shape": {"a_scale": a_scale[:, :2]},
            "b_scale_shape": {"b_scale": torch.rand(2 if one_d else 256, 5)},
            "out_shape": {"out": out[:, :128]}, "c_shape": {"c": torch.rand(96, 128)},
            "a_row_stride": {"a": torch.empty(96, 648, dtype=FP8)[:, :640]},
            "out_row_stride": {"out": torch.empty(96, 258)[:, :256]},
            "c_row_stride": {"c": torch.empty(96, 260, dtype=torch.bfloat16)[:, :256]},
            "out_k_strided": {"out": torch.empty(256, 96).t()},
            "a_misaligned": {"a": _off_by(a.shape, FP8, 1)}, "b_misaligned": {"b": _off_by(b.shape, FP8, 8)},
            "out_misaligned": {"out": _off_by(out.shape, torch.float32, 4)},
            "c_misaligned": {"c": _off_by((96, 256), torch.bfloat16, 2)},
        }
        for label, change in variants.items():
            cases.append((f"{'1d1d' if one_d else 'acc'}-{label}", {**base, **change}))
    return cases


ACC_NAMES = ("a", "a_scale", "b", "b_scale", "c", "accumulate", "out", "out_dtype", "b_scale_1d")


def _python_acc(args: dict):
    """check_fp8_gemm_acc_args on a call: None when it passes, else (type, message)."""
    from deep_tile.gemm.checks import check_fp8_gemm_acc_args

    try:
        check_fp8_gemm_acc_args(*(args[name] for name in ACC_NAMES[:-1]), b_scale_1d=args["b_scale_1d"])
    except (TypeError, ValueError) as error:
        return type(error), str(error)
    return None


def _acc_op(args: dict):
    """The custom op of this call (fp8_gemm_acc / _1d1d, _out when out is given), or None when the
    ops cannot express it (accumulate without out, out_dtype with out)."""
    name = "fp8_gemm_1d1d" if args["b_scale_1d"] else "fp8_gemm_acc"
    tensors = tuple(args[name] for name in ("a", "a_scale", "b", "b_scale", "c"))
    if args["out"] is None:
        if args["accumulate"]:
            return None
        return lambda: getattr(torch.ops.deep_tile, name)(*tensors, args["out_dtype"])
    if args["out_dtype"] is not None:
        return None
    return lambda: getattr(torch.ops.deep_tile, name + "_out")(*tensors, args["accumulate"], args["out"])


def _check_errors_equal_pythons(extension, cases, names, python_verdict, native, op_of) -> None:
    """Every CPU case (bad, or good but for its device) raises Python's exception through the
    extension's entry ``native`` and through the custom op (``op_of``, where it can express the
    call), every one handed over to the Python path."""
    before = extension.stats()["python_calls"]
    calls = 0
    for label, args in cases:
        expected = python_verdict(args)
        assert expected is not None, label  # CPU tensors: at least the device is wrong
        paths = {"native": lambda: native(*(args[name] for name in names))}
        if op_of(args) is not None:
            paths["op"] = op_of(args)
        calls += _raise_as(paths, expected, label)
    assert extension.stats()["python_calls"] - before == calls  # the C++ kernels handed every call over


@needs_toolchain
def test_acc_native_errors_equal_python_errors(extension):
    """Every output-variant CPU call -- bad, or good but for its device -- raises Python's exception
    through the ops (their C++ kernels hand it over) and the extension."""
    _check_errors_equal_pythons(extension, acc_cases(), ACC_NAMES, _python_acc, extension.fp8_gemm_acc, _acc_op)


def k_grouped_args(m: int = 96, n: int = 256, sizes: tuple = (100, 0, 200), k: int = 640, out=torch.float32, c=None,
                   accumulate: bool = False, scale: str = "row") -> dict:
    """A K-grouped call on the CPU that check_k_grouped_args accepts but for the device: ``out``
    the output dtype (None: the op allocating one, of float32), ``c`` the addend's dtype (None:
    none; "out": out itself), ``scale`` row-major or "tma" scales."""
    from deep_tile.gemm.layouts import get_tma_aligned_a_scale

    k_blocks = -(-k // 128)
    a_scale, b_scale = torch.rand(m, k_blocks), torch.rand(n, k_blocks)
    if scale == "tma":
        a_scale, b_scale = get_tma_aligned_a_scale(a_scale), get_tma_aligned_a_scale(b_scale)
    g = len(sizes)
    output = None if out is None else torch.empty(g, m, n, dtype=out)
    addend = output if c == "out" else None if c is None else torch.rand(g, m, n).to(c)
    return dict(a=torch.empty(m, k, dtype=FP8), a_scale=a_scale, b=torch.empty(n, k, dtype=FP8), b_scale=b_scale,
                group_sizes=torch.tensor(sizes, dtype=torch.int32), c=addend, accumulate=accumulate, out=output,
                out_dtype=torch.float32 if out is None else None)


def k_grouped_cases() -> list:
    """(label, args) of K-grouped calls: valid ones (on the CPU refused for their device alone) and
    bad ones from every family of check_k_grouped_args' rules."""
    base = k_grouped_args()
    a, a_scale, b, b_scale, sizes, out = (base[name] for name in ("a", "a_scale", "b", "b_scale", "group_sizes", "out"))
    shared = torch.empty(3 * 97 * 256)
    variants = {
        "valid": {}, "valid_bf16": k_grouped_args(out=torch.bfloat16), "valid_c_bf16": k_grouped_args(c=torch.bfloat16),
        "valid_c_f32": k_grouped_args(c=torch.float32), "valid_bf16_c_f32": k_grouped_args(out=torch.bfloat16, c=torch.float32),
        "valid_accumulate": {"accumulate": True}, "valid_c_is_out": k_grouped_args(c="out"),
        "valid_tma": k_grouped_args(scale="tma"), "valid_new": k_grouped_args(out=None),
        "valid_new_bf16": k_grouped_args(out=None) | {"out_dtype": torch.bfloat16},
        "valid_k_tail": k_grouped_args(sizes=(100, 0, 90), k=208), "valid_one_row": k_grouped_args(m=1),
        "valid_no_rows": k_grouped_args(m=0), "valid_one_group": k_grouped_args(sizes=(640,)),
        "valid_512_groups": k_grouped_args(n=8, sizes=(1,) * 512, m=4),
        "valid_sizes_any_values": {"group_sizes": torch.tensor([-5, 10 ** 6, 3], dtype=torch.int32)},
        "out_half": {"out": out.half()}, "new_half": k_grouped_args(out=None) | {"out_dtype": torch.float16},
        "out_dtype_differs": {"out_dtype": torch.bfloat16}, "c_half": {"c": torch.rand(3, 96, 256).half()},
        "c_needs_out": k_grouped_args(out=None, c=torch.float32),
        "accumulate_with_c": k_grouped_args(c=torch.float32) | {"accumulate": True},
        "accumulate_no_out": k_grouped_args(out=None) | {"accumulate": True},
        "c_same_view": {"c": out[:]},
        "c_overlaps_out": {"out": shared[:3 * 96 * 256].view(3, 96, 256), "c": shared[256:256 + 3 * 96 * 256].view(3, 96, 256)},
        "out_overlaps_b_scale": {"out": shared[:3 * 96 * 256].view(3, 96, 256), "b_scale": shared[:256 * 5].view(256, 5)},
        "sizes_int64": {"group_sizes": sizes.long()}, "sizes_2d": {"group_sizes": sizes[None]},
        "sizes_strided": {"group_sizes": torch.zeros(6, dtype=torch.int32)[::2]},
        "no_groups": {"group_sizes": sizes[:0], "out": out[:0]},
        "513_groups": k_grouped_args(n=8, sizes=(1,) * 513, m=4),
        "a_dtype": {"a": torch.empty(a.shape)}, "b_scale_dtype": {"b_scale": b_scale.half()},
        "a_rank": {"a": a[None]}, "out_rank": {"out": out[0]}, "c_rank": {"c": torch.rand(96, 256)},
        "k_mismatch": {"b": b[:, :512]}, "n_not_multiple": {"b": b[:250]},
        "a_scale_shape": {"a_scale": a_scale[:, :2]}, "b_scale_blocks": {"b_scale": torch.rand(2, 5)},
        "out_shape": {"out": out[:2]}, "c_shape": {"c": torch.rand(3, 96, 128)},
        "out_groups_apart": {"out": torch.empty(3, 97, 256)[:, :96]},
        "out_row_stride": {"out": torch.empty(3, 96, 258)[..., :256]},
        "c_row_stride": {"c": torch.empty(3, 96, 260, dtype=torch.bfloat16)[..., :256]},
        "a_row_stride": {"a": torch.empty(96, 648, dtype=FP8)[:, :640]},
        "a_misaligned": {"a": _off_by(a.shape, FP8, 1)}, "out_misaligned": {"out": _off_by(out.shape, torch.float32, 4)},
    }
    return [(f"k_grouped-{label}", {**base, **change}) for label, change in variants.items()]


K_GROUPED_NAMES = ("a", "a_scale", "b", "b_scale", "group_sizes", "c", "accumulate", "out", "out_dtype")


def _python_k_grouped(args: dict):
    """check_k_grouped_args on a call: None when it passes, else (type, message)."""
    from deep_tile.gemm.checks import check_k_grouped_args

    a, a_scale, b, b_scale, sizes, c, accumulate, out, out_dtype = (args[name] for name in K_GROUPED_NAMES)
    try:
        check_k_grouped_args(a, a_scale, b, b_scale, sizes, out, c, out_dtype, accumulate=accumulate)
    except (TypeError, ValueError) as error:
        return type(error), str(error)
    return None


def _k_grouped_op(args: dict):
    """The custom op of this call (_out when out is given), or None when the ops cannot express it."""
    a, a_scale, b, b_scale, sizes, c, accumulate, out, out_dtype = (args[name] for name in K_GROUPED_NAMES)
    if out is None:
        if accumulate:
            return None
        return lambda: torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes, c, out_dtype)
    if out_dtype is not None:
        return None
    return lambda: torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d_out(a, a_scale, b, b_scale, sizes, c, accumulate, out)


@needs_toolchain
def test_k_grouped_native_errors_equal_python_errors(extension):
    """Every K-grouped CPU call -- bad, or good but for its device -- raises Python's exception
    through the ops (their C++ kernels hand it over) and the extension."""
    _check_errors_equal_pythons(extension, k_grouped_cases(), K_GROUPED_NAMES, _python_k_grouped,
                                extension.k_grouped_fp8_gemm, _k_grouped_op)


# ---- one native op keyed by the call's signature (CPU: Python plans, no kernel is launched) --------

@pytest.fixture
def planned(extension, monkeypatch):
    """The extension with Python planning CPU calls: checks without their device rule, plans
    without a kernel (``resolve`` stops short of the launch); its plan cache emptied around it."""
    from deep_tile.gemm import checks

    monkeypatch.setattr(checks, "_require_device", lambda fn, named: None)

    def plan_without_kernel(problem, where, limit):
        return {"kernel": 0, "symbol": "none", "label": str(problem), "grid": 1, "block": 1, "smem": 0, "cluster": 1,
                "args": []}

    monkeypatch.setattr(bridge, "_launch_plan", plan_without_kernel)
    extension.clear()
    yield extension
    extension.clear()


def _call(op: str, **fields) -> dict:
    """A call as the native op family ``op`` takes it: the slots (bridge.SLOTS) and the scalars."""
    call = dict.fromkeys(bridge.SLOTS)
    call.update(op=op, expected_m=None, accumulate=False, out_dtype=None, kind=None)
    call.update(fields)
    return call


def dense_calls() -> list:
    cases = [(label, _call("fp8_gemm", a=args[0], a_scale=args[1], b=args[2], b_scale=args[3], out=out))
             for label, args, out in bad_cases()
             if all(isinstance(x, torch.Tensor) for x in args) and (out is None or isinstance(out, torch.Tensor))]
    for label, a_scale in a_scale_layouts()[::3]:
        m, k_blocks = a_scale.shape
        tensors = dict(a=torch.empty(m, 128 * k_blocks, dtype=FP8), a_scale=a_scale,
                       b=torch.empty(256, 128 * k_blocks, dtype=FP8), b_scale=torch.rand(2, k_blocks))
        cases.append((f"dense {label}", _call("fp8_gemm", **tensors)))
        cases.append((f"dense {label} out", _call("fp8_gemm", **tensors, out=torch.empty(m, 256, dtype=torch.bfloat16))))
    return cases


def acc_calls() -> list:
    return [(label, _call("fp8_gemm_1d1d" if args["b_scale_1d"] else "fp8_gemm_acc", a=args["a"], a_scale=args["a_scale"],
                          b=args["b"], b_scale=args["b_scale"], c=args["c"], out=args["out"],
                          accumulate=args["accumulate"], out_dtype=args["out_dtype"]))
            for label, args in acc_cases()]


def k_grouped_calls() -> list:
    return [(label, _call("k_grouped_fp8_gemm_1d1d", a=args["a"], a_scale=args["a_scale"], b=args["b"],
                          b_scale=args["b_scale"], info=args["group_sizes"], c=args["c"], out=args["out"],
                          accumulate=args["accumulate"], out_dtype=args["out_dtype"]))
            for label, args in k_grouped_cases()]


def grouped_calls() -> list:
    calls = []
    for label, kind, args in grouped_cases() + grouped_layout_cases():
        tensors = dict(zip(("a", "a_scale", "b", "b_scale", "info"), _tensors(args)), out=args["out"],
                       expected_m=args["expected_m"])
        variant = _variant(args)
        if variant == _variant({}):
            calls.append((label, _call("m_" + kind.replace("grouped_", "grouped_fp8_gemm_"), **tensors)))
        else:
            calls.append((label, _call("m_grouped_fp8_gemm_acc", **tensors, **variant, kind=kind)))
    return calls


def _python_verdict(call: dict):
    """What Python's path makes of ``call``: (type, message) of its error, else None."""
    try:
        _python_operands(call)
    except (TypeError, ValueError) as error:
        return type(error), str(error)
    return None


def _python_operands(call: dict):
    """The Python path's first half of ``call`` (deep_tile.gemm.launch.prepare and its kin):
    (out, operands or None when there are no rows)."""
    args = [call[name] for name in bridge.SLOTS] + [call[name] for name in ("expected_m", "accumulate", "out_dtype",
                                                                               "kind")]
    _, out, operands = bridge._prepare(call["op"], *args)
    return out, operands


def _resolve(extension, call: dict):
    fields = {name: call[name] for name in bridge.SLOTS + ("expected_m", "accumulate", "out_dtype", "kind")}
    return extension.resolve(call["op"], **fields)


def _native_verdict(extension, call: dict):
    """(verdict as _python_verdict says it, whether the signature's plan was found)."""
    try:
        found, _, _ = _resolve(extension, call)
    except (TypeError, ValueError) as error:
        return (type(error), str(error)), None
    return None, found


def _mutated(call: dict, rng) -> tuple:
    """``call`` with one of its tensors changed in one way that may or may not matter to the
    checks: its address moved off (or onto) a 16-byte boundary, its rows padded, its layout made
    column-major, its dtype or a size changed, made another slot's tensor, or left out."""
    call = dict(call)
    given = [name for name in bridge.SLOTS if call[name] is not None]
    name = given[rng.randrange(len(given))]
    t = call[name]
    how = rng.choice(["offset", "pitch", "columns", "dtype", "size", "alias", "drop", "offset", "pitch"])
    if how == "offset":
        elements = rng.randrange(1, 9)
        flat = torch.empty(t.numel() + elements, dtype=t.dtype)
        t = flat[elements:].view(t.shape)
    elif how == "pitch" and t.dim() >= 1 and t.numel():
        pad = rng.choice([1, 2, 4, 8, 16])
        t = torch.empty(tuple(t.shape[:-1]) + (t.shape[-1] + pad,), dtype=t.dtype)[..., :t.shape[-1]]
    elif how == "columns" and t.dim() >= 2:
        t = torch.empty(tuple(t.shape[:-2]) + (t.shape[-1], t.shape[-2]), dtype=t.dtype).transpose(-1, -2)
    elif how == "dtype":
        t = torch.empty(t.shape, dtype=rng.choice([torch.float32, torch.bfloat16, torch.float16, FP8, torch.int32]))
    elif how == "size" and t.dim() >= 1 and t.shape[0] > 1:
        t = t[: t.shape[0] - 1] if rng.random() < 0.5 else t[..., : max(1, t.shape[-1] - 8)]
    elif how == "alias":
        t = call[given[rng.randrange(len(given))]]
    elif how == "drop" and name in ("c", "out", "info"):
        t = None
    if t is not None and t.is_floating_point() and t.dtype != FP8:
        t = t.clone() if t.numel() and t.data_ptr() % 16 == 0 and t.is_contiguous() else t
    call[name] = t
    return f"{how} {name}", call


def fuzz_calls(seed: int = 0, count: int = 400) -> list:
    """Calls mutated from the valid ones of every family (:func:`_mutated`), seeded."""
    import random

    rng = random.Random(seed)
    valid = [call for _, call in dense_calls()[:40] + acc_calls() + k_grouped_calls() + grouped_calls()
             if _python_verdict(call) is None]
    calls = []
    for i in range(count):
        label, call = _mutated(valid[rng.randrange(len(valid))], rng)
        calls.append((f"fuzz {i} {call['op']} {label}", call))
    return calls


@needs_toolchain
def test_the_native_path_takes_exactly_the_calls_python_takes(planned):
    """Over every family's cases and a seeded fuzz of their signatures: with the plans of every
    signature Python takes already made, each call is taken or refused (with Python's error) as
    Python's path takes or refuses it -- a signature planned once never lets a call through that
    Python refuses -- and a call taken twice finds its plan the second time."""
    calls = dense_calls() + acc_calls() + k_grouped_calls() + grouped_calls() + fuzz_calls()
    verdicts = [_python_verdict(call) for _, call in calls]
    for (_, call), verdict in zip(calls, verdicts):
        if verdict is None:
            _resolve(planned, call)
    found = set()
    for (label, call), verdict in zip(calls, verdicts):
        for attempt in range(2):
            got, hit = _native_verdict(planned, call)
            assert got == verdict, (label, attempt)
            found.add(hit)
    assert found == {True, False, None}  # hits, calls Python answers itself (no rows), refusals
    assert sum(v is None for v in verdicts) > 300 and sum(v is not None for v in verdicts) > 300


def _apart_and_overlapping(shape: tuple, dtype, rows: int) -> tuple:
    """Two (out, c) pairs of one signature in one buffer: ``rows`` rows apart, then overlapping."""
    numel = torch.Size(shape).numel()
    step = numel // shape[0] if len(shape) == 2 else numel // (shape[0] * shape[1])
    buffer = torch.empty(2 * numel + step * rows, dtype=dtype)
    apart = buffer[:numel].view(shape), buffer[numel:2 * numel].view(shape)
    overlapping = buffer[:numel].view(shape), buffer[step * rows:step * rows + numel].view(shape)
    return apart, overlapping


@needs_toolchain
def test_overlap_is_tested_on_every_call_of_a_signature(planned):
    """Addresses beyond their alignment are not in a signature: a call whose out overlaps its C
    has the signature of one whose out and C lie apart, and is refused with Python's error on a hit
    too (the plan names the pairs its checks tested); c given as out itself is another signature."""
    acc, grouped, k_grouped = acc_args(), grouped_args("grouped_contiguous"), k_grouped_args()
    families = [
        (_call("fp8_gemm_acc", **{n: acc[n] for n in ("a", "a_scale", "b", "b_scale")}), (96, 256), 1),
        (_call("m_grouped_fp8_gemm_acc", kind="grouped_contiguous",
               **dict(zip(("a", "a_scale", "b", "b_scale", "info"), _tensors(grouped)))), (96, 256), 1),
        (_call("k_grouped_fp8_gemm_1d1d", info=k_grouped["group_sizes"],
               **{n: k_grouped[n] for n in ("a", "a_scale", "b", "b_scale")}), (3, 96, 256), 1),
    ]
    for base, shape, rows in families:
        apart, overlapping = _apart_and_overlapping(shape, torch.float32, rows)
        calls = {name: base | {"out": out, "c": c} for name, (out, c) in (("apart", apart),
                                                                           ("overlapping", overlapping))}
        assert _python_verdict(calls["apart"]) is None
        expected = _python_verdict(calls["overlapping"])
        assert expected is not None and "must not overlap c" in expected[1], expected
        assert _native_verdict(planned, calls["apart"]) == (None, False)
        assert _native_verdict(planned, calls["apart"]) == (None, True)
        before = planned.stats()
        assert _native_verdict(planned, calls["overlapping"]) == (expected, None)
        after = planned.stats()
        assert after["plans"] == before["plans"] and after["python_calls"] == before["python_calls"] + 1
    k_call = families[2][0] | {"out": apart[0]}
    assert _native_verdict(planned, k_call | {"c": apart[0]}) == (None, False)  # c is out: accumulate in place
    assert _native_verdict(planned, k_call | {"c": apart[0]}) == (None, True)
    expected = _python_verdict(k_call | {"c": apart[0][:]})  # the same view, another tensor: an overlap
    assert expected is not None and _native_verdict(planned, k_call | {"c": apart[0][:]}) == (expected, None)


@needs_toolchain
def test_the_operands_are_the_ones_python_makes(planned):
    """For every call Python takes with rows to compute (dense over many a_scale layouts, the
    output variants and 1D1D, K-grouped, every grouped kind and its variants), on the call that
    makes the plan and on one that finds it: the operands the native path launches with are the
    ones the Python path makes -- same shapes, strides and dtypes, the call's own memory where
    Python copies nothing, a copy with equal values where it copies."""
    copied = set()
    for label, call in dense_calls() + acc_calls() + k_grouped_calls() + grouped_calls():
        if _python_verdict(call) is not None:
            continue
        python_out, python = _python_operands(call)
        if python is None:
            continue
        given = {call[name].data_ptr() for name in bridge.SLOTS if call[name] is not None}
        for attempt in range(2):
            found, out, native = _resolve(planned, call)
            assert (found or not attempt) and len(native) == len(python), (label, attempt)  # found the second time
            assert (out.shape, out.dtype) == (python_out.shape, python_out.dtype), label
            for i, (got, want) in enumerate(zip(native, python)):
                assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype), (label, i)
                if want.data_ptr() in given:
                    assert got.data_ptr() == want.data_ptr(), (label, i)  # the same view, no copy
                elif want.untyped_storage().data_ptr() == python_out.untyped_storage().data_ptr():
                    assert got.untyped_storage().data_ptr() == out.untyped_storage().data_ptr(), (label, i)
                else:
                    assert got.data_ptr() not in given and torch.equal(got, want), (label, i)
                    copied.add((call["op"], i))
    assert {("fp8_gemm", 1), ("fp8_gemm_1d1d", 3), ("k_grouped_fp8_gemm_1d1d", 1), ("m_grouped_fp8_gemm_masked", 1),
            ("m_grouped_fp8_gemm_offsets", 1), ("m_grouped_fp8_gemm_contiguous", 3)} <= copied


# ---- GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_native_path_equals_python_path_bitwise():
    cases = [dict(m=64, n=2112, k=7168), dict(m=64, n=2112, k=7168, layout="row"), dict(m=1, n=256, k=128),
             dict(m=129, n=384, k=272, seed=1), dict(m=129, n=384, k=272, seed=1, layout="row"),
             dict(m=4096, n=7168, k=2048, seed=2), dict(m=4096, n=7168, k=2048, seed=2, layout="row")]
    for r in run_host_cases("native_vs_python", cases):
        assert r["native_equals_python"] and r["repeat_bitwise"], r
        assert r["native_calls"] == 7 and r["python_calls"] == 0, r  # every call took the native path
        # A row-major a_scale is read by the kernel as it is when its rows are a multiple of 16
        # bytes (K = 7168, 2048: 56, 16 groups); with 3 groups (K = 272) it is copied per call.
        copied = r["layout"] == "row" and r["k"] == 272
        assert r["a_scale_copies"] == (7 if copied else 0), r
        assert r["nan"] == 0 and r["diff"] < DIFF_TOL, r


# (whether the native path copies a_scale on each call, case of gpu_host_cases.grouped_native_vs_python)
GROUPED_GPU_CASES = [
    # contiguous: -1 padding after each run and 128 rows after the last, mixed with ids out of range
    (False, dict(kind="contiguous", counts=[130, 0, 256, 5], n=256, k=512, tail=128, bad_ids=True)),
    (False, dict(kind="contiguous", counts=[130, 0, 256, 5], n=256, k=512, tail=128, layout="row")),
    (True, dict(kind="contiguous", counts=[77, 200], n=136, k=640, layout="row")),  # 5 K blocks: copied
    # offsets: an empty expert, rows of no expert before the first run and after the last
    (False, dict(kind="offsets", counts=[1, 0, 77, 300, 64], n=256, k=512, gaps=True, tail=9, layout="row")),
    (True, dict(kind="offsets", counts=[1, 0, 77, 300, 64], n=256, k=512, gaps=True, tail=9)),  # to row-major
    # masked: masked_m 0 and = max_m
    (False, dict(kind="masked", counts=[0, 192, 13, 64], n=256, k=512, max_m=192)),
    (False, dict(kind="masked", counts=[0, 192, 13, 64], n=256, k=512, max_m=192, layout="row")),
]


@pytest.mark.gpu
def test_grouped_native_path_equals_python_path_bitwise():
    results = run_host_cases("grouped_native_vs_python", [case for _, case in GROUPED_GPU_CASES])
    for (copies, _), r in zip(GROUPED_GPU_CASES, results):
        assert r["native_equals_python"] and r["repeat_bitwise"], r
        assert r["rows"] > 0 and r["nan"] == 0 and r["diff"] < DIFF_TOL, r
        assert r["untouched"], r  # the rows of no expert are still NaN
        assert r["native_calls"] == r["calls"] and r["python_calls"] == 0, r  # every call took the native path
        assert r["a_scale_copies"] == (r["calls"] if copies else 0), r


# the training ops on both host paths (tests/gpu_host_training_cases.py): FP32 and bf16 out, no C,
# a separate bf16 / FP32 C, in-place accumulation; a row-major a_scale read as it is; 1D1D with
# its row-major b_scale copied; K-grouped with an empty group, a partial last K block (T = 208 and
# 336: tokens past the groups are FP8 NaN) and c given as out itself
ACC_GPU_CASES = [
    dict(m=256, n=512, k=1024, out_dtype="float32", c_mode="none"),
    dict(m=256, n=512, k=1024, out_dtype="float32", c_mode="inplace"),
    dict(m=129, n=384, k=272, out_dtype="bfloat16", c_mode="float32", seed=1),
    dict(m=129, n=384, k=1024, out_dtype="float32", c_mode="bfloat16", layout="row", seed=2),
    dict(m=64, n=2112, k=7168, out_dtype="bfloat16", c_mode="inplace", layout="row", seed=3),
    dict(m=256, n=384, k=1024, out_dtype="float32", c_mode="none", one_d=True),
    dict(m=192, n=256, k=4096, out_dtype="float32", c_mode="inplace", one_d=True, seed=4),
    dict(m=129, n=136, k=272, out_dtype="bfloat16", c_mode="float32", one_d=True, seed=5),
]
K_GROUPED_GPU_CASES = [
    dict(m=128, n=256, sizes=[130, 0, 77], out_dtype="float32", c_mode="none"),
    dict(m=128, n=256, sizes=[130, 0, 77], out_dtype="float32", c_mode="inplace", seed=1),
    dict(m=96, n=128, sizes=[0, 256, 1, 127], out_dtype="float32", c_mode="c_is_out", pad=33, seed=2),
    dict(m=256, n=384, sizes=[300, 0, 200, 500], out_dtype="bfloat16", c_mode="float32", seed=3),
    dict(m=256, n=384, sizes=[129, 0, 511], out_dtype="bfloat16", c_mode="inplace", pad=5, seed=4),
    dict(m=64, n=256, sizes=[200, 0], out_dtype="float32", c_mode="bfloat16", pad=8, seed=5),
]


@pytest.mark.gpu
def test_training_ops_native_path_equals_python_path_bitwise():
    results = run_child_cases("gpu_host_training_cases.py", "acc_native_vs_python", ACC_GPU_CASES, 900)
    results += run_child_cases("gpu_host_training_cases.py", "k_grouped_native_vs_python", K_GROUPED_GPU_CASES, 900)
    for r in results:
        assert r["native_equals_python"], r  # the _out op, repeats, the public function, the extension, the new op
        assert r["native_calls"] == r["calls"] and r["python_calls"] == 0, r  # every call took the native path
        assert r["nan"] == 0 and r["diff"] < DIFF_TOL, r
        assert r.get("empty_wrong", 0) == 0, r  # an empty group holds C (zeros without C)


@pytest.mark.gpu
def test_k_grouped_op_in_cuda_graph_replays_new_group_sizes():
    cases = [dict(m=128, n=256, sizes=[130, 0, 77], new_sizes=[0, 300, 5]),
             dict(m=64, n=128, sizes=[16, 16], new_sizes=[200, 0], seed=1)]
    for r in run_child_cases("gpu_host_training_cases.py", "k_grouped_native_graph", cases, 900):
        assert r["captured_native"] == 1 and r["captured_python"] == 0, r  # captured from the native path
        assert r["graph_equals_python"] and r["nan"] == 0 and r["diff"] < DIFF_TOL, r


@pytest.mark.gpu
def test_grouped_ops_in_cuda_graph_replay_new_counts():
    cases = [dict(kind="contiguous", counts=[100, 200], new_counts=[200, 100], n=256, k=384),
             dict(kind="offsets", counts=[10, 20, 0], new_counts=[25, 0, 4], n=128, k=256),
             dict(kind="masked", counts=[5, 100], new_counts=[100, 0], n=128, k=256, max_m=128)]
    for r in run_host_cases("grouped_graph_replay", cases):
        assert r["captured_native"] == 2 and r["captured_python"] == 0, r  # captured from the native path
        assert r["out_ok"] and r["new_ok"], r  # the replay equals an eager call on the new counts
        assert r["rows"] > 0 and r["nan"] == 0 and r["diff"] < DIFF_TOL and r["untouched"], r


@pytest.mark.gpu
def test_grouped_native_errors_on_cuda_tensors():
    cases = [dict(kind="contiguous", case="misaligned_a"), dict(kind="masked", case="cpu_info"),
             dict(kind="offsets", case="info_shape")]
    for r in run_host_cases("grouped_errors_match", cases):
        assert r["raised"]["python"] != "none" and len(set(r["raised"].values())) == 1, r
        assert r["out_untouched"], r


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["misaligned_a", "cpu_b", "a_scale_shape", "out_dtype"])
def test_native_errors_on_cuda_tensors(case):
    (r,) = run_host_cases("errors_match", [dict(case=case)])
    assert r["raised"]["python"] != "none" and len(set(r["raised"].values())) == 1, r
    assert r["out_untouched"], r


@pytest.mark.gpu
def test_debug_prints_the_first_call_phases():
    (r,) = run_host_cases("debug_phases", [{}])
    line = next(l for l in r["stderr"].splitlines() if "first call 192x384x1024 (native path" in l)
    for phase in ("tensor maps", "launch"):
        assert phase in line, r["stderr"]


@pytest.mark.gpu
def test_set_num_sms_reaches_the_native_path():
    (r,) = run_host_cases("sms_limit_on_native", [dict(m=4096, n=7168, k=2048)])
    assert r["native_calls"] == 3 and r["python_calls"] == 0, r
    assert r["plans_created"] == 1, r  # the limit is in the plan key: one new plan; the unlimited one is found again
    assert r["limited_grid"] <= 66 < r["full_grid"], r
    assert r["limited_equals_python"] and r["full_equals_python"], r


@pytest.mark.gpu
@pytest.mark.parametrize("what", ["so-truncated", "so-garbage"])
def test_damaged_library_is_rebuilt_before_a_gemm(tmp_path, monkeypatch, what):
    """A copy of the test run's build, damaged, then a GEMM in a fresh process (DEEP_TILE_NATIVE=wait):
    the library is discarded, rebuilt (a real build) and loaded; native equals Python bitwise."""
    (ready,) = run_host_cases("native_ready", [{}])
    key = ready["key"]
    cache_dir = tmp_path / "cache"
    shutil.copytree(Path(ready["library"]).parent, cache_dir / "native" / key)
    _damage_native(cache_dir, key, what)
    (r,) = run_host_cases("native_vs_python", [dict(m=129, n=384, k=272, seed=1)],
                          env={"DEEP_TILE_CACHE_DIR": str(cache_dir), "DEEP_TILE_NATIVE": "wait"})
    assert r["native_equals_python"] and r["repeat_bitwise"], r
    assert r["native_calls"] == 7 and r["python_calls"] == 0, r
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(cache_dir))
    assert importlib.import_module("deep_tile.native.build").entry_problem(key) is None
    assert _publishes(cache_dir, key) == 1


@pytest.mark.gpu
def test_gemm_runs_while_a_damaged_library_is_rebuilt_in_the_background(tmp_path):
    """DEEP_TILE_NATIVE=auto and a truncated library: the first fp8_gemm calls run on the Python path
    (no SIGBUS, no warning) while the build runs; then the native path gives the same bits."""
    (ready,) = run_host_cases("native_ready", [{}])
    key = ready["key"]
    cache_dir = tmp_path / "cache"
    shutil.copytree(Path(ready["library"]).parent, cache_dir / "native" / key)
    _damage_native(cache_dir, key, "so-truncated")
    (r,) = run_host_cases("gemm_while_native_rebuilds", [dict(m=64, n=2112, k=7168)],
                          env={"DEEP_TILE_CACHE_DIR": str(cache_dir), "DEEP_TILE_NATIVE": "auto"})
    assert r["state"] == "loaded" and r["equal"] and r["native_equal"] and r["warnings"] == [], r


@pytest.mark.gpu
def test_first_gemm_with_an_unusable_cache_dir(tmp_path):
    """One NativeUnavailableWarning (no raw OSError), then the kernel cache's CacheError naming
    DEEP_TILE_CACHE_DIR, the same on the second call."""
    (tmp_path / "blocker").write_text("a regular file")
    (r,) = run_host_cases("gemm_with_unusable_cache", [dict(m=64, n=2112, k=7168)],
                          env={"DEEP_TILE_CACHE_DIR": str(tmp_path / "blocker" / "cache"), "DEEP_TILE_NATIVE": "wait"})
    native_warnings = [w for w in r["warnings"] if w.startswith("NativeUnavailableWarning")]
    assert len(native_warnings) == 1 and "DEEP_TILE_CACHE_DIR" in native_warnings[0], r
    assert r["state"] == "unavailable", r
    for raised in r["raised"]:
        assert raised.startswith("deep_tile.errors.CacheError: ") and "DEEP_TILE_CACHE_DIR" in raised, r


@needs_toolchain
def test_grouped_output_variant_ops_refuse_an_unknown_kind_as_python_does(extension):
    """The ops' ``kind`` argument: a name that is not a grouped kind raises the same ValueError on
    the native kernels as on the Python ones (deep_tile.gemm.checks.grouped_op_kind: Python plans the
    call and refuses it)."""
    from deep_tile import ops

    args = grouped_args("grouped_contiguous")
    tensors = _tensors(args)
    with pytest.raises(ValueError) as python_error:
        ops._grouped_kind("dense")
    assert extension.ops_registered()
    with pytest.raises(ValueError) as native_error:
        torch.ops.deep_tile.m_grouped_fp8_gemm_acc("dense", *tensors, None, None, torch.float32)
    assert str(native_error.value).splitlines()[0] == str(python_error.value)
    with pytest.raises(ValueError) as native_error:
        torch.ops.deep_tile.m_grouped_fp8_gemm_acc_out("k_grouped", *tensors, None, None, False, args["out"])
    assert str(native_error.value).splitlines()[0] == str(python_error.value).replace("'dense'", "'k_grouped'")
