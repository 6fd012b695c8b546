"""The trace build (include/deep_tile/debug/trace.cuh, DT_TRACE) on the CPU: it compiles, carries
the buffer tools/trace_chain.py reads, and without the define the product's kernel has neither
the buffer nor the timer reads. The trace itself needs a GPU (tools/trace_chain.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

from deep_tile import get_config
from deep_tile.jit import compiler, paths
from deep_tile.kernels import fp8_gemm as family
from deep_tile.problem import ProblemKind

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
