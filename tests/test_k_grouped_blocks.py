"""The K-grouped GEMM reading DeepGEMM's NT layout as it is (``layout="blocks"``).

Host-side tests (no GPU): the kernel kind's contract (DT_PROBLEM_KIND 6, the map table as its last
parameter, the map-table kernel's parameters), both kernels built spill-free, the argument checks
of the layout, and the path from DeepGEMM's flat buffers to the launcher without a copy. GPU tests
(marker ``gpu``, in a child process, tests/gpu_training_cases.py): the selector's pick and forced
tiles against the float64 reference with poisoned outputs, DeepGEMM's test sizes scaled down,
groups of 0 and of multiples of 16 that start mid-block, c separate and c = d, the compatible
module's NT function, a CUDA graph replayed with new sizes, and device sizes TMA cannot address.
"""
from __future__ import annotations

import re

import pytest
import torch

from conftest import accuracy_problems, run_child_cases
from test_k_grouped import _check  # the K-grouped results judged by the rows layout's own rule
from deep_tile.gemm import checks, launch
from deep_tile.jit import compiler, paths
from deep_tile.kernels import fp8_gemm as family
from deep_tile.kernels import moe_layout
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select import KernelConfig
from deep_tile.select.k_grouped import select_k_grouped_config

KG = ProblemKind.K_GROUPED
DEEPGEMM_SIZES = [(512, 1024, [128, 384, 0, 256]), (1024, 512, [256] * 6 + [0, 128]), (384, 768, [512, 128, 128])]
"""(m, n, ks) of DeepGEMM's K-grouped test scaled down: multiples of 128, an empty group."""
EDGE16 = [16, 0, 112, 144, 48, 256, 32]
"""Multiples of 16 that start and end mid-block (a group's first k-block begins before its block)."""


def _run(function: str, cases: list) -> list:
    return run_child_cases("gpu_training_cases.py", function, cases, timeout=600.0)


# ---- GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_blocks_public_api():
    """The selector's pick through k_grouped_fp8_gemm_1d1d(layout="blocks"): DeepGEMM's sizes scaled
    down in place, with a C of its own and without; groups of multiples of 16 mid-block; a host list."""
    cases = []
    for i, (m, n, ks) in enumerate(DEEPGEMM_SIZES):
        for c_mode in ("inplace", "float32", "none"):
            cases.append(dict(m=m, n=n, sizes=ks, c_mode=c_mode, seed=i, layout="blocks"))
    cases += [dict(m=1000, n=2112, sizes=EDGE16, seed=7, pad=40, layout="blocks"),
              dict(m=520, n=1160, sizes=EDGE16, out_dtype="bfloat16", c_mode="none", seed=8, layout="blocks"),
              dict(m=256, n=512, sizes=EDGE16, out_dtype="float32", c_mode="bfloat16", seed=9, layout="blocks"),
              dict(m=64, n=384, sizes=[128, 0, 256], seed=10, host_sizes=True, layout="blocks"),
              dict(m=512, n=1024, sizes=[1024, 0, 768, 128], seed=11, layout="blocks"),  # the rule's pairs
              dict(m=520, n=1160, sizes=[0, 0, 0], c_mode="float32", seed=12, layout="blocks")]
    _check(_run("k_grouped", cases))


@pytest.mark.gpu
def test_blocks_forced_tiles():
    """Forced tiles in the blocks layout: the direct store with two buffers, the staged epilogue in
    place and without C, one consumer warpgroup, 2-CTA pairs sharing B."""
    families = [(dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), ("float32", "inplace")),
                (dict(block_m=128, block_n=160, num_stages=4), ("bfloat16", "float32")),
                (dict(block_m=128, block_n=128, num_stages=4, staged_epilogue=True), ("float32", "inplace")),
                (dict(block_m=128, block_n=128, num_stages=4, staged_epilogue=True), ("float32", "none")),
                (dict(block_m=64, block_n=128, num_stages=8, accum_buffers=2), ("float32", "inplace")),
                (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, staged_epilogue=True),
                 ("float32", "inplace"))]
    cases = [dict(m=256, n=384, sizes=EDGE16 if i % 2 else [384, 0, 128, 256], out_dtype=out, c_mode=c,
                  config=dict(fields, grid_size=132 if i % 2 else 30, raster_width=8), seed=20 + i, layout="blocks")
             for i, (fields, (out, c)) in enumerate(families)]
    _check(_run("k_grouped", cases))


@pytest.mark.gpu
def test_blocks_compat_nt():
    """deep_tile.compat.deepgemm.k_grouped_fp8_gemm_nt_contiguous on DeepGEMM's flat buffers: c = d,
    c separate, no c; an empty group."""
    cases = [dict(m=m, n=n, ks=ks, c_mode=c_mode, seed=30 + i)
             for i, (m, n, ks) in enumerate(DEEPGEMM_SIZES) for c_mode in ("inplace", "float32", "none")]
    _check(_run("k_grouped_compat", cases))


@pytest.mark.gpu
def test_blocks_graph_replay_with_new_sizes():
    """Captured once with device sizes, replayed after new sizes and blocks were copied in: the map
    table is rewritten on the device from the new sizes."""
    results = _run("k_grouped_graph", [dict(m=512, n=768, sizes=[128, 0, 256, 128], new_sizes=[0, 384, 16, 112],
                                            seed=40, layout="blocks"),
                                       dict(m=256, n=512, sizes=EDGE16, new_sizes=EDGE16[::-1], seed=41,
                                            layout="blocks")])
    bad = [f"{r}" for r in results if accuracy_problems(r)]
    assert not bad, bad


@pytest.mark.gpu
def test_blocks_misaligned_device_sizes_run_as_empty_groups():
    """Device sizes whose group ranges start or end off a multiple of 16 tokens (the caller's error:
    TMA's row pitch) run those groups as empty ones (out keeps C), the other groups right, with no
    fault; the launch after it is right."""
    results = _run("k_grouped_blocks_bad_sizes", [dict(m=256, n=384, sizes=[100, 28, 0, 20], seed=50),
                                                  dict(m=128, n=256, sizes=[7, 5000, -3], seed=51),
                                                  dict(m=256, n=256, sizes=[32, 100, 28, 16, 0, 64], seed=52)])
    assert [r["fits"] for r in results] == [[False, False, True, False], [False, False, True],
                                            [True, False, False, True, True, True]]
    _check(results)
    _check([r["after"] for r in results])
    assert not [r for r in results if r["misfit_changed"]], [r["misfit_changed"] for r in results]


# ---- host side -------------------------------------------------------------------------------

def test_the_kernel_kind_and_its_arguments():
    """DT_PROBLEM_KIND 6 is a K-grouped config's kernel with the map table as its last parameter;
    the argument specs add the table's pointer (the operand after C); other configs are refused."""
    problem = Problem(1000, 2112, 4096, kind=KG, num_groups=8, b_scale_1d=True, out_dtype="float32", c_dtype="out")
    config = select_k_grouped_config(problem, 132).for_problem(problem)
    defines = family.k_grouped_blocks_defines(config)
    assert defines == family.defines(config) | {"DT_PROBLEM_KIND": 6} and family.K_GROUPED_BLOCKS_CODE == 6
    specs = family.k_grouped_blocks_argument_specs(config, problem)
    assert [s.code() for s in specs[:-1]] == [s.code() for s in family.argument_specs(config, problem)]
    assert specs[-1].code() == (2, len(family.K_GROUPED_BLOCKS_OPERANDS) - 1) == (2, 7)
    assert len(family.K_GROUPED_BLOCKS_OPERANDS) <= family.spec.MAX_OPERANDS
    with pytest.raises(ValueError, match="needs a k_grouped config"):
        family.k_grouped_blocks_defines(KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132))
    source = paths.entry_path(family.ENTRY).read_text()
    maps = re.search(r"#if DT_PROBLEM_KIND == 6\n#define DT_MAPS_PARAMS (.*)\n", source).group(1)
    assert tuple(re.findall(r"(\w+)(?:,|$)", maps)) == family.K_GROUPED_BLOCKS_ARGUMENTS
    assert "int num_groups, int group_rows DT_C_PARAMS DT_B1D_PARAMS DT_MAPS_PARAMS" in source


def test_the_map_table_kernel_contract():
    """The map-table kernel's parameters are MAPS_ARGUMENT_KINDS; its threads are one per group of
    the most the K-grouped kind takes."""
    source = paths.entry_path(moe_layout.ENTRY).read_text()
    signature = re.search(rf"{moe_layout.MAPS_SYMBOL}\((.*?)\)\s*{{", source, re.S).group(1)
    params = [p.strip() for p in signature.split(",")]
    kinds = ["tensormap" if "TmaDescriptor tmpl" in p else "ptr" if "*" in p else "i32" for p in params]
    assert tuple(kinds) == moe_layout.MAPS_ARGUMENT_KINDS
    header = (paths.include_dir() / "deep_tile" / "kernels" / "k_grouped_maps.cuh").read_text()
    threads = int(re.search(r"kKGroupedMapsThreads = (\d+);", header).group(1))
    assert threads == moe_layout.MAPS_THREADS == family.MAX_TABLE_GROUPS


@pytest.mark.slow
def test_blocks_kernels_build_spill_free():
    """The blocks kernel of the rule's picks (staged in place, 128x160 with a C of its own, the short
    tile, the pairs) and the map-table kernel compile for sm_90a without spills or a stack."""
    picks = [(4096, 7168, 8192, 8, "out"), (4096, 7168, 8192, 8, "float32"), (64, 7168, 4096, 4, "out"),
             (4096, 7168, 32 * 1024, 32, "out")]
    for m, n, k, g, c in picks:
        problem = Problem(m, n, k, kind=KG, num_groups=g, b_scale_1d=True, out_dtype="float32", c_dtype=c)
        config = select_k_grouped_config(problem, 132).for_problem(problem)
        result = compiler.compile_cubin(paths.entry_path(family.ENTRY), family.k_grouped_blocks_defines(config),
                                        family.GROUPED_SYMBOL, "nvrtc")
        assert compiler.ptxas_problems(result.log) == [], (config.label, result.log)
    result = compiler.compile_cubin(paths.entry_path(moe_layout.ENTRY), {}, moe_layout.MAPS_SYMBOL, "nvrtc")
    assert compiler.has_symbol(result.cubin, moe_layout.MAPS_SYMBOL)
    assert compiler.ptxas_problems(result.log) == []


def _flat(rows: int, k: int) -> torch.Tensor:
    return (torch.arange(rows * k, dtype=torch.int32) % 113).to(torch.uint8).view(torch.float8_e4m3fn)


def test_blocks_views_share_the_storage():
    """The flat buffers are viewed as [m, k] / [n, k] (m, n the scales' rows), never copied."""
    a, b = _flat(8 * 384, 1), _flat(16 * 384, 1).view(16, 384)
    sa, sb = torch.ones(8, 3), torch.ones(16, 3)
    va, vb = launch.k_grouped_blocks_views(a, sa, b, sb)
    assert va.shape == (8, 384) and vb.shape == (16, 384)
    assert va.data_ptr() == a.data_ptr() and vb.data_ptr() == b.data_ptr()


@pytest.mark.parametrize("change, words", [
    (dict(a=_flat(8 * 384 + 16, 1)), r"a must be a contiguous buffer of 8 \* k = 3072 elements"),
    (dict(b=_flat(16 * 380, 1)), r"a must be a contiguous buffer of 8 \* k = 3040 elements"),
    (dict(a=_flat(16 * 384, 1).view(16, 384)[::2]), "not contiguous"),
    (dict(a_scale=torch.ones(24)), "a_scale and b_scale must be 2-D"),
    (dict(group_sizes=[128, 100, 156]), "with layout='blocks' every group size must be a multiple of 16"),
    (dict(layout="cols"), "layout must be one of"),
])
def test_blocks_refusals(monkeypatch, change, words):
    """Bad arguments of the blocks layout raise, naming the function, before anything is launched."""
    launched = []
    monkeypatch.setattr(launch, "launch_k_grouped_blocks", lambda *args: launched.append(args))
    real = checks.check_k_grouped_args
    monkeypatch.setattr(launch, "check_k_grouped_args", lambda *a, **kw: real(*a, **kw, data_checks=False))
    args = dict(a=_flat(8 * 384, 1), a_scale=torch.ones(8, 3), b=_flat(16 * 384, 1), b_scale=torch.ones(16, 3),
                group_sizes=[128, 0, 256], layout="blocks")
    args.update(change)
    layout = args.pop("layout")
    with pytest.raises(ValueError, match=f"k_grouped_fp8_gemm_1d1d: .*({words})"):
        launch.run_k_grouped(**args, layout=layout)
    assert not launched


def test_blocks_reach_the_launcher_without_a_copy(monkeypatch):
    """k_grouped_fp8_gemm_1d1d(layout="blocks") hands the flat buffers' own storage to the launcher
    (views, no copy), with out, c and the sizes; c = out accumulates in place."""
    import deep_tile.gemm.k_grouped as k_grouped

    launched = []
    monkeypatch.setattr(launch, "launch_k_grouped_blocks", lambda *args: launched.append(args))
    real = checks.check_k_grouped_args
    monkeypatch.setattr(launch, "check_k_grouped_args", lambda *a, **kw: real(*a, **kw, data_checks=False))
    a, b = _flat(8 * 384, 1), _flat(16 * 384, 1)
    sa, sb = torch.ones(8, 3), torch.ones(16, 3)
    sizes = torch.tensor([128, 0, 256], dtype=torch.int32)
    out = torch.zeros(3, 8, 16)
    k_grouped.k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes, out, c=out, layout="blocks")
    other = torch.zeros(3, 8, 16)
    k_grouped.k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes, out, c=other, layout="blocks")
    (problem, va, psa, vb, psb, psizes, pout, pc, config), second = launched
    pc2 = second[7]
    assert (problem.m, problem.n, problem.k, problem.num_groups, problem.c_dtype) == (8, 16, 384, 3, "out")
    assert va.data_ptr() == a.data_ptr() and vb.data_ptr() == b.data_ptr() and va.shape == (8, 384)
    assert psa is sa and psb is sb and psizes is sizes and pout is out and pc is out and pc2 is other
    assert config is None


# ---- the TN form's byte transposition (host side; its GPU checks: tests/test_compat_deepgemm.py) ----

def test_the_transposition_kernel_contract():
    """The transposition's parameters are TRANSPOSE_ARGUMENT_KINDS; its threads and tile are the
    header's; the grid covers both matrices' tiles."""
    source = paths.entry_path(moe_layout.ENTRY).read_text()
    signature = re.search(rf"{moe_layout.TRANSPOSE_SYMBOL}\((.*?)\)\s*{{", source, re.S).group(1)
    kinds = ["ptr" if "*" in p else "i32" for p in signature.split(",")]
    assert tuple(kinds) == moe_layout.TRANSPOSE_ARGUMENT_KINDS
    header = (paths.include_dir() / "deep_tile" / "kernels" / "fp8_transpose.cuh").read_text()
    assert int(re.search(r"kTransposeThreads = (\d+);", header).group(1)) == moe_layout.TRANSPOSE_THREADS
    assert int(re.search(r"kTransposeTile = (\d+);", header).group(1)) == moe_layout.TRANSPOSE_TILE
    assert moe_layout.transpose_grid(4096, 7168, 2048) == 32 * (56 + 16)
    assert moe_layout.transpose_grid(400, 528, 0) == 4 * 5
    assert moe_layout.transpose_grid(0, 528, 16) == 0


def test_transpose_bytes_on_the_cpu_is_torchs_copy():
    """CPU tensors (and shapes the kernel refuses) take torch's copy: the exact transposes; bad
    shapes raise."""
    from deep_tile.gemm.moe_layout import transposable, transpose_bytes_into

    gen = torch.Generator().manual_seed(0)
    pairs = []
    for rows, cols in ((48, 80), (48, 24)):
        src = torch.randint(0, 256, (rows, cols), generator=gen, dtype=torch.int32).to(torch.uint8)
        pairs.append((src.view(torch.float8_e4m3fn), torch.full((cols, rows), 7, dtype=torch.uint8)))
    transpose_bytes_into(pairs)
    for src, dst in pairs:
        assert torch.equal(dst, src.view(torch.uint8).t())
        assert not transposable(src)
    with pytest.raises(ValueError, match="one or two"):
        transpose_bytes_into(pairs * 2)
    with pytest.raises(ValueError, match="contiguous dst"):
        transpose_bytes_into([(pairs[0][0], torch.empty(48, 80, dtype=torch.uint8))])


@pytest.mark.parametrize("choice", ["kernel", "torch"])
def test_tn_form_hands_on_the_same_operands_either_way(monkeypatch, choice):
    """DEEP_TILE_KGROUPED_TN_TRANSPOSE picks the copy; on the CPU both give the launcher the same
    [m, sum_k] / [n, sum_k] operands (the recorded call)."""
    import deep_tile.compat.deepgemm as deep_gemm
    import deep_tile.gemm.k_grouped

    monkeypatch.setenv("DEEP_TILE_KGROUPED_TN_TRANSPOSE", choice)
    recorded = []
    monkeypatch.setattr(deep_tile.gemm.k_grouped, "k_grouped_fp8_gemm_1d1d", lambda *a, **k: recorded.append(a))
    ks = [128, 0, 256]
    m, n = 32, 48
    gen = torch.Generator().manual_seed(1)
    x = [torch.randint(0, 256, (sum(ks), r), generator=gen, dtype=torch.int32).to(torch.uint8)
         .view(torch.float8_e4m3fn) for r in (m, n)]
    sf = [torch.rand(sum(ks) // 128, r, generator=gen) for r in (m, n)]
    d = torch.zeros(len(ks), m, n)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous((x[0], sf[0]), (x[1], sf[1]), d, ks, torch.tensor(ks, dtype=torch.int32))
    (args,) = recorded
    assert torch.equal(args[0].view(torch.uint8), x[0].view(torch.uint8).t())
    assert torch.equal(args[2].view(torch.uint8), x[1].view(torch.uint8).t())
    assert args[0].is_contiguous() and args[2].is_contiguous() and args[0].dtype == torch.float8_e4m3fn


def test_the_transposition_builds_spill_free():
    """The transposition compiles for sm_90a without spills or a stack frame."""
    result = compiler.compile_cubin(paths.entry_path(moe_layout.ENTRY), {}, moe_layout.TRANSPOSE_SYMBOL, "nvrtc")
    assert compiler.has_symbol(result.cubin, moe_layout.TRANSPOSE_SYMBOL)
    assert compiler.ptxas_problems(result.log) == []
