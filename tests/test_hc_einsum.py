"""deep_tile.tf32_hc_prenorm_gemm (DeepGEMM's hyper-connection pre-norm GEMM) and deep_tile.einsum /
fp8_einsum (DeepGEMM's einsum expressions): argument checks before anything runs, the CPU paths
against float64 (tests/gpu_hc_einsum_cases.py), the split partials, the kernels' contract and
builds for sm_90a (no spills, no stack), the DeepGEMM compat names, and (marker ``gpu``) the
kernels on a Hopper GPU against float64, in a child process with a timeout.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from conftest import compiler_params, run_child_cases
from deep_tile.hyper_connection import hc_prenorm_reference, tf32_hc_prenorm_gemm
from deep_tile.kernels import hc_prenorm as contract
from gpu_hc_einsum_cases import check_hc, hc_outputs, make_hc_inputs


# --------------------------------------------------------------------------------------------------
# The pre-norm GEMM: the CPU path
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(13, 24, 256), (1, 8, 64), (70, 32, 448), (5, 16, 640)])
@pytest.mark.parametrize("num_splits", [None, 1, 3, 16])
def test_cpu_path_matches_float64(m, n, k, num_splits):
    a, b = make_hc_inputs(m, n, k, seed=m + n)
    d, s = hc_outputs(m, n, num_splits, "cpu")
    assert tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits) is None
    result = check_hc(a, b, d, s, num_splits)
    assert result["ok"], result


def test_split_partials_sum_to_the_whole_and_follow_the_kernels_rule():
    a, b = make_hc_inputs(9, 24, 64 * 7, seed=4)
    d, s = hc_outputs(9, 24, 3, "cpu")
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=3)
    whole_d, whole_s = hc_prenorm_reference(a, b, None, torch.float64)
    assert torch.allclose(d.double().sum(0), whole_d, rtol=1e-5, atol=1e-3)
    assert torch.allclose(s.double().sum(0), whole_s, rtol=1e-6)
    # seven blocks over three splits: 3, 2, 2 (the first 7 % 3 splits take one more)
    ranges = [contract.k_blocks_of_split(7, 3, i) for i in range(3)]
    assert ranges == [range(0, 3), range(3, 5), range(5, 7)]
    first = a[:, :3 * 64].double() @ b[:, :3 * 64].double().T
    assert torch.allclose(d[0].double(), first, rtol=1e-5, atol=1e-3)
    # more splits than blocks: the splits past the blocks hold zeros
    a, b = make_hc_inputs(4, 8, 128, seed=5)
    d, s = hc_outputs(4, 8, 5, "cpu")
    tf32_hc_prenorm_gemm(a, b, d, s, num_splits=5)
    assert torch.count_nonzero(d[2:]) == 0 and torch.count_nonzero(s[2:]) == 0


def test_empty_m_writes_nothing():
    a, b = make_hc_inputs(0, 24, 128, seed=0)
    d, s = hc_outputs(0, 24, None, "cpu")
    assert tf32_hc_prenorm_gemm(a, b, d, s) is None
    # m = 0 returns before the kernel's own limits, as DeepGEMM does
    a, b = torch.zeros(0, 100, dtype=torch.bfloat16), torch.zeros(40, 100)
    tf32_hc_prenorm_gemm(a, b, torch.zeros(0, 40), torch.zeros(0))


def test_strided_views_are_taken():
    a, b = make_hc_inputs(6, 16, 192, seed=2, a_row_stride=256)
    assert a.stride(0) == 256
    d, s = hc_outputs(6, 16, None, "cpu", d_row_stride=20)
    tf32_hc_prenorm_gemm(a, b, d, s)
    assert check_hc(a, b, d, s, None)["ok"]
    full = d.as_strided((6, 20), (20, 1))
    assert torch.isnan(full[:, 16:]).all()


# --------------------------------------------------------------------------------------------------
# The pre-norm GEMM: argument checks
# --------------------------------------------------------------------------------------------------

def hc_bad_cases():
    a, b = make_hc_inputs(8, 24, 128, seed=0)
    d, s = hc_outputs(8, 24, None, "cpu")
    d3, s3 = hc_outputs(8, 24, 4, "cpu")
    yield "a not a tensor", (a.tolist(), b, d, s), {}, TypeError
    yield "num_splits float", (a, b, d3, s3), {"num_splits": 4.0}, TypeError
    yield "num_splits bool", (a, b, d3, s3), {"num_splits": True}, TypeError
    yield "a dtype", (a.float(), b, d, s), {}, ValueError
    yield "b dtype", (a, b.bfloat16(), d, s), {}, ValueError
    yield "d dtype", (a, b, d.bfloat16(), s), {}, ValueError
    yield "sqr_sum dtype", (a, b, d, s.double()), {}, ValueError
    yield "a 3-D", (a[None], b, d, s), {}, ValueError
    yield "a M-major", (a.t().contiguous().t(), b, d, s), {}, ValueError
    yield "b M-major", (a, b.t().contiguous().t(), d, s), {}, ValueError
    yield "d column stride", (a, b, d.t().contiguous().t(), s), {}, ValueError
    yield "sqr_sum strided", (a, b, d, torch.zeros(16)[::2]), {}, ValueError
    yield "k mismatch", (a, b[:, :64].contiguous(), d, s), {}, ValueError
    yield "d shape", (a, b, d[:, :16], s), {}, ValueError
    yield "split d without num_splits", (a, b, d3, s3), {}, ValueError
    yield "num_splits without split d", (a, b, d, s), {"num_splits": 4}, ValueError
    yield "num_splits mismatch", (a, b, d3, s3), {"num_splits": 3}, ValueError
    yield "num_splits zero", (a, b, d3[:0], s3[:0]), {"num_splits": 0}, ValueError
    yield "n 40", (a, torch.zeros(40, 128), torch.zeros(8, 40), s), {}, ValueError
    yield "n 12", (a, torch.zeros(12, 128), torch.zeros(8, 12), s), {}, ValueError
    yield "k 96", (a[:, :96].contiguous(), b[:, :96].contiguous(), d, s), {}, ValueError


@pytest.mark.parametrize("label,args,kwargs,error", list(hc_bad_cases()), ids=[c[0] for c in hc_bad_cases()])
def test_hc_bad_arguments_are_refused(label, args, kwargs, error):
    d, s = args[2], args[3]
    before = (d.clone(), s.clone()) if isinstance(d, torch.Tensor) else None
    with pytest.raises(error, match="tf32_hc_prenorm_gemm"):
        tf32_hc_prenorm_gemm(*args, **kwargs)
    if before is not None:  # nothing written
        assert torch.equal(before[0].isnan(), d.isnan()) and torch.equal(before[1].isnan(), s.isnan())


# --------------------------------------------------------------------------------------------------
# The pre-norm GEMM: contract and builds
# --------------------------------------------------------------------------------------------------

def test_hc_contract():
    assert contract.symbol(24) == "deep_tile_hc_prenorm_gemm_n24"
    for bad in (0, 12, 40, 64):
        with pytest.raises(ValueError):
            contract.symbol(bad)
    assert len(contract.ARGUMENT_KINDS) == 9
    for n in contract.NS:  # two CTAs per SM (227 KB each SM's usable shared memory, 1 KB reserved per CTA)
        assert 2 * (contract.smem_bytes(n) + 1024) <= 233472
    assert contract.grid(13, 1) == 1 and contract.grid(8192, 16) == 128 * 16 and contract.grid(0, 4) == 4
    for blocks in (1, 7, 112, 448):
        for splits in (1, 3, 16, 500):
            covered = [b for i in range(splits) for b in contract.k_blocks_of_split(blocks, splits, i)]
            assert covered == list(range(blocks))


HC_SYMBOLS = [contract.symbol(n) for n in contract.NS]


@pytest.mark.parametrize("name", compiler_params())
def test_hc_kernels_build_spill_free(name):
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), contract.defines(), HC_SYMBOLS[0], name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert set(HC_SYMBOLS) <= compiler.elf_functions(result.cubin)
    lines = [line for line in result.log.splitlines() if "bytes stack frame" in line]
    assert len(lines) == len(HC_SYMBOLS), result.log
    for line in lines:
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in line, result.log
    for line in result.log.splitlines():  # two CTAs of 160 threads per SM
        if "Used" in line and "registers" in line:
            assert int(line.split("Used ")[1].split(" registers")[0]) <= 200, result.log
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("no SASS tools here")
    bodies = {chunk.split()[0]: chunk for chunk in sass.split("Function : ")[1:]}
    for symbol in HC_SYMBOLS:  # eight k8 TF32 wgmmas per K block, in three unrolled copies of the step
        assert bodies[symbol].count("HGMMA") == 24, symbol


# --------------------------------------------------------------------------------------------------
# DeepGEMM's names
# --------------------------------------------------------------------------------------------------

def test_hc_compat_name_forwards():
    params = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
              for p in inspect.signature(deep_gemm.tf32_hc_prenorm_gemm).parameters.values()]
    assert params == [("a", None), ("b", None), ("d", None), ("sqr_sum", None), ("num_splits", None)]
    a, b = make_hc_inputs(7, 24, 128, seed=9)
    d, s = hc_outputs(7, 24, 2, "cpu")
    want_d, want_s = hc_outputs(7, 24, 2, "cpu")
    assert deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=2) is None
    deep_tile.tf32_hc_prenorm_gemm(a, b, want_d, want_s, num_splits=2)
    assert torch.equal(d, want_d) and torch.equal(s, want_s)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------

HC_GPU_CASES = (
    [dict(m=m, n=24, k=k, num_splits=splits)  # DeepGEMM's test shapes
     for m in (13, 137, 4096, 8192) for k in (28672, 7680, 7168) for splits in (None, 16)]
    + [dict(m=1, n=8, k=64), dict(m=64, n=16, k=128, num_splits=1), dict(m=65, n=32, k=192, num_splits=5),
       dict(m=200, n=24, k=640, num_splits=3, a_row_stride=704, d_row_stride=28),
       dict(m=129, n=32, k=7168, d_row_stride=36), dict(m=300, n=8, k=1024, num_splits=16)]
)


@pytest.mark.gpu
def test_gpu_hc_matches_float64():
    results = run_child_cases("gpu_hc_einsum_cases.py", "hc", HC_GPU_CASES, timeout=600)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_hc_is_deterministic_and_graph_capturable():
    results = run_child_cases("gpu_hc_einsum_cases.py", "hc_repeat_and_graph", [{}, {"num_splits": None}], timeout=300)
    assert all(r["ok"] for r in results), results
