"""Every name a Python file of the checkout reads is defined somewhere it can be found: a global
the module assigns or imports, or a builtin. The GPU case modules (tests/gpu_*.py), the benchmarks
and the tools mostly run on a GPU, where a misspelt or removed name would surface only there; this
CPU test reads them with the compiler's own scope analysis (symtable) instead of running them."""
from __future__ import annotations

import builtins
import symtable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for folder in ("deep_tile", "tests", "benchmarks", "tools", "examples")
               for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
MODULE_NAMES = {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__",
                "__path__", "__annotations__"}


def undefined_globals(source: str, filename: str) -> list:
    """``(scope, name)`` for each name read as a global that the module never binds (assignment,
    import, def, class, for target...) and that is not a builtin. Empty for a module with a star
    import, whose globals cannot be known without importing it."""
    top = symtable.symtable(source, filename, "exec")
    if "import *" in source:
        return []
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    known = bound | set(dir(builtins)) | MODULE_NAMES
    found = []

    def visit(table) -> None:
        for sym in table.get_symbols():
            reads_global = sym.is_global() if table.get_type() != "module" else not (
                sym.is_assigned() or sym.is_imported() or sym.is_namespace())
            if sym.is_referenced() and reads_global and sym.get_name() not in known:
                found.append((table.get_name(), sym.get_name()))
        for child in table.get_children():
            visit(child)

    visit(top)
    return found


def test_finds_an_undefined_name_and_passes_defined_ones():
    source = ("import os\nfrom math import pi\nX = 1\n\ndef f(a):\n    b = a + X + pi + len(os.sep)\n"
              "    return [c for c in range(b)] + [missing]\n\nclass K:\n    def g(self):\n        return f(1)\n")
    assert undefined_globals(source, "<case>") == [("f", "missing")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_undefined_global_names(path):
    source = path.read_text()
    assert undefined_globals(source, str(path)) == [], f"{path.relative_to(ROOT)} reads names it never defines"
