"""The shape of deep_tile's imports, read statically with :mod:`ast` (nothing here imports deep_tile).

The package is meant to be a layered house: imports point one way, from the top floors (the public
entry points, ``deep_tile.gemm``, ``deep_tile.ops``) down to the foundations (``deep_tile.common``,
``deep_tile.errors``, ``deep_tile.env``). A cycle -- even one closed by an import hidden inside a
function to dodge the circular-import error at load time -- means two modules cannot be understood,
tested or moved apart, and the load order decides which of them sees the other half-initialised.
And a module's private names (``_run``, ``_num_sms_limit``) are its own: a module that reaches into
another's privates ties itself to details the owner is free to change without notice.

Enforced here:

1. The module graph has no cycles. Every import statement anywhere in a file counts (module level
   and inside functions and methods; ``import x``, ``from x import y``, relative imports resolved),
   and so does ``importlib.import_module("deep_tile.x")`` with a literal string. ``from deep_tile
   import gemm`` is an edge to ``deep_tile.gemm`` when ``gemm`` is a submodule, else to the package
   ``deep_tile``. Imports under ``if TYPE_CHECKING:`` do not count (annotations only), and neither
   does ``importlib.import_module(variable)`` (the package's lazy attribute loader).
2. Every module has its place in one of :data:`LAYERS` (entry points, public API, custom ops, host
   paths, planning, JIT, kernel contracts/checks/device facts, leaves), and imports point to the
   importer's own layer or a lower one: none runs from a lower layer up to a higher one. (Folders
   are not layers: ``deep_tile/`` holds both the public API and the leaves.)
3. No module imports a private name (``_x``, not a ``__dunder__``) of another deep_tile module:
   ``from deep_tile.x import _name``, or ``mod._name`` / ``getattr(mod, "_name")`` where ``mod`` is a
   deep_tile module bound by an import in that file.
4. ``deep_tile.testing`` (helpers for the tests and benchmarks) may import anything in deep_tile,
   but nothing outside ``deep_tile/testing`` imports it: the library never imports its test helpers.

Failures name every cycle with the file:line of each import that makes it, so they read plainly.
The checker is tested on small synthetic packages first, so it cannot pass by finding nothing.
"""
from __future__ import annotations

import ast
import functools
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "deep_tile"


# --------------------------------------------------------------------------------------------------
# Reading the imports
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """One import of a module of the package, as written in one file."""

    source: str          # importing module, e.g. "deep_tile.gemm"
    target: str          # imported module, e.g. "deep_tile.select.api"
    line: int
    names: tuple         # names taken by ``from target import ...`` (empty for ``import target``)
    type_checking: bool  # under ``if TYPE_CHECKING:``


def discover_modules(root: Path) -> dict[str, Path]:
    """Map each module of the package at ``root`` (a folder with ``__init__.py``) to its file.

    Names are dotted and start with the folder's name: ``deep_tile/native/loader.py`` is
    ``deep_tile.native.loader``, ``deep_tile/native/__init__.py`` is ``deep_tile.native``.
    """
    root = Path(root)
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name,) + path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module that ``from <level dots><name> import ...`` in ``module`` means."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known_prefix(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the package (None if none is)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _is_type_checking_test(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` (the guard of annotation-only imports)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return False


def _is_import_module_call(node: ast.Call) -> bool:
    """``importlib.import_module(...)`` or a bare ``import_module(...)``."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id == "import_module"


class _ImportCollector(ast.NodeVisitor):
    """Collects the imports of package modules in one module, remembering TYPE_CHECKING guards."""

    def __init__(self, module: str, modules: dict[str, Path]):
        self.module = module
        self.modules = modules
        self.is_package = _is_package(module, modules)
        self.type_checking = 0
        self.found: list[Import] = []

    def _add(self, target: str, line: int, names=()):
        if target != self.module:  # a module naming itself is no edge
            self.found.append(Import(self.module, target, line, tuple(names), self.type_checking > 0))

    def visit_If(self, node: ast.If):
        if _is_type_checking_test(node.test):
            self.visit(node.test)
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import):
        for alias in node.names:
            target = _known_prefix(alias.name, self.modules)
            if target is not None:
                self._add(target, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom):
        base = _resolve_relative(self.module, self.is_package, node.level, node.module)
        if _known_prefix(base, self.modules) is None:
            return  # not the package (os, torch, ...)
        # ``from pkg import sub`` is an edge to the submodule; other names are an edge to ``base``.
        plain = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if alias.name != "*" and sub in self.modules:
                self._add(sub, node.lineno)
            else:
                plain.append(alias.name)
        if plain:
            self._add(_known_prefix(base, self.modules), node.lineno, plain)

    def visit_Call(self, node: ast.Call):
        if _is_import_module_call(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                target = _known_prefix(arg.value, self.modules)
                if target is not None:
                    self._add(target, node.lineno)
        self.generic_visit(node)


def _parse(path: Path) -> ast.Module:
    """The syntax tree of one file (cached while the file is unchanged)."""
    stat = Path(path).stat()
    return _parse_cached(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _parse_cached(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def collect_imports(root: Path) -> list[Import]:
    """Every import of a package module by a package module, with line numbers."""
    modules = discover_modules(root)
    found = []
    for module, path in modules.items():
        collector = _ImportCollector(module, modules)
        collector.visit(_parse(path))
        found.extend(collector.found)
    return found


def module_graph(root: Path) -> dict[str, dict[str, list[int]]]:
    """``{importer: {imported: [line, ...]}}`` over all modules of the package at ``root``.

    Every module is a key (a module importing nothing maps to ``{}``); TYPE_CHECKING-only imports
    are left out.
    """
    graph: dict[str, dict[str, list[int]]] = {module: {} for module in discover_modules(root)}
    for imp in collect_imports(root):
        if not imp.type_checking:
            graph[imp.source].setdefault(imp.target, []).append(imp.line)
    return graph


def _where(modules: dict[str, Path], module: str, line: int) -> str:
    """``deep_tile/native/loader.py:12``: the file of ``module``, from the package's parent."""
    path = module.replace(".", "/") + ("/__init__.py" if _is_package(module, modules) else ".py")
    return f"{path}:{line}"


# --------------------------------------------------------------------------------------------------
# Cycles
# --------------------------------------------------------------------------------------------------

def find_cycles(graph: dict[str, dict]) -> list[list[str]]:
    """The strongly connected components of ``graph`` that hold a cycle (Tarjan), each sorted.

    ``graph`` maps a node to a dict whose keys are the nodes it points at. A component holds a cycle
    when it has more than one node, or one node with an edge to itself.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0

    def neighbours(node):
        return sorted(n for n in graph.get(node, {}) if n in graph)

    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: (node, iterator over its neighbours)
        work = [(start, iter(neighbours(start)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(neighbours(nxt))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, {}):
                    components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph: dict[str, dict], component: list[str]) -> list[str]:
    """One shortest cycle through the first node of ``component``, as ``[a, b, ..., a]``."""
    members = set(component)
    start = component[0]
    parent = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, {})):
            if nxt not in members:
                continue
            if nxt == start:
                path = []
                while node is not None:
                    path.append(node)
                    node = parent[node]
                return path[::-1] + [start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return component + component[:1]


def describe_cycles(graph: dict[str, dict], cycles: list[list[str]], evidence) -> str:
    """A plain report: per cycle, one shortest loop and every edge inside it with its evidence.

    ``evidence(source, target, items)`` turns the value stored on an edge into lines of text.
    """
    out = []
    for number, component in enumerate(cycles, 1):
        loop = shortest_cycle(graph, component)
        out.append(f"cycle {number}: {len(component)} nodes, e.g. {' -> '.join(loop)}")
        members = set(component)
        for source in component:
            for target in sorted(graph[source]):
                if target in members:
                    for line in evidence(source, target, graph[source][target]):
                        out.append(f"    {line}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# Private names and the testing helpers
# --------------------------------------------------------------------------------------------------

def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (``__version__``, ``__all__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _attribute_chain(node: ast.expr) -> tuple[ast.expr, list[str]]:
    """``<base>.b.c`` as ``(base, ["b", "c"])``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return node, parts[::-1]


def _dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` as ``"a.b.c"``; None when it is not a chain of plain names."""
    base, parts = _attribute_chain(node)
    return ".".join([base.id] + parts) if isinstance(base, ast.Name) else None


def _literal_module(node: ast.expr) -> str | None:
    """The module named by ``importlib.import_module("m")``, ``sys.modules.get("m")`` or
    ``sys.modules["m"]`` (a literal string); None for anything else."""
    arg = None
    if isinstance(node, ast.Call) and node.args:
        is_get = (isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and _dotted_name(node.func.value) in ("sys.modules", "modules"))
        if is_get or _is_import_module_call(node):
            arg = node.args[0]
    elif isinstance(node, ast.Subscript) and _dotted_name(node.value) in ("sys.modules", "modules"):
        arg = node.slice
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _module_aliases(tree: ast.Module, module: str, modules: dict[str, Path]) -> dict[str, str]:
    """Names bound to package modules anywhere in the file (``import deep_tile.x as m``,
    ``from deep_tile import x``, ``from deep_tile.pkg import x``, ``import deep_tile.x``)."""
    is_package = _is_package(module, modules)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _known_prefix(alias.name, modules) is None:
                    continue
                if alias.asname:
                    if alias.name in modules:
                        aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    if top in modules:
                        aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    aliases[alias.asname or alias.name] = sub
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            named = _literal_module(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if named in modules:
                for target in targets:
                    if isinstance(target, ast.Name):
                        aliases[target.id] = named
    return aliases


def _module_of(base: ast.expr, aliases: dict[str, str], modules: dict[str, Path]) -> str | None:
    """The package module an expression stands for: a name bound by an import (or by
    ``m = sys.modules.get("deep_tile.x")``), or a literal ``import_module``/``sys.modules`` lookup."""
    if isinstance(base, ast.Name):
        return aliases.get(base.id)
    named = _literal_module(base)
    return named if named in modules else None


def private_imports(root: Path) -> list[str]:
    """Every use of another package module's private name, as ``"file:line: text"``.

    Looks at ``from <module> import _name`` (relative too), and at ``m._name`` and
    ``getattr(m, "_name")`` where ``m`` is bound to a package module in the file by an import or
    by ``m = sys.modules.get("deep_tile.x")`` / ``importlib.import_module("deep_tile.x")``
    (``m.sub._name`` follows submodules). Imports under TYPE_CHECKING count here too. Names are
    matched file-wide, not per scope.
    """
    modules = discover_modules(root)
    found = []
    for imp in collect_imports(root):
        for name in imp.names:
            if is_private(name):
                found.append(f"{_where(modules, imp.source, imp.line)}: from {imp.target} import {name}")
    for module, path in modules.items():
        tree = _parse(path)
        aliases = _module_aliases(tree, module, modules)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                base, chain = _attribute_chain(node)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "getattr" and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                base, chain = _attribute_chain(node.args[0])
                chain = chain + [node.args[1].value]
            else:
                continue
            owner = _module_of(base, aliases, modules)
            if owner is None:
                continue
            rest = chain
            while rest and f"{owner}.{rest[0]}" in modules:  # m.sub.name: walk down submodules
                owner, rest = f"{owner}.{rest[0]}", rest[1:]
            if rest and owner != module and is_private(rest[0]):
                shown = base.id if isinstance(base, ast.Name) else ast.unparse(base)
                text = ".".join([shown] + chain[: len(chain) - len(rest) + 1])
                found.append(f"{_where(modules, module, node.lineno)}: {text} ({owner}.{rest[0]})")
    return sorted(set(found), key=_sort_key)


def _sort_key(entry: str):
    path, line, _ = entry.split(":", 2)
    return path, int(line), entry


def library_imports_of_testing(root: Path) -> list[str]:
    """Imports of ``<package>.testing`` by modules outside ``<package>/testing`` (any import,
    TYPE_CHECKING too), as ``"file:line: source imports target"``."""
    modules = discover_modules(root)
    testing = f"{Path(root).name}.testing"
    inside = lambda name: name == testing or name.startswith(testing + ".")  # noqa: E731
    return [f"{_where(modules, imp.source, imp.line)}: {imp.source} imports {imp.target}"
            for imp in collect_imports(root) if inside(imp.target) and not inside(imp.source)]


def _module_edge_lines(modules):
    def evidence(source, target, lines):
        return [f"{_where(modules, source, line)}: {source} imports {target}" for line in lines]
    return evidence


def write_package(base: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: source}`` under ``base/fakepkg`` and return the package folder."""
    root = base / "fakepkg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_finds_cycle_closed_inside_a_function(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from fakepkg import b\n",
        "b.py": "def f():\n    from fakepkg.a import thing\n    return thing\n",
        "c.py": "import fakepkg.a\n",
    })
    graph = module_graph(root)
    assert graph["fakepkg.a"] == {"fakepkg.b": [1]}
    assert graph["fakepkg.b"] == {"fakepkg.a": [2]}
    assert find_cycles(graph) == [["fakepkg.a", "fakepkg.b"]]
    report = describe_cycles(graph, find_cycles(graph), _module_edge_lines(discover_modules(root)))
    assert "a.py:1: fakepkg.a imports fakepkg.b" in report
    assert "b.py:2: fakepkg.b imports fakepkg.a" in report


def test_checker_resolves_relative_submodule_and_literal_dynamic_imports(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "import importlib\n"
                       "def load(name):\n    return importlib.import_module(name)\n"  # not counted
                       "importlib.import_module('fakepkg.c')\n",                        # counted
        "a.py": "from . import b\nfrom .b import VALUE\nfrom fakepkg import NAME\n",
        "b.py": "import fakepkg.sub.m as m\n",
        "c.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from fakepkg.a import A\nelse:\n    from fakepkg.b import B\n",
        "sub/__init__.py": "from .m import X\nfrom .. import c\nfrom ..sub import m\n",
        "sub/m.py": "X = 1\n",
    })
    graph = module_graph(root)
    assert graph["fakepkg"] == {"fakepkg.c": [4]}
    assert graph["fakepkg.a"] == {"fakepkg.b": [1, 2], "fakepkg": [3]}
    assert graph["fakepkg.b"] == {"fakepkg.sub.m": [1]}
    assert graph["fakepkg.c"] == {"fakepkg.b": [5]}  # the TYPE_CHECKING import is left out
    assert graph["fakepkg.sub"] == {"fakepkg.sub.m": [1, 3], "fakepkg.c": [2]}
    assert graph["fakepkg.sub.m"] == {}
    assert find_cycles(graph) == []


def test_checker_finds_private_imports(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "__version__ = '1'\n",
        "a.py": "_hidden = 1\n_x = 2\nprint(_hidden)\n",
        "b.py": "from fakepkg.a import _hidden\n"
                "from fakepkg import __version__\n"
                "import fakepkg.a as mod\n"
                "def f():\n    from fakepkg import a\n    return a._x + mod._hidden + mod.__doc__\n"
                "getattr(mod, '_x')\n",
        "c.py": "from .a import _x as public\nimport fakepkg.sub.m\nfakepkg.sub.m._y\n",
        "d.py": "from fakepkg import sub\n_own = 1\nsub.m.public\nprint(_own)\n",
        "e.py": "import importlib, sys\n"
                "def f():\n    dev = sys.modules.get('fakepkg.a')\n    return dev._x\n"
                "importlib.import_module('fakepkg.a')._hidden\n"
                "sys.modules['os']._private\n",
        "sub/__init__.py": "",
        "sub/m.py": "_y = 1\npublic = 2\n",
    })
    found = [entry.split("/", 1)[-1] for entry in private_imports(root)]
    assert found == [
        "b.py:1: from fakepkg.a import _hidden",
        "b.py:6: a._x (fakepkg.a._x)",
        "b.py:6: mod._hidden (fakepkg.a._hidden)",
        "b.py:7: mod._x (fakepkg.a._x)",
        "c.py:1: from fakepkg.a import _x",
        "c.py:3: fakepkg.sub.m._y (fakepkg.sub.m._y)",
        "e.py:4: dev._x (fakepkg.a._x)",
        "e.py:5: importlib.import_module('fakepkg.a')._hidden (fakepkg.a._hidden)",
    ], found


def test_checker_finds_library_imports_of_testing(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "def f():\n    from fakepkg.testing import helper\n",
        "b.py": "from fakepkg import testing\n",
        "testing/__init__.py": "from fakepkg import a\n",
        "testing/helper.py": "from fakepkg.testing import other\nimport fakepkg.b\n",
        "testing/other.py": "",
    })
    found = [entry.split("/", 1)[-1] for entry in library_imports_of_testing(root)]
    assert sorted(found) == ["a.py:2: fakepkg.a imports fakepkg.testing.helper",
                             "b.py:1: fakepkg.b imports fakepkg.testing"], found


def test_real_graph_is_read():
    """A parser that silently finds nothing would pass every check below: it must not."""
    graph = module_graph(PACKAGE)
    edges = sum(len(targets) for targets in graph.values())
    assert len(graph) > 30, sorted(graph)
    assert edges > 60, edges
    assert {"deep_tile", "deep_tile.gemm", "deep_tile.native.loader", "deep_tile.testing"} <= set(graph)


# --------------------------------------------------------------------------------------------------
# The rules, on the real package
# --------------------------------------------------------------------------------------------------

def test_module_imports_have_no_cycles():
    graph = module_graph(PACKAGE)
    cycles = find_cycles(graph)
    assert not cycles, (
        "deep_tile modules import each other in a cycle (imports inside functions count; "
        "move the shared piece down a layer):\n"
        + describe_cycles(graph, cycles, _module_edge_lines(discover_modules(PACKAGE))))


LAYERS = (
    ("entry points and test helpers", ("deep_tile", "deep_tile.__main__", "deep_tile.testing", "deep_tile.testing.*",
                                       "deep_tile.compat", "deep_tile.compat.*")),
    ("training layers, tensor parallelism", ("deep_tile.nn", "deep_tile.nn.*", "deep_tile.tp")),
    ("public API", ("deep_tile.gemm", "deep_tile.gemm.dense", "deep_tile.gemm.grouped", "deep_tile.gemm.k_grouped",
                    "deep_tile.gemm.warmup", "deep_tile.casts", "deep_tile.casts.quant", "deep_tile.casts.cast_transpose",
                    "deep_tile.einsums")),
    ("custom ops", ("deep_tile.ops",)),
    ("host paths", ("deep_tile.native", "deep_tile.native.*", "deep_tile.gemm.launch", "deep_tile.casts.quant_impl",
                    "deep_tile.casts.cast_transpose_impl", "deep_tile.gemm.moe_layout", "deep_tile.casts.swiglu",
                    "deep_tile.attention", "deep_tile.paged_attention",
                    "deep_tile.hyper_connection", "deep_tile.bf16")),
    ("planning", ("deep_tile.gemm.planner", "deep_tile.gemm.plan_index", "deep_tile.select", "deep_tile.select.*",
                  "deep_tile.gemm.layouts", "deep_tile.casts.quant_kernels", "deep_tile.casts.cast_transpose_kernels",
                  "deep_tile.gemm.tma")),
    ("JIT", ("deep_tile.jit", "deep_tile.jit.*")),
    ("kernel contracts, checks, device facts", ("deep_tile.kernels", "deep_tile.kernels.*", "deep_tile.gemm.checks",
                                                 "deep_tile.device", "deep_tile.pdl", "deep_tile.reference",
                                                 "deep_tile.casts.cast_transpose_ref")),
    ("leaves", ("deep_tile.env", "deep_tile.errors", "deep_tile.common", "deep_tile.arch", "deep_tile.phases",
                "deep_tile.disk", "deep_tile.cuda_stack", "deep_tile.json_records", "deep_tile.gemm.problem",
                "deep_tile.gemm.kernel_args")),
)
"""The layers of the house, top to bottom: a module imports from its own layer or a lower one.
A new module is placed here deliberately (an unplaced one fails the test)."""


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module`` (``pkg.*`` matches every module below ``pkg``)."""
    found = [i for i, (_, patterns) in enumerate(LAYERS) for pattern in patterns
             if module == pattern or (pattern.endswith(".*") and module.startswith(pattern[:-1]))]
    return found[0] if len(found) == 1 else None


def test_every_module_has_one_layer():
    unplaced = [module for module in discover_modules(PACKAGE) if layer_of(module) is None]
    assert not unplaced, f"modules in no layer (or in two) of tests/test_import_graph.py LAYERS: {unplaced}"


def test_imports_point_down_the_layers():
    modules = discover_modules(PACKAGE)
    upward = []
    for source, targets in module_graph(PACKAGE).items():
        for target, lines in targets.items():
            if layer_of(target) is not None and layer_of(source) is not None and layer_of(target) < layer_of(source):
                upward += [f"{_where(modules, source, line)}: {source} ({LAYERS[layer_of(source)][0]}) imports "
                           f"{target} ({LAYERS[layer_of(target)][0]})" for line in lines]
    assert not upward, "imports from a lower layer up to a higher one:\n    " + "\n    ".join(upward)


def test_the_layer_rule_can_fail():
    """An import from the leaves up to the public API is caught (the rule is not vacuous)."""
    assert layer_of("deep_tile.env") > layer_of("deep_tile.gemm")
    assert layer_of("deep_tile.testing.data") == 0 and layer_of("deep_tile.nonexistent") is None


def test_no_module_uses_another_modules_private_names():
    found = private_imports(PACKAGE)
    assert not found, (
        "deep_tile modules use private names of other modules (make the name public, or move "
        "the code that needs it into its owner):\n    " + "\n    ".join(found))


def test_library_does_not_import_testing_helpers():
    found = library_imports_of_testing(PACKAGE)
    assert not found, (
        "deep_tile.testing holds helpers for tests and benchmarks; the library must not import "
        "it:\n    " + "\n    ".join(found))
