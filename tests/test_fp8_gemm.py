"""GPU correctness of deep_tile.fp8_gemm (marker `gpu`; skipped without an sm_90 GPU).

Each test runs its cases in a child process under a timeout (conftest.run_gpu_cases). Pass
criteria per case: no NaN left in the (NaN-poisoned) output, calc_diff < 1e-3 and
max|out - ref| / max|ref| < 1e-2 against the float64 dequantised reference, bitwise-identical
repeated runs, and agreement with cuBLAS blockwise where torch._scaled_mm supports the shape.
"""
from __future__ import annotations

import itertools

import pytest

from conftest import DIFF_TOL, REL_TOL, accuracy_problems, run_gpu_cases
from deep_tile.testing.shapes import EDGE_K, EDGE_M, EDGE_N, MODEL_SHAPES

pytestmark = pytest.mark.gpu


def _failures(results: list[dict]) -> list[str]:
    bad = []
    for r in results:
        problems = accuracy_problems(r, nan_what="NaN (unwritten or non-finite)")
        if not r.get("bitwise_repeat", True):
            problems.append("repeat not bitwise identical")
        if not r.get("padding_untouched", True):
            problems.append("wrote past n into the row padding")
        if "diff_vs_cublas" in r and not r["diff_vs_cublas"] < DIFF_TOL:
            problems.append(f"calc_diff vs cuBLAS {r['diff_vs_cublas']:.2e}")
        if problems:
            bad.append(f"m={r['m']} n={r['n']} k={r['k']} config={r.get('config')}: " + "; ".join(problems))
    return bad


def _check(results: list[dict]) -> None:
    bad = _failures(results)
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(bad)


def test_model_shapes():
    _check(run_gpu_cases("gemm", [dict(m=m, n=n, k=k, seed=i) for i, (m, n, k) in enumerate(MODEL_SHAPES)]))


def test_edge_shapes():
    cases = [dict(m=m, n=n, k=k, seed=i)
             for i, (m, n, k) in enumerate(itertools.product(EDGE_M, EDGE_N, EDGE_K))]
    _check(run_gpu_cases("gemm", cases))


# Every family the kernel supports: block_m 64/128/256; one or two accumulator buffers; whole or
# half-width WGMMAs; multicast off / on A / on B (odd tile counts leave a CTA without a peer);
# split-K clusters of 2..8 (K=16 leaves ranks without k-blocks); block_n that straddles b_scale
# blocks (144, 160, 48, 112, 192); odd tails in m, n and k.
FAMILIES = [
    dict(block_m=64, block_n=16, num_stages=8), dict(block_m=64, block_n=16, num_stages=8, accum_buffers=2),
    dict(block_m=64, block_n=144, num_stages=6),
    dict(block_m=64, block_n=48, num_stages=8, num_multicast=2, multicast_on_a=True, accum_buffers=2),
    dict(block_m=128, block_n=128, num_stages=5), dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2),
    dict(block_m=128, block_n=112, num_stages=6, accum_buffers=2),
    dict(block_m=128, block_n=160, num_stages=5, num_multicast=2, multicast_on_a=True),
    dict(block_m=128, block_n=144, num_stages=5, num_multicast=2, multicast_on_a=False),
    dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, num_multicast=2, multicast_on_a=True),
    dict(block_m=128, block_n=192, num_stages=4),
    dict(block_m=128, block_n=192, num_stages=4, raster_along_m=True, raster_width=16),
    dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16),
    dict(block_m=256, block_n=64, num_stages=4, accum_buffers=2),
    dict(block_m=256, block_n=128, num_stages=3),
    dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True),
    dict(block_m=256, block_n=112, num_stages=3, num_multicast=2, multicast_on_a=False),
    dict(block_m=256, block_n=48, num_stages=4, num_multicast=2, multicast_on_a=False, accum_buffers=2),
    dict(block_m=64, block_n=64, num_stages=8, split_k=4, accum_buffers=2),
    dict(block_m=64, block_n=48, num_stages=8, split_k=8),
    dict(block_m=128, block_n=128, num_stages=5, split_k=2, accum_buffers=2),
    dict(block_m=64, block_n=16, num_stages=8, split_k=3, accum_buffers=2),
    # L2 policies on the loads (B evict-first, A evict-last): plain, multicast of A and of B, split-K
    dict(block_m=64, block_n=32, num_stages=16, accum_buffers=2, evict_first_b=True),
    dict(block_m=128, block_n=128, num_stages=5, num_multicast=2, multicast_on_a=True, accum_buffers=2,
         evict_first_b=True),
    dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, evict_first_b=True),
    dict(block_m=64, block_n=64, num_stages=13, split_k=2, accum_buffers=2, evict_first_b=True),
    # one-buffer k-loops unrolled by 6 (K = 7168: 56 k-blocks, a remainder of 2; 1536: 12; 400 and
    # 16: fewer than one body): plain, multicast of A, a tile straddling b_scale blocks
    dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16, k_unroll=6),
    dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True, k_unroll=6),
    dict(block_m=128, block_n=160, num_stages=5, k_unroll=6),
]
# M = 1000, 4097 and 520 fill their last m-block only partly: that tile starts earlier (the
# dense scheduler's tile_m0, rounded up to 4 rows), recomputes rows of the one before and stores
# them again; the outputs are NaN-poisoned and checked whole.
FAMILY_SHAPES = [(1000, 2112, 7168), (4097, 1160, 400), (520, 4096, 16), (2048, 7168, 1536)]


def _family_cases():
    cases = []
    for i, (family, (m, n, k)) in enumerate(itertools.product(FAMILIES, FAMILY_SHAPES)):
        # The persistent grid at full size and shrunk; a split-K launch has one cluster per tile.
        for grid in ((132, 30) if family.get("split_k", 1) == 1 else (132,)):
            cases.append(dict(m=m, n=n, k=k, seed=i, config=dict({"raster_width": 8, **family}, grid_size=grid)))
    return cases


def test_every_config_family():
    _check(run_gpu_cases("gemm", _family_cases()))


# M below one tile: the A box is M rows (deep_tile.kernels.fp8_gemm.a_box_rows; multicast of A
# keeps whole halves) and the tile rows the TMA leaves stale must only reach output rows that are
# never stored. M = 1 and 37 are below every block_m, 100 below 128 and 256, 200 below 256.
SMALL_M_SHAPES = [(1, 1160, 400), (37, 2112, 1536), (100, 4096, 16), (200, 520, 7168)]


def test_every_config_family_below_one_tile():
    cases = [dict(m=m, n=n, k=k, seed=i, config=dict({"raster_width": 8, **family}, grid_size=132))
             for i, (family, (m, n, k)) in enumerate(itertools.product(FAMILIES, SMALL_M_SHAPES))]
    _check(run_gpu_cases("gemm", cases))


# K fixed at compile time (KernelConfig.static_k_blocks = ceil(K / 128)): 1, 4 (K = 400, a partial
# last K block), 12, 16 and 56 K blocks (the long tier), below and beyond the unrolled body
# (fp8_gemm.STATIC_K_UNROLL);
# a tile straddling b_scale blocks, two column parts, multicast of A and of B, the L2 policies,
# ragged M and N, M below one tile, a persistent grid at full size and shrunk, and the row-major
# a_scale (K = 1536 and 2048: whole 4-group boxes).
STATIC_K_FAMILIES = [
    dict(block_m=256, block_n=128, num_stages=3),
    dict(block_m=128, block_n=160, num_stages=5, raster_along_m=True, raster_width=16),
    dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16),
    dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True),
    dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, evict_first_b=True),
]
STATIC_K_SHAPES = [(4097, 1160, 400), (520, 4096, 16), (2048, 7168, 1536), (1000, 2112, 2048), (37, 2112, 1536),
                   (700, 1160, 7168)]


def test_static_k_families():
    cases = []
    for i, (family, (m, n, k)) in enumerate(itertools.product(STATIC_K_FAMILIES, STATIC_K_SHAPES)):
        fixed = dict({"raster_width": 8, **family}, static_k_blocks=-(-k // 128))
        for grid in (132, 30):
            cases.append(dict(m=m, n=n, k=k, seed=i, config=dict(fixed, grid_size=grid)))
    cases += [dict(m=m, n=n, k=k, layout="row", seed=i,
                   config=dict(STATIC_K_FAMILIES[j], static_k_blocks=k // 128, grid_size=132))
              for i, (j, (m, n, k)) in enumerate(itertools.product((0, 2), [(1000, 2112, 2048), (4097, 1160, 1536)]))]
    _check(run_gpu_cases("gemm", cases))


# The stage ring as immediates (KernelConfig.static_ring; selector.static_ring_for): K fixed at a
# multiple of the stages, 8, 7 and 4 of them, over several passes and one (a partial K block), a
# persistent grid at full size and shrunk, M below one tile, the row-major a_scale (over several
# passes: one pass of 8 K blocks on it spills 8 bytes, NVRTC 13.5 and nvcc 13.0), and 128x192
# tiles at odd n-blocks straddling two b_scale blocks (N = 1160 and 2112).
STATIC_RING_FAMILIES = [
    dict(block_m=128, block_n=64, num_stages=8, accum_buffers=1, evict_first_b=True),
    dict(block_m=128, block_n=96, num_stages=7, accum_buffers=1),
    dict(block_m=128, block_n=192, num_stages=4, accum_buffers=1, raster_along_m=True, raster_width=16),
]
STATIC_RING_SHAPES = [(520, 2112, 7168), (700, 1160, 1008), (37, 2112, 896), (4097, 1160, 2048)]


def static_ring_cases() -> list:
    """The GPU cases of test_static_ring_families: each family on each shape whose K blocks are a
    multiple of its stages."""
    cases = []
    for i, (family, (m, n, k)) in enumerate(itertools.product(STATIC_RING_FAMILIES, STATIC_RING_SHAPES)):
        k_blocks = -(-k // 128)
        if k_blocks % family["num_stages"]:
            continue
        ring = dict(family, static_k_blocks=k_blocks, static_ring=True)
        cases += [dict(m=m, n=n, k=k, seed=i, config=dict(ring, grid_size=grid)) for grid in (132, 30)]
        if k_blocks % 4 == 0 and k_blocks > family["num_stages"]:  # (one pass on the row-major a_scale spills)
            cases.append(dict(m=m, n=n, k=k, layout="row", seed=i, config=dict(ring, grid_size=132)))
    return cases


def test_static_ring_families():
    _check(run_gpu_cases("gemm", static_ring_cases()))


# Swap-AB (KernelConfig.swap_n, M <= 16): the weights are each WGMMA's 64-row operand and 8 or 16
# rows of A its N side, the output stored transposed back. Tiles 64, 128 and 192 wide (192: a tile
# straddling two b_scale blocks at odd n-blocks), one and two buffers, split-K over 2 and 3, a
# persistent grid at full size and shrunk (several tiles per CTA), N not a multiple of 64, K
# tails, and the row-major a_scale.
SWAP_FAMILIES = [
    dict(block_m=64, block_n=64, num_stages=13, accum_buffers=2, evict_first_b=True),
    dict(block_m=64, block_n=64, num_stages=8),
    dict(block_m=64, block_n=128, num_stages=8, accum_buffers=2, raster_along_m=True, raster_width=16),
    dict(block_m=64, block_n=192, num_stages=6),
    dict(block_m=64, block_n=64, num_stages=13, split_k=3, accum_buffers=2, evict_first_b=True),
    dict(block_m=64, block_n=128, num_stages=8, split_k=2, accum_buffers=2),
]
SWAP_SHAPES = [(1, 2112, 7168), (3, 1160, 400), (8, 520, 1536), (9, 4096, 16), (13, 7168, 2048), (16, 328, 7168)]


def test_swap_ab_families():
    cases = []
    for i, (family, (m, n, k)) in enumerate(itertools.product(SWAP_FAMILIES, SWAP_SHAPES)):
        swap = dict(family, swap_n=8 if m <= 8 else 16)
        for grid in ((132, 30) if family.get("split_k", 1) == 1 else (132,)):
            cases.append(dict(m=m, n=n, k=k, seed=i, config=dict({"raster_width": 8, **swap}, grid_size=grid)))
    cases += [dict(m=m, n=n, k=k, layout="row", seed=i, config=dict({"raster_width": 8, **family}, swap_n=8, grid_size=132))
              for i, (family, (m, n, k)) in enumerate(itertools.product(SWAP_FAMILIES[:2] + SWAP_FAMILIES[4:5],
                                                                        [(5, 520, 1536), (1, 2112, 7168)]))]
    cases += [dict(m=m, n=n, k=k, row_stride=row_stride, seed=i, config=dict({"raster_width": 8, **family},
                                                                               swap_n=16, grid_size=132))
              for i, (family, (m, n, k, row_stride)) in enumerate(itertools.product(
                  SWAP_FAMILIES[:1] + SWAP_FAMILIES[5:], [(12, 1160, 1536, 1160 + 64), (16, 520, 400, 600)]))]
    _check(run_gpu_cases("gemm", cases))


def test_every_kind_reads_a_row_major_a_scale():
    # K = 1536 (12 groups) and 7168 (56): the kernel variant reads the row-major a_scale as it is,
    # through 4-group TMA boxes; every kernel kind, ragged M and N, and M = 5 below every tile (a
    # box of 8 a_scale rows: fp8_gemm.a_scale_box_rows).
    kinds = [dict(block_m=64, block_n=16, num_stages=8, accum_buffers=2), dict(block_m=128, block_n=144, num_stages=5),
             dict(block_m=256, block_n=128, num_stages=3), dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3),
             dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True),
             dict(block_m=64, block_n=64, num_stages=8, split_k=3, accum_buffers=2),
             dict(block_m=128, block_n=128, num_stages=5, split_k=2, accum_buffers=2)]
    cases = [dict(m=m, n=n, k=k, layout="row", seed=i, config=dict(kind, grid_size=132))
             for i, (kind, (m, n, k)) in enumerate(itertools.product(kinds, [(1000, 2112, 7168), (4097, 1160, 1536),
                                                                             (5, 520, 1536)]))]
    _check(run_gpu_cases("gemm", cases))


def test_layouts_row_major_scale_and_padded_out():
    cases = [dict(m=m, n=n, k=k, layout="row", row_stride=row_stride, seed=i)
             for i, (m, n, k, row_stride) in enumerate([(129, 2112, 7168, 2112 + 64), (4096, 4096, 7168, None),
                                                        (7, 24, 144, 32), (1000, 136, 16, 200)])]
    _check(run_gpu_cases("gemm", cases))


def test_non_default_stream_and_cuda_graph():
    results = run_gpu_cases("gemm_stream_and_graph", [dict(m=128, n=2112, k=7168), dict(m=4097, n=136, k=144)])
    for r in results:
        for what in ("stream", "graph"):
            metrics = r[what]
            assert metrics["nan"] == 0 and metrics["diff"] < DIFF_TOL and metrics["rel"] < REL_TOL, (what, r)


def test_bad_input_raises_before_writing():
    results = run_gpu_cases("bad_input_leaves_out_untouched",
                            [dict(case="b_scale_shape"), dict(case="a_dtype"), dict(case="cpu_b")])
    for r in results:
        assert r["raised"] != "none", r
        assert r["out_all_nan"], r
