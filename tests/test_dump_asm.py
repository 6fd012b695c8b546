"""DEEP_TILE_DUMP_ASM: kernel.sass is written with the test extra's tools, and a missing tool gives
one warning on stderr that says what to install."""
import pytest

from deep_tile.jit import cache, compiler
from conftest import cache_entries

AVAILABLE = compiler.available_compilers()
TINY = ("tiny", {"DT_SCALE": 3}, "dt_tiny")

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="neither NVRTC nor nvcc is available")


@pytest.fixture
def tree(data_tree, monkeypatch):
    """tests/data as the source tree, an empty cache in tmp_path, DEEP_TILE_DUMP_ASM on, no warning yet."""
    monkeypatch.setenv("DEEP_TILE_DUMP_ASM", "1")
    monkeypatch.setattr(cache, "_warned_no_sass", False)
    return data_tree


def test_the_test_extra_provides_the_sass_tools():
    assert compiler.missing_sass_tools() == [], \
        f"SASS checks would skip: install the test extra (pip install -e \".[test]\") or {compiler.SASS_TOOLS_INSTALL}"


def test_dump_asm_writes_sass_with_the_tools(tree, capsys):
    cache.get_cubin(*TINY)
    [entry] = cache_entries(tree)
    sass = (entry / "kernel.sass").read_text()
    assert "Function : dt_tiny" in sass
    assert ".target sm_90a" in (entry / "kernel.ptx").read_text()
    assert "DEEP_TILE_DUMP_ASM" not in capsys.readouterr().err


@pytest.mark.parametrize("missing", [("cuobjdump", "nvdisasm"), ("nvdisasm",), ()])
def test_missing_tools_warn_once_with_what_to_install(tree, monkeypatch, capsys, missing):
    """Both tools missing, nvdisasm missing, or both found but cuobjdump failing."""
    real = compiler.find_tool
    monkeypatch.setattr(compiler, "find_tool", lambda name: None if name in missing else real(name))
    if "cuobjdump" not in missing:  # without nvdisasm cuobjdump cannot disassemble sm_90a: fail as it would
        monkeypatch.setattr(compiler, "disassemble", lambda cubin: None)
    cache.get_cubin(*TINY)
    cache.get_cubin("tiny", {"DT_SCALE": 4}, "dt_tiny")  # a second kernel: no second warning
    assert len(cache_entries(tree)) == 2 and not any((e / "kernel.sass").exists() for e in cache_entries(tree))
    err = capsys.readouterr().err
    assert err.count("deep_tile: warning: DEEP_TILE_DUMP_ASM: kernel.sass not written") == 1, err
    if missing:
        assert f"{' and '.join(missing)} not found" in err
        assert "install with: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm" in err
    else:
        assert "cuobjdump -sass failed on " in err
