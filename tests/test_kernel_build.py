"""The real kernels compile spill-free for sm_90a with each compiler, and their SASS is what we expect.

Every FP8 GEMM configuration family the selector can emit (each legal tile with its stage count
and each multicast variant it can get), plus a few forced families, and the three input-dtype
variants of the cast kernels, are compiled with ``compile_cubin`` directly (no cache, so each
compiler really runs). For each build: the kernel symbol exists, the ptxas ``-v`` report shows no
stack frame, no spills and none of the warnings C7508/C7511/C7517/C7519, and the SASS (cuobjdump,
from the pip package ``nvidia-cuda-cuobjdump``, which ``.ci/run`` installs) holds the instructions
the design relies on: ``QGMMA`` (FP8 WGMMA) and ``USETMAXREG`` (register reallocation between the
producer and consumer warpgroups). No GPU needed.
"""
import functools
from pathlib import Path

import pytest

from conftest import compiler_params

from deep_tile import arch, env
from deep_tile.jit import compiler, paths
from deep_tile.select import KernelConfig, select_config
from deep_tile.select.candidates import enumerate_candidates
from deep_tile.select.selector import MULTICAST_MIN_M, choose_multicast
from deep_tile.testing.shapes import EDGE_SHAPES, MODEL_SHAPES

ROOT = Path(__file__).resolve().parents[1]
GEMM_ENTRY, GEMM_SYMBOL = "fp8_gemm_sm90", "deep_tile_fp8_gemm_sm90"
CAST_ENTRY = "cast_fp8"
CAST_SYMBOLS = ("deep_tile_per_token_cast", "deep_tile_per_block_cast")
CAST_DTYPES = {0: "float32", 1: "bfloat16", 2: "float16"}
NUM_SMS = 132

# (block_m, block_n, num_stages, num_multicast, multicast_on_a) always built, whatever the selector
# does today: one of each tile height, both multicast directions, and multicast on a 256-row tile.
FORCED_FAMILIES = {(64, 16, 8, 1, 0), (64, 144, 7, 1, 0), (128, 128, 5, 1, 0), (128, 112, 6, 1, 0),
                   (128, 160, 5, 2, 1), (128, 160, 5, 2, 0), (256, 64, 4, 1, 0), (256, 48, 5, 2, 1)}


def family(config: KernelConfig) -> tuple:
    """The compile-time identity of a config: the values of its defines."""
    return (config.block_m, config.block_n, config.num_stages, config.num_multicast, int(config.multicast_on_a))


def selector_families() -> set:
    """Every family the selector can emit: each legal candidate with each multicast choice it can get.

    The multicast choice depends on M (threshold), the parity of the n-block and m-block counts
    and the SM count; probing both sides of each reaches every outcome of ``choose_multicast``.
    Combinations that ``KernelConfig`` refuses (tiles that spill without multicast) are the ones
    the selector drops as unbuildable.
    """
    found = set()
    for c in enumerate_candidates():
        for m in (64, 4096, 4096 + c.block_m):  # below the multicast threshold; even / odd m-blocks
            for n in (2 * c.block_n, 3 * c.block_n):  # even / odd n-blocks
                for num_sms in (NUM_SMS, NUM_SMS - 1):
                    num_multicast, on_a = choose_multicast(m, n, c.block_m, c.block_n, num_sms)
                    try:
                        config = KernelConfig(block_m=c.block_m, block_n=c.block_n, num_stages=c.num_stages,
                                              num_multicast=num_multicast, multicast_on_a=on_a, num_sms=2)
                    except ValueError:
                        continue
                    found.add(family(config))
    return found


FAMILIES = sorted(FORCED_FAMILIES | selector_families())

COMPILERS = compiler_params()

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No DEEP_TILE_* variable set except DEEP_TILE_NVCC: the ptxas check is done here, not by the JIT."""
    for name in env.REGISTRY:
        if name.startswith("DEEP_TILE_") and name != "DEEP_TILE_NVCC":
            monkeypatch.delenv(name, raising=False)


def gemm_defines(fam: tuple) -> dict:
    block_m, block_n, stages, multicast, on_a = fam
    return {"DT_BLOCK_M": block_m, "DT_BLOCK_N": block_n, "DT_NUM_STAGES": stages,
            "DT_NUM_MULTICAST": multicast, "DT_MULTICAST_ON_A": on_a}


def family_id(fam: tuple) -> str:
    block_m, block_n, stages, multicast, on_a = fam
    return f"{block_m}x{block_n}s{stages}" + ("" if multicast == 1 else ("mcA" if on_a else "mcB"))


@functools.lru_cache(maxsize=None)
def build_gemm(name: str, fam: tuple) -> compiler.CompiledKernel:
    """One uncached compile of the GEMM family ``fam`` (shared by the ptxas and SASS tests)."""
    return compiler.compile_cubin(paths.entry_path(GEMM_ENTRY), gemm_defines(fam), GEMM_SYMBOL, name)


@functools.lru_cache(maxsize=None)
def build_cast(name: str, dtype: int) -> compiler.CompiledKernel:
    """One uncached compile of the cast kernels (both symbols live in one translation unit)."""
    return compiler.compile_cubin(paths.entry_path(CAST_ENTRY), {"DT_IN_DTYPE": dtype}, CAST_SYMBOLS[0], name)


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
    for code in ("C7508", "C7511", "C7517", "C7519"):
        assert code not in result.log, result.log


@pytest.mark.parametrize("fam", FAMILIES, ids=family_id)
@pytest.mark.parametrize("name", COMPILERS)
def test_gemm_builds_spill_free(name, fam):
    result = build_gemm(name, fam)
    assert result.compiler == name and result.cubin[:4] == b"\x7fELF"
    assert_ptxas_clean(result, [GEMM_SYMBOL])


@pytest.mark.parametrize("fam", FAMILIES, ids=family_id)
@pytest.mark.parametrize("name", COMPILERS)
def test_gemm_sass(name, fam):
    sass = sass_or_skip(build_gemm(name, fam).cubin)
    assert f"Function : {GEMM_SYMBOL}" in sass
    assert "QGMMA" in sass, "no FP8 WGMMA (QGMMA) instruction in the SASS"
    assert "USETMAXREG" in sass, "no setmaxnreg (USETMAXREG) instruction in the SASS"


@pytest.mark.parametrize("dtype", sorted(CAST_DTYPES), ids=lambda d: CAST_DTYPES[d])
@pytest.mark.parametrize("name", COMPILERS)
def test_cast_builds_spill_free(name, dtype):
    result = build_cast(name, dtype)
    assert result.compiler == name and result.cubin[:4] == b"\x7fELF"
    assert_ptxas_clean(result, CAST_SYMBOLS)


@pytest.mark.parametrize("dtype", sorted(CAST_DTYPES), ids=lambda d: CAST_DTYPES[d])
@pytest.mark.parametrize("name", COMPILERS)
def test_cast_sass(name, dtype):
    sass = sass_or_skip(build_cast(name, dtype).cubin)
    for symbol in CAST_SYMBOLS:  # plain SIMT kernels: no WGMMA, no setmaxnreg to look for
        assert f"Function : {symbol}" in sass


# ---- the list above covers what the selector does ----------------------------------------------

def test_families_cover_every_selected_config():
    shapes = MODEL_SHAPES + EDGE_SHAPES + [(8192, 8192, 8192), (4096, 7168, 16384)]
    for num_sms in (NUM_SMS, 114, 78):
        for shape in shapes:
            fam = family(select_config(*shape, num_sms))
            assert fam in FAMILIES, f"select_config{shape + (num_sms,)} -> {fam}: not compiled by this test"


def test_selector_families_include_each_multicast_direction():
    fams = selector_families()
    for block_m, block_n in arch.SPILLS_WITHOUT_MULTICAST:
        assert any(f[:2] == (block_m, block_n) and f[3:] == (2, 1) for f in fams)
        assert any(f[:2] == (block_m, block_n) and f[3:] == (2, 0) for f in fams)
        assert not any(f[:2] == (block_m, block_n) and f[3] == 1 for f in fams)
    assert MULTICAST_MIN_M > 64  # selector_families probes m = 64 for the no-multicast side


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
