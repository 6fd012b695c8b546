"""Tensor-parallel GEMMs (deep_tile.tp): the overlapped rings against the sequential forms and float64.

On the CPU the ranks are processes with the gloo backend and the GEMM an FP32 stand-in
(deep_tile.testing.tp_cases.stand_in_gemm); on GPUs (marker ``gpu``) the same cases run
deep_tile's kernels in a simulated world (LoopbackRing: each chunk arriving by a copy on a side
stream), under NCCL with a world of one, and under NCCL with worlds of 2 and 4 (one process per
GPU, each case repeated three times).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


# NVLink multicast (NVLS) stays off: the machines these run on must not use it.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# T,K,N of the GPU cases: the selector splits K for no GEMM of them at worlds 1 to 8 (checked per
# case through the reported k_split).
GPU_SHAPES = ["512,7168,2304", "256,2048,1024"]


def _child_env(device: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    if device == "cuda":
        env.update(NCCL_ENV)
    return env


def _run_ranks(world: int, tmp_path: Path, *extra: str, device: str = "cpu", timeout: int = 240,
               env: dict = None) -> list:
    """Run tp_cases in ``world`` processes (one per rank), all of them within ``timeout`` seconds
    (``env``: variables added to theirs); every rank's JSON lines, in rank order."""
    init = f"file://{tmp_path / f'rendezvous_{world}'}"
    child_env = {**_child_env(device), **(env or {})}
    procs = [subprocess.Popen([sys.executable, "-m", "deep_tile.testing.tp_cases", "--world", str(world),
                               "--rank", str(r), "--init", init, "--device", device, *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
             for r in range(world)]
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for rank, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"world {world}: rank {rank} still running after {timeout} s (a hung transfer?)")
            assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
            outputs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs


def _check_results(results: list, fp32_bound: float = TOLERANCE[torch.float32], repeats=None) -> None:
    """Every case bitwise equal to its sequential form (and to the local reference where there is
    one), close to float64, split K nowhere, and (``repeats``: the output of a tp_cases process
    run with ``--repeat``) the same in every repeat."""
    assert not [r for r in results if "error" in r], results
    cases = [r for r in results if r["case"] not in ("mismatch", "summary")]
    assert cases, "no case ran"
    for r in cases:
        assert r["bitwise"], f"overlapped != sequential: {r}"
        assert r.get("local_bitwise", True), f"overlapped != the sequential form without transfers: {r}"
        assert all(v == 1 for v in r.get("k_split", {}).values()), f"a K split: choose other shapes: {r}"
        assert r["nan"] == 0 and r["diff"] < DIFF_TOL, r
        out = torch.float32 if r["dtype"] == "torch.float32" else torch.bfloat16
        bound = TOLERANCE[torch.bfloat16] if "partials=torch.bfloat16" in r["case"] or out == torch.bfloat16 \
            else fp32_bound
        assert r["max_rel"] < bound, r
    if repeats is None:
        return
    summary = [r for r in results if r["case"] == "summary"]
    assert len(summary) == 1 and summary[0]["repeats"] == repeats and summary[0]["repeats_identical"], summary
    assert len(cases) == repeats * summary[0]["cases"], (len(cases), summary)


@pytest.mark.parametrize("world,repeats", [(2, 3), (3, 1), (4, 3)])
def test_rings_over_gloo_equal_the_sequential_forms_and_float64(tmp_path, world, repeats):
    # One process per rank: the all-gather ring with both a_scale layouts, the reduce-scatter with
    # every partial / output type, each against the sequential form, the same form over the other
    # ranks' regenerated tensors, and float64; then the shape check across ranks.
    outputs = _run_ranks(world, tmp_path, "--shapes", "48,384,144", "--repeat", str(repeats))
    for rank, results in enumerate(outputs):
        _check_results(results, repeats=repeats)
        mismatch = [r for r in results if r["case"] == "mismatch"]
        assert len(mismatch) == repeats and all(m["raised"] for m in mismatch), (rank, mismatch)
        # every rank raises, naming each rank's shape (rank 1 passed one token more)
        assert "rank 0: (32," in mismatch[0]["raised"] and "rank 1: (33," in mismatch[0]["raised"]


class _FakeDist:
    """The parts of torch.distributed DistRing uses, recording what it is asked to send."""

    def __init__(self, backend: str):
        self.backend, self.batches, self.gathered = backend, [], []

    def get_world_size(self, group=None):
        return 4

    def get_rank(self, group=None):
        return 1

    def get_backend(self, group=None):
        return self.backend

    def isend(self, *args):
        raise AssertionError("isend is only named in a P2POp")

    irecv = isend

    class P2POp:
        def __init__(self, op, tensor, peer, group=None):
            self.op, self.tensor, self.peer = op, tensor, peer

    def batch_isend_irecv(self, ops):
        self.batches.append(ops)
        return []

    def all_gather_into_tensor(self, out, t, group=None):
        self.gathered.append(t)
        out.copy_(t.repeat(4, *([1] * (t.dim() - 1))))

    def all_gather(self, parts, t, group=None):
        self.gathered.append(t)
        for part in parts:
            part.copy_(t)


def _fake_ring(monkeypatch, backend: str):
    """A DistRing of rank 1 in a world of 4 over :class:`_FakeDist`; returns ``(ring, fake)``."""
    fake = _FakeDist(backend)
    for name in ("get_world_size", "get_rank", "get_backend"):
        monkeypatch.setattr(torch.distributed, name, getattr(fake, name))
    ring = tp.DistRing()
    ring.dist = fake
    return ring, fake


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_dist_ring_hands_the_backend_bytes_only(monkeypatch, backend):
    # NCCL refuses int16 and gloo float8: every transfer must reach the backend as uint8, on
    # every path (ring steps, the sequential gather, the shape check).
    ring, fake = _fake_ring(monkeypatch, backend)
    tensors = [torch.ones(8, 16, dtype=dtype) for dtype in
               (torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.uint8, torch.int64, torch.float16)]
    ring.send_recv(tensors, 2, [torch.empty_like(t) for t in tensors], 0)
    ring.shift(tensors[:2], [torch.empty_like(t) for t in tensors[:2]], 1)
    assert [op.peer for op in fake.batches[0]] == [2] * 6 + [0] * 6
    assert [op.peer for op in fake.batches[1]] == [2, 2, 0, 0]
    assert all(op.tensor.dtype == torch.uint8 for batch in fake.batches for op in batch)
    for t in tensors:
        gathered = ring.gather_rows(t)
        assert gathered.dtype == t.dtype and gathered.shape == (32, 16)
        assert torch.equal(gathered[8:16].view(torch.uint8), t.view(torch.uint8))
    if backend == "gloo":  # (NCCL's shape check allocates on the GPU)
        assert ring.all_shapes((3, 5)) == [(3, 5)] * 4
    assert fake.gathered and all(t.dtype == torch.uint8 for t in fake.gathered)


def test_dist_ring_refuses_a_strided_tensor_before_any_transfer(monkeypatch):
    # An error inside batch_isend_irecv would leave NCCL's group open (every later operation of
    # the process group deferred): a bad tensor must be refused before the batch is built.
    ring, fake = _fake_ring(monkeypatch, "nccl")
    with pytest.raises(ValueError, match="contiguous"):
        ring.send_recv([torch.ones(4)], 2, [torch.ones(16, 8).t()], 0)
    assert fake.batches == []


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
    # a simulated world of one too (the local references of a world-of-one run use one)
    for fn, ring in ((tp.all_gather_fp8_gemm, tp_cases.column_ring(1, 0, 24, 256, 128, torch.device("cpu"))),
                     (tp.all_gather_then_gemm, tp_cases.column_ring(1, 0, 24, 256, 128, torch.device("cpu"))),
                     (tp.fp8_gemm_reduce_scatter, tp.LoopbackRing(1, 0, [])),
                     (tp.gemm_then_reduce_scatter, tp.LoopbackRing(1, 0, []))):
        assert torch.equal(fn(x, xs, w, ws, ring=ring), plain), fn.__name__


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
    shapes where the selector splits K for no GEMM; and NCCL with a world of one."""
    for rank in (0, 3):
        proc = subprocess.run([sys.executable, "-m", "deep_tile.testing.tp_cases", "--world", "4", "--rank", str(rank),
                               "--device", "cuda", "--loopback", "--shapes", *GPU_SHAPES],
                              capture_output=True, text=True, timeout=240, env=_child_env("cuda"))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        _check_results([json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")],
                       GPU_FP32_TOLERANCE, repeats=1)
    (results,) = _run_ranks(1, tmp_path, "--shapes", *GPU_SHAPES, device="cuda", timeout=240)
    _check_results(results, GPU_FP32_TOLERANCE, repeats=1)


@pytest.mark.gpu
@pytest.mark.parametrize("transport", ["symm", "nccl"])
@pytest.mark.parametrize("world", [2, 4])
def test_gpu_nccl_rings_bitwise_equal_the_sequential_forms(tmp_path, world, transport):
    """One process per GPU over an NCCL process group, the overlapped forms' data moved by each
    transport (symmetric memory's copy engines, or NCCL itself): every case three times, each
    overlapped result bitwise equal to its sequential form and to the same form without
    transfers (the other ranks' tensors regenerated here), close to float64, and the same bytes
    in every repeat; the shape check raises on every rank."""
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs; {torch.cuda.device_count()} visible")
    outputs = _run_ranks(world, tmp_path, "--shapes", *GPU_SHAPES, "--repeat", "3", device="cuda", timeout=300,
                         env={"DEEP_TILE_TP_TRANSPORT": transport})
    for rank, results in enumerate(outputs):
        _check_results(results, GPU_FP32_TOLERANCE, repeats=3)
        mismatch = [r for r in results if r["case"] == "mismatch"]
        assert len(mismatch) == 3 and all(m["raised"] for m in mismatch), (rank, mismatch)
        summary = [r for r in results if r["case"] == "summary"]
        assert summary and summary[0]["transport"] == transport, (rank, summary)


def test_tp_mlp_example_under_torchrun_matches_one_device(tmp_path):
    # The example as a user runs it (torchrun, two ranks), on gloo with the FP32 stand-in GEMM:
    # the overlapped layer bitwise equal to the sequential forms, and equal to the unsharded MLP
    # and the float64 reference of the same quantized math within the bf16 output's rounding.
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "examples" / "tp_mlp.py"), "--device", "cpu", "--tokens", "64", "--hidden", "256",
                           "--intermediate", "512"], capture_output=True, text=True, timeout=240,
                          env=_child_env("cpu"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "overlapped == sequential (bitwise, every rank): True" in proc.stdout, proc.stdout
    assert "overlapped, called again: the same bytes (every rank): True" in proc.stdout, proc.stdout
    errors = {line.split()[-2].rstrip(":"): float(line.split()[-1]) for line in lines if "max |y - ref|" in line}
    assert set(errors) == {"vs_single_device", "vs_float64"}, lines
    assert errors["vs_single_device"] < 1e-5 and errors["vs_float64"] < 1e-2, errors
    assert lines[-1] == "OK", lines
