"""The real kernels compile spill-free for sm_90a with each compiler, and their SASS is what we expect.

Compiled with ``compile_cubin`` directly (no cache, so each compiler really runs): every kernel
kind the selector can emit -- each tile shape it considers (tile, WGMMA width, accumulator
buffers: the register-critical part) as a persistent kernel, with multicast on A and on B, and
split along K where the selector may split it, each with its most stages and each also as the
row-major-a_scale variant the launcher derives from it -- plus the families the GPU tests force, and the three input-dtype variants of the cast kernels. For each build: the kernel
symbol exists, the ptxas ``-v`` report shows no stack frame, no spills and none of the warnings
C7508/C7511/C7514/C7517/C7519, and the SASS (cuobjdump and nvdisasm from the ``test`` extra)
holds the instructions the design relies on: ``QGMMA`` (FP8 WGMMA) and ``USETMAXREG`` (register
reallocation between the producer and consumer warpgroups). No GPU needed.
"""
import dataclasses
import functools
import itertools
from pathlib import Path

import pytest

from conftest import compiler_params
from test_fp8_gemm import FAMILIES as GPU_TEST_FAMILIES

from deep_tile import arch
from deep_tile.jit import compiler, paths
from deep_tile.kernels import cast_fp8, fp8_gemm
from deep_tile.select import KernelConfig, select_config
from deep_tile.select.candidates import max_stages, tile_shapes
from deep_tile.testing.shapes import EDGE_SHAPES, MODEL_NK, MODEL_SHAPES

ROOT = Path(__file__).resolve().parents[1]
CAST_DTYPES = tuple(cast_fp8.INPUT_DTYPES)
SM_COUNTS = (132, 114, 78)
SELECTOR_SHAPES = (MODEL_SHAPES + EDGE_SHAPES + [(8192, 8192, 8192), (4096, 7168, 16384)]
                   + [(m, n, k) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)
                      for (n, k) in MODEL_NK]
                   + list(itertools.product((3, 300, 3000), (8, 520, 6144), (16, 1040, 8992))))


def family(config: KernelConfig) -> tuple:
    """The compile-time identity of a config: its defines, sorted."""
    return tuple(sorted(config.defines().items()))


def kind(config: KernelConfig) -> tuple:
    """What decides a build's registers and code paths: the tile, its WGMMA width and buffers, the
    multicast operand, whether it splits K, the a_scale layout, the L2 policies and the k-loop's
    unrolling (stage counts and split factors are constants)."""
    return (config.block_m, config.block_n, config.wgmma_n, config.accum_buffers, config.num_multicast,
            config.multicast_on_a, config.split_k > 1, config.a_scale_row_major, config.evict_first_b, config.k_unroll)


def selector_kinds() -> list:
    """One config of every kind the selector can emit: each tile shape it considers, persistent
    (with each multicast choice) and, where it may split K, split, with the most stages."""
    configs = []
    smem = arch.MAX_SMEM_PER_BLOCK
    for bm, bn, wn, buffers in tile_shapes(smem):
        base = dict(block_m=bm, block_n=bn, wgmma_n=wn, accum_buffers=buffers, grid_size=2,
                    num_stages=max_stages(bm, bn, smem))
        kinds = [KernelConfig(**base), KernelConfig(**base, num_multicast=2, multicast_on_a=True),
                 KernelConfig(**base, num_multicast=2, multicast_on_a=False)]
        split = dict(base, num_stages=max_stages(bm, bn, smem, 2), split_k=2)
        if bm <= 128 and buffers == 2 and not fp8_gemm.tile_problems(bm, bn, split["num_stages"], 1, 2, wn, buffers, smem):
            kinds.append(KernelConfig(**split))
        # each also as the launcher runs it for a row-major a_scale, and with the L2 policies of a
        # one-round launch (the producer holds two more 64-bit values)
        variants = (kinds + [config.with_row_major_a_scale() for config in kinds]
                    + [dataclasses.replace(config, evict_first_b=True) for config in kinds])
        # and one-buffer loops unrolled by 6, as the selector picks them for long K ranges
        configs += variants + [dataclasses.replace(config, k_unroll=6) for config in variants
                               if config.accum_buffers == 1 and config.split_k == 1]
    return configs


def gpu_test_configs() -> list:
    """The families tests/test_fp8_gemm.py forces on the GPU."""
    return [KernelConfig(**fam, grid_size=2) for fam in GPU_TEST_FAMILIES]


FAMILIES = sorted({family(c) for c in selector_kinds() + gpu_test_configs()})
KINDS = {kind(c) for c in selector_kinds() + gpu_test_configs()}

COMPILERS = compiler_params()

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_deep_tile_env")]


def family_id(fam: tuple) -> str:
    d = dict(fam)
    text = f"{d['DT_BLOCK_M']}x{d['DT_BLOCK_N']}s{d['DT_NUM_STAGES']}b{d['DT_ACCUM_BUFFERS']}w{d['DT_WGMMA_N']}"
    if d["DT_NUM_MULTICAST"] == 2:
        text += "mcA" if d["DT_MULTICAST_ON_A"] else "mcB"
    if d["DT_SPLIT_K"] > 1:
        text += f"k{d['DT_SPLIT_K']}"
    if d["DT_A_SCALE_ROW_MAJOR"]:
        text += "rm"
    if d["DT_EVICT_FIRST_B"]:
        text += "ef"
    if d["DT_K_UNROLL"] != 3:
        text += f"u{d['DT_K_UNROLL']}"
    return text


@functools.lru_cache(maxsize=None)
def build_gemm(name: str, fam: tuple) -> compiler.CompiledKernel:
    """One uncached compile of the GEMM family ``fam`` (shared by the ptxas and SASS tests)."""
    return compiler.compile_cubin(paths.entry_path(fp8_gemm.ENTRY), dict(fam), fp8_gemm.SYMBOL, name)


@functools.lru_cache(maxsize=None)
def build_cast(name: str, dtype: str) -> compiler.CompiledKernel:
    """One uncached compile of the cast kernels (both symbols live in one translation unit)."""
    return compiler.compile_cubin(paths.entry_path(cast_fp8.ENTRY), cast_fp8.defines(dtype),
                                  cast_fp8.PER_TOKEN_SYMBOL, name)


def sass_or_skip(cubin: bytes) -> str:
    sass = compiler.disassemble(cubin)
    if sass is None:
        pytest.skip("SASS not checked: no working cuobjdump found (PATH, the CUDA toolkit, or the pip "
                    "packages nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm, which .ci/run installs)")
    return sass


def assert_ptxas_clean(result: compiler.CompiledKernel, symbols) -> None:
    assert compiler.ptxas_problems(result.log) == [], result.log
    for symbol in symbols:
        assert compiler.has_symbol(result.cubin, symbol), f"{symbol} missing from the cubin"
        assert f"Function properties for {symbol}" in result.log, result.log
    # ptxas_problems already rejects these; spelled out so a failure reads plainly.
    assert "bytes stack frame" in result.log
    for line in result.log.splitlines():
        if "bytes stack frame" in line:
            assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in line, result.log
    for code in ("C7508", "C7511", "C7514", "C7517", "C7519"):
        assert code not in result.log, result.log


@pytest.mark.parametrize("fam", FAMILIES, ids=family_id)
@pytest.mark.parametrize("name", COMPILERS)
def test_gemm_builds_spill_free(name, fam):
    result = build_gemm(name, fam)
    assert result.compiler == name and result.cubin[:4] == b"\x7fELF"
    assert_ptxas_clean(result, [fp8_gemm.SYMBOL])


@pytest.mark.parametrize("fam", FAMILIES, ids=family_id)
@pytest.mark.parametrize("name", COMPILERS)
def test_gemm_sass(name, fam):
    sass = sass_or_skip(build_gemm(name, fam).cubin)
    assert f"Function : {fp8_gemm.SYMBOL}" in sass
    assert "QGMMA" in sass, "no FP8 WGMMA (QGMMA) instruction in the SASS"
    assert "USETMAXREG" in sass, "no setmaxnreg (USETMAXREG) instruction in the SASS"


@pytest.mark.parametrize("dtype", CAST_DTYPES)
@pytest.mark.parametrize("name", COMPILERS)
def test_cast_builds_spill_free(name, dtype):
    result = build_cast(name, dtype)
    assert result.compiler == name and result.cubin[:4] == b"\x7fELF"
    assert_ptxas_clean(result, cast_fp8.SYMBOLS)


@pytest.mark.parametrize("dtype", CAST_DTYPES)
@pytest.mark.parametrize("name", COMPILERS)
def test_cast_sass(name, dtype):
    sass = sass_or_skip(build_cast(name, dtype).cubin)
    for symbol in cast_fp8.SYMBOLS:  # plain SIMT kernels: no WGMMA, no setmaxnreg to look for
        assert f"Function : {symbol}" in sass


READ_FLOOR_SOURCE = Path(__file__).resolve().parents[1] / "benchmarks" / "read_floor.cu"
READ_FLOOR_SYMBOLS = ("deep_tile_empty", "deep_tile_stream_read")  # benchmarks/read_floor.py PROBE_SYMBOLS


@pytest.mark.parametrize("name", COMPILERS)
def test_read_floor_probes_build(name):
    """benchmarks/read_floor.py's probes compile clean, and the read probe keeps its loads (the
    fold is only stored under a key, so ptxas could have dropped them if it were not used)."""
    result = compiler.compile_cubin(READ_FLOOR_SOURCE, {}, READ_FLOOR_SYMBOLS[1], name)
    assert_ptxas_clean(result, READ_FLOOR_SYMBOLS)
    sass = sass_or_skip(result.cubin)
    read_body = sass.split(f"Function : {READ_FLOOR_SYMBOLS[1]}")[1].split("Function :")[0]
    assert read_body.count("LDG.E.128") >= 5, read_body  # four in the unrolled loop, one in the tail


# ---- the list above covers what the selector does ----------------------------------------------

def test_families_cover_every_selected_config():
    for num_sms in SM_COUNTS:
        for shape in SELECTOR_SHAPES:
            config = select_config(*shape, num_sms)
            assert kind(config) in KINDS, f"select_config{shape + (num_sms,)} -> {config.label}: not compiled here"


def test_families_include_every_kernel_kind():
    kinds = {(d["DT_BLOCK_M"], d["DT_NUM_MULTICAST"], d["DT_MULTICAST_ON_A"], d["DT_SPLIT_K"] > 1,
              d["DT_ACCUM_BUFFERS"], d["DT_WGMMA_N"] < d["DT_BLOCK_N"]) for d in map(dict, FAMILIES)}
    for kind in [(256, 2, 1, False, 1, False), (256, 2, 0, False, 1, False), (128, 2, 1, False, 1, True),
                 (128, 1, 0, False, 2, False), (64, 1, 0, False, 2, False), (64, 1, 0, True, 2, False),
                 (128, 1, 0, True, 2, False), (64, 1, 0, True, 1, False)]:
        assert kind in kinds, kind


def test_ci_installs_the_sass_tools():
    """The SASS tools come from the `test` extra, which the README's test line installs and .ci/run
    runs verbatim (so these checks do not skip in CI, nor for a newcomer following the README)."""
    import re

    tests = re.search(r"^## Tests\s*$(.*?)(?=^## |\Z)", (ROOT / "README.md").read_text(), re.M | re.S).group(1)
    [line] = [block.strip() for block in re.findall(r"^```\n(.*?)^```", tests, re.M | re.S)]
    assert line.startswith('pip install -e ".[test]" && '), f"README's test line installs no test extra: {line}"
    extra = re.search(r"^test = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    for package in ("pytest", "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"):
        assert f'"{package}' in extra, f"the test extra in pyproject.toml lacks {package}"
    assert line in [ci.strip() for ci in (ROOT / ".ci" / "run").read_text().splitlines()], \
        ".ci/run does not run the README's test line"
