"""tools/check_engines.py's machinery on a CPU without the engines: the stub modules that answer an
engine's uninstalled imports (and only an engine's), the report's verdicts and the independence of
its checks, and the checks' CPU branches where no CUDA stack is installed. The engines
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
    assert isinstance(Derived.model_rebuild(), tool._Stub)  # a class attribute too (pydantic's, at import)

    import abc

    class Both(stub.Model, abc.ABC):  # a stub base beside ABC (vLLM's metrics models)
        pass

    assert isinstance(Both.missing, tool._Stub)
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


def test_report_each_check_starts_clean(tool):
    """A check that fails after a wrapper made a call or changed a setting leaves neither to the
    next: the recorder's calls are dropped before each check, the settings set back after it."""
    recorder, setting = tool.Recorder(), {"value": 128}
    report = tool.Report(recorder=recorder, state=[(lambda: setting["value"], lambda v: setting.update(value=v))])
    with report.check("sglang", "fails after a call"):
        recorder.calls.append(("m_grouped_fp8_gemm_masked", {}))
        setting["value"] = 256
        raise RuntimeError("on purpose")
    assert setting["value"] == 128
    with report.check("sglang", "the next"):
        recorder.calls.append(("fp8_gemm", {}))
        assert recorder.take() == ["fp8_gemm"] and setting["value"] == 128
    assert [row[2].split(":")[0] for row in report.rows] == ["FAIL", "ok"]


NO_CUDA_STACK = r'''
import importlib.util, json, sys

sys.modules["cuda"] = None  # no CUDA stack: `import cuda.bindings` fails as where none is installed
spec = importlib.util.spec_from_file_location("check_engines_under_test", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
finder = tool.StubFinder()
tool._imported_by_engine = lambda: True  # the imports below stand for the engines' own


class NotInstalled:
    """`packaging` is not installed: the tool's finder answers it (it does, last on sys.meta_path)."""

    def find_spec(self, name, path=None, target=None):
        return finder.find_spec(name, path, target) if name == "packaging" else None


hide = NotInstalled()
sys.meta_path.insert(0, hide)
from packaging.version import Version  # as vLLM and SGLang compare torch's version at import
import packaging

assert "_vendor" in packaging.__file__ and Version("2.13.0") >= Version("2.8"), packaging.__file__
assert finder.stubbed and finder.stubbed[0].startswith("packaging (= the copy vendored in "), finder.stubbed
sys.meta_path.remove(hide)

import torch
import deep_tile
import deep_tile.compat.deepgemm as compat

recorder = tool.Recorder()
recorder.install(deep_tile)
compat.install_alias()
inputs = tool.Inputs("cpu")
report = tool.Report(finder, recorder, tool.deep_gemm_state(compat))
k, n, groups = 512, 256, 4
w, ws = inputs.weights(0, n, k)
w1, w1s = inputs.weights(groups, n, k)
for alignment in (128, 256):
    with report.check("vllm", f"psum layout, alignment {alignment}"):
        ends, m = tool._psum_case(inputs, [100, 0, 300, 1], alignment)
        a, sa = inputs.act(m, k)
        compat.set_mk_alignment_for_contiguous_layout(alignment)
        compat.m_grouped_fp8_gemm_nt_contiguous((a, sa), (w1, w1s), inputs.out(m, n), ends, use_psum_layout=True)
        compat.set_mk_alignment_for_contiguous_layout(128)
        assert recorder.calls[0][1]["rows"] == 401, recorder.calls
        tool._verify(inputs, recorder, ["m_grouped_fp8_gemm_psum"], None)
with report.check("sglang", "masked with the single-batch-overlap signal"):
    a, sa = inputs.act(groups, 200, k)
    masked_m = torch.tensor([5, 0, 200, 64], dtype=torch.int32)
    signal = torch.zeros(groups * 4, dtype=torch.int32)
    got = compat.m_grouped_fp8_gemm_nt_masked((a, sa), (w1, w1s), inputs.out(groups, 200, n), masked_m, 64,
                                              enable_overlap=True, signal=signal)
    assert got == (64, 1) and signal.view(groups, 4).tolist() == [[1, 0, 0, 0], [0] * 4, [1] * 4, [1, 0, 0, 0]]
    tool._verify(inputs, recorder, ["m_grouped_fp8_gemm_masked"], None)
with report.check("sglang", "fails on purpose after a call and new settings"):
    compat.set_mk_alignment_for_contiguous_layout(256)
    compat.set_compile_mode(1)
    compat.set_num_sms(7)
    compat.m_grouped_fp8_gemm_nt_masked((a, sa), (w1, w1s), inputs.out(groups, 200, n), masked_m, 64)
    raise RuntimeError("on purpose")
with report.check("vllm", "the next check"):
    assert compat.get_mk_alignment_for_contiguous_layout() == 128 and compat.get_compile_mode() == 0
    assert deep_tile.device.sms_limit() is None
    a, sa = inputs.act(96, k)
    compat.fp8_gemm_nt((a, sa), (w, ws), inputs.out(96, n))
    tool._verify(inputs, recorder, ["fp8_gemm"], None)
try:
    import deep_tile.gemm.launch  # the environment really has no CUDA stack
except deep_tile.cuda_stack.MissingCudaStackError:
    pass
else:
    raise AssertionError("deep_tile.gemm.launch imported without cuda.bindings")
print(json.dumps(report.rows))
'''


def test_cpu_checks_run_without_a_cuda_stack():
    """The CPU branches of the checks (psum layout, SGLang's overlap signal) run with no CUDA stack
    installed, with `packaging` not installed either, and a deliberately failed check does not
    fail the next one."""
    import json
    import subprocess

    run = subprocess.run([sys.executable, "-c", NO_CUDA_STACK, str(TOOL)], capture_output=True, text=True,
                         cwd=TOOL.parents[1], timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    outcomes = [(what, outcome.split(" |")[0]) for _, what, outcome in rows]
    assert outcomes == [("psum layout, alignment 128", "ok"), ("psum layout, alignment 256", "ok"),
                        ("masked with the single-batch-overlap signal", "ok"),
                        ("fails on purpose after a call and new settings", "FAIL: RuntimeError: on purpose"),
                        ("the next check", "ok")], outcomes


def test_indexer_stand_ins_refuse_what_deep_tile_refuses(tool):
    """The logits stand-ins fail on what deep_tile would refuse (an int flag, a 3-D context), and
    the pass-through check fails on a schedule that changed on its way."""
    import torch

    deep_tile = type("deep_tile_stand_in", (), {})()
    recorder = tool.Recorder()
    recorder.install(deep_tile)
    q = torch.zeros(4, 64, 128).to(torch.float8_e4m3fn)
    kv = (torch.zeros(9, 128).to(torch.float8_e4m3fn), torch.ones(9))
    ks, ke = torch.zeros(4, dtype=torch.int32), torch.full((4,), 9, dtype=torch.int32)
    logits = deep_tile.fp8_mqa_logits(q, kv, torch.ones(4, 64), ks, ke, False, 5)
    assert logits.shape == (4, 5) and recorder.calls[-1][1]["max_seqlen_k"] == 5
    with pytest.raises(AssertionError, match="not a bool"):
        deep_tile.fp8_mqa_logits(q, kv, torch.ones(4, 64), ks, ke, 5)
    lens = torch.tensor([[70, 71]], dtype=torch.int32)
    schedule = deep_tile.get_paged_mqa_logits_metadata(lens, 64, 132)
    with pytest.raises(AssertionError):
        deep_tile.get_paged_mqa_logits_metadata(lens[None], 64, 132)
    q4 = torch.zeros(1, 2, 64, 128).to(torch.float8_e4m3fn)
    cache = torch.zeros(3, 64, 1, 132, dtype=torch.uint8)
    table = torch.zeros(1, 2, dtype=torch.int32)
    deep_tile.fp8_paged_mqa_logits(q4, cache, torch.ones(2, 64), lens, table, schedule.clone(), 128)
    made, used = recorder.calls[-2][1], recorder.calls[-1][1]
    tool._schedule_came_through(made, used)
    deep_tile.fp8_paged_mqa_logits(q4, cache, torch.ones(2, 64), lens, table, schedule.flip(0).contiguous(), 128)
    with pytest.raises(AssertionError, match="changed"):
        tool._schedule_came_through(made, recorder.calls[-1][1])
