"""Programmatic dependent launch (deep_tile.pdl): the switch, the launch attribute both host paths
set, the device code's wait, and (marker ``gpu``) chains whose every kernel reads what the kernel
before it wrote, with PDL on and off, eagerly on side streams and in CUDA graphs
(tests/gpu_pdl_cases.py, in a child process)."""
from __future__ import annotations

import re

import pytest

import deep_tile
from conftest import ROOT, run_child_cases
from deep_tile import env, pdl


@pytest.fixture
def fresh_pdl(monkeypatch):
    """deep_tile.pdl as at process start (setting undecided, no listeners), restored afterwards."""
    monkeypatch.setattr(pdl, "_enabled", None)
    monkeypatch.setattr(pdl, "_listeners", [])
    monkeypatch.delenv("DEEP_TILE_PDL", raising=False)
    yield pdl


def test_on_by_default(fresh_pdl):
    assert env.pdl() is True
    assert deep_tile.get_pdl() is True


@pytest.mark.parametrize("value, expected", [("0", False), ("off", False), ("1", True), ("", True)])
def test_environment_decides_once(fresh_pdl, monkeypatch, value, expected):
    monkeypatch.setenv("DEEP_TILE_PDL", value)
    assert pdl.get_pdl() is expected
    monkeypatch.setenv("DEEP_TILE_PDL", "1" if value == "0" else "0")  # read once: later changes do nothing
    assert pdl.get_pdl() is expected


def test_bad_environment_value_names_the_variable(fresh_pdl, monkeypatch):
    monkeypatch.setenv("DEEP_TILE_PDL", "maybe")
    with pytest.raises(ValueError, match="DEEP_TILE_PDL"):
        pdl.get_pdl()


def test_set_pdl_overrides_and_notifies(fresh_pdl):
    seen = []
    pdl.add_pdl_listener(seen.append)
    pdl.add_pdl_listener(seen.append)  # registered once
    deep_tile.set_pdl(False)
    assert deep_tile.get_pdl() is False
    deep_tile.set_pdl(True)
    assert deep_tile.get_pdl() is True and seen == [False, True]


@pytest.mark.parametrize("bad", [1, None, "on"])
def test_set_pdl_takes_only_a_bool(fresh_pdl, bad):
    with pytest.raises(TypeError, match="set_pdl"):
        deep_tile.set_pdl(bad)
    assert pdl.get_pdl() is True


def _attributes(config) -> dict:
    runtime = pytest.importorskip("deep_tile.jit.runtime")
    ids = runtime.driver().CUlaunchAttributeID
    found = {}
    for attr in list(config.attrs)[:config.numAttrs]:
        if attr.id == ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            found["pdl"] = attr.value.programmaticStreamSerializationAllowed
        elif attr.id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            found["cluster"] = attr.value.clusterDim.x
    return found


@pytest.mark.parametrize("cluster, with_pdl, expected", [
    (1, False, {}), (1, True, {"pdl": 1}), (2, False, {"cluster": 2}), (2, True, {"cluster": 2, "pdl": 1})])
def test_python_launch_config_carries_the_attribute(cluster, with_pdl, expected):
    runtime = pytest.importorskip("deep_tile.jit.runtime")
    config = runtime.Kernel._config(132, 384, 1024, 0, cluster, with_pdl)
    assert _attributes(config) == expected


def test_both_host_paths_launch_with_the_setting():
    """The Python launcher and the cast launcher pass get_pdl(); the native launch reads its copy
    (pushed by the loader) and sets the same attribute."""
    for path in ("deep_tile/gemm/launch.py", "deep_tile/casts/quant_kernels.py"):
        assert "pdl=get_pdl()" in (ROOT / path).read_text(), path
    launch_cpp = (ROOT / "deep_tile/native/csrc/launch.cpp").read_text()
    assert "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION" in launch_cpp and "pdl()" in launch_cpp
    loader = (ROOT / "deep_tile/native/loader.py").read_text()
    assert "loaded.set_pdl(pdl.get_pdl())" in loader and "pdl.add_pdl_listener(push_pdl)" in loader


def _body_before(source: str, marker: str) -> str:
    index = source.find(marker)
    assert index >= 0, marker
    return source[:index]


def test_gemm_kernel_waits_before_any_global_access():
    """In the kernel body, nothing before the wait reads global memory: the code before it is the
    tensor-map prefetch, the barrier init and the L2 prefetch of the weights (no loads, no TMA
    copies into shared memory, no group table)."""
    body = (ROOT / "include/deep_tile/kernels/fp8_gemm_sm90.cuh").read_text()
    kernel = body[body.index("DT_DEVICE void fp8_gemm_sm90("):]
    before = _body_before(kernel, "ptx::grid_dependency_wait();")
    assert "tma_prefetch_descriptor" in before and "mbarrier_init" in before and "prefetch_first_weights" in before
    for forbidden in ("__ldg", "GroupTable", "producer_loop", "consumer_loop", "read_table", "load_ahead",
                      "tma_load", "cp_async", "b_scale["):
        assert forbidden not in before, forbidden
    producer = (ROOT / "include/deep_tile/kernels/fp8_gemm_producer.cuh").read_text()
    prefetch = producer[producer.index("DT_DEVICE void prefetch_first_weights("):
                        producer.index("DT_DEVICE void producer_loop(")]
    assert re.findall(r"ptx::\w+", prefetch) == ["ptx::tma_prefetch_2d_l2"] * 2


def test_cast_kernels_wait_first():
    source = (ROOT / "include/deep_tile/kernels/cast_fp8.cuh").read_text()
    for name in ("per_token_cast", "per_block_cast"):
        body = source[source.index(f"DT_DEVICE void {name}("):]
        body = body[:body.index("\n}\n")]
        before = _body_before(body, "ptx::grid_dependency_wait();").split("{", 1)[1]  # after the signature
        for forbidden in (r"\bx\[", r"\bsrc\b", r"\bq\[", r"\bscales\[", r"\bdst\b"):
            assert not re.search(forbidden, before), (name, forbidden)


CHAINS = [
    dict(m=64, n=2048, k=7168),                       # split-K, then a persistent small tile
    dict(m=1024, n=2048, k=7168, config2="256x128:mcA"),  # a persistent large tile, then 2-CTA multicast
    dict(m=200, n=4096, k=1024, config2="64x64:k2"),  # partial tiles; a forced split-K
]


@pytest.mark.gpu
def test_both_host_paths_capture_programmatic_edges_only_when_on():
    cases = [dict(pdl=on, path=path) for on in (True, False) for path in ("native", "python")]
    for r in run_child_cases("gpu_pdl_cases.py", "graph_edge_types", cases, timeout=600):
        # GEMM -> cast -> GEMM: two edges, each programmatic exactly when PDL is on.
        assert len(r["edge_types"]) == 2 and r["same"], r
        assert all((t == r["programmatic"]) == r["pdl"] for t in r["edge_types"]), r
        assert r["native_calls"] == (2 if r["path"] == "native" else 0), r


@pytest.mark.gpu
@pytest.mark.parametrize("on", [True, False], ids=["pdl_on", "pdl_off"])
def test_chains_read_what_the_kernel_before_wrote(on):
    results = run_child_cases("gpu_pdl_cases.py", "pdl_chain", [dict(pdl=on, **c) for c in CHAINS], timeout=600)
    problems = []
    for case, result in zip(CHAINS, results):
        assert result["pdl"] is on
        for mode in ("eager", "graph"):
            for i, r in enumerate(result[mode]):
                label = f"{case} {mode} round {i}"
                if not r["casts_bitwise"]:
                    problems.append(f"{label}: a cast differs from the CPU cast")
                if mode == "eager" and not r["other_stream_bitwise"]:
                    problems.append(f"{label}: the GEMM on the other stream differs")
                for name in ("y", "z", "ze"):
                    g = r[name]
                    if g["nan"] or not g["untouched"] or g["diff"] >= 1e-3 or g["rel"] >= 1e-2:
                        problems.append(f"{label}: {name} {g}")
    assert not problems, "\n".join(problems)
