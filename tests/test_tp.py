"""Tensor-parallel GEMMs (deep_tile.tp): the overlapped rings against the sequential forms and float64.

On the CPU the ranks are processes with the gloo backend and the GEMM an FP32 stand-in
(deep_tile.testing.tp_cases.stand_in_gemm); on a GPU (marker ``gpu``) the same cases run
deep_tile's kernels in a simulated world (LoopbackRing: each chunk arriving by a copy on a side
stream) and under NCCL with a world of one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deep_tile import tp
from deep_tile.testing import tp_cases
from deep_tile.testing.numeric import DIFF_TOL

ROOT = Path(__file__).resolve().parents[1]
# max |got - want| / max |want| by the output's (or the partials') rounding step: FP32 is exact to
# 1e-6 with the CPU stand-in; deep_tile's kernels sum FP8 products at the tensor cores' precision
# (1.2e-4 to 1.7e-4 measured on an H100 at these shapes), so on a GPU FP32 results get 1e-3.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1e-2}
GPU_FP32_TOLERANCE = 1e-3


def _run_ranks(world: int, tmp_path: Path, *extra: str, device: str = "cpu", timeout: int = 240) -> list:
    """Run tp_cases in ``world`` processes (one per rank); every rank's JSON lines, in rank order."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [subprocess.Popen([sys.executable, "-m", "deep_tile.testing.tp_cases", "--world", str(world),
                               "--rank", str(r), "--init", init, "--device", device, *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"rank exited with {p.returncode}:\n{err[-3000:]}"
            outputs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outputs


def _check_results(results: list, fp32_bound: float = TOLERANCE[torch.float32]) -> None:
    cases = [r for r in results if r["case"] != "mismatch"]
    assert cases, "no case ran"
    for r in cases:
        assert r["bitwise"], f"overlapped != sequential: {r}"
        assert r["nan"] == 0 and r["diff"] < DIFF_TOL, r
        out = torch.float32 if r["dtype"] == "torch.float32" else torch.bfloat16
        bound = TOLERANCE[torch.bfloat16] if "partials=torch.bfloat16" in r["case"] or out == torch.bfloat16 \
            else fp32_bound
        assert r["max_rel"] < bound, r


def test_rings_over_gloo_equal_the_sequential_forms_and_float64(tmp_path):
    # Three processes (worlds of 2, 4 and 5 run in the simulated world below): the all-gather ring
    # with both a_scale layouts, the reduce-scatter with every partial / output type, and the
    # shape check across ranks.
    outputs = _run_ranks(3, tmp_path, "--shapes", "48,384,144")
    for rank, results in enumerate(outputs):
        _check_results(results)
        mismatch = [r for r in results if r["case"] == "mismatch"]
        assert len(mismatch) == 1 and mismatch[0]["raised"], (rank, mismatch)
        # every rank raises, naming each rank's shape (rank 1 passed one token more)
        assert "rank 0: (32," in mismatch[0]["raised"] and "rank 1: (33," in mismatch[0]["raised"]


@pytest.mark.parametrize("world,rank", [(4, 2), (2, 0), (5, 4)])
def test_simulated_world_equals_the_sequential_forms_and_float64(monkeypatch, world, rank):
    monkeypatch.setattr(tp, "chunk_gemm", tp_cases.stand_in_gemm)
    device = torch.device("cpu")
    for t, k, n in ((32, 256, 128), (16, 144, 272)):
        results = [tp_cases.column_case(world, rank, t, k, n, device,
                                        tp_cases.loopback_rings(world, rank, t, k, n, device, torch.float32)[0])]
        for partial in (torch.float32, torch.bfloat16):
            for out in (torch.bfloat16, torch.float32):
                ring = tp_cases.loopback_rings(world, rank, t, k, n, device, partial)[1]
                results.append(tp_cases.row_case(world, rank, t, k, n, device, out, partial, ring))
        _check_results(results)


def test_caller_tensors_are_never_written(monkeypatch):
    monkeypatch.setattr(tp, "chunk_gemm", tp_cases.stand_in_gemm)
    device = torch.device("cpu")
    world, rank, t, k, n = 3, 1, 32, 256, 128
    x, xs, w, ws = tp_cases.column_data(rank, t, k, n, device)
    before = [v.clone() for v in (x.view(torch.uint8), xs, w.view(torch.uint8), ws)]
    tp.all_gather_fp8_gemm(x, xs, w, ws, ring=tp_cases.loopback_rings(world, rank, t, k, n, device, torch.float32)[0])
    after = (x.view(torch.uint8), xs, w.view(torch.uint8), ws)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_world_of_one_is_the_plain_gemm(monkeypatch):
    monkeypatch.setattr(tp, "chunk_gemm", tp_cases.stand_in_gemm)
    assert not torch.distributed.is_initialized()
    x, xs, w, ws = tp_cases.column_data(0, 24, 256, 128, torch.device("cpu"))
    plain = tp_cases.stand_in_gemm(x, xs, w, ws)
    for fn in (tp.all_gather_fp8_gemm, tp.all_gather_then_gemm, tp.fp8_gemm_reduce_scatter, tp.gemm_then_reduce_scatter):
        assert torch.equal(fn(x, xs, w, ws), plain), fn.__name__
    plain32 = tp_cases.stand_in_gemm(x, xs, w, ws, out_dtype=torch.float32)
    assert torch.equal(tp.fp8_gemm_reduce_scatter(x, xs, w, ws, out_dtype=torch.float32), plain32)


def test_bad_arguments_raise_before_any_transfer(monkeypatch):
    monkeypatch.setattr(tp, "chunk_gemm", tp_cases.stand_in_gemm)
    device = torch.device("cpu")
    x, xs, w, ws = tp_cases.column_data(0, 24, 256, 128, device)
    ring = tp.LoopbackRing(3, 0, peers=[])  # any transfer would fail on the empty peers
    with pytest.raises(ValueError, match="x must be a 2-D float8_e4m3fn"):
        tp.all_gather_fp8_gemm(x.float(), xs, w, ws, ring=ring)
    with pytest.raises(ValueError, match="w must be a 2-D float8_e4m3fn"):
        tp.all_gather_fp8_gemm(x, xs, w.float(), ws, ring=ring)
    with pytest.raises(ValueError, match="positive multiple of the world size"):
        tp.fp8_gemm_reduce_scatter(x[:23], xs[:23], w, ws, ring=ring)
    with pytest.raises(ValueError, match="partial_dtype"):
        tp.fp8_gemm_reduce_scatter(x, xs, w, ws, ring=ring, partial_dtype=torch.float16)
    with pytest.raises(ValueError, match="out_dtype"):
        tp.gemm_then_reduce_scatter(x, xs, w, ws, ring=ring, out_dtype=torch.float16)


@pytest.mark.gpu
def test_gpu_simulated_world_and_nccl_world_of_one(tmp_path):
    """deep_tile's kernels in the overlapped rings: a simulated world of 4 on one GPU (chunks
    arriving on a side stream) bitwise equal to the sequential forms and close to float64, at
    shapes where the selector splits K for no chunk; and NCCL with a world of one."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    shapes = ["512,7168,2304", "256,2048,1024"]  # T,K,N: no K split at T or 4 T rows (selector, 132 SMs)
    for rank in (0, 3):
        proc = subprocess.run([sys.executable, "-m", "deep_tile.testing.tp_cases", "--world", "4", "--rank", str(rank),
                               "--device", "cuda", "--loopback", "--shapes", *shapes],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _check_results([json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")],
                       GPU_FP32_TOLERANCE)
    (results,) = _run_ranks(1, tmp_path, "--shapes", *shapes, device="cuda", timeout=600)
    _check_results(results, GPU_FP32_TOLERANCE)


def test_tp_mlp_example_under_torchrun_matches_one_device(tmp_path):
    # The example as a user runs it (torchrun, two ranks), on gloo with the FP32 stand-in GEMM:
    # the overlapped layer bitwise equal to the sequential forms, and equal to the unsharded MLP
    # and the float64 reference of the same quantized math within the bf16 output's rounding.
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "examples" / "tp_mlp.py"), "--device", "cpu", "--tokens", "64", "--hidden", "256",
                           "--intermediate", "512"], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "overlapped == sequential (bitwise, every rank): True" in proc.stdout, proc.stdout
    errors = {line.split()[-2].rstrip(":"): float(line.split()[-1]) for line in lines if "max |y - ref|" in line}
    assert set(errors) == {"vs_single_device", "vs_float64"}, lines
    assert errors["vs_single_device"] < 1e-5 and errors["vs_float64"] < 1e-2, errors
    assert lines[-1] == "OK", lines
