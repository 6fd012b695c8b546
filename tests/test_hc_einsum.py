"""deep_tile.tf32_hc_prenorm_gemm (DeepGEMM's hyper-connection pre-norm GEMM) and deep_tile.einsum /
fp8_einsum (DeepGEMM's einsum expressions): argument checks before anything runs, the CPU paths
against float64 (tests/gpu_hc_einsum_cases.py), the split partials, the kernels' contract and
builds for sm_90a (no spills, no stack), the DeepGEMM compat names, and (marker ``gpu``) the
kernels on a Hopper GPU against float64, in a child process with a timeout.
"""
from __future__ import annotations

import dataclasses
import inspect

import os

import pytest
import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from conftest import assert_spill_free, compiler_params, run_child_cases
from deep_tile.hyper_connection import hc_prenorm_reference, tf32_hc_prenorm_gemm
from deep_tile.einsums import BH_PATHS, EXPRESSIONS, FP8_PATHS, einsum, fp8_einsum
from deep_tile.kernels import einsum as einsum_contract
from deep_tile.kernels import hc_prenorm as contract
from gpu_hc_einsum_cases import (check_hc, einsum_case, fp8_einsum_case, hc_outputs, make_einsum_inputs,
                                 make_hc_inputs, quantize_fp8)


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
    assert len(contract.ARGUMENT_KINDS) == 10
    for n in contract.NS:  # CTAS_PER_SM CTAs per SM (228 KB of shared memory per SM, 1 KB reserved per CTA)
        for groups in contract.GROUP_CHOICES:
            assert contract.CTAS_PER_SM * (contract.smem_bytes(n, groups) + 1024) <= 233472
            assert contract.smem_bytes(n, groups) <= 232448
    assert contract.threads(1) == 160 and contract.block_m(1) == 64 and contract.defines(1)["DT_HC_MATH_GROUPS"] == 1
    with pytest.raises(ValueError):
        contract.defines(3)
    assert contract.THREADS == 128 * contract.MATH_GROUPS + 32 and contract.BLOCK_M == 64 * contract.MATH_GROUPS
    assert contract.num_items(13, 1) == 1 and contract.num_items(8192, 16) == 8192 // contract.BLOCK_M * 16
    assert contract.num_items(0, 4) == 4
    assert contract.grid(13, 1, 132) == 1 and contract.grid(8192, 16, 132) == contract.CTAS_PER_SM * 132
    assert len(contract.REDUCE_ARGUMENT_KINDS) == 10
    assert contract.reduce_grid(13, 24, 132) == 2 and contract.reduce_grid(8192, 24, 132) == 4 * 132
    assert contract.reduce_grid(13, 24, 132, 16) == 21
    for blocks in (1, 7, 112, 448):
        for splits in (1, 3, 16, 500):
            covered = [b for i in range(splits) for b in contract.k_blocks_of_split(blocks, splits, i)]
            assert covered == list(range(blocks))


def test_parts_cover_each_split():
    for blocks in (1, 7, 112, 448):
        for splits in (1, 3, 16):
            for sub in (1, 2, 7):
                for split in range(splits):
                    pieces = [b for p in range(split * sub, split * sub + sub)
                              for b in contract.k_blocks_of_part(blocks, splits, sub, p)]
                    assert pieces == list(contract.k_blocks_of_split(blocks, splits, split))


def test_sub_splits_fill_idle_sms_only():
    assert contract.sub_splits(13, 28672, 16, 132, 1) == 7  # 16 CTAs of 28 blocks -> 112 of 4
    assert contract.sub_splits(13, 7168, 16, 132, 1) == 1  # 7 blocks per split: not cut
    assert contract.sub_splits(4096, 28672, 16, 132, 2) == 1  # the row blocks fill the GPU
    for m, k, splits in ((13, 28672, 16), (137, 28672, 16), (137, 7680, 3), (600, 640, 3)):
        groups = contract.math_groups(m)
        sub = contract.sub_splits(m, k, splits, 132, groups)
        assert sub == 1 or contract.num_items(m, splits, groups, sub) <= contract.CTAS_PER_SM * 132
        assert sub == 1 or (k // contract.BLOCK_K) // splits // sub >= contract.MIN_BLOCKS_PER_PART
    assert contract.math_groups(13) == 1 and contract.math_groups(4096) == contract.MATH_GROUPS


def test_one_group_without_splits_where_two_would_split_short_k():
    # 8192 rows, K 7168 / 7680: 128 one-group row blocks fill 132 SMs unsplit, two groups' 64 split in two
    for k in (7168, 7680):
        assert contract.math_groups(8192, k, None, 132) == 1
        assert contract.own_splits(8192, k, 132, 1) == 1 < contract.own_splits(8192, k, 132, 2)
    # long K: one group only where its row blocks fill nearly every SM (m 8192: 128 of 132, DeepGEMM's CTAs)
    assert contract.math_groups(8192, 28672, None, 132) == 1
    assert contract.math_groups(5000, 28672, None, 132) == 2  # 79 one-group row blocks: two groups, split
    assert contract.math_groups(5000, 7168, None, 132) == 1  # short K: the rule as before
    for m in range(257, 20000, 61):  # the long-K change touches only m whose one-group blocks fill 9/10 of the SMs
        if contract.math_groups(m, 28672, None, 132) != contract.math_groups(m, 28672 // 4, None, 132):
            assert contract.math_groups(m, 28672, None, 132) == 2 and -(-m // 64) < 0.9 * 132, m
    assert contract.math_groups(8192, 7168, 16, 132) == 2  # the caller's splits: rule not taken
    assert contract.math_groups(4096, 7168, None, 132) == 2  # one group would split too
    assert contract.math_groups(32768, 7168, None, 132) == 2  # neither splits
    assert contract.math_groups(8192, 7168) == 2  # no SM count: the plain rule


def test_own_splits_fill_one_wave():
    slots = contract.CTAS_PER_SM * 132
    assert contract.own_splits(13, 7168, 132) == min(slots, 56)  # at most 112 / 2 splits: two K blocks each
    assert contract.own_splits(13, 28672, 132) == min(slots, 224)
    assert contract.own_splits(4096, 7168, 132) == slots // (4096 // contract.BLOCK_M)
    assert contract.own_splits(32768, 7168, 132) == 1  # the row blocks fill the GPU alone
    assert contract.own_splits(100, 64, 132) == 1  # one K block: nothing to split
    for m, k in ((13, 7168), (137, 7168), (4096, 28672), (8192, 7680), (8192, 28672), (600, 640)):
        splits = contract.own_splits(m, k, 132)
        assert contract.num_items(m, splits) <= slots or splits == 1


HC_SYMBOLS = [contract.symbol(n) for n in contract.NS]


@pytest.mark.parametrize("groups,variant", [(g, "default") for g in contract.GROUP_CHOICES]
                         + [(1, v) for v in contract.VARIANTS if v != "default"])
@pytest.mark.parametrize("name", compiler_params())
def test_hc_kernels_build_spill_free(name, groups, variant):
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), contract.defines(groups, variant), HC_SYMBOLS[0],
                                    name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert "C75" not in result.log, result.log  # C7512 too: wgmmas serialised for want of registers
    assert set(HC_SYMBOLS) | {contract.REDUCE_SYMBOL} <= compiler.elf_functions(result.cubin)
    assert_spill_free(result.log, len(HC_SYMBOLS) + 1)
    for line in result.log.splitlines():  # CTAS_PER_SM CTAs of THREADS threads per SM
        if "Used" in line and "registers" in line:
            used = int(line.split("Used ")[1].split(" registers")[0])
            assert used * contract.threads(groups) * contract.CTAS_PER_SM <= 65536, result.log
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("no SASS tools here")
    bodies = {chunk.split()[0]: chunk for chunk in sass.split("Function : ")[1:]}
    for symbol in HC_SYMBOLS:  # eight k8 TF32 wgmmas per K block, in three unrolled copies of the step
        assert bodies[symbol].count("HGMMA") == 24, symbol
        if contract.VARIANTS[variant][0]:  # the fragment sets kept apart: the copies read distinct registers
            operands = {line.split("TF32")[1].split(",")[1].strip() for line in bodies[symbol].splitlines()
                        if "HGMMA" in line}
            assert len(operands) == 24, (symbol, sorted(operands))
            # the wgmma descriptors in uniform registers: not two R2UR per wgmma (the earlier kernel: 69-81)
            assert bodies[symbol].count("R2UR") <= 16, symbol


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
       dict(m=129, n=32, k=7168, d_row_stride=36), dict(m=300, n=8, k=1024, num_splits=16),
       dict(m=20000, n=24, k=1024, d_row_stride=26),  # row blocks fill the GPU: no own splits
       dict(m=600, n=24, k=640, num_splits=3, num_sms=4), dict(m=700, n=32, k=1280, num_sms=3),  # items per CTA
       dict(m=300, n=16, k=192, num_splits=7, num_sms=2)]  # some items with no K block
    + [dict(m=m, n=n, k=k, num_splits=splits, groups=groups, sub=sub)  # forced math groups and pieces
       for m, n, k, splits in ((13, 24, 7168, 16), (137, 32, 2048, 3), (70, 8, 640, 2), (300, 16, 1024, None))
       for groups, sub in ((1, None), (2, None), (1, 3), (2, 4), (1, 1), (2, 1))]
    + [dict(m=m, n=n, k=k, num_splits=splits, groups=groups, variant=variant)  # each kernel variant
       for m, n, k, splits, groups in ((13, 24, 7168, 16, 1), (137, 24, 2048, None, 2), (300, 32, 1024, 3, 1))
       for variant in ("prev", "short_path", "hint")]
)


@pytest.mark.gpu
def test_gpu_hc_matches_float64():
    results = run_child_cases("gpu_hc_einsum_cases.py", "hc", HC_GPU_CASES, timeout=600)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_hc_is_deterministic_and_graph_capturable():
    results = run_child_cases("gpu_hc_einsum_cases.py", "hc_repeat_and_graph",
                              [{}, {"num_splits": None}, {"m": 13, "k": 28672},
                               {"m": 137, "k": 7168, "num_splits": None}],
                              timeout=300)
    assert all(r["ok"] for r in results), results


# --------------------------------------------------------------------------------------------------
# einsum and fp8_einsum: the CPU paths
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr,dims,out_dtype", [
    ("bmk,bnk->mn", dict(b=3, m=128, n=192, k=64), "float32"),
    ("bmk,bnk->mn", dict(b=2, m=64, n=64, k=128), "bfloat16"),
    ("bmk,bnk->mn", dict(b=0, m=64, n=128, k=64), "float32"),
    ("bhr,hdr->bhd", dict(b=5, h=4, r=256, d=128), "bfloat16"),
    ("bhd,hdr->bhr", dict(b=3, h=2, r=64, d=96), "bfloat16"),
])
def test_einsum_cpu_matches_float64(expr, dims, out_dtype):
    result = einsum_case(expr, dims, out_dtype, seed=1, device="cpu")
    assert result["ok"], result


@pytest.mark.parametrize("b,h,r,d,with_c", [(5, 2, 384, 256, False), (3, 2, 200, 130, True), (1, 1, 128, 128, False)])
def test_fp8_einsum_cpu_matches_float64(b, h, r, d, with_c):
    result = fp8_einsum_case(b, h, r, d, with_c, seed=2, device="cpu")
    assert result["ok"], result


def test_fp8_einsum_auto_takes_strided_first(monkeypatch):
    """``auto`` tries the in-place strided path first; where its views do not apply, the batch-size rule."""
    import deep_tile.einsums as einsums

    monkeypatch.delenv(einsums.FP8_PATH_ENV, raising=False)
    assert einsums._fp8_path(128, 8, 1024, None) == "strided"
    monkeypatch.setattr(einsums, "get_num_sms", lambda: 132)
    assert einsums._fp8_fallback(8192, 8, 1024, None) == "heads"  # 64 x 8 tiles of one head fill 132 SMs
    assert einsums._fp8_fallback(4, 8, 1024, None) == "diag"
    assert einsums._fp8_fallback(4, 8, 1024, torch.empty(0)) == "masked"  # a c: not diag
    assert einsums._fp8_fallback(128, 8, 1024, None) == "masked"  # 1024 rows: past DIAG_MAX_ROWS
    for path in FP8_PATHS[1:]:
        monkeypatch.setenv(einsums.FP8_PATH_ENV, path)
        assert einsums._fp8_path(128, 8, 1024, None) == path


def test_fp8_einsum_strided_path_on_cpu(monkeypatch):
    """The ``strided`` path is a CUDA path: on the CPU it takes the float torch product as the others."""
    from deep_tile.einsums import FP8_PATH_ENV

    monkeypatch.setenv(FP8_PATH_ENV, "strided")
    result = fp8_einsum_case(5, 2, 256, 128, False, seed=3, device="cpu")
    assert result["ok"], result


def test_strided_views():
    """The head-strided kernel's views of x, sx and d: row i of each is x[i] (all heads side by side),
    so head g's rows are columns g * r .. of it; None for what the kernel cannot read or write."""
    from deep_tile.einsums import _strided_views

    bs, h, r, dd = 5, 3, 512, 128
    x = torch.randn(bs, h, r).to(torch.float8_e4m3fn)
    sx = torch.rand(bs, h, r // 128)
    d = torch.zeros(bs, h, dd, dtype=torch.bfloat16)
    x2, sx2, d2 = _strided_views(x, sx, d, None)
    assert x2.shape == (bs, h * r) and sx2.shape == (bs, h * 4) and d2.shape == (bs, h * dd)
    assert x2.data_ptr() == x.data_ptr() and d2.data_ptr() == d.data_ptr()  # views, nothing copied
    assert torch.equal(x2[:, 2 * r:3 * r].view(torch.uint8), x[:, 2].view(torch.uint8))
    assert torch.equal(sx2[:, 4:8], sx[:, 1])
    d2[:, dd:2 * dd] = 1  # head 1's columns are d[:, 1]
    assert bool((d[:, 1] == 1).all()) and not bool(d[:, 0].any()) and not bool(d[:, 2].any())
    assert _strided_views(x, sx, d, d) is None  # a c: the masked path
    x_wide = torch.zeros(bs, h, r + 128, dtype=torch.float8_e4m3fn)[..., :r]  # heads apart in a row
    assert _strided_views(x_wide, sx, d, None) is None
    sx_wide = torch.rand(bs, h, 8)[..., :4]
    assert _strided_views(x, sx_wide, d, None) is None
    d_pad = torch.zeros(bs, h, dd + 8, dtype=torch.bfloat16)[..., :dd]
    assert _strided_views(x, sx, d_pad, None) is None
    assert _strided_views(x, sx, torch.zeros(bs, h, 96, dtype=torch.bfloat16), None) is None  # d % 64
    for r_bad in (192, 384):  # r not whole 128-blocks; 3 blocks: head 1's scales would start 12 bytes in
        assert _strided_views(torch.zeros(bs, h, r_bad, dtype=torch.float8_e4m3fn), torch.rand(bs, h, 2 + r_bad // 384),
                              d, None) is None
    assert _strided_views(torch.zeros(1, 1, 512, dtype=torch.float8_e4m3fn), torch.rand(1, 1, 4),
                          torch.zeros(1, 1, dd, dtype=torch.bfloat16), None) is not None  # b 1 and h 1
    h1 = _strided_views(x[:, :1], sx[:, :1], d[:, :1], None)  # h 1: the head stride is free
    assert h1 is not None and h1[0].shape == (bs, r)
    rows = torch.zeros(bs, 520, dtype=torch.float8_e4m3fn)[:, None, :r]  # one head, rows 520 bytes apart
    assert _strided_views(rows, sx[:, :1], d[:, :1], None) is None  # a TMA row pitch is whole 16-byte chunks


def test_head_strided_contract():
    """The head-strided kernel's parameters: the masked kind's, m being max_m (the rows of each view)
    and k the problem's (not the view's h * k columns); D's map the slab view of [max_m, h * n]."""
    from deep_tile.gemm import kernel_args as spec
    from deep_tile.gemm.problem import Problem, ProblemKind
    from deep_tile.kernels import fp8_gemm as family
    from deep_tile.select import select_config

    problem = Problem(32, 1024, 4096, kind=ProblemKind.GROUPED_MASKED, num_groups=8, a_scale_row_major=True)
    config = select_config(problem, 132).for_problem(problem)
    assert family.head_strided_problems(config, problem) == []
    assert family.head_strided_defines(config) == {**family.defines(config), family.HEAD_STRIDED_DEFINE: 1}
    specs = family.head_strided_argument_specs(config, problem)
    plain = family.argument_specs(config, problem)
    assert len(specs) == len(plain) == len(family.GROUPED_ARGUMENTS)
    a_map, _, scale_map, d_map = specs[:4]
    assert a_map.box == (family.BLOCK_K, min(config.block_m, 32)) and scale_map.box == (4, min(config.block_m, 32))
    assert d_map.slab_rows == d_map.box[1]
    assert isinstance(specs[7], spec.Size) and specs[7].operand == 0  # m: the views' rows, max_m
    assert [(s.constant if isinstance(s, spec.Value) else None) for s in specs[8:]] == [
        1024, 4096, config.raster_width, None, 8, 32]
    column = family.head_strided_problems(dataclasses.replace(config, a_scale_row_major=False), problem)
    assert len(column) == 1 and "row-major" in column[0]
    assert family.head_strided_problems(config, Problem(32, 1000, 4000, kind=ProblemKind.GROUPED_MASKED,
                                                        num_groups=8)) != []


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize("b,h,x", [(3, 5, 64), (1, 4, 24), (6, 2, 6), (2, 3, 3)])
def test_word_moves_equal_copies(dtype, b, h, x):
    from deep_tile.einsums import _head_major, _head_major_words, _moved, _words

    t = torch.randn(b, h, x + 8).to(dtype)[..., :x]  # a view of wider rows
    assert torch.equal(_head_major_words(t).view(torch.uint8), _head_major(t).view(torch.uint8))
    dst = torch.zeros(b, h, x + 8, dtype=dtype)[..., :x]
    _moved(dst, _head_major(t).permute(1, 0, 2))
    assert torch.equal(dst.view(torch.uint8), t.view(torch.uint8))
    if (x * t.element_size()) % 8 == 0:
        assert _words(t).dtype == torch.int64


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_bmm_views_compute_the_expression(expr):
    from deep_tile.einsums import _bh_bmm

    gen = torch.Generator().manual_seed(4)
    b, h, r, d = 5, 3, 24, 16
    a = torch.randn(b, h, r if expr == "bhr,hdr->bhd" else d, generator=gen, dtype=torch.float64)
    w = torch.randn(h, d, r + 8, generator=gen, dtype=torch.float64)[..., :r]
    out = torch.full((b, h, (d if expr == "bhr,hdr->bhd" else r) + 4), float("nan"), dtype=torch.float64)
    _bh_bmm(expr, a, w, out[..., :-4])
    torch.testing.assert_close(out[..., :-4], torch.einsum(expr, a, w))
    assert torch.isnan(out[..., -4:]).all()


def test_diag_views_pick_each_heads_block():
    from deep_tile.einsums import _diag_views, _diagonal_blocks

    gen = torch.Generator().manual_seed(5)
    bs, h, r, dd = 3, 4, 256, 128
    x = torch.randn(bs, h, r, generator=gen, dtype=torch.float64)
    y = torch.randn(h, dd, r, generator=gen, dtype=torch.float64)
    sx, sy = torch.ones(bs, h, 2), torch.ones(h, 1, 2)
    d = torch.empty(bs, h, dd)
    x2, sx2, y2, sy2 = _diag_views(x, sx, y, sy, d, None)
    assert x2.shape == (bs * h, r) and y2.shape == (h * dd, r) and sx2.shape == (bs * h, 2) and sy2.shape == (h, 2)
    full = (x2 @ y2.T).contiguous()
    torch.testing.assert_close(_diagonal_blocks(full, bs, h, dd), torch.einsum("bhr,hdr->bhd", x, y))
    assert _diag_views(x, sx, y, sy, d, d) is None  # a c: not this path
    assert _diag_views(x, sx, y[:, :64], sy, d, None) is None  # d not a multiple of 128
    assert _diag_views(x.transpose(0, 1).contiguous().transpose(0, 1), sx, y, sy, d, None) is None


def test_head_major_chunks():
    from deep_tile.einsums import _chunk_rows

    x = torch.zeros(6, 4, 512, dtype=torch.float8_e4m3fn)
    assert _chunk_rows(x) == (32, 4 * 32, 32)
    assert _chunk_rows(torch.zeros(6, 4, 32)) == (8, 32, 8)  # float32 scales of r = 4096
    assert _chunk_rows(torch.zeros(6, 4, 3)) is None  # rows not whole 16-byte chunks
    assert _chunk_rows(torch.zeros(6, 4, 264, dtype=torch.bfloat16)[:, :, :256]) == (32, 4 * 33, 33)
    assert _chunk_rows(torch.zeros(6, 4, 260, dtype=torch.bfloat16)[:, :, :256]) is None  # pitch not whole chunks


def test_path_variables_are_checked(monkeypatch):
    from deep_tile import env
    from deep_tile.einsums import BH_PATH_ENV, FP8_PATH_ENV

    # the registry's choices are the paths the module knows
    assert env.REGISTRY[BH_PATH_ENV].choices == BH_PATHS
    assert env.REGISTRY[FP8_PATH_ENV].choices == FP8_PATHS
    monkeypatch.setenv(FP8_PATH_ENV, "fast")
    with pytest.raises(ValueError, match=FP8_PATH_ENV):
        env.fp8_einsum()
    monkeypatch.delenv(BH_PATH_ENV, raising=False)
    assert env.bh_einsum() == "auto"
    monkeypatch.setenv(BH_PATH_ENV, "Heads")
    assert env.bh_einsum() == "heads"
    # auto: the batched GEMM for many heads of many rows (DeepGEMM's 128-head shapes from b 128 on, measured
    # 1.00-1.03x DeepGEMM there against bmm's 0.94-1.04x), bmm for few rows or few large heads
    from deep_tile.einsums import bh_auto_path
    assert [bh_auto_path(b, 128) for b in (4, 32, 128, 4096, 8192)] == ["bmm", "bmm", "batched", "batched", "batched"]
    assert [bh_auto_path(b, 8) for b in (4, 128, 8192)] == ["bmm"] * 3


def test_batched_path_views(monkeypatch):
    """The batched path's head-major views: w K-major for 'bhr,hdr->bhd', MN-major (w[h] transposed) for
    'bhd,hdr->bhr', d written in place; None (the bmm fallback) where d's strides are odd or a's rows
    break 16 bytes; on the CPU the path computes in torch."""
    from deep_tile.einsums import _bh_batched_views

    bf = torch.bfloat16
    a, w, d = torch.randn(4, 3, 64).to(bf), torch.randn(3, 72, 192).to(bf)[:, :, :64], torch.zeros(4, 3, 72, dtype=bf)
    av, bv, dv = _bh_batched_views("bhr,hdr->bhd", a, w, d)
    assert av.shape == (3, 4, 64) and bv.stride(-1) == 1 and dv.shape == (3, 4, 72) and dv.data_ptr() == d.data_ptr()
    a2, d2 = torch.randn(4, 3, 72).to(bf), torch.zeros(4, 3, 64, dtype=bf)
    av, bv, dv = _bh_batched_views("bhd,hdr->bhr", a2, w, d2)
    assert bv.shape == (3, 64, 72) and bv.stride(1) == 1 and dv.shape == (3, 4, 64)
    assert _bh_batched_views("bhr,hdr->bhd", a, torch.randn(3, 33, 64).to(bf), torch.zeros(4, 3, 33, dtype=bf)) is None
    assert _bh_batched_views("bhd,hdr->bhr", torch.randn(4, 3, 33).to(bf), torch.randn(3, 33, 64).to(bf),
                             torch.zeros(4, 3, 64, dtype=bf)) is None
    out = torch.full((4, 3, 72), float("nan"), dtype=bf)
    monkeypatch.setenv("DEEP_TILE_BH_EINSUM", "batched")
    einsum("bhr,hdr->bhd", a, w, out)
    torch.testing.assert_close(out.float(), torch.einsum("bhr,hdr->bhd", a.float(), w.float()), rtol=2e-2, atol=2e-2)


def test_prenorm_variant_variable(monkeypatch):
    from deep_tile import env
    from deep_tile.hyper_connection import VARIANT_ENV
    from deep_tile.kernels import hc_prenorm

    assert tuple(env.REGISTRY[VARIANT_ENV].choices) == tuple(hc_prenorm.VARIANTS)
    monkeypatch.delenv(VARIANT_ENV, raising=False)
    assert env.hc_variant() == "default"
    assert hc_prenorm.defines(1)["DT_HC_LEAN_ISSUE"] == 1 and hc_prenorm.defines(1)["DT_HC_A_EVICT_FIRST"] == 0
    monkeypatch.setenv(VARIANT_ENV, "prev")
    assert env.hc_variant() == "prev"
    prev = hc_prenorm.defines(2, "prev")
    assert (prev["DT_HC_LEAN_ISSUE"], prev["DT_HC_A_EVICT_FIRST"]) == (0, 1)
    monkeypatch.setenv(VARIANT_ENV, "nope")
    with pytest.raises(ValueError, match=VARIANT_ENV):
        env.hc_variant()
    with pytest.raises(ValueError, match="variant"):
        hc_prenorm.defines(1, "nope")


def test_prenorm_variables_are_checked(monkeypatch):
    from deep_tile import env
    from deep_tile.hyper_connection import GROUPS_ENV, SUB_SPLITS_ENV
    from deep_tile.kernels import hc_prenorm

    assert tuple(int(c) for c in env.REGISTRY[GROUPS_ENV].choices) == tuple(hc_prenorm.GROUP_CHOICES)
    monkeypatch.delenv(GROUPS_ENV, raising=False)
    monkeypatch.delenv(SUB_SPLITS_ENV, raising=False)
    assert (env.hc_groups(), env.hc_sub_splits()) == (0, 0)
    monkeypatch.setenv(GROUPS_ENV, "1")
    monkeypatch.setenv(SUB_SPLITS_ENV, "3")
    assert (env.hc_groups(), env.hc_sub_splits()) == (1, 3)
    for bad in ("0", "x"):
        monkeypatch.setenv(SUB_SPLITS_ENV, bad)
        with pytest.raises(ValueError, match=SUB_SPLITS_ENV):
            env.hc_sub_splits()
    monkeypatch.setenv(GROUPS_ENV, "3")
    with pytest.raises(ValueError, match=GROUPS_ENV):
        env.hc_groups()


def einsum_bad_cases():
    a, b = make_einsum_inputs("bmk,bnk->mn", dict(b=2, m=64, n=128, k=64), seed=0)
    d = torch.zeros(64, 128)
    x, y = make_einsum_inputs("bhr,hdr->bhd", dict(b=4, h=2, r=128, d=64), seed=0)
    z = torch.zeros(4, 2, 64, dtype=torch.bfloat16)
    yield "expr not a str", (0, a, b, d), {"c": d}, TypeError
    yield "a not a tensor", ("bmk,bnk->mn", a.tolist(), b, d), {"c": d}, TypeError
    yield "unknown expression", ("bmk,bnk->nm", a, b, d), {"c": d}, ValueError
    yield "spaces in expression", ("bmk, bnk -> mn", a, b, d), {"c": d}, ValueError
    yield "a float32", ("bmk,bnk->mn", a.float(), b, d), {"c": d}, ValueError
    yield "d float16", ("bmk,bnk->mn", a, b, d.half()), {}, ValueError
    yield "c dtype", ("bmk,bnk->mn", a, b, d), {"c": d.bfloat16()}, ValueError
    yield "float32 d without c", ("bmk,bnk->mn", a, b, d), {}, ValueError
    yield "float32 d, c another tensor", ("bmk,bnk->mn", a, b, d), {"c": d.clone()}, ValueError
    yield "bf16 d with c", ("bmk,bnk->mn", a, b, d.bfloat16()), {"c": d.bfloat16()}, ValueError
    yield "use_cublaslt", ("bmk,bnk->mn", a, b, d), {"c": d, "use_cublaslt": True}, ValueError
    a_t = a.transpose(1, 2).contiguous().transpose(1, 2)
    yield "a not contiguous", ("bmk,bnk->mn", a_t, b, d), {"c": d}, ValueError
    yield "batch mismatch", ("bmk,bnk->mn", a, b[:1], d), {"c": d}, ValueError
    d32 = torch.zeros(32, 128)
    yield "m not a multiple of 64", ("bmk,bnk->mn", a[:, :32].contiguous(), b, d32), {"c": d32}, ValueError
    yield "k not a multiple of 64", ("bmk,bnk->mn", a[..., :32].contiguous(), b[..., :32].contiguous(), d), {"c": d}, \
        ValueError
    yield "d shape", ("bmk,bnk->mn", a, b, d[:, :64].contiguous()), {}, ValueError
    yield "bhr with c", ("bhr,hdr->bhd", x, y, z), {"c": z}, ValueError
    yield "bhr shapes", ("bhr,hdr->bhd", x, y, z[:, :, :32]), {}, ValueError
    yield "bhr d float32", ("bhr,hdr->bhd", x, y, z.float()), {}, ValueError
    yield "bhr a strided r", ("bhr,hdr->bhd", x.transpose(0, 2).contiguous().transpose(0, 2), y, z), {}, ValueError
    yield "bhd shapes", ("bhd,hdr->bhr", x, y, z), {}, ValueError


@pytest.mark.parametrize("label,args,kwargs,error", list(einsum_bad_cases()), ids=[c[0] for c in einsum_bad_cases()])
def test_einsum_bad_arguments_are_refused(label, args, kwargs, error):
    d = args[3]
    before = d.clone()
    with pytest.raises(error, match="einsum"):
        einsum(*args, **kwargs)
    assert torch.equal(before, d)  # nothing written


def fp8_bad_cases():
    x = torch.randn(4, 2, 256)
    y = torch.randn(2, 128, 256)
    xq, sx = quantize_fp8(x.view(8, 1, 256), 1)
    xq, sx = xq.view(4, 2, 256), sx.view(4, 2, 2)
    yq, sy = quantize_fp8(y, 128)
    z = torch.zeros(4, 2, 128, dtype=torch.bfloat16)
    yield "a not a pair", ("bhr,hdr->bhd", xq, (yq, sy), z), {}, TypeError
    yield "SM100 expression bhd,hdr->bhr", ("bhd,hdr->bhr", (xq, sx), (yq, sy), z), {}, ValueError
    yield "SM100 expression bhd,bhr->hdr", ("bhd,bhr->hdr", (xq, sx), (yq, sy), z), {}, ValueError
    yield "recipe 1,1,128", ("bhr,hdr->bhd", (xq, sx), (yq, sy), z), {"recipe": (1, 1, 128)}, ValueError
    yield "x bf16", ("bhr,hdr->bhd", (x.bfloat16(), sx), (yq, sy), z), {}, ValueError
    yield "d float32", ("bhr,hdr->bhd", (xq, sx), (yq, sy), z.float()), {}, ValueError
    yield "sx shape", ("bhr,hdr->bhd", (xq, sx[..., :1]), (yq, sy), z), {}, ValueError
    yield "sy shape", ("bhr,hdr->bhd", (xq, sx), (yq, sy[:, :, :1]), z), {}, ValueError
    yield "d shape", ("bhr,hdr->bhd", (xq, sx), (yq, sy), z[:, :, :64]), {}, ValueError
    yield "c dtype", ("bhr,hdr->bhd", (xq, sx), (yq, sy), z), {"c": z.float()}, ValueError


@pytest.mark.parametrize("label,args,kwargs,error", list(fp8_bad_cases()), ids=[c[0] for c in fp8_bad_cases()])
def test_fp8_einsum_bad_arguments_are_refused(label, args, kwargs, error):
    d = args[3]
    before = d.clone()
    with pytest.raises(error, match="fp8_einsum"):
        fp8_einsum(*args, **kwargs)
    assert torch.equal(before, d)


# --------------------------------------------------------------------------------------------------
# einsum: contract, build, DeepGEMM's names
# --------------------------------------------------------------------------------------------------

def test_einsum_contract():
    assert EXPRESSIONS[0] == "bmk,bnk->mn"
    assert len(einsum_contract.ARGUMENT_KINDS) == 8
    assert einsum_contract.smem_bytes() <= 232448
    # DeepGEMM's split rule: 2 x 3 tiles of 128 x 128 on 132 SMs leave 22 splits of the s * k / 64 blocks
    split = einsum_contract.split_factor(4096, 256, 384, 128, 132)
    assert split == -(-4096 * 2 // 22)
    assert einsum_contract.grid(4096, 256, 384, 128, split) == 6 * -(-4096 * 2 // split)
    for s, m, n, k in ((129, 128, 384, 128), (1, 64, 64, 64), (8192, 384, 128, 384), (3, 4096, 4096, 64)):
        split = einsum_contract.split_factor(s, m, n, k, 132)
        tiles = -(-m // 128) * -(-n // 128)
        assert split >= 1 and einsum_contract.grid(s, m, n, k, split) // tiles * split >= s * (k // 64)


@pytest.mark.parametrize("name", compiler_params())
def test_einsum_kernel_builds_spill_free(name):
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(einsum_contract.ENTRY), einsum_contract.defines(),
                                    einsum_contract.SYMBOL, name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert "C75" not in result.log, result.log
    assert {einsum_contract.SYMBOL, einsum_contract.HEAD_MAJOR_SYMBOL} <= compiler.elf_functions(result.cubin)
    assert_spill_free(result.log, 2)
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("no SASS tools here")
    assert sass.count("HGMMA.64x128x16.F32.BF16") == 4  # four k16 steps per 64-wide block
    assert "REDG.E.ADD.F32x2" in sass  # the tile is added into d with vector reductions


def test_einsum_compat_names_follow_deepgemm():
    def params(fn):
        return [(p.name, None if p.default is inspect.Parameter.empty else p.default)
                for p in inspect.signature(fn).parameters.values()]

    assert params(deep_gemm.einsum) == [("expr", None), ("a", None), ("b", None), ("d", None), ("c", None),
                                        ("use_cublaslt", False)]
    assert params(deep_gemm.fp8_einsum) == [("expr", None), ("a", None), ("b", None), ("d", None), ("c", None),
                                            ("recipe", (1, 128, 128))]
    a, b = make_einsum_inputs("bmk,bnk->mn", dict(b=2, m=64, n=64, k=64), seed=3)
    d = torch.zeros(64, 64)
    want = torch.zeros(64, 64)
    assert deep_gemm.einsum("bmk,bnk->mn", a, b, d, c=d) is None
    deep_tile.einsum("bmk,bnk->mn", a, b, want, c=want)
    assert torch.equal(d, want)
    with pytest.raises(ValueError, match="unsupported expression"):
        deep_gemm.einsum("ij,jk->ik", a[0], b[0], d)


# --------------------------------------------------------------------------------------------------
# einsum on the GPU
# --------------------------------------------------------------------------------------------------

EINSUM_GPU_CASES = (
    [dict(expr="bmk,bnk->mn", dims=dict(b=s, m=m, n=n, k=k), out_dtype=dt)  # DeepGEMM's test shapes
     for s in (129, 4096, 8192) for m, n, k in ((128, 384, 128), (256, 256, 256), (384, 128, 384))
     for dt in ("float32", "bfloat16")]
    + [dict(expr="bmk,bnk->mn", dims=dict(b=1, m=64, n=64, k=64)),
       dict(expr="bmk,bnk->mn", dims=dict(b=3, m=192, n=320, k=192)),
       dict(expr="bmk,bnk->mn", dims=dict(b=2, m=1024, n=1024, k=512), out_dtype="bfloat16")]
    + [dict(expr=e, dims=dict(b=b, h=h, r=r, d=d), out_dtype="bfloat16", path=path)
       for e in ("bhr,hdr->bhd", "bhd,hdr->bhr") for h, r, d in ((128, 512, 128), (8, 4096, 1024)) for b in (4, 128)
       for path in BH_PATHS]
    + [dict(expr=e, dims=dict(b=b, h=3, r=r, d=d), out_dtype="bfloat16", path=path, d_pad=8)
       for e in ("bhr,hdr->bhd", "bhd,hdr->bhr") for b, r, d in ((1, 64, 72), (37, 192, 136)) for path in BH_PATHS]
    # the batched BF16 GEMM: b 1, 4, 37, 300, h 3 and 128, d and r past whole 64-blocks, d padded or not;
    # a d of odd width (odd strides of d) falls back to bmm
    + [dict(expr=e, dims=dict(b=b, h=h, r=r, d=d), out_dtype="bfloat16", path="batched", d_pad=pad, batched=True)
       for e in ("bhr,hdr->bhd", "bhd,hdr->bhr") for b in (1, 4, 37, 300)
       for h, r, d, pad in ((3, 200, 72, 8), (128, 512, 128, 0), (3, 520, 40, 0), (128, 136, 200, 8))]
    + [dict(expr=e, dims=dict(b=5, h=3, r=64, d=33), out_dtype="bfloat16", path="batched", batched=False)
       for e in ("bhr,hdr->bhd", "bhd,hdr->bhr")]
)


@pytest.mark.gpu
def test_gpu_einsum_matches_float64():
    results = run_child_cases("gpu_hc_einsum_cases.py", "einsum_case", EINSUM_GPU_CASES, timeout=600)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


STRIDED_GPU_CASES = (
    [dict(b=b, h=8, r=4096, d=1024, path="strided", in_place=True) for b in (4, 128)]  # DeepGEMM's shapes
    + [dict(b=b, h=h, r=r, d=d, path="strided", in_place=True)
       for b, h, r, d in ((100, 3, 512, 256),  # b not a multiple of the tile (a partial slab by TMA)
                          (1, 4, 512, 192),  # b 1: every slab by 16-byte stores
                          (37, 1, 512, 320),  # h 1
                          (200, 2, 1024, 128))]  # two m-blocks per head
    + [dict(b=9, h=2, r=512, d=256, with_c=True, path="strided", in_place=False),  # c: the masked path
       dict(b=9, h=2, r=512, d=256, path="strided", d_pad=8, in_place=False)]  # d's heads apart: masked
)
"""fp8_einsum's ``strided`` path on the device: in place where its views apply, else its fallback."""


@pytest.mark.gpu
def test_gpu_fp8_einsum_strided_matches_float64():
    results = run_child_cases("gpu_hc_einsum_cases.py", "fp8_einsum_case", STRIDED_GPU_CASES, timeout=300)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_fp8_einsum_matches_float64():
    cases = ([dict(b=b, h=8, r=4096, d=1024) for b in (4, 32, 128, 4096)]  # DeepGEMM's shapes (auto)
             + [dict(b=b, h=h, r=r, d=d, with_c=c, path=path, d_pad=pad)  # each path forced (few builds)
                for path, shapes in (("heads", ((300, 2, 384, 264, True, 8), (1, 3, 144, 136, False, 0))),
                                     ("masked", ((64, 4, 512, 256, True, 0), (300, 2, 512, 264, True, 8),
                                                 (300, 2, 384, 264, True, 8))),  # one copy kernel; torch's
                                     ("diag", ((4, 8, 512, 256, False, 0), (40, 6, 384, 128, False, 8),
                                               (3, 2, 256, 136, False, 0))),  # d % 128: the grouped path
                                     ("copy", ((64, 4, 512, 256, True, 0),)))
                for b, h, r, d, c, pad in shapes]
             + [dict(b=5, h=2, r=200, d=130, with_c=True)])  # r not a multiple of 16: torch
    results = run_child_cases("gpu_hc_einsum_cases.py", "fp8_einsum_case", cases, timeout=300)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))
