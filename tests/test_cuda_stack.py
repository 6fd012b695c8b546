"""deep_tile.cuda_stack and tools/cuda_stack_check.py: the CUDA 12 / 13 stacks, the extras that
install them, and the errors that name them. No GPU needed."""
import importlib.util
import re
from pathlib import Path

import pytest

from deep_tile import cuda_stack

ROOT = Path(__file__).resolve().parents[1]


def extras() -> dict[str, str]:
    """pyproject.toml's optional-dependency extras: name -> the text of its list."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    return dict(re.findall(r"^(\w+) = \[(.*?)^\]", section, re.M | re.S))


def test_each_extra_pins_one_major_of_bindings_and_nvrtc():
    found = extras()
    for major, extra in cuda_stack.EXTRAS.items():
        assert extra in found, f"pyproject.toml has no extra {extra}"
        text = found[extra]
        assert f'"cuda-bindings>=' in text and f"<{major + 1}" in text, text
        nvrtc = "nvidia-cuda-nvrtc-cu12" if major == 12 else "nvidia-cuda-nvrtc>="
        assert nvrtc in text, text
        assert f'pip install "deep_tile[{extra}]"' in cuda_stack.INSTALL_HINT


def test_the_base_install_pulls_no_cuda_package():
    text = (ROOT / "pyproject.toml").read_text()
    base = text.split("dependencies = [")[1].split("]")[0]
    assert "cuda" not in base.lower() and "torch" in base, base


def test_driver_mismatch_names_the_extra_to_install(monkeypatch):
    monkeypatch.setattr(cuda_stack, "bindings_version", lambda: "13.3.1")
    message = cuda_stack.driver_mismatch(12080)
    assert "cuda-bindings 13.3.1 (CUDA 13)" in message and "CUDA 12.8" in message
    assert 'pip install "deep_tile[cu12]"' in message
    assert cuda_stack.driver_mismatch(13000) is None and cuda_stack.driver_mismatch(13020) is None
    monkeypatch.setattr(cuda_stack, "bindings_version", lambda: "12.9.4")
    assert cuda_stack.driver_mismatch(12020) is None and cuda_stack.driver_mismatch(13000) is None
    assert cuda_stack.driver_mismatch(11080) is not None  # no extra for CUDA 11: the general hint
    monkeypatch.setattr(cuda_stack, "bindings_version", lambda: None)
    assert cuda_stack.driver_mismatch(12000) is None  # nothing installed: the import error says so


def test_a_missing_stack_is_an_import_error_naming_both_extras():
    error = cuda_stack.missing_bindings(ModuleNotFoundError("No module named 'cuda'"))
    assert isinstance(error, ImportError)
    assert "deep_tile[cu13]" in str(error) and "deep_tile[cu12]" in str(error) and "No module named" in str(error)


def test_the_stack_check_tool_reads_this_environment():
    spec = importlib.util.spec_from_file_location("cuda_stack_check", ROOT / "tools" / "cuda_stack_check.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    packages = tool.cuda_packages()
    if cuda_stack.bindings_version() is None:
        pytest.skip("no cuda-bindings installed here")
    version, major = packages["cuda-bindings"]
    assert version == cuda_stack.bindings_version() and major == cuda_stack.bindings_major()
    for name, (_, package_major) in packages.items():
        if name.endswith("-cu12"):
            assert package_major == 12, name
