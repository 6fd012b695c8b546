"""The trace build (include/deep_tile/debug/trace.cuh, DT_TRACE) on the CPU: it compiles, carries
the buffer tools/trace_chain.py reads, and without the define the product's kernel has neither
the buffer nor the timer reads. The trace itself needs a GPU (tools/trace_chain.py)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

from deep_tile import get_config
from deep_tile.jit import compiler, paths
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind

pytestmark = pytest.mark.skipif("nvrtc" not in compiler.available_compilers(), reason="needs NVRTC")


def build(extra: dict):
    defines = {**get_config(64, 7168, 2048, 132).defines(), **extra}
    return compiler.compile_cubin(paths.entry_path(family.ENTRY), defines, family.symbol(ProblemKind.DENSE), "nvrtc")


def test_trace_build_has_the_buffer_and_no_spills():
    traced, plain = build({"DT_TRACE": 1}), build({})
    assert b"dt_trace_buf" in traced.cubin  # the buffer's name in the ELF string table
    assert b"dt_trace_buf" not in plain.cubin
    assert compiler.ptxas_problems(traced.log) == []  # no spills, no stack frame in a 64-row tile
    sass = compiler.disassemble(plain.cubin)
    if sass is not None:  # the SASS tools are installed: the product reads no timer
        assert "GLOBALTIMER" not in sass
        assert "GLOBALTIMER" in compiler.disassemble(traced.cubin)


def test_trace_chain_command_line():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "trace_chain.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "DT_TRACE" in out.stdout


def _ctas(ends_us, waited=1000):
    return [{"cta": i, "waited": waited, "loop_done": waited + int(e * 1e3)} for i, e in enumerate(ends_us)]


def test_tail_consistency_tells_a_fixed_tail_from_a_random_one():
    sys.path.insert(0, str(ROOT / "tools"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import trace_chain
    except ImportError as err:  # torch is a dependency; numpy comes with it
        pytest.skip(f"trace_chain not importable: {err}")
    rng = np.random.default_rng(1)
    fixed = [_ctas(list(np.r_[np.full(8, 5.0), np.full(2, 9.0)] + rng.normal(0, 0.05, 10))) for _ in range(4)]
    spread, corr = trace_chain.tail_consistency(fixed)
    assert 3.7 < spread < 4.3 and corr > 0.9
    random = [_ctas(list(5.0 + rng.uniform(0, 4, 200))) for _ in range(4)]
    spread, corr = trace_chain.tail_consistency(random)
    assert 3.5 < spread < 4.1 and abs(corr) < 0.3
    flat = [_ctas([5.0] * 4) for _ in range(2)]
    assert trace_chain.tail_consistency(flat)[0] == 0 and np.isnan(trace_chain.tail_consistency(flat)[1])


def test_epilogue_gaps_split_the_wait_from_the_reduction():
    sys.path.insert(0, str(ROOT / "tools"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import trace_chain
    except ImportError as err:
        pytest.skip(f"trace_chain not importable: {err}")
    # CTA 2 ends last: 0.3 us waiting at the barrier, then 1.5 us to its end; a persistent CTA
    # (published 0) is left out.
    ctas = [{"loop_done": 1000, "published": 1200, "end": 1700}, {"loop_done": 1100, "published": 1200, "end": 1600},
            {"loop_done": 900, "published": 1200, "end": 2700}, {"loop_done": 500, "published": 0, "end": 9000}]
    gaps = trace_chain.epilogue_gaps(ctas)
    assert gaps["barrier"] == pytest.approx((0.2, 0.3)) and gaps["reduce"] == pytest.approx((0.5, 1.5))
    assert trace_chain.POINTS.index("published") == 6 and set(trace_chain.SHOWN) == set(trace_chain.POINTS)
