"""deep_tile.env: the registry, its README table, parsing, and that nothing else reads os.environ."""
import ast
import os
import re
from pathlib import Path

import pytest

from deep_tile import env

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "deep_tile"
BOOLS = [name for name, var in env.REGISTRY.items() if var.type == "bool"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Start every test with no declared variable set."""
    for name in env.REGISTRY:
        monkeypatch.delenv(name, raising=False)


def readme_table() -> dict[str, list[str]]:
    """Rows of README.md's `## Environment variables` table: name -> [type, default, effect]."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Environment variables\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "README.md has no '## Environment variables' section"
    rows = [line.strip() for line in match.group(1).splitlines() if line.strip().startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header == ["Variable", "Type", "Default", "Effect"]
    table = {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        assert len(cells) == 4, f"README env table row must have 4 cells: {row}"
        table[cells[0].strip("`")] = cells[1:]
    return table


def test_readme_table_lists_the_registry():
    table = readme_table()
    assert set(table) == set(env.REGISTRY)
    assert {n for n in table if n.startswith("DEEP_TILE_")} == {
        "DEEP_TILE_CACHE_DIR", "DEEP_TILE_DISABLE_CACHE", "DEEP_TILE_COMPILER", "DEEP_TILE_NVCC",
        "DEEP_TILE_DEBUG", "DEEP_TILE_PTXAS_CHECK", "DEEP_TILE_DUMP_ASM", "DEEP_TILE_PRINT_CONFIGS",
        "DEEP_TILE_WATCHDOG", "DEEP_TILE_NATIVE", "DEEP_TILE_PDL", "DEEP_TILE_TP_TRANSPORT",
        "DEEP_TILE_KGROUPED_TN_TRANSPOSE", "DEEP_TILE_BH_EINSUM", "DEEP_TILE_FP8_EINSUM", "DEEP_TILE_HC_GROUPS",
        "DEEP_TILE_HC_SUB_SPLITS", "DEEP_TILE_HC_VARIANT", "DEEP_TILE_BF16_LEGACY", "DEEP_TILE_BF16_PLAN"}


def test_readme_rows_match_the_declarations():
    generated = {}
    for line in env.markdown_table().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        generated[cells[0].strip("`")] = cells[1:3]
    for name, (kind, default, effect) in readme_table().items():
        assert [kind, default] == generated[name], name
        assert effect, f"README: {name} has an empty Effect"


def test_every_variable_is_documented():
    for var in env.REGISTRY.values():
        assert var.doc and var.default and var.type in ("bool", "str", "path", "choice")


def test_defaults():
    assert env.cache_dir() == Path.home() / ".cache" / "deep_tile"
    assert env.compiler() is None
    assert env.cuda_home() is None
    assert env.native() == "auto"
    assert env.cxx() == "c++"
    for name in BOOLS:
        assert env.get(name) is (name == "DEEP_TILE_PDL")  # the one bool that defaults to on
    assert not any([env.disable_cache(), env.debug(), env.ptxas_check(), env.dump_asm(), env.print_configs()])
    assert env.pdl() is True


@pytest.mark.parametrize("raw,expected", [
    ("1", True), ("true", True), ("TRUE", True), ("yes", True), ("On", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False), ("  ", False),
])
def test_bool_values(monkeypatch, raw, expected):
    for name in BOOLS:
        monkeypatch.setenv(name, raw)
        default = env.REGISTRY[name].default == "on"
        assert env.get(name) is (default if not raw.strip() else expected)


@pytest.mark.parametrize("name", BOOLS)
def test_bad_bool_names_variable_and_value(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError) as info:
        env.get(name)
    assert name in str(info.value) and "'maybe'" in str(info.value) and "true/false" in str(info.value)


def test_compiler_choice(monkeypatch):
    monkeypatch.setenv("DEEP_TILE_COMPILER", "NVCC")
    assert env.compiler() == "nvcc"
    monkeypatch.setenv("DEEP_TILE_COMPILER", "nvrtc")
    assert env.compiler() == "nvrtc"
    monkeypatch.setenv("DEEP_TILE_COMPILER", "")
    assert env.compiler() is None
    monkeypatch.setenv("DEEP_TILE_COMPILER", "foo")
    with pytest.raises(ValueError, match=r"DEEP_TILE_COMPILER.*nvrtc, nvcc.*'foo'"):
        env.compiler()


def test_native_choice_and_cxx(monkeypatch):
    for raw, expected in (("WAIT", "wait"), ("off", "off"), ("", "auto"), ("auto", "auto")):
        monkeypatch.setenv("DEEP_TILE_NATIVE", raw)
        assert env.native() == expected
    monkeypatch.setenv("DEEP_TILE_NATIVE", "sometimes")
    with pytest.raises(ValueError, match=r"DEEP_TILE_NATIVE.*auto, wait, off.*'sometimes'"):
        env.native()
    monkeypatch.setenv("CXX", "clang++")
    assert env.cxx() == "clang++"


def test_accessors_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", str(tmp_path / "a"))
    assert env.cache_dir() == tmp_path / "a"
    monkeypatch.setenv("DEEP_TILE_CACHE_DIR", "~/x")
    assert env.cache_dir() == Path.home() / "x"
    monkeypatch.setenv("DEEP_TILE_DEBUG", "1")
    assert env.debug() is True


def test_nvcc_path_search_order(monkeypatch, tmp_path):
    monkeypatch.setenv("DEEP_TILE_NVCC", str(tmp_path / "my-nvcc"))
    assert env.nvcc_path() == str(tmp_path / "my-nvcc")  # explicit: returned even if missing
    monkeypatch.delenv("DEEP_TILE_NVCC")
    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert env.nvcc_path() == str(fake)
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.delenv("CUDA_HOME")
    assert env.nvcc_path() == str(fake)


def test_undeclared_variable_is_refused():
    with pytest.raises(ValueError, match="DEEP_TILE_NOPE"):
        env.get("DEEP_TILE_NOPE")


def test_subprocess_env_prepends_path(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    assert env.subprocess_env(["/opt/x"])["PATH"] == os.pathsep.join(["/opt/x", "/usr/bin"])


_ENV_ATTRS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(path: Path) -> list[str]:
    """Lines of ``path`` that touch the process environment through the os module."""
    tree = ast.parse(path.read_text())
    os_names = {"os"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "posix"):
            if any(a.name in _ENV_ATTRS or a.name == "*" for a in node.names):
                found.append(node.lineno)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in _ENV_ATTRS
                and isinstance(node.value, ast.Name) and node.value.id in os_names):
            found.append(node.lineno)
    lines = path.read_text().splitlines()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{name}:{n}: {lines[n - 1].strip()}" for n in sorted(set(found))]


def test_environment_reads_detector(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os as o\nfrom os import getenv\n# os.environ in a comment is fine\n"
                     "x = o.environ.get('A')\n")
    assert [r.split(":")[1] for r in environment_reads(probe)] == ["2", "4"]


def test_only_env_reads_the_environment():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != PACKAGE / "env.py" and "_data" not in path.parts:
            offenders += environment_reads(path)
    assert not offenders, "only deep_tile/env.py may read the environment:\n" + "\n".join(offenders)


def test_env_imports_nothing_from_deep_tile():
    tree = ast.parse((PACKAGE / "env.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("deep_tile")
        elif isinstance(node, ast.Import):
            assert not any(alias.name.startswith("deep_tile") for alias in node.names)


def test_validate_checks_every_variable(monkeypatch):
    env.validate()  # nothing set: fine
    for name, var in env.REGISTRY.items():
        if var.type in ("bool", "choice"):
            monkeypatch.setenv(name, "maybe")
            with pytest.raises(ValueError, match=rf"^environment variable {name} must be .*'maybe'$"):
                env.validate()
            monkeypatch.delenv(name)
    monkeypatch.setenv("DEEP_TILE_DEBUG", "yes")
    monkeypatch.setenv("DEEP_TILE_NATIVE", "WAIT")
    env.validate()
