"""The output variants of the FP8 GEMM: FP32 out and ``out = C + A.B^T`` (C bf16 or FP32, or ``out``
itself: in-place accumulation into a main gradient).

Host-side tests (no GPU): the contract (defines, shared memory, kernel parameters, labels), the
checks (dtypes, shapes, strides, aliasing; nothing written on error) and the fake implementations.
GPU tests (marker ``gpu``): every kernel family of the direct-store epilogue against the float64
reference in a child process (tests/gpu_training_cases.py): poisoned outputs, bitwise repeats,
row padding untouched, M that fills its last m-block partly (that tile starts earlier and must not
accumulate the rows of the m-block before twice), M below one tile, swap-AB and split-K, and a
CUDA graph replayed with new operands.
"""
from __future__ import annotations

import dataclasses
import itertools
import re

import pytest
import torch

from conftest import DIFF_TOL, REL_TOL, accuracy_problems, run_child_cases
from deep_tile import arch
from deep_tile.gemm import checks
from deep_tile.jit import paths
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import Problem, ProblemKind
from deep_tile.select import KernelConfig

VARIANTS = [("float32", None), ("float32", "out"), ("float32", "float32"), ("float32", "bfloat16"),
            ("bfloat16", "bfloat16"), ("bfloat16", "out"), ("bfloat16", "float32")]
"""Every (out_dtype, c_dtype) but the default (bf16, no C); ``"out"``: accumulated in place."""
F32, F32_INPLACE, F32_C32, F32_C16, BF16_C16, BF16_INPLACE, BF16_C32 = VARIANTS

# The families the GPU tests force, each with the output variants it runs: the FP32 TMA store and
# reduce-add (F32, F32_INPLACE) on persistent tiles of every height, one and two buffers, a WGMMA
# narrower than the tile, multicast of A and of B, sub-tiles of 128 and 64-byte atoms (144, 48);
# the direct store (a C apart from D, bf16 with C) on the same launch kinds, split-K clusters (2,
# 4, 8) and swap-AB (8 and 16 token columns, one of them split).
FAMILIES = [
    (dict(block_m=128, block_n=128, num_stages=5), VARIANTS),
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), [F32_INPLACE, BF16_C16]),
    (dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True), [F32_INPLACE, F32_C16]),
    (dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16),
     [F32_INPLACE, BF16_C32]),
    (dict(block_m=64, block_n=144, num_stages=6), [F32, BF16_INPLACE]),
    (dict(block_m=128, block_n=144, num_stages=5, num_multicast=2, multicast_on_a=False), [F32_INPLACE]),
    (dict(block_m=64, block_n=48, num_stages=8, num_multicast=2, multicast_on_a=True, accum_buffers=2), [F32_INPLACE]),
    (dict(block_m=128, block_n=128, num_stages=5, split_k=2, accum_buffers=2), [F32_INPLACE, BF16_C16]),
    (dict(block_m=64, block_n=64, num_stages=8, split_k=4, accum_buffers=2), [F32_C16]),
    (dict(block_m=64, block_n=48, num_stages=8, split_k=8), [F32]),
]
SWAP_FAMILIES = [
    (dict(block_m=64, block_n=128, num_stages=8, swap_n=16), [F32_INPLACE, BF16_C16]),
    (dict(block_m=64, block_n=64, num_stages=8, swap_n=8, split_k=2, accum_buffers=2), [F32_C32]),
]
# 1D1D (b_scale per row of b): the families of the weight gradient (FP32 accumulated in place),
# and the others with a bf16 and an FP32 output; the promotion reads each column's b_scale.
FAMILIES_1D1D = [
    (dict(block_m=128, block_n=128, num_stages=5), [F32_INPLACE, F32, (BF16_C16[0], None)]),
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), [F32_INPLACE]),
    (dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True), [F32_INPLACE]),
    (dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16), [F32_INPLACE]),
    (dict(block_m=128, block_n=160, num_stages=4), [F32_INPLACE, BF16_C16]),
    # 12 of its 18 column groups' scale products formed while the WGMMAs run (kPreScaleGroups)
    (dict(block_m=128, block_n=144, num_stages=4, raster_along_m=True), [F32_INPLACE]),
    (dict(block_m=64, block_n=144, num_stages=6, num_multicast=2, multicast_on_a=False), [F32_C32]),
    (dict(block_m=64, block_n=64, num_stages=8, split_k=4, accum_buffers=2), [F32_INPLACE]),
    (dict(block_m=64, block_n=48, num_stages=8, split_k=8), [(BF16_C16[0], None)]),
]
SHAPES = [(1000, 2112, 1536), (4097, 1160, 400), (520, 4096, 16), (37, 2112, 1536)]
"""M = 1000, 4097 and 520 fill their last m-block only partly; 37 is below every tile."""
SWAP_SHAPES = [(7, 2112, 1536), (8, 1160, 400)]


def configs() -> list:
    """Every (config fields, out_dtype, c_dtype, b_scale_1d) the GPU tests force
    (tests/test_kernel_build.py compiles them)."""
    return ([(fields, out, c, False) for fields, variants in FAMILIES + SWAP_FAMILIES for out, c in variants]
            + [(fields, out, c, True) for fields, variants in FAMILIES_1D1D for out, c in variants])


def _c_mode(c_dtype) -> str:
    """The gemm_acc case's c_mode of a variant's c_dtype."""
    return {None: "none", "out": "inplace"}.get(c_dtype, c_dtype)


def _cases(families, shapes, one_d: bool = False) -> list:
    cases = []
    for i, ((fields, variants), (m, n, k)) in enumerate(itertools.product(families, shapes)):
        for out_dtype, c_dtype in variants:
            config = dict({"raster_width": 8, "grid_size": 132 if i % 2 else 30}, **fields)
            if config.get("split_k", 1) > 1:
                config["grid_size"] = 132
            config.update(out_dtype=out_dtype, c_dtype=c_dtype)
            cases.append(dict(m=m, n=n, k=k, out_dtype=out_dtype, c_mode=_c_mode(c_dtype), config=config, seed=i,
                              one_d=one_d))
    return cases


def _failures(results: list) -> list:
    bad = []
    for r in results:
        problems = accuracy_problems(r, nan_what="NaN (unwritten or non-finite)")
        if r.get("unwritten"):
            problems.append(f"{r['unwritten']} elements still hold C (unwritten)")
        if not r.get("bitwise_repeat", True):
            problems.append("repeat not bitwise identical")
        if not r.get("padding_untouched", True):
            problems.append("wrote past n into the row padding")
        if problems:
            bad.append(f"m={r['m']} n={r['n']} k={r['k']} out={r.get('out_dtype')} c={r.get('c_mode')} "
                       f"config={r.get('config')}: " + "; ".join(problems))
    return bad


def _check(results: list) -> None:
    bad = _failures(results)
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(bad)


def _run(function: str, cases: list) -> list:
    return run_child_cases("gpu_training_cases.py", function, cases, timeout=900.0)


@pytest.mark.gpu
def test_every_output_family():
    _check(_run("gemm_acc", _cases(FAMILIES, SHAPES) + _cases(SWAP_FAMILIES, SWAP_SHAPES)))


@pytest.mark.gpu
def test_every_1d1d_family():
    _check(_run("gemm_acc", _cases(FAMILIES_1D1D, SHAPES, one_d=True)))


@pytest.mark.gpu
def test_a_nan_a_scale_makes_its_row_nan_on_the_prescaled_tiles():
    """The tiles that form scale products under the WGMMAs (Fp8GemmConfig::kPreScaleGroups 12, 8
    and 4) with one NaN a_scale, in a k-block's middle: the kernel completes, that row is NaN, the
    others are right."""
    tiles = [fields for fields, _ in FAMILIES_1D1D
             if fields["block_m"] == 128 and fields["block_n"] >= 144 and fields.get("accum_buffers", 1) == 1]
    assert {fields["block_n"] for fields in tiles} == {144, 160, 256}
    cases = [dict(m=520, n=1160, k=1040, config=dict({"raster_width": 8, "grid_size": 132}, **fields), row=300,
                  k_block=4, seed=i) for i, fields in enumerate(tiles)]
    results = run_child_cases("gpu_training_cases.py", "nan_a_scale_1d1d", cases, timeout=600.0)
    bad = [r for r in results if r["row_nan"] != r["n"] or r["nan_elsewhere"] or not r["diff"] < 1e-8]
    assert not bad, bad


@pytest.mark.gpu
def test_1d1d_weight_gradients():
    """deep_tile.fp8_gemm_1d1d with the selector's config on DeepSeek-V3's weight gradients
    (N x K of each layer over 4096 tokens) accumulated in place into FP32, a bf16 output, M = 1,
    K not a multiple of 128, N % 16 == 8."""
    shapes = [(7168, 2048, 4096), (2112, 7168, 4096), (4096, 7168, 4096), (7168, 16384, 4096), (1536, 7168, 4096),
              (512, 32768, 4096), (1, 4096, 512), (2048, 1160, 400), (520, 4104, 1040)]
    cases = [dict(m=m, n=n, k=k, out_dtype="float32", c_mode="inplace", public=True, one_d=True, seed=i)
             for i, (m, n, k) in enumerate(shapes)]
    cases += [dict(m=1000, n=2112, k=1536, out_dtype="bfloat16", c_mode="none", public=True, one_d=True, seed=20),
              dict(m=520, n=1160, k=400, out_dtype="float32", c_mode="float32", public=True, one_d=True,
                   row_stride=1168, seed=21),
              dict(m=2048, n=2048, k=2048, out_dtype="float32", c_mode="none", public=True, one_d=True, seed=22)]
    _check(_run("gemm_acc", cases))


@pytest.mark.gpu
def test_public_api_and_padded_rows():
    """deep_tile.fp8_gemm with the selector's config: wgrad-like shapes accumulated in place into
    FP32, a separate C, a bf16 output with a bf16 C, and rows padded past n (out and C)."""
    cases = [dict(m=m, n=n, k=k, out_dtype="float32", c_mode="inplace", public=True, seed=i)
             for i, (m, n, k) in enumerate([(7168, 2048, 4096), (2112, 7168, 4096), (576, 7168, 4096), (1, 4096, 512),
                                            (64, 1160, 1536)])]
    cases += [dict(m=1000, n=2112, k=1536, out_dtype="float32", c_mode="float32", public=True, seed=11),
              dict(m=1000, n=2112, k=1536, out_dtype="bfloat16", c_mode="bfloat16", public=True, seed=12),
              dict(m=520, n=1160, k=400, out_dtype="float32", c_mode="inplace", public=True, row_stride=1168, seed=13),
              dict(m=520, n=1160, k=400, out_dtype="float32", c_mode="none", public=True, row_stride=1176, seed=14)]
    _check(_run("gemm_acc", cases))


@pytest.mark.gpu
def test_graph_replay_accumulates():
    results = _run("graph_acc", [dict(m=1000, n=2112, k=1536), dict(m=4096, n=512, k=2048, seed=3)])
    bad = [f"{r}" for r in results if accuracy_problems(r)]
    assert not bad, bad


GROUPED_OUTPUT_CONFIGS = (dict(block_m=64, block_n=128, num_stages=6), dict(block_m=128, block_n=192, num_stages=4),
                          dict(block_m=256, block_n=128, num_stages=3))
"""Tiles test_grouped_output_variants forces on the grouped kinds (FP32 accumulated in place;
tests/test_kernel_build.py compiles them)."""


def _grouped_failures(results: list) -> list:
    bad = []
    for r in results:
        problems = accuracy_problems(r, nan_what="NaN (unwritten or non-finite)")
        for name, r_part in (("python path", r.get("python")), ("graph replay", r.get("graph"))):
            if r_part is not None:
                problems += [f"{name}: {p}" for p in accuracy_problems(r_part)]
                if not r_part["others_kept"]:
                    problems.append(f"{name}: wrote rows of no expert")
        if r.get("unwritten"):
            problems.append(f"{r['unwritten']} elements still hold C (unwritten)")
        if not r["others_kept"]:
            problems.append("wrote rows of no expert")
        if not r["bitwise_repeat"]:
            problems.append("repeat not bitwise identical")
        if not r.get("paths_equal", True):
            problems.append("the native and Python host paths differ")
        if r["native_calls"] != 1:
            problems.append(f"the public call took the native path {r['native_calls']} times, not once")
        if not r["rows"]:
            problems.append("no real rows: the case checks nothing")
        if problems:
            bad.append(f"{r['kind']} {r['counts']} n={r['n']} k={r['k']} out={r['out_dtype']} c={r['c_mode']} "
                       f"config={r['config']}: " + "; ".join(problems))
    return bad


def grouped_output_cases() -> list:
    """The cases of :func:`test_grouped_output_variants` (keyword arguments of
    gpu_training_cases.grouped_acc)."""
    counts = [129, 0, 1, 127, 128, 300]
    cases = []
    for kind in ("contiguous", "offsets", "masked", "psum"):
        extra = {"max_m": 320} if kind == "masked" else {}
        for i, (out_dtype, c_mode) in enumerate((("float32", "inplace"), ("float32", "bfloat16"),
                                                  ("bfloat16", "float32"), ("float32", "none"))):
            cases.append(dict(kind=kind, counts=counts, n=520, k=400, out_dtype=out_dtype, c_mode=c_mode, seed=i,
                              **extra))
        cases.append(dict(kind=kind, counts=[700, 900, 1000, 0, 500, 997, 1024, 900], n=4096, k=7168,
                          out_dtype="float32", c_mode="inplace", seed=9, **({"max_m": 1024} if extra else {})))
        cases.append(dict(kind=kind, counts=counts, n=256, k=512, out_dtype="float32", c_mode="inplace", seed=5,
                          graph_counts=[1, 128, 0, 129, 64, 300], **extra))
        for fields in GROUPED_OUTPUT_CONFIGS:
            if kind == "contiguous" and fields["block_m"] == 256:  # runs start every 128 rows
                continue
            cases.append(dict(kind=kind, counts=counts, n=520, k=400, out_dtype="float32", c_mode="inplace",
                              config=dict(fields, grid_size=132), seed=7, **extra))
    return cases


@pytest.mark.gpu
def test_grouped_output_variants():
    """The M-grouped kinds' FP32 output and C through the public functions and the Python path:
    every kind with FP32 accumulated in place, FP32 with a bf16 C and bf16 with an FP32 C, FP32
    without C; an empty expert, experts of 1, 127, 128 and 129 rows, a K tail, N % 16 == 8; a
    DeepSeek-V3 shape; forced tiles of 64, 128 and 256 rows; graph replay with new counts."""
    results = _run("grouped_acc", grouped_output_cases())
    bad = _grouped_failures(results)
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(bad)


# ---- host side -------------------------------------------------------------------------------

def test_the_variants_defines_smem_and_labels():
    base = KernelConfig(block_m=128, block_n=128, num_stages=5, grid_size=132)
    assert (base.defines()["DT_OUT_KIND"], base.defines()["DT_C_KIND"]) == (0, 0) and not base.direct_store
    for out_dtype, c_dtype in VARIANTS:
        config = base.with_output(out_dtype, c_dtype)
        d = config.defines()
        assert d["DT_OUT_KIND"] == family.OUT_DTYPES.index(out_dtype)
        assert d["DT_C_KIND"] == family.C_DTYPES.index(c_dtype)
        assert config.direct_store
        staging = config.smem_breakdown()["d_staging"]
        if c_dtype is None:  # the TMA store of a 64-row FP32 sub-tile per consumer warpgroup: 2 x 64 x 128 x 4
            assert family.tma_f32_store(config)
            assert staging == 65536 and config.smem_bytes <= arch.MAX_SMEM_PER_BLOCK
            boxes = family.tensor_map_boxes(config, 4096)
            assert (boxes.d, boxes.d_swizzle) == ((32, 64), 128)
        else:  # no staging: straight from registers; 5 stages were the most, 6 fit now
            assert staging == 0 and config.num_stages == 6
    assert family.tensor_map_boxes(KernelConfig(block_m=64, block_n=144, num_stages=4, grid_size=1,
                                                out_dtype="float32"), 64).d == (16, 64)  # 64-byte atoms
    assert dataclasses.replace(base, out_dtype="float32").label == base.label + " f32"
    assert dataclasses.replace(base, c_dtype="float32").label == base.label + " +c32"
    assert dataclasses.replace(base, out_dtype="float32", c_dtype="bfloat16").label == base.label + " f32 +c16"
    wide = KernelConfig(block_m=128, block_n=256, wgmma_n=128, num_stages=3, grid_size=132)
    assert wide.with_output("float32", "out").label == "128x256 s4 /128 f32 +="  # no staging: a stage more
    assert wide.with_output("float32").smem_bytes == wide.smem_bytes  # 64 KB staging, as bf16's
    big = KernelConfig(block_m=128, block_n=192, num_stages=4, grid_size=132)  # staging 48 KB -> 96 KB
    assert big.with_output("float32").num_stages == 3 and big.with_output("float32", "out").num_stages == 5
    assert dataclasses.replace(big, num_stages=2).with_output("float32", "out").num_stages == 2  # not the most: kept
    split = KernelConfig(block_m=64, block_n=64, num_stages=2, split_k=2, accum_buffers=2, grid_size=132)
    assert split.with_output("float32", "out").num_stages == 2  # split-K: no staging
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        KernelConfig(block_m=128, block_n=128, num_stages=5, grid_size=132, out_dtype="float16")
    with pytest.raises(ValueError, match="c_dtype must be one of"):
        KernelConfig(block_m=128, block_n=128, num_stages=5, grid_size=132, c_dtype="float64")


def test_for_problem_takes_the_output_from_the_problem():
    config = KernelConfig(block_m=128, block_n=128, num_stages=5, grid_size=132)
    problem = Problem(256, 512, 1024).with_output("float32", "float32")
    assert (config.for_problem(problem).out_dtype, config.for_problem(problem).c_dtype) == ("float32", "float32")
    assert problem != Problem(256, 512, 1024) and problem.with_a_scale_row_major().c_dtype == "float32"
    assert Problem(256, 512, 1024).key() == ("dense", 256, 512, 1024, 1, 256, False)  # default key unchanged


def test_the_kernel_parameters_of_the_variants():
    """The entry's C parameters (DT_C_PARAMS) are C_ARGUMENTS with their kinds, and the argument
    specs of a direct-store config end with C's pointer and row pitch and pass no D tensor map."""
    source = paths.entry_path(family.ENTRY).read_text()
    params = re.search(r"#define DT_C_PARAMS , (.*)\n", source).group(1).split(",")
    assert tuple(re.search(r"(\w+)$", p.strip()).group(1) for p in params) == family.C_ARGUMENTS
    assert tuple("ptr" if "*" in p else "i32" for p in params) == family.C_ARGUMENT_KINDS
    for kind, c_dtype in ((ProblemKind.DENSE, "float32"), (ProblemKind.GROUPED_CONTIGUOUS, None)):
        config = KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, out_dtype="float32",
                              c_dtype=c_dtype, problem_kind=kind)
        problem = Problem(256, 512, 1024, kind=kind, num_groups=1 if kind is ProblemKind.DENSE else 2)
        specs = family.argument_specs(config, problem)
        assert len(specs) == len(family.arguments(kind, direct=True))
        assert specs[3].code() == (1,)  # ZeroMap: stored straight from registers, no D tensor map
        c_index = len(family.OPERANDS) + (kind is not ProblemKind.DENSE)
        assert specs[-2].code() == (2, c_index) and specs[-1].code() == (4, c_index, 0)
    config = KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=132, out_dtype="float32")
    d_map = family.argument_specs(config, Problem(256, 512, 1024))[3]
    assert d_map.code()[:3] == (0, 4, 2) and d_map.box == (32, 64) and d_map.swizzle == 128  # FP32 map of out


def _operands(m=256, n=512, k=1024, device="cpu"):
    a = torch.zeros((m, k), dtype=torch.float8_e4m3fn, device=device)
    b = torch.zeros((n, k), dtype=torch.float8_e4m3fn, device=device)
    return a, torch.ones((m, k // 128), device=device), b, torch.ones((n // 128 + (n % 128 > 0), k // 128),
                                                                       device=device)


def test_checks_of_out_and_c():
    a, sa, b, sb = _operands()
    check = checks.check_fp8_gemm_acc_args
    p = check(a, sa, b, sb, None, False, torch.empty((256, 512)), data_checks=False)
    assert (p.out_dtype, p.c_dtype) == ("float32", None)
    p = check(a, sa, b, sb, torch.empty((256, 512), dtype=torch.bfloat16), False, torch.empty((256, 512)),
              data_checks=False)
    assert (p.out_dtype, p.c_dtype) == ("float32", "bfloat16")
    p = check(a, sa, b, sb, None, True, torch.empty((256, 512), dtype=torch.bfloat16), data_checks=False)
    assert (p.out_dtype, p.c_dtype) == ("bfloat16", "out")
    p = check(a, sa, b, sb, None, False, None, torch.float32, data_checks=False)
    assert (p.out_dtype, p.c_dtype) == ("float32", None)
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16 or torch.float32; got torch.float16"):
        check(a, sa, b, sb, None, False, torch.empty((256, 512), dtype=torch.float16), data_checks=False)
    with pytest.raises(TypeError, match="c must have dtype"):
        check(a, sa, b, sb, torch.empty((256, 512), dtype=torch.float64), False, torch.empty((256, 512)),
              data_checks=False)
    with pytest.raises(ValueError, match=r"c must have shape \(m, n\) = \(256, 512\); got \(256, 504\)"):
        check(a, sa, b, sb, torch.empty((256, 504)), False, torch.empty((256, 512)), data_checks=False)
    with pytest.raises(ValueError, match="out must be contiguous along its last dimension"):
        check(a, sa, b, sb, None, False, torch.empty((512, 256)).t(), data_checks=False)
    with pytest.raises(ValueError, match="c row stride must be a multiple of 4 elements"):
        check(a, sa, b, sb, torch.empty((256, 514))[:, :512], False, torch.empty((256, 512)), data_checks=False)
    with pytest.raises(ValueError, match="accumulate=True adds out to itself"):
        check(a, sa, b, sb, torch.empty((256, 512)), True, torch.empty((256, 512)), data_checks=False)
    with pytest.raises(ValueError, match="out_dtype=torch.bfloat16 differs from out.dtype=torch.float32"):
        check(a, sa, b, sb, None, False, torch.empty((256, 512)), torch.bfloat16, data_checks=False)


def test_aliasing_rules():
    """out may not share memory with what the kernel reads, except a c that is out exactly (which
    the public function passes as accumulate)."""
    full = torch.empty((512, 512))
    out = full[:256]
    assert checks._same_view(out, full[:256]) and not checks._same_view(out, full[1:257])
    checks._require_no_overlap("fp8_gemm", out, (("c", full[256:]),))  # disjoint halves
    with pytest.raises(ValueError, match="out must not overlap c in memory"):
        checks._require_no_overlap("fp8_gemm", out, (("c", full[128:384]),))
    a8 = torch.empty(256 * 1024, dtype=torch.uint8)
    with pytest.raises(ValueError, match="out must not overlap a in memory"):
        checks._require_no_overlap("fp8_gemm", a8.view(torch.float32).view(256, 256)[:, :256],
                                   (("a", a8.view(torch.float8_e4m3fn).view(256, 1024)),))


def test_fake_implementations_give_the_output_type():
    from deep_tile import ops

    with torch._subclasses.fake_tensor.FakeTensorMode():
        a, sa, b, sb = _operands()
        out = ops.fp8_gemm_acc(a, sa, b, sb, None, torch.float32)
        assert out.shape == (256, 512) and out.dtype == torch.float32
        out = ops.fp8_gemm_acc(a, sa, b, sb, torch.empty((256, 512), dtype=torch.bfloat16), torch.bfloat16)
        assert out.dtype == torch.bfloat16
        main_grad = torch.empty((256, 512))
        ops.fp8_gemm_acc_out(a, sa, b, sb, None, True, main_grad)


def test_public_function_refuses_bad_output_before_launch():
    import deep_tile

    a, sa, b, sb = _operands()
    with pytest.raises(TypeError, match="out must have dtype torch.bfloat16 or torch.float32"):
        deep_tile.fp8_gemm(a, sa, b, sb, torch.empty((256, 512), dtype=torch.float16), c=torch.empty((256, 512)))
    with pytest.raises(ValueError, match=r"c must have shape \(m, n\)"):
        deep_tile.fp8_gemm(a, sa, b, sb, torch.empty((256, 512)), c=torch.empty((255, 512)))
