"""tools/check_engines.py's machinery on a CPU without the engines: the stub modules that answer an
engine's uninstalled imports (and only an engine's), and the report's verdicts. The engines
themselves are checked by running the tool (docs/deepgemm-compat.md), not here: it downloads them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "check_engines.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("check_engines_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stub_values_behave_as_import_time_code_needs(tool):
    stub = tool._Stub("pkg")
    assert isinstance(stub.a.b.c, tool._Stub) and not stub and list(stub) == [] and stub["x"] is stub

    def f():
        return 3

    assert stub.decorator(f) is f  # a decorator hands the function back
    assert isinstance(stub.factory(1, x=2), tool._Stub)
    some_type = stub.SomeType
    assert not isinstance(3, some_type) and (some_type | None) is some_type  # annotations, isinstance

    class Derived(stub.Base, frozen=True):  # class keywords, as msgspec.Struct takes
        def value(self):
            return 7

    d = Derived(1, 2, key=3)
    assert d.value() == 7 and isinstance(d.missing, tool._Stub) and Derived[int] is Derived
    with pytest.raises(AttributeError):
        stub.__wrapped__  # inspect.unwrap must not loop


def test_finder_stubs_only_what_an_engine_imports(tool, monkeypatch):
    finder = tool.StubFinder()
    name = "surely_not_installed_module_xyz"
    assert finder.find_spec(name) is None  # imported from here (not an engine): ImportError stays
    monkeypatch.setattr(tool, "_imported_by_engine", lambda: True)
    spec = finder.find_spec(name)
    module = finder.create_module(spec)
    assert isinstance(module.anything, tool._Stub) and finder.stubbed == [name]
    for never in ("torch", "deep_gemm", "libtpu", "json"):
        assert finder.find_spec(never) is None
    assert finder.find_spec("vllm.some_module") is None  # an engine's own .py module is never a stub
    assert finder.find_spec("vllm._C_missing") is not None  # its missing compiled extension is
    alias = finder.create_module(finder.find_spec("regex"))
    assert alias is sys.modules.get("re") or alias.__name__ == "re"


def test_report_verdicts(tool):
    finder = tool.StubFinder()
    finder.stubbed.append("vllm._C_stable_libtorch")
    report = tool.Report(finder)
    with report.check("vllm", "works"):
        pass
    with report.check("vllm", "breaks"):
        raise ValueError("bad")
    with report.check("vllm", "needs the extension"):
        raise AttributeError("'_OpNamespace' '_C' object has no attribute 'op'")
    with report.check("sglang", "same error, extension not stubbed"):
        raise AttributeError("'_OpNamespace' '_C' object has no attribute 'op'")
    outcomes = [row[2].split(":")[0] for row in report.rows]
    assert outcomes == ["ok", "FAIL", "skip", "FAIL"] and report.failures == 2
