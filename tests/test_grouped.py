"""GPU correctness of the grouped (Mixture-of-Experts) GEMMs (marker `gpu`; skipped without an
sm_90 GPU).

Each test runs its cases in a child process under a timeout (conftest.run_gpu_cases,
tests/gpu_cases.py ``grouped``): fresh random data, NaN-poisoned outputs, the float64 reference
per expert. Pass: the rows of an expert have no NaN, calc_diff < 1e-3 and max relative error
< 1e-2; the rows of no expert (padding, past masked_m, outside the offsets or the psum runs) are
still NaN; a repeat is bitwise identical; a CUDA graph replayed with new counts passes the same
checks.
"""
from __future__ import annotations

import random

import pytest

from conftest import accuracy_problems, run_gpu_cases

pytestmark = pytest.mark.gpu


def _failures(results: list) -> list:
    bad = []
    for r in results:
        problems = []
        for label, part in (("", r), ("graph replay: ", r.get("graph"))):
            if part is None:
                continue
            problems += accuracy_problems(part, label, nan_what="NaN in computed rows")
            if not part["untouched"]:
                problems.append(f"{label}wrote rows of no expert")
        if not r["bitwise_repeat"]:
            problems.append("repeat not bitwise identical")
        if problems:
            bad.append(f"{r['kind']} counts={r['counts']} n={r['n']} k={r['k']} config={r['config']} "
                       f"layout={r['layout']}: " + "; ".join(problems))
    return bad


def _check(cases):
    results = run_gpu_cases("grouped", cases, timeout=900)
    assert not _failures(results), "\n".join(_failures(results))
    return results


def test_contiguous():
    rng = random.Random(1)
    many = [rng.randrange(0, 40) for _ in range(256)]
    results = _check([
        dict(kind="contiguous", counts=[130, 0, 256, 5], n=256, k=512, tail=128),
        dict(kind="contiguous", counts=[130, 0, 256, 5], n=256, k=512, tail=128, bad_ids=True, layout="row"),
        dict(kind="contiguous", counts=[0, 0, 0], n=128, k=256, tail=256),  # every row padding
        dict(kind="contiguous", counts=[1000], n=4096, k=7168),  # one expert, DeepSeek-V3 gate-up
        dict(kind="contiguous", counts=[77, 200, 128], n=136, k=208),  # N % 128, K tail
        dict(kind="contiguous", counts=many, n=128, k=256),  # 256 experts, many empty
        dict(kind="contiguous", counts=[100, 200], n=256, k=384, graph_counts=[200, 100]),
    ])
    assert results[2]["rows"] == 0 and results[0]["rows"] == 391


FORCED_CONFIGS = [
    dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=16),
    dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, grid_size=16),
    dict(block_m=64, block_n=64, num_stages=6, accum_buffers=2, grid_size=10),
    # b_scale staged in shared memory (one-buffer k-loop, width not a multiple of 128), alone in
    # bands along M and in pairs sharing B
    dict(block_m=128, block_n=192, num_stages=4, raster_along_m=True, raster_width=16, grid_size=16),
    dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=16),
    # K fixed at compile time (the cases' K = 512: 4 K blocks), alone in bands along M and in pairs
    dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16, grid_size=16,
         static_k_blocks=4),
    dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, grid_size=16,
         static_k_blocks=4),
]
"""Configs test_forced_configs_and_straddling_pairs forces on every grouped kind (KernelConfig
fields; tests/test_kernel_build.py compiles them in the full kernel sweep)."""


@pytest.mark.parametrize("config", FORCED_CONFIGS)
def test_forced_configs_and_straddling_pairs(config):
    """Multicast pairs whose two m-blocks belong to two experts, or to an expert and padding
    (contiguous), or straddle two experts (offsets, masked): no hang, no corruption."""
    _check([
        dict(kind="contiguous", counts=[128, 129, 0, 300, 1], n=384, k=512, tail=128, config=config),
        dict(kind="offsets", counts=[128, 129, 0, 300, 1], n=384, k=512, tail=7, gaps=True, config=config),
        dict(kind="masked", counts=[0, 256, 129, 3], n=384, k=512, max_m=256, config=config),
        dict(kind="psum", counts=[128, 129, 0, 300, 1], n=384, k=512, tail=77, config=config),
    ])


def test_offsets():
    rng = random.Random(2)
    many = [rng.randrange(0, 20) for _ in range(256)]
    _check([
        dict(kind="offsets", counts=[1, 0, 77, 300, 64], n=256, k=512, gaps=True, tail=9),
        dict(kind="offsets", counts=[1, 0, 77, 300, 64], n=256, k=512, layout="row"),
        dict(kind="offsets", counts=[0, 0], n=128, k=128, tail=50),
        dict(kind="offsets", counts=many, n=136, k=208),
        dict(kind="offsets", counts=[10, 20], n=128, k=256, graph_counts=[25, 4]),
    ])


def test_psum():
    """DeepGEMM's psum layout in its own kind: the rows between the runs and after the last are
    padding; empty experts, a 256-row tile over two experts' runs, 256 experts, a graph replay."""
    rng = random.Random(4)
    many = [rng.randrange(0, 40) for _ in range(256)]
    big = dict(block_m=256, block_n=128, num_stages=3, raster_along_m=True, grid_size=16)
    _check([
        dict(kind="psum", counts=[100, 0, 300, 128, 1], n=256, k=512, tail=200),
        dict(kind="psum", counts=[100, 0, 300, 128, 1], n=256, k=512, layout="row"),
        dict(kind="psum", counts=[0, 0, 5], n=128, k=128, tail=128),
        dict(kind="psum", counts=[129, 77, 256], n=136, k=208, config=big),
        dict(kind="psum", counts=many, n=136, k=208),
        dict(kind="psum", counts=[10, 200], n=128, k=256, graph_counts=[128, 4]),
    ])


def test_masked():
    rng = random.Random(3)
    _check([
        dict(kind="masked", counts=[0, 192, 13, 64], n=256, k=512, max_m=192),
        dict(kind="masked", counts=[0, 192, 13, 64], n=256, k=512, max_m=192, layout="row"),
        dict(kind="masked", counts=[rng.randrange(0, 48) for _ in range(32)], n=4096, k=7168, max_m=64),
        dict(kind="masked", counts=[5, 1000], n=136, k=208, max_m=900),  # a count above max_m is clamped
        dict(kind="masked", counts=[rng.randrange(0, 4) for _ in range(256)], n=128, k=128, max_m=8),
        dict(kind="masked", counts=[5, 100], n=128, k=256, max_m=128, graph_counts=[100, 0]),
        # K fixed over long K (selector.static_k_blocks_for's long tier: the masked kind's 256x128
        # pick at 32 x 192 rows, K = 7168)
        dict(kind="masked", counts=[0, 192, 250, 64], n=384, k=7168, max_m=256,
             config=dict(block_m=256, block_n=128, num_stages=3, raster_along_m=True, raster_width=16, grid_size=16,
                         static_k_blocks=56)),
    ])
