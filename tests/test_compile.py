"""deep_tile.jit.compiler and deep_tile.jit.paths: sm_90a cubins from NVRTC and NVCC, no GPU needed."""
import tempfile
from pathlib import Path

import pytest

from conftest import compiler_params

from deep_tile import env
from deep_tile.errors import CompileError
from deep_tile.jit import compiler, paths

DATA = Path(__file__).resolve().parent / "data"
ENTRY = DATA / "csrc" / "entry"
AVAILABLE = compiler.available_compilers()

COMPILERS = compiler_params()


@pytest.fixture(autouse=True)
def test_tree(monkeypatch, tmp_path):
    """Compile against tests/data/include with no DEEP_TILE_* variable set; temp files in tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in env.REGISTRY:
        if name.startswith("DEEP_TILE_") and name != "DEEP_TILE_NVCC":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(paths, "include_dir", lambda: DATA / "include")


@pytest.mark.parametrize("name", COMPILERS)
def test_tiny_kernel(name):
    result = compiler.compile_cubin(ENTRY / "tiny.cu", {"DT_SCALE": 3}, "dt_tiny", name)
    assert result.cubin[:4] == b"\x7fELF"
    assert compiler.has_symbol(result.cubin, "dt_tiny")
    assert not compiler.has_symbol(result.cubin, "dt_other")
    assert compiler.elf_functions(result.cubin) == {"dt_tiny"}
    assert not compiler.has_symbol(result.cubin[:-8], "dt_tiny")  # truncated image
    assert result.compiler == name and result.seconds > 0
    assert "sm_90a" in result.command and "-DDT_SCALE=3" in result.command
    assert f"-I{DATA / 'include'}" in result.command
    assert "Function properties for dt_tiny" in result.log
    assert compiler.ptxas_problems(result.log) == []


@pytest.mark.parametrize("name", COMPILERS)
def test_sm90a_only_instruction(name):
    result = compiler.compile_cubin(ENTRY / "maxnreg.cu", {}, "dt_maxnreg", name)
    assert compiler.has_symbol(result.cubin, "dt_maxnreg")
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("cuobjdump not found: SASS not checked")
    assert "Function : dt_maxnreg" in sass and "USETMAXREG" in sass


@pytest.mark.parametrize("name", COMPILERS)
def test_syntax_error_raises_with_log_and_kept_source(name):
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(ENTRY / "syntax_error.cu", {"DT_X": 1}, "dt_syntax_error", name)
    error = info.value
    assert "error" in error.log and "syntax_error.cu" in error.log
    assert error.log.strip() in str(error) and error.source_path in str(error)
    kept = Path(error.source_path)
    assert kept.is_file() and kept != ENTRY / "syntax_error.cu"
    assert kept.parent.name.startswith("deep_tile-failed-syntax_error-")
    text = kept.read_text()
    assert "#define DT_X 1" in text and "int value = ;" in text
    assert (kept.parent / "compile.log").read_text() == error.log
    assert "sm_90a" in error.command


@pytest.mark.parametrize("name", COMPILERS)
def test_missing_define_hits_the_entry_error(name):
    with pytest.raises(CompileError, match="DT_SCALE must be defined"):
        compiler.compile_cubin(ENTRY / "tiny.cu", {}, "dt_tiny", name)


@pytest.mark.parametrize("name", COMPILERS)
def test_missing_symbol_is_an_error(name):
    with pytest.raises(CompileError, match="no kernel symbol 'dt_absent'"):
        compiler.compile_cubin(ENTRY / "tiny.cu", {"DT_SCALE": 1}, "dt_absent", name)


@pytest.mark.parametrize("name", COMPILERS)
def test_ptxas_check(monkeypatch, name):
    spill = compiler.compile_cubin(ENTRY / "spill.cu", {}, "dt_spill", name)  # check off: accepted
    assert any("stack frame" in p for p in compiler.ptxas_problems(spill.log))
    monkeypatch.setenv("DEEP_TILE_PTXAS_CHECK", "1")
    with pytest.raises(CompileError, match=r"DEEP_TILE_PTXAS_CHECK.*dt_spill: \d+ bytes stack frame"):
        compiler.compile_cubin(ENTRY / "spill.cu", {}, "dt_spill", name)
    clean = compiler.compile_cubin(ENTRY / "tiny.cu", {"DT_SCALE": 2}, "dt_tiny", name)
    assert clean.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", COMPILERS)
def test_want_ptx(name):
    result = compiler.compile_cubin(ENTRY / "tiny.cu", {"DT_SCALE": 2}, "dt_tiny", name, want_ptx=True)
    assert ".target sm_90a" in result.ptx and "dt_tiny" in result.ptx


def test_ptxas_problems_parser():
    log = """ptxas info    : Function properties for k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for k2
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas warning : (C7510) harmless
ptxas warning : (C7508) Potential Performance Loss: wgmma.mma_async instructions are serialized
ptxas warning : (C7519) something else
"""
    problems = compiler.ptxas_problems(log)
    assert problems[0].startswith("k2: 8 bytes stack frame, 4 bytes spill stores")
    assert len(problems) == 3 and "C7508" in problems[1] and "C7519" in problems[2]
    (empty,) = compiler.ptxas_problems("")
    assert empty.startswith("no ptxas -v report (stack frame / spill lines) in the log") and "CUDA_CACHE_DISABLE=1" in empty


def test_normalize_defines():
    assert compiler.normalize_defines({"B": True, "A": 3, "C": "x1", "D": False}) == (
        ("A", "3"), ("B", "1"), ("C", "x1"), ("D", "0"))
    with pytest.raises(ValueError, match="C identifiers.*'1BAD'"):
        compiler.normalize_defines({"1BAD": 1})
    with pytest.raises(ValueError, match="DT_S.*'a b'"):
        compiler.normalize_defines({"DT_S": "a b"})
    with pytest.raises(TypeError, match="DT_F.*float"):
        compiler.normalize_defines({"DT_F": 1.5})
    with pytest.raises(TypeError, match="mapping"):
        compiler.normalize_defines([("A", 1)])


def test_compiler_selection(monkeypatch):
    with pytest.raises(ValueError, match="nvrtc, nvcc.*'gcc'"):
        compiler.flags("gcc")
    with pytest.raises(ValueError, match="'gcc'"):
        compiler.compile_cubin(ENTRY / "tiny.cu", {}, "dt_tiny", "gcc")
    monkeypatch.setenv("DEEP_TILE_COMPILER", "nvcc")
    assert compiler.default_compiler() == "nvcc"
    monkeypatch.delenv("DEEP_TILE_COMPILER")
    assert compiler.default_compiler() == ("nvrtc" if "nvrtc" in AVAILABLE else "nvcc")
    assert "-gencode=arch=compute_90a,code=sm_90a" in compiler.flags("nvcc")
    assert "--gpu-architecture=sm_90a" in compiler.flags("nvrtc")


@pytest.mark.parametrize("name", COMPILERS)
def test_compiler_version(name):
    version = compiler.compiler_version(name)
    assert version and version[0].isdigit() and "." in version
    assert compiler.compiler_version(name) is version  # cached


def test_missing_nvcc_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DEEP_TILE_NVCC", str(tmp_path / "no-nvcc"))
    assert "nvcc" not in compiler.available_compilers()
    with pytest.raises(CompileError, match="DEEP_TILE_NVCC"):
        compiler.compile_cubin(ENTRY / "tiny.cu", {"DT_SCALE": 1}, "dt_tiny", "nvcc")


# ---- paths ------------------------------------------------------------------------------------

def test_paths_in_checkout(monkeypatch):
    monkeypatch.undo()  # the real include_dir
    root = Path(__file__).resolve().parents[1]
    assert paths.include_dir() == root / "include"
    assert (paths.include_dir() / "deep_tile").is_dir()
    assert paths.csrc_dir() == root / "csrc"


def test_entry_path(monkeypatch):
    monkeypatch.setattr(paths, "csrc_dir", lambda: DATA / "csrc")
    assert paths.entry_path("tiny") == ENTRY / "tiny.cu"
    with pytest.raises(FileNotFoundError, match=r"'nope'.*available: \[.*'tiny'"):
        paths.entry_path("nope")
    with pytest.raises(ValueError, match="bare entry name"):
        paths.entry_path("../tiny")
    with pytest.raises(TypeError, match="name must be a str"):
        paths.entry_path(3)


def test_paths_in_installed_wheel(monkeypatch, tmp_path):
    package = tmp_path / "site-packages" / "deep_tile"
    (package / "_data" / "include" / "deep_tile").mkdir(parents=True)
    (package / "_data" / "csrc" / "entry").mkdir(parents=True)
    monkeypatch.undo()
    monkeypatch.setattr(paths, "_PACKAGE_DIR", package)
    paths.data_root.cache_clear()
    try:
        assert paths.include_dir() == package / "_data" / "include"
        assert paths.csrc_dir() == package / "_data" / "csrc"
        monkeypatch.setattr(paths, "_PACKAGE_DIR", tmp_path / "broken" / "deep_tile")
        paths.data_root.cache_clear()
        with pytest.raises(FileNotFoundError, match="cannot find the deep_tile CUDA headers"):
            paths.include_dir()
    finally:
        monkeypatch.undo()
        paths.data_root.cache_clear()
