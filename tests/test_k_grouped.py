"""The K-grouped 1D1D FP8 GEMM (MoE weight gradients, deep_tile.gemm.k_grouped).

Host-side tests (no GPU): the kind and its contract (defines, kernel parameters, shared memory),
the selection rule, the checks (nothing written on error), the float64 reference. GPU tests
(marker ``gpu``, in a child process, tests/gpu_training_cases.py): forced tile families and the
selector's rule against the float64 reference with poisoned outputs, groups of 0 / 1 / 127 / 128 /
129 tokens, uneven groups, tokens past the groups holding FP8 NaN, bitwise repeats, a host list of
sizes, and a CUDA graph replayed with new sizes.
"""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from conftest import accuracy_problems, assert_spill_free, compiler_params, run_child_cases
from deep_tile import arch
from deep_tile.gemm import checks
from deep_tile.jit import paths
from deep_tile.gemm.k_grouped import k_grouped_fp8_gemm_1d1d
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.reference import ref_fp8_gemm_1d1d, ref_k_grouped_fp8_gemm_1d1d
from deep_tile.select import KernelConfig
from deep_tile.select.k_grouped import SHORT_TILE, STAGED_TILE, TILE, select_k_grouped_config

KG = ProblemKind.K_GROUPED
EDGE_SIZES = [128, 0, 1, 127, 129, 256, 5, 384]
"""A group of exactly one block, an empty one, 1 / 127 / 129 tokens, and groups starting mid-block."""
UNEVEN_SIZES = [1000, 24, 3000, 0, 1, 700]
MANY_SIZES = [1024 + 37 * ((7 * i) % 5 - 2) for i in range(32)]
"""32 experts of about 1k tokens each."""

# Forced tiles of the GPU tests (each with the output variants it runs): two accumulator buffers,
# one buffer with two sub-tiles (256 rows; 256 columns in two parts), one consumer warpgroup (64
# rows), a width that is not a multiple of 128 (the rule's tile, with every output variant), and
# 192 columns in two parts of 96 and in one (C loaded 8 column pairs at a time).
FAMILIES = [
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2),
     [("float32", "inplace"), ("float32", "none"), ("bfloat16", "none"), ("float32", "bfloat16")]),
    (dict(block_m=256, block_n=128, num_stages=3), [("float32", "inplace"), ("bfloat16", "float32")]),
    (dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3), [("float32", "inplace")]),
    (dict(block_m=64, block_n=128, num_stages=8, accum_buffers=2), [("float32", "inplace"), ("bfloat16", "bfloat16")]),
    (dict(block_m=128, block_n=160, num_stages=4),
     [("float32", "inplace"), ("bfloat16", "none"), ("float32", "bfloat16")]),
    (dict(block_m=128, block_n=192, wgmma_n=96, num_stages=4), [("float32", "inplace")]),
    (dict(block_m=128, block_n=192, num_stages=4), [("float32", "inplace"), ("bfloat16", "none")]),
]
SHAPES = [(256, 384), (1000, 2112), (520, 1160)]
"""(m, n): whole tiles; a partial last m-block and 2112 = 16.5 x 128 columns; n % 16 == 8."""

# Forced tiles with the staged epilogue (FP32 D without C or in place; one sub-tile per consumer
# warpgroup): 160 columns (5 atoms), 128x128 (the rule's before 128x152), 144 columns (atoms of 16
# floats), one consumer warpgroup with two buffers, and widths of 8 mod 16 staged unswizzled
# (152: 4 stages; 56 over one consumer warpgroup).
STAGED_FAMILIES = [
    dict(block_m=128, block_n=160, num_stages=3, staged_epilogue=True),
    dict(block_m=128, block_n=128, num_stages=4, accum_buffers=1, staged_epilogue=True),
    dict(block_m=128, block_n=144, num_stages=4, staged_epilogue=True),
    dict(block_m=64, block_n=128, num_stages=7, accum_buffers=2, staged_epilogue=True),
    dict(block_m=128, block_n=152, num_stages=4, staged_epilogue=True),
    dict(block_m=64, block_n=56, num_stages=8, accum_buffers=2, staged_epilogue=True),
]
# Forced tiles in 2-CTA multicast pairs: the staged 128x128 sharing B (pairs along M) in place and
# without C, and sharing A (pairs along N) in place; the direct store's 128x160 sharing B, in place
# and to bf16.
MULTICAST_FAMILIES = [
    (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, staged_epilogue=True),
     [("float32", "inplace"), ("float32", "none")]),
    (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, staged_epilogue=True),
     [("float32", "inplace")]),
    (dict(block_m=128, block_n=160, num_stages=4, num_multicast=2), [("float32", "inplace"), ("bfloat16", "none")]),
    (dict(block_m=128, block_n=152, num_stages=4, num_multicast=2, staged_epilogue=True), [("float32", "inplace")]),
]
MULTICAST_SHAPES = [(256, 384), (576, 1160), (128, 384)]
"""(m, n): an even number of tiles per group (both tiles of a pair of one group); a last m-block
whose second warpgroup has no rows; 3 tiles per group (odd: the launcher drops the pairs)."""
STAGED_SHAPES = [(256, 384), (576, 1160), (192, 2112)]
"""(m, n) the staged epilogue takes (m % 64 == 0): whole tiles; a last m-block whose second
warpgroup's slab lies past m, with a last atom 8 columns wide (n % 32 == 8); 2112 = 16.5 x 128
columns."""


def configs() -> list:
    """Every KernelConfig the GPU tests force (tests/test_kernel_build.py compiles them)."""
    out = []
    for fields, variants in FAMILIES:
        for out_dtype, c_mode in variants:
            c_dtype = {"none": None, "inplace": "out"}.get(c_mode, c_mode)
            out.append(KernelConfig(**fields, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype=out_dtype,
                                    c_dtype=c_dtype))
    for fields in STAGED_FAMILIES:
        for c_dtype in ("out", None):
            out.append(KernelConfig(**fields, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype="float32",
                                    c_dtype=c_dtype))
    for fields, variants in MULTICAST_FAMILIES:
        for out_dtype, c_mode in variants:
            c_dtype = {"none": None, "inplace": "out"}.get(c_mode, c_mode)
            out.append(KernelConfig(**fields, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype=out_dtype,
                                    c_dtype=c_dtype))
    return out


BENCH_SHAPES = [(4096, 7168), (7168, 2048)]
"""(m, n) of DeepGEMM's k-grouped test (and benchmarks/bench_training.py's k-grouped set)."""


def rule_configs() -> list:
    """The selection rule's picks on the k-grouped benchmark set (4 to 64 groups of 1k-8k tokens),
    FP32 accumulated in place, on 132 and 114 SMs (tests/test_kernel_build.py compiles them)."""
    picks = []
    for m, n in BENCH_SHAPES:
        for groups, tokens in ((4, 8192), (8, 4096), (16, 2048), (32, 1024), (64, 1024)):
            for num_sms in (132, 114):
                problem = Problem(m, n, groups * tokens, kind=KG, num_groups=groups, b_scale_1d=True,
                                  out_dtype="float32", c_dtype="out")
                picks.append(select_k_grouped_config(problem, num_sms).for_problem(problem))
    for block_m, block_n, wgmma_n, accum_buffers in (TILE, SHORT_TILE):  # in place on 132 SMs, every stage count
        config = KernelConfig(block_m=block_m, block_n=block_n, wgmma_n=wgmma_n, accum_buffers=accum_buffers,
                              num_stages=2, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype="float32",
                              c_dtype="out")
        picks.append(dataclasses.replace(config, num_stages=max_stages(config)))
    return picks


def max_stages(config: KernelConfig) -> int:
    """The most stages ``config``'s tile fits (the rule's stage count)."""
    stages = family.MAX_STAGES
    while family.smem_bytes(config.block_m, config.block_n, stages, 1, False, True, family.d_staging_bytes(config),
                            True) > arch.MAX_SMEM_PER_BLOCK:
        stages -= 1
    return stages


def _run(function: str, cases: list) -> list:
    return run_child_cases("gpu_training_cases.py", function, cases, timeout=900.0)


def _check(results: list) -> None:
    bad = []
    for r in results:
        problems = accuracy_problems(r, nan_what="NaN (unwritten, or a neighbour's tokens read)")
        if r.get("unwritten"):
            problems.append(f"{r['unwritten']} elements still hold C (unwritten)")
        if r.get("empty_wrong"):
            problems.append(f"{r['empty_wrong']} elements of empty groups differ from C (or 0)")
        if not r.get("bitwise_repeat", True):
            problems.append("repeat not bitwise identical")
        if problems:
            bad.append(f"m={r['m']} n={r['n']} k={r['k']} sizes={r.get('sizes')} out={r.get('out_dtype')} "
                       f"c={r.get('c_mode')} config={r.get('config')}: " + "; ".join(problems))
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(bad)


def test_staged_epilogue_where_the_problem_allows():
    """A config with the staged epilogue keeps it for the K-grouped FP32 problems it can run (m % 64
    == 0, without C or in place), with D's FP32 tensor map and its stagings and barriers in shared
    memory, and drops it (the direct store, every other field kept) otherwise; nothing else may
    ask for it."""
    for fields in STAGED_FAMILIES:
        for m, n in STAGED_SHAPES + [(1000, 2112), (520, 1160)]:
            for c_dtype in ("out", None, "float32"):
                config = KernelConfig(**fields, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype="float32",
                                      c_dtype=c_dtype if c_dtype != "float32" else None)
                problem = Problem(m, n, 4096, kind=KG, num_groups=4, b_scale_1d=True, out_dtype="float32",
                                  c_dtype=c_dtype)
                allowed = m % 64 == 0 and c_dtype != "float32"
                if not allowed and config.block_n not in family.LEGAL_BLOCK_N:  # no direct store of that width
                    with pytest.raises(ValueError, match="runs only with the staged epilogue"):
                        config.for_problem(problem)
                    continue
                planned = config.for_problem(problem)
                assert planned.staged_epilogue == allowed == family.staged_epilogue_allowed(problem), (m, c_dtype)
                assert (planned.block_m, planned.block_n, planned.accum_buffers) == \
                    (config.block_m, config.block_n, config.accum_buffers)
                defines = planned.defines()
                assert defines.get(family.STAGED_EPILOGUE_DEFINE, 0) == int(allowed)
                parts = planned.smem_breakdown()
                warpgroups = family.math_warpgroups(planned.block_m)
                assert parts["d_staging"] == (warpgroups * 64 * planned.wgmma_n * 4 if allowed else 0)
                assert parts["barriers"] == 16 * planned.num_stages + (16 * warpgroups if allowed else 0)
                assert defines["DT_SMEM_BYTES"] == parts["total"] <= arch.MAX_SMEM_PER_BLOCK
                d_map = family.argument_specs(planned, problem)[3]
                assert (type(d_map).__name__, getattr(d_map, "element", None)) == \
                    (("TensorMap", "float32") if allowed else ("ZeroMap", None))
    dense = dict(block_m=128, block_n=160, num_stages=3, grid_size=132, staged_epilogue=True)
    for extra in (dict(), dict(out_dtype="float32"), dict(problem_kind=KG, b_scale_1d=True),
                  dict(problem_kind=KG, b_scale_1d=True, out_dtype="float32", c_dtype="float32"),
                  dict(problem_kind=KG, b_scale_1d=True, out_dtype="float32", block_n=256, wgmma_n=128)):
        with pytest.raises(ValueError, match="staged_epilogue needs"):
            KernelConfig(**{**dense, **extra})


def test_k_grouped_refuses_column_parts_wider_than_192():
    """A K-grouped tile of one 256-column part (never built or checked) is refused with the way out
    named; one 192-column part (the GPU tests force it) and the same width in two parts are taken."""
    with pytest.raises(ValueError, match="column parts .wgmma_n. of at most 192; got 256"):
        KernelConfig(block_m=64, block_n=256, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True,
                     out_dtype="float32")
    assert KernelConfig(block_m=64, block_n=256, wgmma_n=128, num_stages=4, grid_size=132, problem_kind=KG,
                        b_scale_1d=True, out_dtype="float32").wgmma_n == 128
    assert KernelConfig(block_m=128, block_n=192, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True,
                        out_dtype="float32").wgmma_n == 192
    assert family.K_GROUPED_MAX_WGMMA_N == 192


def test_widths_of_8_mod_16_only_with_the_staged_epilogue_in_one_part():
    """152 columns (and the other widths of 8 mod 16 up to 184) are K-grouped staged tiles of one
    column part, their FP32 staging unswizzled in one 64-row box of the whole width; the dense
    kind and the K-grouped direct store refuse them, and no width of 16 changes its staging."""
    fields = dict(block_m=128, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True, out_dtype="float32",
                  c_dtype="out")
    config = KernelConfig(block_n=152, staged_epilogue=True, **fields)
    assert family.f32_plain_staging(config) and config.wgmma_n == 152
    boxes = family.tensor_map_boxes(config, 4096)
    assert (boxes.d, boxes.d_swizzle) == ((152, 64), 0)
    # without the b_scale ring (tiles over 128 columns) one slot a stage: 4 stages fit beside the stagings
    assert config.smem_breakdown()["b_scale_stages"] == 4 * 640 and config.smem_bytes <= arch.MAX_SMEM_PER_BLOCK
    with pytest.raises(ValueError, match="or with the K-grouped staged epilogue one of"):
        KernelConfig(block_n=152, **fields)
    with pytest.raises(ValueError, match="block_n must be one of"):
        KernelConfig(block_m=128, block_n=152, num_stages=4, grid_size=132)
    with pytest.raises(ValueError, match="one column part: wgmma_n must be 152"):
        KernelConfig(block_n=152, wgmma_n=76, staged_epilogue=True, **fields)
    assert family.STAGED_PLAIN_BLOCK_N == tuple(range(24, 185, 16))
    for block_n in (128, 144, 160):
        swizzled = KernelConfig(block_n=block_n, staged_epilogue=True, **{**fields, "num_stages": 3})
        assert not family.f32_plain_staging(swizzled)
        assert family.tensor_map_boxes(swizzled, 4096).d_swizzle == family.f32_atom_cols(block_n) * 4


@pytest.mark.parametrize("name", compiler_params())
def test_unswizzled_staging_builds_spill_free(name):
    """The 152-column staged tile in place, alone and in pairs sharing B: no stack, no spill."""
    from deep_tile.jit import compiler

    problem = Problem(4096, 7168, 32768, kind=KG, num_groups=16, b_scale_1d=True, out_dtype="float32", c_dtype="out")
    for multicast in (1, 2):
        config = KernelConfig(block_m=128, block_n=152, num_stages=4, num_multicast=multicast, grid_size=132,
                              problem_kind=KG, b_scale_1d=True, out_dtype="float32", c_dtype="out",
                              staged_epilogue=True).for_problem(problem)
        assert config.staged_epilogue and config.num_multicast == multicast
        result = compiler.compile_cubin(paths.entry_path(family.ENTRY), family.defines(config), family.symbol(KG), name)
        assert compiler.ptxas_problems(result.log) == [], result.log
        assert_spill_free(result.log)


@pytest.mark.parametrize("name", compiler_params())
def test_k_grouped_192_column_part_builds_spill_free(name):
    """In place, the one-part 192-column tile loads C 8 column pairs at a time: no stack, no spill
    (all 24 pairs at once spilled 56 bytes and stored wrong sums on the device)."""
    from deep_tile.jit import compiler, paths

    problem = Problem(4096, 7168, 33408, kind=KG, num_groups=16, b_scale_1d=True, out_dtype="float32", c_dtype="out")
    config = KernelConfig(block_m=128, block_n=192, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True,
                          out_dtype="float32").for_problem(problem)
    result = compiler.compile_cubin(paths.entry_path(family.ENTRY), family.defines(config), family.symbol(KG), name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert_spill_free(result.log)


# ---- GPU -------------------------------------------------------------------------------------

def forced_cases(families: list, shapes: list) -> list:
    """The cases of tests/gpu_training_cases.py's k_grouped for forced tiles ``families`` ((fields,
    [(out_dtype, c_mode), ...]) each) on the three ``shapes``: shape j with the edge, the uneven
    (40 tokens past the groups) or the mostly empty groups; 132 or 30 CTAs in turn."""
    cases = []
    for i, (fields, variants) in enumerate(families):
        for j, (m, n) in enumerate(shapes):
            sizes = (EDGE_SIZES, UNEVEN_SIZES, [0, 0, 3])[j]
            for out_dtype, c_mode in variants:
                config = dict(fields, grid_size=132 if (i + j) % 2 else 30, raster_width=8)
                cases.append(dict(m=m, n=n, sizes=sizes, out_dtype=out_dtype, c_mode=c_mode, config=config,
                                  seed=10 * i + j, pad=40 if j == 1 else 0))
    return cases


@pytest.mark.gpu
def test_every_k_grouped_family():
    _check(_run("k_grouped", forced_cases(FAMILIES, SHAPES)))


@pytest.mark.gpu
def test_staged_epilogue():
    """The staged epilogue's forced tiles (FP32 in place and without C) against float64, on the
    shapes it takes (test_staged_epilogue_where_the_problem_allows checks that their plans keep
    it), with the edge, uneven and mostly empty groups. In place, the uneven groups' tiles take
    both stores in one launch: 3000 tokens (24 k-blocks) by the TMA unit's reduce-add, the others
    (under 12 k-blocks) by C loaded into the staging and stored."""
    variants = [("float32", "inplace"), ("float32", "none")]
    _check(_run("k_grouped", forced_cases([(fields, variants) for fields in STAGED_FAMILIES], STAGED_SHAPES)))


@pytest.mark.gpu
def test_multicast_pairs():
    """Forced 2-CTA multicast tiles against float64: the two tiles of a pair, of one group, run its
    k-blocks in step and share B (or A); edge groups (masked first and last k-blocks), uneven
    ones (a 3000-token group added by the TMA unit's reduce-add), mostly empty ones; a group of an
    odd number of tiles runs without pairs."""
    _check(_run("k_grouped", forced_cases(MULTICAST_FAMILIES, MULTICAST_SHAPES)))


@pytest.mark.gpu
def test_k_grouped_public_api():
    """The selector's rule through k_grouped_fp8_gemm_1d1d: DeepGEMM's shapes with 8 and 32 experts
    (uneven, one empty), a host list of sizes, every group empty, one group, and an in-place problem
    with m < n and few tokens per group (the rule's 2-CTA pairs)."""
    cases = [dict(m=4096, n=7168, sizes=[0] + [1536 + 128 * (i % 3) for i in range(7)], seed=1),
             dict(m=7168, n=2048, sizes=MANY_SIZES, seed=2),
             dict(m=1000, n=2112, sizes=EDGE_SIZES, host_sizes=True, seed=3),
             dict(m=520, n=1160, sizes=[0, 0, 0], out_dtype="bfloat16", c_mode="none", seed=4),
             dict(m=256, n=512, sizes=[4000], out_dtype="float32", c_mode="float32", pad=96, seed=5),
             # in place with m < n and few tokens per group: the rule's 2-CTA pairs
             dict(m=512, n=1024, sizes=[1000, 0, 700, 129], seed=6)]
    _check(_run("k_grouped", cases))


@pytest.mark.gpu
def test_k_grouped_graph_replay_with_new_sizes():
    results = _run("k_grouped_graph", [dict(m=1000, n=2112, sizes=EDGE_SIZES, new_sizes=UNEVEN_SIZES[:5] + [9, 300, 2]),
                                       dict(m=4096, n=512, sizes=[512] * 4, new_sizes=[0, 1, 1900, 129], seed=3),
                                       dict(m=256, n=512, sizes=[300, 0, 77, 5], new_sizes=[0, 900, 1, 128], seed=4)])
    bad = [f"{r}" for r in results if accuracy_problems(r)]
    assert not bad, bad


# ---- host side -------------------------------------------------------------------------------

def test_the_kind_and_its_problem():
    assert KG.short_name == "k_grouped" and KG.grouped and KG.has_table
    assert checks.PROBLEM_KIND_NAMES["k_grouped"] is KG
    assert family.PROBLEM_KIND_CODES[KG] == 4
    p = Problem(4096, 7168, 8192, kind=KG, num_groups=8, b_scale_1d=True, out_dtype="float32", c_dtype="out")
    assert p.expected_m == 4096 and p.m_blocks(128) == 8 * 32 and p.rows == 4096
    assert p != Problem(4096, 7168, 8192, kind=KG, num_groups=4, b_scale_1d=True, out_dtype="float32", c_dtype="out")


def test_the_rule_makes_k_grouped_kernels():
    for m, n in BENCH_SHAPES + [(512, 512), (64, 4096), (4096, 64)]:
        for groups in (1, 4, 32, 512):
            for out_dtype, c_dtype in (("float32", "out"), ("bfloat16", None), ("float32", "bfloat16")):
                p = Problem(m, n, groups * 1024, kind=KG, num_groups=groups, b_scale_1d=True, out_dtype=out_dtype,
                            c_dtype=c_dtype)
                c = select_k_grouped_config(p, 132).for_problem(p)
                # alone: 1024 tokens per group are more than pairs take (PAIRS_MAX_TOKENS)
                assert (c.problem_kind, c.b_scale_1d, c.num_multicast, c.multicast_on_a, c.split_k, c.swap_n,
                        c.k_unroll) == (KG, True, 1, False, 1, 0, 3), c.label
                assert (c.out_dtype, c.c_dtype, c.grid_size) == (out_dtype, c_dtype, 132)
                # the staged epilogue wherever the problem takes it (FP32 without C or in place, m % 64 == 0)
                staged = out_dtype == "float32" and c_dtype in (None, "out") and m % 64 == 0
                assert c.staged_epilogue == staged, c.label
                # staged 128x152 (its staging unswizzled), else 128x160 (64x128 at m <= 64)
                tile = SHORT_TILE if m <= 64 else STAGED_TILE if staged else TILE
                assert (c.block_m, c.block_n, c.wgmma_n, c.accum_buffers) == tile, c.label
                assert family.f32_plain_staging(c) == (tile == STAGED_TILE)
                assert c.direct_store and family.d_staging_bytes(c) == (64 * 4 * c.wgmma_n * c.num_math_warpgroups
                                                                        if staged else 0)
                assert c.smem_bytes <= arch.MAX_SMEM_PER_BLOCK
                assert c.smem_breakdown()["group_table"] == family.GROUP_TABLE_BYTES
    with pytest.raises(ValueError, match="needs a k_grouped problem"):
        select_k_grouped_config(Problem(256, 256, 256), 132)


def test_the_kernel_contract():
    """DT_PROBLEM_KIND 4; the grouped entry's parameters, C's and the 1D1D b_scale map; the argument
    specs (the sizes as the group info, C after it, b_scale's map last); what cannot be built."""
    config = configs()[0]
    assert config.defines()["DT_PROBLEM_KIND"] == 4 and family.symbol(KG) == family.GROUPED_SYMBOL
    source = paths.entry_path(family.ENTRY).read_text()
    assert "DT_PROBLEM_KIND == 4" in source and "int num_groups, int group_rows DT_C_PARAMS DT_B1D_PARAMS" in source
    problem = Problem(1000, 2112, 4096, kind=KG, num_groups=8, b_scale_1d=True, out_dtype="float32", c_dtype="out")
    specs = family.argument_specs(config, problem)
    assert len(specs) == len(family.arguments(KG, direct=True, b_scale_1d=True))
    assert specs[3].code() == (1,)  # no D tensor map: stored from registers
    c_index = len(family.GROUPED_OPERANDS)
    assert specs[-3].code() == (2, c_index) and specs[-2].code() == (4, c_index, 0)
    bf16 = KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True)
    assert bf16.direct_store and family.d_staging_bytes(bf16) == 0  # bf16 without C: stored from registers too
    with pytest.raises(ValueError, match="k_grouped kind needs the column-major a_scale"):
        KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True,
                     a_scale_row_major=True)
    with pytest.raises(ValueError, match="k_grouped kind needs b_scale_1d"):
        KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, problem_kind=KG)
    with pytest.raises(ValueError, match="persistent kernels only"):
        KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, problem_kind=KG, b_scale_1d=True,
                     split_k=2)


def test_the_rule_pairs_only_where_measured():
    """The rule's pairs: the staged tile in place with at most PAIRS_MAX_TOKENS tokens per group
    (8 groups sharing 2048 tokens), either orientation; not with ~1k tokens or more, another output
    variant, or an odd number of tiles. Long groups in place with m < n take 128x160 (WIDE_MIN_TOKENS)."""
    def pick(m, n, groups, tokens, c_dtype="out"):
        p = Problem(m, n, groups * tokens, kind=KG, num_groups=groups, b_scale_1d=True, out_dtype="float32",
                    c_dtype=c_dtype)
        return select_k_grouped_config(p, 132).for_problem(p)
    assert pick(4096, 7168, 8, 256).num_multicast == 2 and pick(7168, 2048, 8, 256).num_multicast == 2
    assert pick(4096, 7168, 4, 512).num_multicast == 2 and pick(4096, 7168, 4, 513).num_multicast == 1
    assert pick(4096, 7168, 32, 1024).num_multicast == 1 and pick(7168, 2048, 64, 1024).num_multicast == 1
    assert pick(7168, 2048, 16, 2088).num_multicast == 1 and pick(4096, 7168, 16, 2048).num_multicast == 1
    assert pick(4096, 7168, 8, 256, c_dtype=None).num_multicast == 1  # not in place
    assert pick(128, 456, 8, 256).num_multicast == 1  # 3 tiles per group
    paired = pick(4096, 7168, 8, 256)
    assert (paired.block_m, paired.block_n, paired.multicast_on_a, paired.staged_epilogue) == (128, 152, False, True)
    assert family.cluster_size(paired) == 2 and paired.grid_size == 132
    for groups, tokens, tile in ((4, 8192, TILE), (4, 6144, TILE), (4, 6143, STAGED_TILE), (8, 4096, STAGED_TILE)):
        for m, n in ((4096, 7168), (7168, 2048), (2048, 2048)):
            config = pick(m, n, groups, tokens)
            want = tile if m < n else STAGED_TILE  # 128x160 for long groups with m < n only
            assert (config.block_m, config.block_n, config.staged_epilogue) == (want[0], want[1], True), (m, n, tokens)
    assert pick(4096, 7168, 16, 2048).num_stages == 4  # 152 columns: 4 stages beside the stagings


def test_multicast_pairs_only_where_each_group_has_even_tiles():
    """A K-grouped config in 2-CTA pairs keeps them for a problem whose groups each have an even
    number of tiles (a pair is then of one group) and drops them, every other field kept,
    otherwise; the kept ones launch clusters of two."""
    for fields in (dict(block_m=128, block_n=128, num_stages=4), dict(block_m=128, block_n=160, num_stages=4)):
        for on_a in (False, True):
            config = KernelConfig(**fields, grid_size=132, problem_kind=KG, b_scale_1d=True, num_multicast=2,
                                  multicast_on_a=on_a, out_dtype="float32", c_dtype="out")
            for m, n in ((256, 384), (576, 1160), (128, 384), (4096, 7168), (7168, 2048), (1000, 2112)):
                problem = Problem(m, n, 8192, kind=KG, num_groups=4, b_scale_1d=True, out_dtype="float32",
                                  c_dtype="out")
                even = -(-m // fields["block_m"]) * -(-n // fields["block_n"]) % 2 == 0
                planned = config.for_problem(problem)
                assert family.k_grouped_multicast_allowed(problem, fields["block_m"], fields["block_n"]) == even
                assert (planned.num_multicast, planned.multicast_on_a) == ((2, on_a) if even else (1, False)), (m, n)
                assert family.cluster_size(planned) == (2 if even else 1)
                assert (planned.block_m, planned.block_n, planned.num_stages) == \
                    (fields["block_m"], fields["block_n"], fields["num_stages"])


def test_the_device_scheduler_states_the_kind():
    header = (paths.include_dir() / "deep_tile" / "scheduler" / "tile_scheduler.cuh").read_text()
    assert re.search(r"struct Scheduler<Cfg, ProblemKind::kKGrouped>", header)
    assert "build_k_ranges" in header and "KRange k_range(" in header


def _operands(m=256, n=512, k=1024, device="cpu"):
    a = torch.zeros((m, k), dtype=torch.float8_e4m3fn, device=device)
    b = torch.zeros((n, k), dtype=torch.float8_e4m3fn, device=device)
    return a, torch.ones((m, -(-k // 128)), device=device), b, torch.ones((n, -(-k // 128)), device=device)


def test_checks():
    a, sa, b, sb = _operands()
    check = checks.check_k_grouped_args
    sizes = torch.tensor([100, 0, 900], dtype=torch.int32)
    p, s = check(a, sa, b, sb, sizes, None, None, data_checks=False)
    assert (p.kind, p.m, p.n, p.k, p.num_groups, p.out_dtype, p.c_dtype, p.b_scale_1d) == \
        (KG, 256, 512, 1024, 3, "float32", None, True) and s is sizes
    out = torch.empty((3, 256, 512))
    p, s = check(a, sa, b, sb, [1, 2, 3], out, out, data_checks=False)
    assert p.c_dtype == "out" and s == (1, 2, 3)
    p, _ = check(a, sa, b, sb, [1, 2, 3], out, torch.empty((3, 256, 512), dtype=torch.bfloat16), data_checks=False)
    assert p.c_dtype == "bfloat16"
    p, _ = check(a, sa, b, sb, [5], None, None, torch.bfloat16, data_checks=False)
    assert p.out_dtype == "bfloat16"
    fn = "k_grouped_fp8_gemm_1d1d"
    bad = [
        (TypeError, "a must be a torch.Tensor", dict(a=None)),
        (TypeError, "b must have dtype torch.float8_e4m3fn", dict(b=b.float())),
        (ValueError, r"b_scale must have shape \(n, ceil\(k/128\)\)", dict(b_scale=torch.ones((4, 8)))),
        (ValueError, r"a_scale must have shape \(m, ceil\(k/128\)\)", dict(a_scale=torch.ones((256, 7)))),
        (ValueError, "group_sizes must be a contiguous 1-D torch.int32 tensor", dict(group_sizes=sizes.long())),
        (TypeError, "group_sizes must be an int32 tensor or a list", dict(group_sizes=3)),
        (ValueError, "group_sizes must be >= 0", dict(group_sizes=[4, -1])),
        (ValueError, "the group sizes sum to 1025, more than k", dict(group_sizes=[1000, 25])),
        (ValueError, "group_sizes must name 1 to 512 groups; got 0", dict(group_sizes=[])),
        (ValueError, "group_sizes must name 1 to 512 groups; got 513", dict(group_sizes=[0] * 513)),
        (ValueError, r"out must have shape \(num_groups, m, n\) = \(3, 256, 512\)", dict(out=torch.empty((3, 256, 504)))),
        (ValueError, "out must be 3-D", dict(out=torch.empty((256, 512)))),
        (TypeError, "out must have dtype torch.bfloat16 or torch.float32", dict(out=torch.empty((3, 256, 512),
                                                                                          dtype=torch.float16))),
        (ValueError, "out's groups must follow one another", dict(out=torch.empty((3, 300, 512))[:, :256])),
        (ValueError, "c needs out", dict(c=torch.empty((3, 256, 512)))),
        (ValueError, "out_dtype=torch.bfloat16 differs", dict(out=out, out_dtype=torch.bfloat16)),
    ]
    args = dict(a=a, a_scale=sa, b=b, b_scale=sb, group_sizes=sizes, out=None, c=None, out_dtype=None)
    for error, message, change in bad:
        with pytest.raises(error, match=f"{fn}: {message}"):
            check(**dict(args, **change), data_checks=False)
    # the public function checks before it allocates or launches: CPU tensors are refused
    poisoned = torch.full((3, 256, 512), float("nan"))
    with pytest.raises(ValueError, match=f"{fn}: a must be a CUDA tensor"):
        k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes, poisoned, c=poisoned)
    assert torch.isnan(poisoned).all()


def test_reference_sums_the_groups_tokens():
    gen = torch.Generator().manual_seed(0)
    m, n, k = 24, 40, 700
    a = torch.randn((m, k), generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn((n, k), generator=gen).to(torch.float8_e4m3fn)
    sa, sb = torch.rand((m, 6), generator=gen), torch.rand((n, 6), generator=gen)
    sizes = [0, 129, 1, 127, 443]  # sum = k: the groups' products add up to the whole GEMM
    out = ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes)
    assert out.shape == (5, m, n) and out.dtype == torch.float64 and (out[0] == 0).all()
    torch.testing.assert_close(out.sum(0), ref_fp8_gemm_1d1d(a, sa, b, sb))
    # group 2 is token 129 alone, scaled by its 128-token block's scales (block 1)
    one = a[:, 129].double()[:, None] * sa[:, 1:2].double() * (b[:, 129].double() * sb[:, 1].double())[None, :]
    torch.testing.assert_close(out[2], one)
    c = torch.randn((5, m, n), generator=gen)
    torch.testing.assert_close(ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, torch.tensor(sizes), c), out + c.double())
    with pytest.raises(ValueError, match="sum to at most K"):
        ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, [k, 1])


@pytest.mark.parametrize("device", ["meta", "fake-cuda"])
def test_custom_ops_trace(device):
    """torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d(_out): schemas, fake implementations (shape and
    dtype of the new output; the checks without data), opcheck."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from deep_tile import ops

    mode = FakeTensorMode() if device == "fake-cuda" else None
    with mode or torch.device("meta"):
        a, sa, b, sb = _operands(device="cuda" if mode else "meta")
        sizes = torch.empty(3, dtype=torch.int32, device=a.device)
        out = ops.k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes, None, torch.float32)
        assert out.shape == (3, 256, 512) and out.dtype == torch.float32
        main_grad = torch.empty((3, 256, 512), device=a.device)
        for op, args in ((ops.k_grouped_fp8_gemm_1d1d, (a, sa, b, sb, sizes, None, torch.bfloat16)),
                         (ops.k_grouped_fp8_gemm_1d1d_out, (a, sa, b, sb, sizes, None, True, main_grad))):
            result = torch.library.opcheck(op, args)
            assert set(result.values()) == {"SUCCESS"}, result
        with pytest.raises(ValueError, match=r"out must have shape \(num_groups, m, n\)"):
            ops.k_grouped_fp8_gemm_1d1d_out(a, sa, b, sb, sizes, None, True, torch.empty((2, 256, 512),
                                                                                     device=a.device))
