"""The FP8 GEMM's host contract (deep_tile.kernels.fp8_gemm) and its kernel agree, and a
disagreement fails the compile with a message naming the fact: the entry file static_asserts the
contract defines against what the kernel derives. No GPU needed."""
import pytest

from conftest import compiler_params

from deep_tile import arch
from deep_tile.common import SCALE_GROUP
from deep_tile.errors import CompileError
from deep_tile.jit import compiler, paths
from deep_tile.kernels import fp8_gemm as family
from deep_tile.select import KernelConfig
from deep_tile.select.candidates import max_stages

COMPILERS = compiler_params()
CONFIG = KernelConfig(block_m=128, block_n=144, num_stages=4, grid_size=132)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_deep_tile_env")]


def compile_with(name: str, **overrides):
    defines = {**family.defines(CONFIG), **overrides}
    return compiler.compile_cubin(paths.entry_path(family.ENTRY), defines, family.SYMBOL, name)


@pytest.mark.parametrize("name", COMPILERS)
def test_the_contract_compiles(name):
    assert compiler.has_symbol(compile_with(name).cubin, family.SYMBOL)


# (define, wrong value, words the error must contain)
DRIFTS = [
    ("DT_SMEM_BYTES", family.smem_bytes(128, 144, 4) + 16, "DT_SMEM_BYTES"),
    ("DT_MIN_STAGES", 1, "DT_MIN_STAGES"),
    ("DT_MAX_STAGES", 8, "DT_MAX_STAGES"),
    ("DT_STORE_SWIZZLE", 64, "DT_STORE_SWIZZLE"),
    ("DT_SCALE_GROUP", 64, "DT_SCALE_GROUP"),
    ("DT_NUM_THREADS", 256, "DT_NUM_THREADS"),
]


@pytest.mark.parametrize("define,value,words", DRIFTS, ids=[d[0] for d in DRIFTS])
@pytest.mark.parametrize("name", COMPILERS)
def test_a_drifted_fact_fails_the_compile_with_its_name(name, define, value, words):
    with pytest.raises(CompileError) as info:
        compile_with(name, **{define: value})
    assert "contract" in info.value.log and words in info.value.log, info.value.log[-2000:]


@pytest.mark.parametrize("name", COMPILERS)
def test_a_missing_contract_define_fails_with_a_message(name):
    defines = family.defines(CONFIG)
    del defines["DT_SMEM_BYTES"]
    with pytest.raises(CompileError) as info:
        compiler.compile_cubin(paths.entry_path(family.ENTRY), defines, family.SYMBOL, name)
    assert "contract macros" in info.value.log


def test_the_contract_restates_nothing_the_kernel_owns():
    d = family.defines(CONFIG)
    assert d["DT_SCALE_GROUP"] == SCALE_GROUP == family.BLOCK_K == 128
    assert d["DT_STORE_SWIZZLE"] == family.tensor_map_boxes(CONFIG, 4096).d_swizzle == 32  # 144 = 9 x 16
    assert d["DT_NUM_THREADS"] == CONFIG.num_threads == 384
    assert d["DT_SMEM_BYTES"] == CONFIG.smem_bytes == sum(v for k, v in CONFIG.smem_breakdown().items() if k != "total")
    assert (d["DT_MIN_STAGES"], d["DT_MAX_STAGES"]) == (family.MIN_STAGES, family.MAX_STAGES) == (2, 16)
    assert len(family.ARGUMENTS) == len(family.ARGUMENT_KINDS) == 11


def test_the_entry_parameters_are_the_contracts_arguments():
    """The kernel's parameter list in the entry file names ARGUMENTS in order, with the kinds of
    ARGUMENT_KINDS: both host paths pack their values in that order."""
    import re

    source = paths.entry_path(family.ENTRY).read_text()
    signature = re.search(rf"{family.SYMBOL}\((.*?)\)\s*{{", source, re.S).group(1)
    # the output variants' C parameters are tests/test_training.py's to check
    signature = signature.replace(" DT_C_PARAMS", "").replace(" DT_B1D_PARAMS", "").replace(" DT_MAPS_PARAMS", "")
    signature = signature.replace("DT_D_RESTRICT ", "")
    params = [p.strip() for p in signature.split(",")]
    names = [re.search(r"(\w+)$", p).group(1) for p in params]
    assert tuple(names) == family.ARGUMENTS, names
    kinds = ["tensormap" if "TmaDescriptor" in p else "ptr" if "*" in p else "i32" if re.match(r"int\b", p) else p
             for p in params]
    assert tuple(kinds) == family.ARGUMENT_KINDS, kinds


def test_the_row_major_a_scale_variant():
    rm = CONFIG.with_row_major_a_scale()
    assert rm.a_scale_row_major and rm.defines()["DT_A_SCALE_ROW_MAJOR"] == 1
    assert rm.smem_breakdown()["a_scale_stages"] == 4 * CONFIG.smem_breakdown()["a_scale_stages"]
    assert family.tensor_map_boxes(rm, 4096).a_scale == (4, 128)
    assert family.tensor_map_boxes(CONFIG, 4096).a_scale == (128, 1)
    assert rm.label == CONFIG.label + " rm"
    # the same stages where the wider a_scale tiles still fit; one stage fewer where they do not
    roomy = KernelConfig(block_m=64, block_n=16, num_stages=16, grid_size=132)
    assert roomy.with_row_major_a_scale().num_stages == 16
    full = KernelConfig(block_m=64, block_n=48, num_stages=15, accum_buffers=2, grid_size=132)
    assert full.smem_bytes <= arch.MAX_SMEM_PER_BLOCK < family.smem_bytes(64, 48, 15, 1, True)
    assert full.with_row_major_a_scale().num_stages == 14
    assert full.with_row_major_a_scale().smem_bytes <= arch.MAX_SMEM_PER_BLOCK
    assert family.row_major_a_scale_readable(56) and not family.row_major_a_scale_readable(3)


@pytest.mark.parametrize("name", COMPILERS)
def test_the_row_major_variant_compiles(name):
    result = compiler.compile_cubin(paths.entry_path(family.ENTRY), family.defines(CONFIG.with_row_major_a_scale()),
                                    family.SYMBOL, name)
    assert compiler.ptxas_problems(result.log) == []


def test_split_k_refuses_the_tiles_that_spill():
    # 64x144 with one buffer spills when split (ptxas 13.0); the same tile unsplit, and 64x48 split, do not.
    with pytest.raises(ValueError, match="spills registers when split along K"):
        KernelConfig(block_m=64, block_n=144, num_stages=8, split_k=8, grid_size=2)
    assert KernelConfig(block_m=64, block_n=144, num_stages=6, grid_size=2).split_k == 1
    assert KernelConfig(block_m=64, block_n=48, num_stages=8, split_k=8, grid_size=2).split_k == 8
    # every table entry names a tile the rest of the contract accepts (no dead entries)
    for bm, bn, wn, buffers in family.SPILLING_SPLIT_TILES:
        stages = max_stages(bm, bn, arch.MAX_SMEM_PER_BLOCK, 2)
        problems = family.tile_problems(bm, bn, stages, 1, 2, wn, buffers, arch.MAX_SMEM_PER_BLOCK)
        assert problems and all("spills registers" in p for p in problems), (bm, bn, wn, buffers, problems)


def test_the_a_box_shrinks_to_m_below_one_tile_except_under_multicast_of_a():
    # The kernel's expected bytes per stage follow the same rule (producer_loop); a mismatch hangs.
    tall = KernelConfig(block_m=256, block_n=128, num_stages=3, grid_size=132)
    assert [family.a_box_rows(tall, m) for m in (1, 8, 100, 255, 256, 4096)] == [1, 8, 100, 255, 256, 256]
    assert family.tensor_map_boxes(tall, 37).a == (128, 37)
    mc_a = KernelConfig(block_m=128, block_n=128, num_stages=5, num_multicast=2, multicast_on_a=True, grid_size=132)
    assert family.a_box_rows(mc_a, 5) == family.a_box_rows(mc_a, 4096) == 64  # each CTA loads its half
    mc_b = KernelConfig(block_m=128, block_n=128, num_stages=5, num_multicast=2, multicast_on_a=False,
                        raster_along_m=True, grid_size=132)
    assert family.a_box_rows(mc_b, 5) == 5 and family.tensor_map_boxes(mc_b, 5).b == (128, 64)


def test_the_a_scale_box_shrinks_to_m_rounded_up_to_4_below_one_tile():
    # The kernel's expected bytes per stage follow the same rule (stage_tx_bytes_for); a mismatch hangs.
    tall = KernelConfig(block_m=256, block_n=128, num_stages=3, grid_size=132)
    assert [family.a_scale_box_rows(tall, m) for m in (0, 1, 4, 5, 37, 253, 256, 4096)] == [4, 4, 4, 8, 40, 256, 256,
                                                                                             256]
    assert family.tensor_map_boxes(tall, 37).a_scale == (40, 1)
    assert family.tensor_map_boxes(tall.with_row_major_a_scale(), 37).a_scale == (4, 40)
    mc_a = KernelConfig(block_m=128, block_n=128, num_stages=5, num_multicast=2, multicast_on_a=True, grid_size=132)
    assert family.tensor_map_boxes(mc_a, 5).a_scale == (8, 1)  # each CTA loads its tile's rows itself


def test_the_kernel_names_the_problem_kinds_python_names():
    """The device scheduler's ``ProblemKind`` (include/deep_tile/scheduler/tile_scheduler.cuh) and
    deep_tile.gemm.problem.ProblemKind list the same kinds, in the same order, with the values of
    PROBLEM_KIND_CODES (the DT_PROBLEM_KIND define)."""
    import re

    from deep_tile.gemm.problem import ProblemKind

    header = (paths.include_dir() / "deep_tile" / "scheduler" / "tile_scheduler.cuh").read_text()
    body = re.search(r"enum class ProblemKind\s*\{([^}]*)\}", header).group(1)
    cpp = [tuple(part.strip() for part in item.split("=")) for item in body.split(",") if item.strip()]
    python = [("k" + "".join(part.title() for part in kind.name.split("_")), str(family.PROBLEM_KIND_CODES[kind]))
              for kind in ProblemKind]
    python.append(("kKGroupedBlocks", str(family.K_GROUPED_BLOCKS_CODE)))  # a kernel kind of K_GROUPED problems
    assert cpp == python, (cpp, python)
    assert family.MAX_TABLE_GROUPS == int(re.search(r"kMaxTableGroups = (\d+);", header).group(1))


@pytest.mark.parametrize("kind", ["GROUPED_CONTIGUOUS", "GROUPED_MASKED", "GROUPED_OFFSETS"])
def test_the_grouped_entry_parameters_and_build(kind):
    """The grouped kernel's parameters are GROUPED_ARGUMENTS with their kinds, and each grouped
    kind builds spill-free (its shared memory, the table included, checked by the entry)."""
    import dataclasses
    import re

    from deep_tile.gemm.problem import ProblemKind

    source = paths.entry_path(family.ENTRY).read_text()
    signature = re.search(rf"{family.GROUPED_SYMBOL}\((.*?)\)\s*{{", source, re.S).group(1)
    signature = signature.replace(" DT_C_PARAMS", "").replace(" DT_B1D_PARAMS", "").replace(" DT_MAPS_PARAMS", "")
    signature = signature.replace("DT_D_RESTRICT ", "")
    params = [p.strip() for p in signature.split(",")]
    assert tuple(re.search(r"(\w+)$", p).group(1) for p in params) == family.GROUPED_ARGUMENTS
    kinds = ["tensormap" if "TmaDescriptor" in p else "ptr" if "*" in p else "i32" for p in params]
    assert tuple(kinds) == family.GROUPED_ARGUMENT_KINDS
    config = dataclasses.replace(CONFIG, problem_kind=ProblemKind[kind], num_stages=3,
                                 a_scale_row_major=kind == "GROUPED_OFFSETS")  # offsets: row-major only
    result = compiler.compile_cubin(paths.entry_path(family.ENTRY), family.defines(config), family.GROUPED_SYMBOL,
                                    "nvrtc")
    assert compiler.has_symbol(result.cubin, family.GROUPED_SYMBOL)
    assert compiler.ptxas_problems(result.log) == []


def test_the_signal_entry_parameters_and_build():
    """The signalling masked kernel's parameters are SIGNAL_ARGUMENTS with their kinds; the define
    refuses every kind but masked (and values other than 0, 1, 2) with a message naming it."""
    import dataclasses
    import re

    from deep_tile.gemm.problem import ProblemKind

    source = paths.entry_path(family.ENTRY).read_text()
    signature = re.search(rf"{family.SIGNAL_SYMBOL}\((.*?)\)\s*{{", source, re.S).group(1)
    params = [p.strip() for p in signature.split(",")]
    assert tuple(re.search(r"(\w+)$", p).group(1) for p in params) == family.SIGNAL_ARGUMENTS
    kinds = ["tensormap" if "TmaDescriptor" in p else "ptr" if "*" in p else "i32" for p in params]
    assert tuple(kinds) == family.SIGNAL_ARGUMENT_KINDS
    config = dataclasses.replace(CONFIG, problem_kind=ProblemKind.GROUPED_CONTIGUOUS, num_stages=3)
    with pytest.raises(CompileError, match="DT_SIGNAL must be 0, or 1 or 2 with the masked kind"):
        compiler.compile_cubin(paths.entry_path(family.ENTRY), {**family.defines(config), family.SIGNAL_DEFINE: 1},
                               family.SIGNAL_SYMBOL, "nvrtc")


def test_the_grouped_kinds_store_through_the_slab_view():
    """The M-grouped kinds' bf16 D map is the 3-D slab view (kernel_args.TensorMap's slab_rows,
    the box's rows: one consumer warpgroup's rows), which store_bf16.cuh's SlabView stores
    through; the dense kind's stays 2-D, and a slab_rows other than the box's rows is refused."""
    import dataclasses

    from deep_tile.gemm import kernel_args
    from deep_tile.gemm.problem import Problem, ProblemKind

    for block_m, rows in ((64, 64), (128, 64)):  # grouped tiles are at most 128 rows high
        config = dataclasses.replace(CONFIG, block_m=block_m, block_n=128, wgmma_n=128, num_stages=3)
        dense = family.argument_specs(config, Problem(256, 2112, 7168))[3]
        assert dense.slab_rows == 0 and dense.code()[-1] == 0 and dense.box[1] == rows
        for kind in (ProblemKind.GROUPED_CONTIGUOUS, ProblemKind.GROUPED_MASKED, ProblemKind.GROUPED_OFFSETS,
                     ProblemKind.GROUPED_PSUM):
            grouped = dataclasses.replace(config, problem_kind=kind, a_scale_row_major=kind is not ProblemKind.GROUPED_MASKED)
            d = family.argument_specs(grouped, Problem(256, 2112, 7168, kind=kind, num_groups=4))[3]
            assert (d.element, d.box[1], d.slab_rows) == ("bfloat16", rows, rows), (block_m, kind)
            assert d.code()[-1] == rows and len(d.code()) == kernel_args.CODE_LENGTHS[d.code()[0]]
    with pytest.raises(ValueError, match="slab_rows must be 0 or the box's rows"):
        kernel_args.TensorMap(4, "bfloat16", 1, 0, (64, 64), 128, slab_rows=32)
