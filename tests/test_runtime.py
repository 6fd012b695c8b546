"""GPU tests of the JIT runtime through the casting kernels (marker `gpu`; skipped without an
sm_90 GPU): launch on a non-default stream, CUDA-graph capture then replay with new data, from a
thread without a CUDA context, and a readable error for a launch the driver refuses. Cases run in a child process under a timeout."""
from __future__ import annotations

import pytest

from conftest import run_gpu_cases

pytestmark = pytest.mark.gpu


def test_cast_on_stream_and_in_cuda_graph():
    cases = [dict(m=m, k=k, dtype=dtype, seed=i) for i, (m, k, dtype) in enumerate(
        [(1, 128, "bfloat16"), (129, 7168, "bfloat16"), (257, 144, "float32"), (4096, 7168, "float16")])]
    for r in run_gpu_cases("cast_stream_and_graph", cases):
        assert r["stream_ok"], f"cast on a non-default stream differs from the CPU result: {r}"
        assert r["graph_ok"], f"cast replayed from a CUDA graph with new data differs: {r}"


def test_refused_launch_raises_launch_error():
    (result,) = run_gpu_cases("launch_error_is_readable", [{}])
    assert "cuLaunchKernelEx(deep_tile_per_token_cast" in result["raised"], result
    assert "CUDA_ERROR_INVALID_VALUE" in result["raised"], result


def test_launch_from_a_thread_without_a_context():
    """Autograd runs backward in threads with no current CUDA context: a launch there must make the
    device's context current (deep_tile.jit.runtime.Kernel.launch)."""
    for r in run_gpu_cases("cast_in_new_thread", [dict(m=256, k=512), dict(m=1, k=7168, seed=1)]):
        assert not r["errors"] and r["same"], r
