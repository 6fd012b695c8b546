"""CPU tests of the configuration selector (deep_tile.select), deep_tile.device, get_config / explain
(deep_tile.select.api) and the CLI."""
import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from deep_tile import arch, device
from deep_tile.__main__ import main
from deep_tile.common import ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.select import KernelConfig, api, explain_text, rank_candidates, select_config
from deep_tile.select.api import explain, get_config
from deep_tile.select.config import raster
from deep_tile.select.candidates import Candidate, max_stages, split_k_factors, tile_shapes
from deep_tile.select.cost import (COUNT_SPREAD, DEFAULT_PARAMS, estimate, min_bytes, table_grid_size, table_rounds,
                                   wgmma_efficiency)
from deep_tile.select.selector import (IN_PLACE_ODD_WIDTH_EFFICIENCY, ONE_M_BLOCK_MAX_M, ONE_M_BLOCK_TOLERANCE, ONE_SUBTILE_TOLERANCE, SERIAL_LOOP_MIN_M, SPLIT_TOLERANCE, STREAM_MIN_BLOCK_N,
                                      RASTER_WIDTH, RING_TILE, RING_TILE_MIN_K_BLOCKS, RING_TILE_OVER, RING_TILE_TOLERANCE, TIE_TOLERANCE, UNSPLIT_TOLERANCE, WIDE_TILE_MIN_K_BLOCKS, _tie_break,
                                      overlaps_promotion)
from deep_tile.gemm.problem import Problem, ProblemKind
from conftest import run_python

ROOT = Path(__file__).resolve().parents[1]

GRID_M = (1, 2, 7, 63, 64, 65, 127, 128, 129, 255, 256, 511, 512, 1000, 1024, 2048, 4096, 4097, 8192, 16384)
GRID_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
           (576, 7168), (1536, 7168), (7168, 1536), (8, 16), (24, 144), (136, 7168), (2048, 4096))
GRID_SMS = (132, 114, 78, 7)
CONTRACT_DEFINES = {"DT_SMEM_BYTES", "DT_MIN_STAGES", "DT_MAX_STAGES", "DT_STORE_SWIZZLE", "DT_SCALE_GROUP",
                    "DT_NUM_THREADS"}


def _check_invariants(m, n, k, num_sms, max_smem):
    cfg = select_config(Problem(m, n, k), num_sms, max_smem)
    tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
    limit = min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    # a buildable kernel: the contract's rules hold, resources within the device's
    assert family.tile_problems(cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_multicast, cfg.split_k,
                                cfg.wgmma_n, cfg.accum_buffers, limit) == []
    assert cfg.smem_bytes <= limit and cfg.accum_registers <= family.ACCUM_REGISTER_BUDGET
    assert cfg.num_threads == 128 * (1 + cfg.num_math_warpgroups)
    # the policy: as many stages as fit (at least 3, at most 16)
    assert 3 <= cfg.num_stages <= 16
    assert cfg.num_stages == 16 or family.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages + 1, cfg.split_k) > limit
    # launch: persistent grid within the SMs; multicast pairs; split-K only where tiles leave SMs idle
    # the raster: wide persistent tiles without multicast in groups of 16 along M, the rest 8 along N
    # (multicast of B: along M, its pair shares the B tile)
    wide = cfg.block_n > cfg.block_m and cfg.num_multicast == 1 and cfg.split_k == 1
    assert cfg.raster_width == (16 if wide else 8)
    assert cfg.raster_along_m == (wide or (cfg.num_multicast == 2 and not cfg.multicast_on_a))
    if cfg.split_k > 1:
        assert cfg.num_multicast == 1 and cfg.block_m <= 128
        assert tiles * cfg.split_k <= num_sms
        assert family.launch_grid(cfg, m, n) == tiles * cfg.split_k
    else:
        assert 1 <= cfg.grid_size <= min(num_sms, tiles) or cfg.num_multicast == 2
        # balanced from 3 rounds of tiles on: no fewer CTAs finish in the same rounds
        full = min(num_sms, tiles)
        rounds = ceil_div(tiles, cfg.grid_size)
        if cfg.num_multicast == 1:
            assert rounds == ceil_div(tiles, full)
            assert cfg.grid_size == full or (rounds >= 3 and ceil_div(tiles, cfg.grid_size - 1) > rounds)
        assert family.launch_grid(cfg, m, n) == cfg.grid_size
    if cfg.num_multicast == 2:
        assert cfg.grid_size % 2 == 0 and cfg.grid_size >= 2 and num_sms % 2 == 0
    else:
        assert cfg.multicast_on_a is False
    defines = cfg.defines()
    assert CONTRACT_DEFINES <= set(defines) and all(type(v) is int for v in defines.values())
    assert defines["DT_SMEM_BYTES"] == cfg.smem_bytes and defines["DT_SPLIT_K"] == cfg.split_k
    # the choice is the model's fastest candidate, a two-buffer tile of two consumer warpgroups with
    # one buffer when unsplit (selector.one_buffer_for_two_warpgroups)
    ranked = rank_candidates(Problem(m, n, k), num_sms, max_smem)
    top = ranked[0].candidate
    if top.accum_buffers == 2 and top.block_m >= 128 and top.split_k == 1:
        top = dataclasses.replace(top, accum_buffers=1)
    assert top == Candidate(cfg.block_m, cfg.block_n, cfg.wgmma_n, cfg.accum_buffers, cfg.num_stages,
                            cfg.num_multicast, cfg.multicast_on_a, cfg.split_k)
    # ties: predicted times within TIE_TOLERANCE of each other; first, a split-K candidate within
    # SPLIT_TOLERANCE of the fastest, when that one is unsplit and latency-bound, or an unsplit
    # HBM-bound one within UNSPLIT_TOLERANCE, as many CTAs and B boxes of STREAM_MIN_BLOCK_N rows
    # when the fastest is an HBM-bound split; at 65-128 rows one of one m-block within
    # ONE_M_BLOCK_TOLERANCE; the 128x192 ring tile within RING_TILE_TOLERANCE of a wider one
    fastest = min(ranked, key=lambda e: e.time_s)
    if ranked[0] is not fastest and ranked[0].time_s > fastest.time_s * (1 + TIE_TOLERANCE):
        first = ranked[0]
        if ONE_M_BLOCK_MAX_M >= m > 64 and first.candidate.block_m >= m > fastest.candidate.block_m:
            # a candidate of one m-block first (selector._one_m_block_first)
            assert first.time_s <= fastest.time_s * (1 + SPLIT_TOLERANCE) * (1 + ONE_M_BLOCK_TOLERANCE)
        elif (first.candidate.block_m, first.candidate.block_n) == RING_TILE and first.candidate.split_k == 1:
            # the 128x192 tile with the stage ring before a wider one (selector._ring_tile_first)
            assert (fastest.candidate.block_m, fastest.candidate.block_n) in RING_TILE_OVER
            assert n % RING_TILE[1] == 0 and cfg.static_ring
            assert first.time_s <= fastest.time_s * (1 + RING_TILE_TOLERANCE)
        elif first.candidate.split_k > 1:
            assert fastest.candidate.split_k == 1 and fastest.bound == "latency"
            assert first.time_s <= fastest.time_s * (1 + SPLIT_TOLERANCE)
        else:
            assert fastest.candidate.split_k > 1 and fastest.bound == first.bound == "hbm"
            assert first.ctas >= fastest.ctas and first.candidate.block_n >= STREAM_MIN_BLOCK_N
            assert first.time_s <= fastest.time_s * (1 + UNSPLIT_TOLERANCE)
    # after the first, in order (after the first two when one of one m-block went before the
    # split-K or unsplit choice)
    rest = ranked[2:] if ONE_M_BLOCK_MAX_M >= m > 64 and ranked[0].candidate.block_m >= m else ranked[1:]
    assert all(a.time_s <= b.time_s * (1 + TIE_TOLERANCE) for a, b in zip(rest, rest[1:]))


@pytest.mark.parametrize("num_sms", GRID_SMS)
@pytest.mark.parametrize("n,k", GRID_NK)
def test_invariants_over_shape_grid(n, k, num_sms):
    for m in GRID_M:
        _check_invariants(m, n, k, num_sms, arch.MAX_SMEM_PER_BLOCK)


@pytest.mark.parametrize("max_smem", [101376, 166912, 200000])
def test_invariants_with_smaller_smem_limit(max_smem):
    for m, (n, k) in itertools.product((64, 1000, 4096), GRID_NK[:6]):
        _check_invariants(m, n, k, 132, max_smem)


def _family_of(cfg):
    return (cfg.block_m * cfg.block_n, cfg.num_multicast, cfg.split_k > 1, cfg.block_m)


# What the selector must pick on an H100 (132 SMs), each backed by the sweeps in
# benchmarks/data/sweep_*_h100_diet_2026-11-22.json (times in us, median of 20, L2 flushed):
def test_large_problems_take_256x128_class_tiles_without_multicast():
    # 4096x7168x16384: 256x128 692.3, 128x256 692.5, 256x128 mcA 695.5, 128x128 mcA (two buffers) 782.0
    for shape in [(4096, 7168, 16384), (4096, 4096, 7168), (8192, 8192, 8192), (4096, 24576, 1536)]:
        cfg = select_config(Problem(*shape), 132)
        assert cfg.block_m * cfg.block_n == 256 * 128 and cfg.num_multicast == 1 and cfg.split_k == 1, cfg.label


def test_small_m_with_long_k_takes_64_row_tiles_with_two_buffers():
    # 64x7168x16384: 64x80 s11 x2 55.3, 64x64 s13 x2 55.6, 64x128 s9 k2 x2 57.0, 64x32 s16 x2 59.4
    cfg = select_config(Problem(64, 7168, 16384), 132)
    assert cfg.block_m == 64 and cfg.split_k <= 2 and cfg.block_n >= 64 and cfg.accum_buffers == 2


@pytest.mark.parametrize("n,k", [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168),
                                 (7168, 2048), (256, 512), (16384, 16384)])
def test_small_m_ranks_only_two_buffer_k_loops(n, k):
    # 128x24576x1536: 128x192 24.0 us, 128x64 x2 22.6; 128x32768x512: 128x256 16.9, 128x128 x2 15.8
    # (H100, selector.overlaps_promotion); from M = 129 on one-buffer tiles compete again. A pick
    # of two consumer warpgroups then runs one buffer (selector.one_buffer_for_two_warpgroups).
    for m in (1, 16, 64, 100, 128):
        cfg = select_config(Problem(m, n, k), 132)
        two_warpgroups = cfg.block_m >= 128 and cfg.split_k == 1
        assert cfg.accum_buffers == (1 if two_warpgroups else 2), (m, n, k, cfg.label)
        assert all(e.candidate.accum_buffers == 2 for e in rank_candidates(Problem(m, n, k), 132))
    assert any(e.candidate.accum_buffers == 1 for e in rank_candidates(Problem(SERIAL_LOOP_MIN_M, n, k), 132))
    assert select_config(Problem(128, 32768, 512), 132).label == "128x128 s5"


def test_one_m_block_first_at_65_to_128_rows():
    # 128x4096x7168: 64x64 21.3 us, 128x32 19.1; 128x2112x7168: 64x64 k2 14.8, 128x32 k2 14.3
    # (H100, RESULTS.md 2026-11-27 'B evict-first up to eight m-blocks over long K, and small tiles
    # at M = 128'); the unsplit one runs one buffer (selector.one_buffer_for_two_warpgroups)
    for shape, label in [((128, 4096, 7168), "128x32 s10 ef"), ((128, 2112, 7168), "128x32 s11 k2 x2 ef")]:
        ranked = rank_candidates(Problem(*shape), 132)
        fastest = min(ranked, key=lambda e: e.time_s)
        assert fastest.candidate.block_m == 64 and ranked[0].candidate.block_m == 128
        assert ranked[0].time_s <= fastest.time_s * (1 + SPLIT_TOLERANCE) * (1 + ONE_M_BLOCK_TOLERANCE)
        assert select_config(Problem(*shape), 132).label == label
        assert "a candidate of one m-block and half its width within 10% goes first" in explain_text(Problem(*shape), 132)
    # not below 65 rows (64-row tiles are one m-block), nor on fewer CTAs (128x4608x7168: 64x96 on
    # 96 CTAs 20.1 us, 128x64 on 72 21.4)
    assert select_config(Problem(64, 4096, 7168), 132).block_m == 64
    assert select_config(Problem(128, 4608, 7168), 132).block_m == 64
    # nor an odd width, a split or a wider one (80x4608x7168: 64x96 20.0, 128x48 21.8, 128x96 k2
    # 22.3; 72x4608x7168: 64x96 20.3-20.9, 128x96 k2 21.8, 128x128 k3 23.2)
    assert select_config(Problem(80, 4608, 7168), 132).block_m == 64
    assert select_config(Problem(72, 4608, 7168), 132).block_m == 64


def test_latency_bound_ties_go_to_split_k():
    # 64x2112x7168: 64x16 and 64x32 k2 tie in the model, both latency-bound; 64x32 k2 measured
    # 13.6 vs 14.3 us (H100), 11.6 vs 14.2 (H200). HBM-bound ties stay unsplit (8x4096x7168: 64x32
    # 18.0, 64x64 k2 18.6).
    ranked = rank_candidates(Problem(64, 2112, 7168), 132)
    assert ranked[0].bound == "latency" and ranked[0].candidate.split_k == 2
    assert select_config(Problem(64, 2112, 7168), 132).label == "64x32 s16 k2 x2 ef"
    tied = rank_candidates(Problem(8, 4096, 7168), 132)
    assert tied[0].bound == "hbm" and tied[0].candidate.split_k == 1
    assert any(e.candidate.split_k > 1 and e.time_s <= tied[0].time_s * (1 + TIE_TOLERANCE) for e in tied[1:])


def test_a_split_within_tolerance_goes_before_a_latency_bound_pick():
    # 1x1024x4096: 64x16 10.6 -> 64x32 k3 9.1 (H100); also 128x2112x7168 (64x32 latency-bound 14.9
    # us, 64x64 k2 predicted 6% slower 14.8), whose pick is now of one m-block (next test)
    for shape, label in [((1, 1024, 4096), "64x32 s16 k3 x2 ef")]:
        ranked = rank_candidates(Problem(*shape), 132)
        unsplit = min((e for e in ranked if e.candidate.split_k == 1), key=lambda e: e.time_s)
        assert unsplit.bound == "latency" and ranked[0].candidate.split_k > 1
        assert unsplit.time_s < ranked[0].time_s <= unsplit.time_s * (1 + SPLIT_TOLERANCE)
        assert select_config(Problem(*shape), 132).label == label
        text = explain_text(Problem(*shape), 132)
        assert "latency-bound, and a split-K candidate within 7% goes first" in text


def test_an_unsplit_stream_within_tolerance_goes_before_an_hbm_bound_split():
    # Mx7168x16384 at M = 1..31 (both chips): 64x128 split-K 2 predicted 1.1-2.8% faster than 64x64
    # on the same 112 CTAs; measured 64x64 30.0 / 29.7 / 30.1 us against 31.7 / 31.6 / 32.1 at M = 1 /
    # 16 / 32 (H200), 42.4 / 42.7 / 42.9 against 43.0 / 43.1 / 43.6 (H100; benchmarks/RESULTS.md,
    # 2026-11-24 'Where a decode GEMM's time goes, and the a_scale box below one tile'). 4096x7168 keeps its split (64x32 boxes are narrower than STREAM_MIN_BLOCK_N).
    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for m in (1, 16, 31):
            ranked = rank_candidates(Problem(m, 7168, 16384), 132, chip=chip)
            fastest = min(ranked, key=lambda e: e.time_s)
            assert fastest.candidate.split_k == 2 and fastest.bound == "hbm"
            assert ranked[0].candidate.split_k == 1 and ranked[0].candidate.block_n == 64
            assert ranked[0].time_s <= fastest.time_s * (1 + UNSPLIT_TOLERANCE)
        assert select_config(Problem(1, 4096, 7168), 132, chip=chip).split_k == 2
    assert select_config(Problem(64, 7168, 16384), 132).label == "64x64 s13 x2 ef"
    text = explain_text(Problem(1, 7168, 16384), 132, chip=arch.CHIPS["H200"])
    assert "an unsplit candidate as wide as its B boxes need, on as many CTAs, within 4% goes first" in text


def test_the_1d1d_fp32_staging_never_takes_the_spilling_256x128_build():
    # Under 1D1D with the FP32 D through shared memory, 256x128 without multicast and unrolled by 3
    # spills (family.SPILLING_1D1D_F32_STAGING_TILES): KernelConfig refuses that build, the
    # multicast and unrolled-by-6 ones and a C apart are taken, and the selector emits none of it;
    # without C it takes 128x256 /128 (measured 4-9% faster, docs/performance.md).
    base = KernelConfig(block_m=256, block_n=128, num_stages=3, grid_size=132).with_b_scale_1d()
    for c_dtype in (None, "out"):
        with pytest.raises(ValueError, match="spills registers under 1D1D with the FP32 D stored through shared memory"):
            base.with_output("float32", c_dtype)
        for fields in (dict(num_multicast=2, multicast_on_a=True), dict(k_unroll=6)):
            assert dataclasses.replace(base, **fields).with_output("float32", c_dtype).block_m == 256
    assert base.with_output("float32", "bfloat16").block_m == 256 and base.with_output("bfloat16", None).block_m == 256
    for m, n, k in itertools.product((512, 2048, 8192), (2048, 7168, 24576), (512, 2048, 4096)):
        for c_dtype in (None, "out"):
            problem = Problem(m, n, k, out_dtype="float32", c_dtype=c_dtype, b_scale_1d=True)
            for num_sms in (132, 114):
                cfg = select_config(problem, num_sms).for_problem(problem)  # refused builds would raise here
                assert not family.f32_staging_problems(cfg), cfg.label
                if c_dtype is None:
                    assert (cfg.block_m, cfg.block_n, cfg.num_multicast) != (256, 128, 1), cfg.label
    problem = Problem(2048, 2048, 2048, out_dtype="float32", b_scale_1d=True)
    assert select_config(problem, 132).for_problem(problem).label == "128x256 s3 /128 gM f32 1d1d"


def test_the_in_place_weight_gradient_takes_a_one_slab_tile_over_a_tied_256_row_one():
    # Only a warpgroup of one 64-row slab forms part of its 1D1D scale products under the WGMMAs
    # (Fp8GemmConfig::kPreScaleGroups), so for the in-place weight gradient a 128-row one-buffer
    # tile beats a 256-row one it ties with (benchmarks/RESULTS.md, 2026-11-26 'Scale products
    # formed under the WGMMAs': 32768x512 over 4096 tokens, 128x256 /128 160.2 us against
    # 256x128's 162.7 on an H100).
    wgrad = Problem(32768, 512, 4096, out_dtype="float32", c_dtype="out", b_scale_1d=True)
    plain = Problem(32768, 512, 4096, b_scale_1d=True)  # the same GEMM writing bf16, no main gradient
    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        ranked = rank_candidates(wgrad, 132, chip=chip)
        cfg = select_config(wgrad, 132, chip=chip)
        assert (cfg.block_m, cfg.accum_buffers, cfg.split_k) == (128, 1, 1)
        tied = [e for e in ranked if e.candidate.block_m == 256 and e.time_s <= ranked[0].time_s * (1 + TIE_TOLERANCE)]
        assert tied, "the case this test is about: a 256-row tile ties with the pick"
        assert "selector._one_slab_first" in explain_text(wgrad, 132, chip=chip)
        # the same GEMM without the main gradient keeps the model's tie-break
        assert "_one_slab_first" not in explain_text(plain, 132, chip=chip)
    assert select_config(plain, 132, chip=arch.CHIPS["H100 SXM"]).block_m == 256


def test_the_in_place_weight_gradient_covers_whole_rows_along_m():
    # A tile the raster would run in bands of RASTER_WIDTH n-blocks runs along M for the in-place
    # weight gradient when N's n-blocks are more than one band but at most grid / RASTER_WIDTH
    # (benchmarks/RESULTS.md, 2026-11-26 'A b_scale ring for the 1D1D k-loop': 7168x2048 128x128
    # x2 on 128 CTAs, +2.6-2.7% over 4096 tokens on an H100).
    def wgrad(m, n, tokens, **kwargs):
        return Problem(m, n, tokens, **{**dict(out_dtype="float32", c_dtype="out", b_scale_1d=True), **kwargs})

    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for tokens in (4096, 16384):
            cfg = select_config(wgrad(7168, 2048, tokens), 132, chip=chip)
            assert (cfg.block_m, cfg.block_n, cfg.accum_buffers) == (128, 128, 2)
            assert cfg.raster_along_m and cfg.raster_width == RASTER_WIDTH
            assert ceil_div(2048, cfg.block_n) * RASTER_WIDTH <= cfg.grid_size
            assert "raster along M (selector.in_place_rows_along_m)" in explain_text(
                wgrad(7168, 2048, tokens), 132, chip=chip)
            # the same shape without the in-place accumulation, and N of more n-blocks than a
            # wave's band spans (4096x7168: 56) or of one band (32768x512: 4), keep the raster's axis
            assert not select_config(wgrad(7168, 2048, tokens, c_dtype=None), 132, chip=chip).raster_along_m
            for m, n in ((4096, 7168), (32768, 512)):
                cfg = select_config(wgrad(m, n, tokens), 132, chip=chip)
                assert cfg.num_multicast == 1 and cfg.raster_along_m == raster(cfg.block_m, cfg.block_n)[0]
            for m, n in ((7168, 2048), (4096, 7168), (32768, 512)):
                assert "in_place_rows_along_m" not in explain_text(wgrad(m, n, tokens, c_dtype=None), 132, chip=chip)


def test_the_in_place_weight_gradient_takes_one_sub_tile_per_warpgroup():
    # The dense 1D1D GEMM accumulated in place into FP32 (the weight gradient): a one-buffer 128-row
    # tile with one sub-tile per warpgroup within ONE_SUBTILE_TOLERANCE of the model's first goes
    # first (benchmarks/RESULTS.md, 2026-11-26 'One sub-tile per warpgroup for the in-place weight
    # gradient': 24576x1536 at 4096 tokens 128x192 339.6 -> 328.3 us on an H100).
    def wgrad(m, n, tokens, **kwargs):
        return Problem(m, n, tokens, **{**dict(out_dtype="float32", c_dtype="out", b_scale_1d=True), **kwargs})

    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for tokens in (4096, 16384):
            for (m, n), label in (((24576, 1536), "128x192"), ((7168, 16384), "128x192"), ((4096, 7168), "128x160"),
                                  ((2112, 7168), "128x192")):
                cfg = select_config(wgrad(m, n, tokens), 132, chip=chip)
                assert cfg.label.startswith(label + " ") and cfg.num_subtiles == 1 and cfg.accum_buffers == 1
                ranked = rank_candidates(wgrad(m, n, tokens), 132, chip=chip)
                fastest = min(ranked, key=lambda e: e.time_s)
                assert ranked[0].time_s <= fastest.time_s * (1 + ONE_SUBTILE_TOLERANCE)
            # a width not a multiple of 32 rated at IN_PLACE_ODD_WIDTH_EFFICIENCY: 128x144 where it
            # runs the same rounds of tiles as 128x160 (RESULTS.md, 2026-11-26 'Odd-width tiles for
            # the in-place weight gradient': 1.02-1.07x on an H100)
            for m, n in ((576, 7168), (256, 18432), (1536, 1536), (2112, 2048), (3072, 1536)):
                assert select_config(wgrad(m, n, tokens), 132, chip=chip).label.startswith("128x144 "), (m, n)
            text = explain_text(wgrad(576, 7168, tokens), 132, chip=chip)
            assert f"is rated at {IN_PLACE_ODD_WIDTH_EFFICIENCY:.2f} of the tensor pipe's speed" in text
            # further than the tolerance (32768x512: 128x192 wastes a third of its last column of
            # tiles), no one-sub-tile tile goes first (a one-slab tile may there:
            # test_the_in_place_weight_gradient_takes_a_one_slab_tile_over_a_tied_256_row_one); and
            # where the model's first already has one sub-tile, the ranking stands (the raster
            # aside: test_the_in_place_weight_gradient_covers_whole_rows_along_m)
            assert select_config(wgrad(32768, 512, tokens), 132, chip=chip).num_subtiles == 2
            in_place = select_config(wgrad(7168, 2048, tokens), 132, chip=chip)
            stored = select_config(wgrad(7168, 2048, tokens, c_dtype=None), 132, chip=chip)
            assert dataclasses.replace(in_place, raster_along_m=stored.raster_along_m) == stored
            # other outputs of the same shapes keep the model's first
            for kwargs in (dict(c_dtype=None), dict(out_dtype="bfloat16", c_dtype=None), dict(b_scale_1d=False)):
                problem = wgrad(24576, 1536, tokens, **kwargs)
                cfg = select_config(problem, 132, chip=chip)
                assert cfg.num_subtiles == 2, (kwargs, cfg.label)
    text = explain_text(wgrad(24576, 1536, 4096), 132, chip=arch.CHIPS["H200"])
    assert "a 128-row one-buffer tile with one sub-tile per warpgroup within 10% goes first" in text


def test_few_tiles_are_split_along_k():
    # 1x2112x7168: 64x96 k4 14.5, 64x64 k3 14.9, 64x64 k2 16.1, 64x64 (no split) 16.4, 64x16 18.8
    cfg = select_config(Problem(1, 2112, 7168), 132)
    assert cfg.split_k >= 2 and cfg.block_m == 64
    assert ceil_div(2112, cfg.block_n) <= arch.CHIPS["H100 SXM"].resident_clusters(cfg.split_k, 132)


def test_select_config_is_cached_and_pure():
    assert select_config(Problem(4096, 7168, 2048), 132) is select_config(Problem(4096, 7168, 2048), 132)
    assert select_config(Problem(4096, 7168, 2048), 114).grid_size <= 114


def test_model_floors_and_monotonicity():
    chip = arch.CHIPS["H100 SXM"]
    c = Candidate(128, 256, 128, 1, 3)
    short, long = (estimate(c, Problem(4096, 7168, k), 132, chip) for k in (2048, 16384))
    assert long.time_s > 4 * short.time_s
    assert short.memory_s == pytest.approx(min_bytes(Problem(4096, 7168, 2048)) / (chip.hbm_bytes_per_s * DEFAULT_PARAMS.hbm_efficiency))
    assert min_bytes(Problem(64, 2112, 7168)) == 64 * 7168 + 2112 * 7168 + 2 * 64 * 2112 + 4 * 64 * 56 + 4 * 17 * 56
    # a tile is no faster than its tensor work, and a narrow WGMMA is less efficient than a wide one
    assert wgmma_efficiency(16) < wgmma_efficiency(64) == wgmma_efficiency(128) == 1.0
    e = estimate(Candidate(64, 16, 16, 2, 16), Problem(64, 2112, 7168), 132, chip)
    assert e.tiles == 132 and e.ctas == 132 and e.k_blocks_per_cta == 56 and e.tiles_per_cta == 1
    split = estimate(Candidate(64, 64, 64, 2, 13, split_k=4), Problem(64, 2112, 7168), 132, chip)
    assert split.k_blocks_per_cta == 14 and split.tiles == 33
    # 33 clusters of 4 do not all fit on a 132-SM GH100 (32 do): two waves
    assert split.tiles_per_cta == 2 and chip.resident_clusters(4) == 30


def test_candidates_cover_the_kernel_kinds():
    shapes = tile_shapes(arch.MAX_SMEM_PER_BLOCK)
    assert (256, 128, 128, 1) in shapes and (128, 256, 128, 1) in shapes and (64, 16, 16, 2) in shapes
    assert (128, 128, 128, 2) in shapes and (256, 64, 64, 2) in shapes
    assert all(max_stages(bm, bn, arch.MAX_SMEM_PER_BLOCK) >= 3 for bm, bn, _, _ in shapes)
    assert split_k_factors(33, 56, 132) == (2, 3, 4)
    assert split_k_factors(17, 56, 132) == (2, 3, 4)  # the selector stops at 4 (MAX_SELECTED_SPLIT_K)
    assert split_k_factors(17, 3, 132) == (2,)  # every CTA keeps two k-blocks
    assert split_k_factors(200, 56, 132) == ()


def test_kernel_config_derived_values():
    # 32768 (D) + 5 x (16384 + 16384 + 512) + 5 x 8 (b_scale) + 5 x 16 (barriers) = 199288
    cfg = KernelConfig(block_m=128, block_n=128, num_stages=5, grid_size=132)
    assert cfg.smem_bytes == 199288 and cfg.num_threads == 384 and cfg.accum_registers == 128
    assert cfg.smem_breakdown()["total"] == 199288 and cfg.wgmma_n == 128 and cfg.num_subtiles == 1
    small = KernelConfig(block_m=64, block_n=16, num_stages=8, grid_size=1, multicast_on_a=True)
    assert small.multicast_on_a is False and small.num_math_warpgroups == 1 and small.num_threads == 256
    assert small.defines()["DT_MULTICAST_ON_A"] == 0
    assert KernelConfig(block_m=256, block_n=64, num_stages=4, grid_size=2, num_multicast=2,
                        multicast_on_a=True, accum_buffers=2).label == "256x64 s4 mcA x2"
    wide = KernelConfig(block_m=128, block_n=256, wgmma_n=128, num_stages=3, grid_size=2)
    assert wide.num_subtiles == 2 and wide.accum_registers == 192 and wide.label == "128x256 s3 /128"
    split = KernelConfig(block_m=64, block_n=64, num_stages=13, split_k=4, accum_buffers=2, grid_size=33)
    assert split.cluster_size == 4 and split.smem_breakdown()["d_staging"] == 0
    assert family.launch_grid(split, 64, 2112) == 132 and split.label == "64x64 s13 k4 x2"
    # the raster bands' axis: free without multicast, fixed by the multicast operand
    assert wide.raster_along_m is False and wide.defines()["DT_RASTER_ALONG_M"] == 0
    along_m = KernelConfig(block_m=128, block_n=256, wgmma_n=128, num_stages=3, grid_size=2, raster_along_m=True)
    assert along_m.defines()["DT_RASTER_ALONG_M"] == 1 and along_m.label == "128x256 s3 /128 gM"
    mc_b = KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=2, num_multicast=2)
    assert mc_b.raster_along_m is True and mc_b.label == "128x128 s4 mcB"


@pytest.mark.parametrize("kwargs,name", [
    (dict(block_m=96), "block_m"), (dict(block_n=24), "block_n"), (dict(block_n=176), "block_n"),
    (dict(block_n=192, accum_buffers=2), "accumulator registers"), (dict(block_m=256, block_n=256), "accumulator"),
    (dict(block_k=64), "block_k"), (dict(num_stages=1), "num_stages"), (dict(num_stages=17), "num_stages"),
    (dict(num_multicast=3), "num_multicast"), (dict(multicast_on_a=1), "multicast_on_a"),
    (dict(raster_width=7), "raster_width"), (dict(grid_size=0), "grid_size"),
    (dict(num_multicast=2, grid_size=131), "grid_size"), (dict(num_stages=7), "shared memory"),
    (dict(block_m=128.0), "block_m"), (dict(split_k=9), "split_k"), (dict(split_k=2, num_multicast=2), "split_k"),
    (dict(wgmma_n=48), "wgmma_n"), (dict(accum_buffers=3), "accum_buffers"),
    (dict(raster_along_m=1), "raster_along_m"), (dict(num_multicast=2, multicast_on_a=True, raster_along_m=True),
                                               "raster_along_m must be False with multicast of A"),
    (dict(num_multicast=2, raster_along_m=False), "raster_along_m must be True with multicast of B"),
    (dict(k_unroll=4), "k_unroll"), (dict(k_unroll=6, accum_buffers=2), "k_unroll"), (dict(k_unroll=6.0), "k_unroll"),
    (dict(swap_n=4), "swap_n"), (dict(swap_n=8.0), "swap_n"), (dict(swap_n=8), "swap_n needs block_m 64"),
    (dict(block_m=64, block_n=96, num_stages=8, swap_n=8), "swap_n needs block_m 64"),
    (dict(block_m=64, block_n=128, wgmma_n=64, num_stages=8, swap_n=16), "swap_n needs block_m 64"),
    (dict(block_m=64, block_n=64, num_stages=8, num_multicast=2, swap_n=8), "swap_n needs the dense kind"),
    (dict(block_m=64, block_n=64, num_stages=8, problem_kind=ProblemKind.GROUPED_MASKED, swap_n=8),
     "swap_n needs the dense kind"),
])
def test_kernel_config_rejects_bad_fields(kwargs, name):
    fields = dict(block_m=128, block_n=128, num_stages=4, grid_size=132)
    fields.update(kwargs)
    with pytest.raises(ValueError, match=name):
        KernelConfig(**fields)


@pytest.mark.parametrize("index,name", [(0, "m"), (1, "n"), (2, "k"), (3, "num_sms")])
@pytest.mark.parametrize("bad", [0, -4, 1.5, True, "64"])
def test_select_config_bad_arguments_name_the_argument(index, name, bad):
    args = [64, 2112, 7168, 132]
    args[index] = bad
    with pytest.raises(ValueError, match=rf"\b{name} must be a positive int; got {bad!r}"):
        select_config(Problem(*args[:3]), args[3])


def test_select_config_takes_a_problem():
    with pytest.raises(TypeError, match="problem must be a deep_tile.gemm.problem.Problem; got tuple"):
        select_config((64, 2112, 7168), 132)
    # the a_scale layout is the launcher's choice of variant: it does not change the selection
    assert select_config(Problem(64, 2112, 7168, a_scale_row_major=True), 132) == select_config(Problem(64, 2112, 7168), 132)


# get_config and explain check shapes with fp8_gemm's check (deep_tile.gemm.checks.check_problem_shape).
SHAPE_ERRORS = [
    ((-1, 2112, 7168), ValueError, "m must be an int >= 0; got -1"),
    ((64, 12, 7168), ValueError, "n must be a positive multiple of 8; got 12"),
    ((64, 0, 7168), ValueError, "n must be a positive multiple of 8; got 0"),
    ((64, 2112, 7170), ValueError, "k must be a positive multiple of 16; got 7170"),
    ((64, 2112, -16), ValueError, "k must be a positive multiple of 16; got -16"),
    ((1.5, 2112, 7168), TypeError, "m must be an int; got 1.5 (float)"),
    ((64, True, 7168), TypeError, "n must be an int; got True (bool)"),
    ((64, 2112, "64"), TypeError, "k must be an int; got '64' (str)"),
]


@pytest.mark.parametrize("func", [get_config, explain])
@pytest.mark.parametrize("shape,error,message", SHAPE_ERRORS)
def test_get_config_and_explain_check_shapes_like_fp8_gemm(func, shape, error, message):
    with pytest.raises(error) as info:
        func(*shape, num_sms=132)
    assert str(info.value) == f"{func.__name__}: {message}"


@pytest.mark.parametrize("func", [get_config, explain])
@pytest.mark.parametrize("bad,error,message", [(0, ValueError, "num_sms must be a positive int; got 0"),
                                               (-4, ValueError, "num_sms must be a positive int; got -4"),
                                               (1.5, TypeError, "num_sms must be an int; got 1.5 (float)"),
                                               (True, TypeError, "num_sms must be an int; got True (bool)")])
def test_get_config_and_explain_check_num_sms(func, bad, error, message):
    with pytest.raises(error) as info:
        func(64, 2112, 7168, num_sms=bad)
    assert str(info.value) == f"{func.__name__}: {message}"


def test_m_zero_is_accepted():
    assert get_config(0, 2112, 7168, num_sms=132) == get_config(1, 2112, 7168, num_sms=132)
    text = explain(0, 2112, 7168, num_sms=132)
    assert "M=0 N=2112 K=7168" in text and "without launching a kernel" in text
    assert "config:" not in text


def test_without_a_device_any_num_sms_is_taken():
    assert not device.has_cuda()  # CPU test machine: the target GPU is unknown
    assert get_config(4096, 7168, 2048, num_sms=500).grid_size <= 500
    assert "500 SMs" in explain(4096, 7168, 2048, num_sms=500)


def test_explain_contains_the_key_facts():
    text = explain_text(Problem(4096, 7168, 16384), 132)
    cfg = select_config(Problem(4096, 7168, 16384), 132)
    for fact in ("M=4096 N=7168 K=16384", f"config: {cfg.label}", f"DT_BLOCK_N={cfg.block_n}", "DT_SMEM_BYTES=",
                 f"{cfg.smem_bytes:,} of 232,448 bytes", "D staging", "A-scale stages", "barriers",
                 "registers per consumer thread", "of the 232", "floors on H100 SXM: HBM", "FP8 peak",
                 "ridge point 591", "model per k-block and CTA: tensor", "predicted:", "runners-up"):
        assert fact in text, fact
    assert sum(line.startswith("  ") and ": predicted" in line for line in text.splitlines()) == 4
    # a pick that is not the fastest prediction says why (a near-tie broken towards taller tiles)
    tie = explain_text(Problem(4096, 24576, 1536), 132)
    assert "config: 256x128 s3" in tie and "128x256 s3 /128 is predicted faster by" in tie and "rank as ties" in tie
    small = explain_text(Problem(1, 2112, 7168), 132)
    assert "split-K: clusters of" in small and "deterministic" in small and "reuses the A/B stages" in small


def test_ranking_is_by_predicted_time():
    ranked = rank_candidates(Problem(4096, 7168, 2048), 132)
    assert len(ranked) > 50 and ranked[0].time_s <= ranked[-1].time_s
    assert {e.candidate.num_multicast for e in ranked} == {1, 2}
    assert all(e.candidate.split_k == 1 for e in ranked)  # 4096x7168 fills the SMs: no split-K
    assert any(e.candidate.split_k > 1 for e in rank_candidates(Problem(64, 2112, 7168), 132))


def test_chip_facts_lookup():
    cases = {"NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H100 NVL": "H100 NVL",
             "NVIDIA H200": "H200", "NVIDIA GH200 480GB": "H200", "NVIDIA H800": "H800 SXM", "NVIDIA H20": "H20",
             "Tesla V100-SXM2-16GB": "H100 SXM", "": "H100 SXM"}
    for device_name, chip in cases.items():
        assert arch.chip_facts(device_name).name == chip, device_name
    assert arch.CHIPS["H100 PCIe"].num_sms == 114 and arch.CHIPS["H200"].hbm_bytes_per_s == 4.8e12
    assert family.LEGAL_BLOCK_N == tuple(range(16, 129, 16)) + (144, 160, 192, 256)
    h100 = arch.CHIPS["H100 SXM"]
    assert h100.resident_clusters(2) == 66 and h100.resident_clusters(2, num_sms=100) == 50
    assert arch.CHIPS["H20"].resident_clusters(4) == 78 // 4  # not measured: one cluster per 4 SMs


def test_set_num_sms_validation():
    device.set_num_sms(None)
    full = device.get_num_sms()
    try:
        for bad in (0, -1):
            with pytest.raises(ValueError, match=r"set_num_sms: num_sms must be a positive int"):
                device.set_num_sms(bad)
        for bad in (1.0, True, "8"):
            with pytest.raises(TypeError, match=r"set_num_sms: num_sms must be an int"):
                device.set_num_sms(bad)
        device.set_num_sms(8)
        assert device.get_num_sms() == 8
        assert get_config(4096, 7168, 2048).grid_size <= 8
    finally:
        device.set_num_sms(None)
    assert device.get_num_sms() == full


def test_set_num_sms_and_get_config_share_one_sm_count_rule(monkeypatch):
    """Without a device any positive count is taken by both (the target GPU is unknown); with one,
    both refuse more SMs than it has, with the same words."""
    device.set_num_sms(None)
    try:
        monkeypatch.setattr(device, "has_cuda", lambda: False)
        device.set_num_sms(200)
        assert device.get_num_sms() == 200 and get_config(4096, 7168, 2048, num_sms=200).grid_size <= 200
        facts = device.DeviceFacts(index=0, name="NVIDIA H100 80GB HBM3", num_sms=132, max_smem_per_block=232448,
                                   capability=(9, 0), chip=arch.DEFAULT_CHIP)
        monkeypatch.setattr(device, "has_cuda", lambda: True)
        monkeypatch.setattr(device, "device_facts", lambda index=None: facts)
        for call in (lambda: device.set_num_sms(133), lambda: get_config(4096, 7168, 2048, num_sms=133)):
            with pytest.raises(ValueError, match=r"num_sms must be at most 132, the SM count of cuda:0"):
                call()
    finally:
        device.set_num_sms(None)


def test_get_config_prints_each_new_choice_once(monkeypatch, capsys):
    monkeypatch.setattr(api, "_printed", set())
    from deep_tile import env
    monkeypatch.setattr(env, "print_configs", lambda: True)
    for _ in range(3):
        cfg = get_config(1000, 7168, 2048, num_sms=132)
    err = capsys.readouterr().err
    assert err.count("deep_tile: m=1000") == 1 and cfg.label in err
    monkeypatch.setattr(env, "print_configs", lambda: False)
    get_config(1001, 7168, 2048, num_sms=132)
    assert capsys.readouterr().err == ""


def test_cli_in_process(capsys):
    assert main(["explain", "4096,7168,2048", "--num-sms", "132"]) == 0
    assert f"config: {select_config(Problem(4096, 7168, 2048), 132).label}" in capsys.readouterr().out
    assert main(["explain", "64,2112,7168", "--num-sms", "0"]) == 2
    assert "num_sms must be a positive int" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["explain", "64,2112"])


def test_cli_subprocess():
    result = subprocess.run([sys.executable, "-m", "deep_tile", "explain", "4096,7168,2048", "--num-sms", "132"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    cfg = select_config(Problem(4096, 7168, 2048), 132)
    assert f"config: {cfg.label}" in result.stdout and f"shared memory: {cfg.smem_bytes:,} of 232,448" in result.stdout


def test_select_imports_neither_torch_nor_cuda():
    code = ("import sys, deep_tile.select, deep_tile.select.report, deep_tile.arch\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'cuda'))\n"
            "print(bad)\nsys.exit(1 if bad else 0)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_device_starts_no_cuda():
    code = ("import sys, deep_tile.device\n"
            "sys.exit(1 if 'torch' in sys.modules or 'deep_tile.select' in sys.modules else 0)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_grid_size_balances_from_three_rounds():
    from deep_tile.select.cost import grid_size
    # 896 tiles on 132 SMs: 7 rounds either way, 128 CTAs share them evenly
    assert grid_size(896, 132, 1) == 128 and grid_size(352, 132, 1) == 118 and grid_size(2048, 132, 1) == 128
    # fewer than 3 rounds: the grid stays full
    assert grid_size(133, 132, 1) == 132 and grid_size(264, 132, 1) == 132 and grid_size(100, 132, 1) == 100
    # multicast: even, balanced the same way; an odd tile count rounds up (one CTA idles, none
    # takes two tiles), within the SMs
    assert grid_size(265, 132, 2) == 90 and grid_size(896, 132, 2) == 128
    assert grid_size(3, 132, 2) == 4 and grid_size(33, 132, 2) == 34 and grid_size(1, 132, 2) == 2
    assert grid_size(131, 131, 2) == 130 and grid_size(133, 132, 2) == 132


def test_evict_first_b_where_b_is_a_long_stream():
    # B evict-first / A evict-last: at most two m-blocks read each B tile, over >= 8 k-blocks,
    # or at most eight over >= 32
    from deep_tile.select.selector import STREAM_MAX_M_BLOCKS, STREAM_MIN_K_BLOCKS, streams_b
    assert streams_b(STREAM_MAX_M_BLOCKS, STREAM_MIN_K_BLOCKS) and streams_b(1, 56)
    assert not streams_b(STREAM_MAX_M_BLOCKS + 1, 31) and not streams_b(1, STREAM_MIN_K_BLOCKS - 1)
    # the long-K tier: up to eight m-blocks over >= 32 k-blocks
    from deep_tile.select.selector import LONG_STREAM_MAX_M_BLOCKS, LONG_STREAM_MIN_K_BLOCKS
    assert streams_b(LONG_STREAM_MAX_M_BLOCKS, LONG_STREAM_MIN_K_BLOCKS)
    assert not streams_b(LONG_STREAM_MAX_M_BLOCKS + 1, 56) and not streams_b(4, LONG_STREAM_MIN_K_BLOCKS - 1)
    assert select_config(Problem(512, 4096, 7168), 132).evict_first_b
    assert not select_config(Problem(1024, 24576, 1536), 132).evict_first_b
    assert not select_config(Problem(4096, 4096, 7168), 132).evict_first_b
    # the second tier and the 160-wide unroll are the dense bf16 kind's: the in-place weight
    # gradient (1D1D, FP32 accumulated) keeps its measured pick
    wgrad = select_config(Problem(576, 7168, 4096, out_dtype="float32", c_dtype="out", b_scale_1d=True), 132)
    assert not wgrad.evict_first_b and wgrad.k_unroll == 6, wgrad.label
    small, two_blocks = select_config(Problem(64, 2112, 7168), 132), select_config(Problem(128, 2112, 7168), 132)
    assert small.evict_first_b and small.defines()["DT_EVICT_FIRST_B"] == 1 and small.label.endswith(" ef")
    assert two_blocks.evict_first_b  # one or two m-blocks
    assert select_config(Problem(1, 2112, 7168), 132).evict_first_b  # split-K: the whole K counts
    for shape in ((4096, 7168, 16384), (128, 32768, 512), (4096, 2112, 7168), (1024, 24576, 1536)):
        cfg = select_config(Problem(*shape), 132)
        assert not cfg.evict_first_b and cfg.defines()["DT_EVICT_FIRST_B"] == 0, (shape, cfg.label)
    assert "L2 policies: B loads evict-first" in explain_text(Problem(64, 2112, 7168), 132)


def test_grouped_weights_evict_first_unless_many_long_streams():
    """A grouped problem of at most 64 rows per group loads its weights evict-first, except with
    >= 16 groups over >= 24 k-blocks each (plain loads measured faster there on both chips)."""
    from deep_tile.gemm.problem import ProblemKind
    from deep_tile.select.selector import (GROUPED_MANY_STREAMS_MIN_GROUPS, GROUPED_MANY_STREAMS_MIN_K_BLOCKS,
                                           GROUPED_STREAM_MAX_M, grouped_streams_b)

    def masked(groups, rows, n, k):
        return Problem(64, n, k, kind=ProblemKind.GROUPED_MASKED, num_groups=groups, expected_m=rows)

    many, long_k = GROUPED_MANY_STREAMS_MIN_GROUPS, GROUPED_MANY_STREAMS_MIN_K_BLOCKS
    assert grouped_streams_b(masked(many - 1, 20, 4096, 7168), 56)
    assert not grouped_streams_b(masked(many, 20, 4096, 7168), long_k)
    assert grouped_streams_b(masked(many, 20, 4096, 7168), long_k - 1)
    assert not grouped_streams_b(masked(6, GROUPED_STREAM_MAX_M + 1, 4096, 7168), 56)
    for (groups, n, k), ef in {(32, 4096, 7168): False, (32, 7168, 3072): False, (16, 4096, 7168): False,
                               (32, 4096, 2048): True, (16, 7168, 2048): True, (6, 4096, 7168): True,
                               (6, 6144, 7168): True}.items():
        cfg = select_config(masked(groups, 20, n, k), 132)
        assert cfg.evict_first_b == ef and cfg.label.endswith(" ef masked") == ef, (groups, n, k, cfg.label)


def test_l2_promotion_128_for_weight_streams_on_the_h200_only():
    """The FP8 maps' L2 promotion: the chip's stream_l2_promotion (H200: 128) where few tiles read
    each weight tile (small M dense, masked with few rows per group), 256 everywhere else; the
    host's tensor-map specs carry it."""
    h200, h100 = arch.CHIPS["H200"], arch.CHIPS["H100 SXM"]
    for shape in ((1, 7168, 16384), (64, 2112, 7168), (128, 7168, 2048), (64, 32768, 512)):
        on_h200, on_h100 = select_config(Problem(*shape), 132, chip=h200), select_config(Problem(*shape), 132, chip=h100)
        assert on_h200.l2_promotion == 128 and " p128" in on_h200.label, shape
        assert on_h100.l2_promotion == 256 and "p128" not in on_h100.label, shape
        assert (on_h200.block_m, on_h200.block_n, on_h200.num_stages) == (on_h100.block_m, on_h100.block_n,
                                                                         on_h100.num_stages)
        b_map = family.argument_specs(on_h200, Problem(*shape))[1]
        assert b_map.code()[8] == 128 and family.argument_specs(on_h100, Problem(*shape))[1].code()[8] == 256
    for shape in ((4096, 32768, 512), (4096, 7168, 16384), (2048, 2112, 7168)):  # B tiles re-read: 256
        assert select_config(Problem(*shape), 132, chip=h200).l2_promotion == 256, shape
    masked = Problem(256, 4096, 7168, kind=ProblemKind.GROUPED_MASKED, num_groups=32, expected_m=16)
    assert select_config(masked, 132, chip=h200).l2_promotion == 128
    assert select_config(masked, 132, chip=h100).l2_promotion == 256
    many = Problem(2048, 4096, 7168, kind=ProblemKind.GROUPED_MASKED, num_groups=8, expected_m=1024)
    assert select_config(many, 132, chip=h200).l2_promotion == 256
    contiguous = Problem(4096, 4096, 7168, kind=ProblemKind.GROUPED_CONTIGUOUS, num_groups=32)
    assert select_config(contiguous, 132, chip=h200).l2_promotion == 256  # not measured
    assert "promote L2 misses to 128 bytes" in explain_text(Problem(64, 2112, 7168), 132, chip=h200)
    with pytest.raises(ValueError, match="l2_promotion must be one of"):
        KernelConfig(block_m=64, block_n=64, num_stages=4, grid_size=8, l2_promotion=96)


def test_one_buffer_k_loops_unroll_by_6_over_long_k_ranges():
    from deep_tile.select.selector import LONG_K_BLOCKS, k_unroll_for, straddle_copies
    assert k_unroll_for(1, LONG_K_BLOCKS, 256) == 6 and k_unroll_for(1, LONG_K_BLOCKS - 1, 256) == 3
    assert k_unroll_for(2, 128, 128) == 3  # the two-buffer loop unrolls on its own
    # tiles whose kernel holds many copies of the k-loop (one per b_scale straddle point) keep 3
    assert [straddle_copies(n) for n in (64, 128, 256, 192, 160, 144)] == [1, 1, 2, 3, 5, 9]
    assert k_unroll_for(1, 64, 192) == 6 and k_unroll_for(1, 64, 160) == 3
    assert select_config(Problem(4096, 1280, 8192), 132).k_unroll == 3
    assert "not 6 as the kernel holds 5 copies of the k-loop" in explain_text(Problem(4096, 1280, 8192), 132)
    assert "not 6" not in explain_text(Problem(4096, 1280, 2048), 132)  # short K: 3 anyway
    for shape in ((4096, 7168, 16384), (4096, 4096, 7168), (8192, 8192, 8192)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.accum_buffers == 1 and cfg.k_unroll == 6, (shape, cfg.label)
        assert cfg.defines()["DT_K_UNROLL"] == 6 and cfg.label.endswith(" u6")
    for shape in ((4096, 7168, 2048), (4096, 32768, 512), (4096, 24576, 1536), (64, 2112, 7168)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.k_unroll == 3 and " u" not in cfg.label, (shape, cfg.label)
    assert "k-loop: one WGMMA buffer, unrolled by 6 K blocks" in explain_text(Problem(4096, 7168, 16384), 132)
    assert KernelConfig(block_m=128, block_n=128, num_stages=4, grid_size=1).defines()["DT_K_UNROLL"] == 3


def test_k_fixed_at_compile_time_over_long_k_where_the_loop_unrolls_by_3():
    from deep_tile.select.selector import STATIC_K_LONG_MAX_K_BLOCKS, static_k_blocks_for
    # loops the selector unrolls by 3 (many straddle copies, or fewer than LONG_K_BLOCKS k-blocks)
    for shape, kb in (((4096, 1280, 8192), 64), ((1024, 4608, 7168), 56), ((4096, 8192, 3584), 28)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.k_unroll == 3 and cfg.static_k_blocks == kb, (shape, cfg.label)
        assert cfg.defines()[family.STATIC_K_DEFINE] == kb
    masked = Problem(1280, 7168, 3072, kind=ProblemKind.GROUPED_MASKED, num_groups=6, expected_m=1024)
    assert select_config(masked, 132).static_k_blocks == 24
    # the masked kind also where its run-time loop would be unrolled by 6; the config then says 3
    # (unused with K fixed), so one kernel
    masked = Problem(256, 6144, 7168, kind=ProblemKind.GROUPED_MASKED, num_groups=32, expected_m=192)
    cfg = select_config(masked, 132)
    assert cfg.static_k_blocks == 56 and cfg.k_unroll == 3 and " u6" not in cfg.label, cfg.label
    assert select_config(Problem(32 * 256, 6144, 7168, kind=ProblemKind.GROUPED_CONTIGUOUS, num_groups=32),
                         132).static_k_blocks == 0
    text = explain_text(Problem(4096, 1280, 8192), 132)
    assert "K fixed at compile time (64 K blocks)" in text and "a long K range" in text
    # unrolled by 6 (K a run-time value), past the long tier, or not a multiple of 4: not fixed
    for shape in ((4096, 4096, 7168), (4096, 7168, 16384), (4096, 1280, 8320), (4096, 1280, 8704), (4096, 7168, 2304)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.static_k_blocks == 0 and family.STATIC_K_DEFINE not in cfg.defines(), (shape, cfg.label)
    one = Candidate(block_m=128, block_n=160, wgmma_n=160, accum_buffers=1, num_stages=5)
    assert static_k_blocks_for(Problem(4096, 1280, 128 * STATIC_K_LONG_MAX_K_BLOCKS), one) == STATIC_K_LONG_MAX_K_BLOCKS
    assert static_k_blocks_for(Problem(4096, 1280, 128 * STATIC_K_LONG_MAX_K_BLOCKS), one, k_unroll=6) == 0
    assert static_k_blocks_for(Problem(4096, 1280, 2048), one, k_unroll=6) == 16  # the short tier takes any loop


def test_k_fixed_at_compile_time_for_short_k():
    from deep_tile.select.selector import STATIC_K_MAX_K_BLOCKS, select_signal_config, static_k_blocks_for
    unroll = family.STATIC_K_UNROLL
    for shape in ((4096, 32768, 512), (4096, 8192, 1024), (4096, 24576, 1536), (4096, 7168, 2048), (512, 32768, 512)):
        cfg = select_config(Problem(*shape), 132)
        kb = ceil_div(shape[2], 128)
        assert cfg.accum_buffers == 1 and cfg.static_k_blocks == kb, (shape, cfg.label)
        assert cfg.label.endswith(f" kb{kb}") and cfg.k_unroll == 3
        d = cfg.defines()
        assert d[family.STATIC_K_DEFINE] == kb and d[family.STATIC_K_UNROLL_DEFINE] == unroll
    assert "K fixed at compile time (4 K blocks)" in explain_text(Problem(4096, 32768, 512), 132)
    # not a multiple of the unrolled body (measured slower), or too long: K a run-time value
    for shape in ((4096, 7168, 640), (4096, 10240, 1280), (4096, 7168, 2304), (4096, 7168, 7168)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.static_k_blocks == 0 and family.STATIC_K_DEFINE not in cfg.defines(), (shape, cfg.label)
    assert STATIC_K_MAX_K_BLOCKS % unroll == 0
    # two buffers (small M), split-K, and the other kinds keep K a run-time value
    assert select_config(Problem(64, 2112, 2048), 132).static_k_blocks == 0
    assert select_config(Problem(4096, 7168, 2048, out_dtype="float32"), 132).static_k_blocks == 0
    assert select_config(Problem(4096, 7168, 2048, b_scale_1d=True, out_dtype="float32", c_dtype="out"),
                         132).static_k_blocks == 0
    # the contiguous kind (measured even) and the K-grouped one keep K a run-time value; the masked,
    # offsets and psum kinds' bf16 GEMMs fix it
    contiguous = Problem(4 * 4096, 7168, 2048, kind=ProblemKind.GROUPED_CONTIGUOUS, num_groups=4)
    assert select_config(contiguous, 132).static_k_blocks == 0
    masked = Problem(1280, 7168, 2048, kind=ProblemKind.GROUPED_MASKED, num_groups=6, expected_m=1024)
    assert select_config(masked, 132).static_k_blocks == 16
    assert select_config(masked.with_output("float32", "out"), 132).static_k_blocks == 0
    assert select_signal_config(masked, 132, 256).static_k_blocks == 0  # measured without signals
    for kind in (ProblemKind.GROUPED_OFFSETS, ProblemKind.GROUPED_PSUM):
        problem = Problem(8 * 2048, 7168, 2048, kind=kind, num_groups=8, expected_m=2048)
        assert select_config(problem, 132).static_k_blocks == 16, kind
    one = Candidate(block_m=256, block_n=128, wgmma_n=128, accum_buffers=1, num_stages=3)
    assert static_k_blocks_for(Problem(4096, 7168, 2048), one) == 16
    assert static_k_blocks_for(Problem(4096, 7168, 2048), dataclasses.replace(one, split_k=2)) == 0
    assert static_k_blocks_for(Problem(4096, 7168, 2048), dataclasses.replace(one, accum_buffers=2)) == 0
    assert static_k_blocks_for(contiguous, one) == 0
    k_grouped = Problem(7168, 2048, 2048, kind=ProblemKind.K_GROUPED, num_groups=4, out_dtype="float32",
                        b_scale_1d=True)
    assert static_k_blocks_for(k_grouped, one) == 0
    # the kernel is right for its own K blocks only: other problems are refused, not run
    cfg = select_config(Problem(4096, 7168, 2048), 132)
    assert cfg.for_problem(Problem(100, 7168, 1921)) is not None  # ceil(1921 / 128) = 16
    assert cfg.for_problem(masked).problem_kind is ProblemKind.GROUPED_MASKED
    for other in (Problem(4096, 7168, 1536), Problem(4096, 7168, 2049), k_grouped):
        with pytest.raises(ValueError, match="static_k_blocks=16"):
            cfg.for_problem(other)
    base = dict(block_m=256, block_n=128, num_stages=3, grid_size=132)
    assert KernelConfig(**base, static_k_blocks=4, problem_kind=ProblemKind.GROUPED_MASKED).static_k_blocks == 4
    for bad, message in ((dict(static_k_blocks=-1), "static_k_blocks must be an int >= 0"),
                         (dict(static_k_blocks=4, split_k=2, num_stages=2), "needs a kind other than k_grouped, split_k == 1"),
                         (dict(static_k_blocks=4, problem_kind=ProblemKind.K_GROUPED), "needs a kind other than k_grouped"),
                         (dict(static_k_blocks=True), "static_k_blocks must be an int")):
        with pytest.raises(ValueError, match=message):
            KernelConfig(**{**base, **bad})
    assert family.STATIC_K_DEFINE not in KernelConfig(**base).defines()


def test_every_ranked_candidate_makes_a_config():
    # multicast candidates take their swizzle axis from the operand they share (mcB: along M)
    from deep_tile.select.selector import config_from_estimate
    for shape in ((4096, 7168, 16384), (8192, 8192, 8192), (128, 2112, 7168)):
        for e in rank_candidates(Problem(*shape), 132):
            cfg = config_from_estimate(Problem(*shape), e, 132)
            assert cfg.raster_along_m == ((cfg.num_multicast == 2 and not cfg.multicast_on_a)
                                         or (cfg.num_multicast == 1 and cfg.split_k == 1 and cfg.block_n > cfg.block_m))


# ---- grouped kinds in get_config / explain --------------------------------------------------

GROUPED_ARGS = [("contiguous", 8192, 4096, 7168, 8, None), ("masked", 256, 6144, 7168, 32, 192),
                ("offsets", 4096, 4096, 7168, 64, None), ("psum", 4352, 4096, 7168, 8, None)]


@pytest.mark.parametrize("kind,m,n,k,groups,expected", GROUPED_ARGS)
def test_get_config_and_explain_cover_the_grouped_kinds(kind, m, n, k, groups, expected):
    from deep_tile.gemm.checks import check_grouped_problem

    problem = check_grouped_problem("test", kind, m, n, k, groups, expected)
    config = get_config(m, n, k, num_sms=132, kind=kind, num_groups=groups, expected_m=expected)
    assert config == select_config(problem, 132) and config.problem_kind is problem.kind
    text = explain(m, n, k, num_sms=132, kind=kind, num_groups=groups, expected_m=expected)
    for fact in (f"problem: {kind} grouped GEMM, G={groups} experts of B[G, N={n}, K={k}]",
                 f"about {problem.expected_m} rows per expert", f"config: {config.label}",
                 f"DT_PROBLEM_KIND={family.PROBLEM_KIND_CODES[problem.kind]}"):
        assert fact in text, (fact, text)
    if problem.kind.has_table:
        assert "per-expert table" in text
    # the work counts the real rows, not the padded slab or runs
    assert f"{2 * groups * problem.expected_m * n * k / 1e9:,.2f} GFLOP" in text
    zero = explain(0, n, k, num_sms=132, kind=kind, num_groups=groups, expected_m=expected and 0)
    assert "without launching a kernel" in zero and "config:" not in zero


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_groups=2), "get_config: num_groups and expected_m describe a grouped kind; got kind='dense'"),
    (dict(kind="sparse"), "get_config: kind must be one of 'dense', 'contiguous', 'masked', 'offsets', 'k_grouped', 'psum'; got 'sparse'"),
    (dict(kind="masked", num_groups=0), "get_config: num_groups must be at least 1; got 0"),
    (dict(kind="offsets", num_groups=513), "get_config: at most 512 groups are supported; num_groups is 513"),
    (dict(kind="masked", num_groups=4, expected_m=-1), "get_config: expected_m must be an int >= 0; got -1"),
    (dict(kind="offsets", num_groups=4, expected_m=8), "get_config: expected_m is the masked kind's hint"),
])
def test_grouped_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError) as info:
        get_config(256, 4096, 7168, num_sms=132, **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_masked_expected_m_is_clamped_as_the_gemm_clamps_it():
    from deep_tile.gemm.checks import check_grouped_problem

    assert check_grouped_problem("f", "masked", 256, 4096, 7168, 4, 1000).expected_m == 256
    assert check_grouped_problem("f", "masked", 256, 4096, 7168, 4, 0).expected_m == 1
    assert check_grouped_problem("f", "masked", 256, 4096, 7168, 4).expected_m == 256


def test_cli_explains_a_grouped_problem(capsys):
    assert main(["explain", "256,6144,7168", "--kind", "masked", "--groups", "32", "--expected-m", "192",
                 "--num-sms", "132"]) == 0
    out = capsys.readouterr().out
    assert "problem: masked grouped GEMM, G=32" in out
    assert f"config: {get_config(256, 6144, 7168, num_sms=132, kind='masked', num_groups=32, expected_m=192).label}" in out
    assert main(["explain", "256,6144,7168", "--groups", "32"]) == 2
    assert "describe a grouped kind" in capsys.readouterr().err


def test_raster_of_experts_that_fit_one_band():
    """The masked and offsets kinds order their tiles expert by expert along M: a tile without
    multicast runs in bands along M when an expert's expected m-blocks (two or more) fit one band
    (each expert's weights read once), else by its shape as for dense; multicast keeps its own axis."""
    from deep_tile.gemm.problem import ProblemKind
    from deep_tile.select.config import RASTER_WIDTH, WIDE_RASTER_WIDTH, raster

    assert raster(256, 128) == (False, RASTER_WIDTH)
    assert raster(256, 128, expert_m_blocks=4) == (True, WIDE_RASTER_WIDTH)
    assert raster(128, 128, expert_m_blocks=1) == (False, RASTER_WIDTH)  # one m-block: by shape
    assert raster(256, 128, expert_m_blocks=WIDE_RASTER_WIDTH + 1) == (False, RASTER_WIDTH)
    assert raster(128, 256, expert_m_blocks=40) == (True, WIDE_RASTER_WIDTH)
    assert raster(256, 128, num_multicast=2, expert_m_blocks=4) == (None, RASTER_WIDTH)
    assert raster(64, 64, split_k=2, expert_m_blocks=1) == (False, RASTER_WIDTH)
    masked = Problem(6 * 1344, 7168, 2048, kind=ProblemKind.GROUPED_MASKED, num_groups=6, expected_m=1024)
    cfg = select_config(masked, 132)
    assert cfg.num_multicast == 2 or (cfg.raster_along_m and cfg.raster_width == WIDE_RASTER_WIDTH), cfg
    large = Problem(4 * 8192, 7168, 2048, kind=ProblemKind.GROUPED_OFFSETS, num_groups=4, expected_m=8192,
                    a_scale_row_major=True)
    cfg = select_config(large, 132)
    expected = raster(cfg.block_m, cfg.block_n, cfg.num_multicast, cfg.split_k)
    if cfg.num_multicast == 1:
        assert (cfg.raster_along_m, cfg.raster_width) == expected, cfg


def _masked(max_m, n, k, groups, expected):
    return Problem(max_m, n, k, kind=ProblemKind.GROUPED_MASKED, num_groups=groups, expected_m=expected)


def test_table_kinds_balance_their_grid_only_when_the_tile_count_is_known():
    # 32 experts of ~192 rows in a 256-row buffer: every count of the spread (134..249 rows) runs 2
    # m-blocks of 128, 1024 tiles of 128x256, balanced on 128 CTAs (H200: 0.937-0.947x DeepGEMM on
    # 132 CTAs, 0.945-0.954x on 128). 6 x ~1024 rows in an 896-row buffer (the hint clamped): the
    # counts may fall short, so the grid stays full (656 tiles: 5 rounds on 132 CTAs, 6 on 112).
    assert table_grid_size(_masked(256, 4096, 7168, 32, 192), 128, 256, 132, 2) == 128
    assert table_grid_size(_masked(896, 4096, 7168, 6, 896), 128, 256, 132, 1) == 132
    assert table_grid_size(_masked(896, 4096, 7168, 6, 896), 256, 128, 132, 1) == 132
    offsets = Problem(6144, 7168, 2048, kind=ProblemKind.GROUPED_OFFSETS, num_groups=64)
    assert table_grid_size(offsets, 128, 128, 132, 1) == 132
    # the launch uses the grid the estimate assumed
    for problem in (_masked(256, 4096, 7168, 32, 192), _masked(1344, 7168, 2048, 6, 1024), offsets):
        best = rank_candidates(problem, 132)[0]
        assert select_config(problem, 132).grid_size == best.ctas


def test_table_rounds_charge_the_padding_of_scattered_counts():
    # 6 experts of ~1024 rows: with the hint alone 256x128 and 128x256 run 1344 tiles alike (7168x2048);
    # over counts of 0.7-1.3 x 1024 a 256-row m-block is on average half empty, twice the padding of
    # a 128-row one, so 128x256 runs fewer rounds. Measured (3 seeds, ratio to DeepGEMM): 128x256
    # 0.997-1.001x, 256x128 0.932-0.933x (H100, H200).
    problem = _masked(1344, 7168, 2048, 6, 1024)
    tall, wide = table_rounds(problem, 256, 128, 132), table_rounds(problem, 128, 256, 132)
    assert wide < tall
    assert abs(sum(COUNT_SPREAD) / len(COUNT_SPREAD) - 1.0) < 1e-9
    assert select_config(problem, 132).block_m == 128


@pytest.mark.parametrize("kind,m,groups,expected,two_buffers", [
    (ProblemKind.DENSE, 96, 1, None, True),
    (ProblemKind.GROUPED_OFFSETS, 6144, 64, None, False),  # ~96 rows per expert, many tiles: 128x256 1.09-1.17x
    (ProblemKind.GROUPED_MASKED, 128, 32, 64, True),        # groups fit a 64-row tile: 64x128 x2 measured faster
    (ProblemKind.GROUPED_MASKED, 192, 16, 128, False),
    (ProblemKind.GROUPED_MASKED, 64, 6, 20, True),
    (ProblemKind.GROUPED_MASKED, 128, 1, 100, True),         # one group of 100 rows: as dense
])
def test_grouped_problems_of_many_rows_rank_one_buffer_tiles(kind, m, groups, expected, two_buffers):
    problem = Problem(m, 4096, 7168, kind=kind, num_groups=groups, expected_m=expected)
    assert overlaps_promotion(problem) is two_buffers
    ranked = rank_candidates(problem, 132)
    assert all(e.candidate.accum_buffers == 2 for e in ranked) is two_buffers


def test_a_tile_holding_whole_groups_goes_first_and_runs_them_one_after_another():
    # masked 32 x ~192 rows (256-row buffer): one 256-row m-block per expert, alone and along M,
    # measured 1.004-1.019x DeepGEMM latest on an H100 and 0.967-1.014x on an H200 against 0.978-0.990x
    # / 0.942-0.967x for 128x256 pairs sharing B (RESULTS.md, 2026-11-23 'The selector's model of the
    # grouped kinds; the grouped floor met'); from WIDE_TILE_MIN_K_BLOCKS k-blocks on its transpose
    # 128x256 alone goes first instead (selector._transposed_tie: 0.1-10% faster on an H200, within
    # 0.9% on an H100; RESULTS.md, 2026-11-28 'The masked kind's tile at 129-256 rows per expert')
    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for n, k in ((7168, 2048), (6144, 7168), (4096, 4096), (4096, 7168)):
            cfg = select_config(_masked(256, n, k, 32, 192), 132, chip=chip)
            tile = (256, 128) if k // 128 < WIDE_TILE_MIN_K_BLOCKS else (128, 256)
            assert (cfg.block_m, cfg.block_n, cfg.num_multicast, cfg.raster_along_m) == tile + (1, True), (n, k)
            assert cfg.grid_size == 128
        # a smaller tile that splits a group still ranks after the whole-group tile on an equal time
        problem = _masked(256, 6144, 7168, 32, 192)
        ranked = rank_candidates(problem, 132, chip=chip)
        tall = next(e for e in ranked if (e.candidate.block_m, e.candidate.block_n) == (256, 128))
        small = next(e for e in ranked if (e.candidate.block_m, e.candidate.block_n) == (128, 192)
                     and e.candidate.num_multicast == 1)
        assert _tie_break(tall, problem) < _tie_break(dataclasses.replace(small, time_s=tall.time_s), problem)
    # groups of more than 256 rows keep the pair sharing B over their two m-blocks
    cfg = select_config(_masked(512, 7168, 2048, 8, 320), 132)
    assert cfg.block_m < 320


def test_swap_ab_for_small_dense_problems_only():
    """selector.swap_n_for: 8 token columns up to M = 8, 16 up to SWAP_MAX_M, on 64-row tiles whose
    width is a multiple of 64 in one column part; the config reaches the kernel as DT_SWAP_N and
    refuses a problem of more rows than it swaps."""
    from deep_tile.select.candidates import Candidate
    from deep_tile.select.selector import SWAP_MAX_M, swap_n_for

    tile = Candidate(64, 64, 64, 2, 13, 1, False, 1)
    assert [swap_n_for(Problem(m, 2112, 7168), tile) for m in (1, 8, 9, SWAP_MAX_M, SWAP_MAX_M + 1)] == [8, 8, 16, 16, 0]
    for other in (Candidate(64, 96, 96, 2, 10, 1, False, 1), Candidate(64, 128, 64, 2, 8, 1, False, 1),
                  Candidate(128, 64, 64, 2, 8, 1, False, 1), Candidate(64, 64, 64, 2, 8, 2, True, 1)):
        assert swap_n_for(Problem(4, 2112, 7168), other) == 0
    assert swap_n_for(Problem(4, 2112, 7168, kind=ProblemKind.GROUPED_MASKED, num_groups=4, expected_m=4), tile) == 0
    for m, swap in ((1, 8), (16, 16), (17, 0), (64, 0)):
        cfg = select_config(Problem(m, 7168, 16384), 132)
        assert cfg.swap_n == swap and cfg.defines()["DT_SWAP_N"] == swap, (m, cfg.label)
        assert (f" sw{swap}" in cfg.label) == bool(swap), cfg.label
    swapped = select_config(Problem(8, 7168, 16384), 132)
    assert swapped.for_problem(Problem(8, 7168, 16384)).swap_n == 8
    with pytest.raises(ValueError, match="swap_n=8 needs a dense problem of at most 8 rows; got dense with M=9"):
        swapped.for_problem(Problem(9, 7168, 16384))


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("expected_m", [1, 20, 64, 192, 512, 1024, 4096])
@pytest.mark.parametrize("max_block_n", [256, 160, 64, 16])
def test_signal_config_respects_the_cap_and_its_build_rules(expected_m, max_block_n, mode):
    """The signalling masked kernel's pick: at most max_block_n wide (SGLang's cap, which its
    threshold ceil(N / block_n) reflects), never split-K, the fastest-ranked such candidate (the
    plain pick, K a run-time value, when that is narrow enough); mode 1 also 64 or 128 rows (64-row counters), two
    accumulator buffers, no multicast."""
    from deep_tile.select.selector import select_signal_config

    problem = Problem(max(expected_m, 64) * 2, 7168, 2048, kind=ProblemKind.GROUPED_MASKED, num_groups=8,
                      expected_m=expected_m)
    config = select_signal_config(problem, 132, max_block_n, mode=mode)
    plain = select_config(problem, 132)
    assert config.block_n <= max_block_n and config.split_k == 1
    assert family.signal_rows(config) == config.block_m // family.math_warpgroups(config.block_m)
    assert family.signal_threshold(config, 7168) == ceil_div(7168, config.block_n)
    if mode == 1:
        assert config.block_m in (64, 128) and config.accum_buffers == 2 and config.num_multicast == 1
        assert config.block_m == 64 or family.accum_registers(config.block_m, config.block_n, config.wgmma_n, 2) < 192
        assert family.signal_rows(config) == 64
    elif plain.block_n <= max_block_n:
        # no rule broken: the plain pick, with K a run-time value (static_k_blocks_for was measured
        # without completion signals)
        assert config == dataclasses.replace(plain, static_k_blocks=0)


def test_signal_config_checks_its_cap():
    from deep_tile.select.selector import select_signal_config

    problem = Problem(128, 4096, 2048, kind=ProblemKind.GROUPED_MASKED, num_groups=2, expected_m=64)
    with pytest.raises(ValueError, match="max_block_n"):
        select_signal_config(problem, 132, 0)


def test_psum_tile_counts_follow_the_rows():
    """The psum kind's m-blocks come from its padded rows, not from groups of expected_m: 128-row
    tiles count the 128-row blocks (each holds one expert's rows or padding), other heights the
    runs with half a block of padding each, so the count is exact where the rows are."""
    psum = Problem(4352, 4096, 7168, kind=ProblemKind.GROUPED_PSUM, num_groups=8)
    assert psum.m_blocks(128) == 34 and psum.m_blocks(64) == 64 and psum.m_blocks(256) == 19
    assert Problem(128, 4096, 7168, kind=ProblemKind.GROUPED_PSUM, num_groups=8).m_blocks(128) == 1
    assert psum.max_m_blocks(128) >= psum.m_blocks(128)


def test_get_config_takes_the_output_variant():
    """get_config's out_dtype / c_dtype / b_scale_1d give the config the call with such tensors
    gets (its output variant included), and bad values are refused with the argument's name."""
    from deep_tile.select.api import get_config, get_problem_config

    problem = Problem(24576, 1536, 4096, b_scale_1d=True).with_output("float32", "out")
    config = get_config(24576, 1536, 4096, 132, out_dtype="float32", c_dtype="out", b_scale_1d=True)
    assert config == get_problem_config(problem, 132)
    # the in-place weight gradient's rules (the plain GEMM's pick has the 128x192 ring tile)
    assert config.label != get_config(24576, 1536, 4096, 132).label and not config.static_ring
    with pytest.raises(ValueError, match="get_config: out_dtype must be one of 'bfloat16', 'float32'; got 'half'"):
        get_config(64, 2112, 7168, 132, out_dtype="half")
    with pytest.raises(ValueError, match="get_config: c_dtype must be one of"):
        get_config(64, 2112, 7168, 132, c_dtype="float64")
    with pytest.raises(ValueError, match="b_scale_1d describes the dense 1D1D GEMM"):
        get_config(64, 2112, 7168, 132, kind="contiguous", num_groups=2, b_scale_1d=True)
    with pytest.raises(TypeError, match="get_config: b_scale_1d must be a bool; got int"):
        get_config(64, 2112, 7168, 132, b_scale_1d=1)


def test_a_near_tie_with_the_transposed_tile_takes_the_orientation_rule():
    """Where 256x128 and 128x256 are predicted within TIE_TOLERANCE of each other, the orientation
    rule decides even when the two predictions fall into different steps of _tie_break's rounding
    (selector._transposed_tie): taller below WIDE_TILE_MIN_K_BLOCKS k-blocks, wider from there on."""
    from deep_tile.select.selector import _transposed_tie
    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for shape in ((4096, 7168, 2048), (2048, 7168, 2048), (4096, 32768, 512), (2048, 24576, 1536)):
            cfg = select_config(Problem(*shape), 132, chip=chip)
            assert (cfg.block_m, cfg.block_n) == (256, 128), (chip.name, shape, cfg.label)
        assert select_config(Problem(4096, 7168, 16384), 132, chip=chip).block_n == 256  # 128 k-blocks: wider
    problem = Problem(4096, 7168, 2048)
    ranked = rank_candidates(problem, 132, chip=arch.CHIPS["H200"])
    tall = next(e for e in ranked if (e.candidate.block_m, e.candidate.block_n) == (256, 128))
    wide = next(e for e in ranked if (e.candidate.block_m, e.candidate.block_n) == (128, 256)
                and e.candidate.num_multicast == tall.candidate.num_multicast)
    assert abs(wide.time_s / tall.time_s - 1) <= TIE_TOLERANCE and tall.k_blocks_per_cta < WIDE_TILE_MIN_K_BLOCKS
    others = tuple(e for e in ranked if e is not wide and e is not tall)
    assert _transposed_tie((wide, tall) + others, problem)[0] is tall  # the taller goes first ...
    assert _transposed_tie((tall, wide) + others, problem)[0] is tall  # ... and stays first
    slower = dataclasses.replace(tall, time_s=wide.time_s * (1 + 2 * TIE_TOLERANCE))
    assert _transposed_tie((wide, slower) + others, problem)[0] is wide  # not within the tolerance
    assert _tie_break(tall, problem)[1:] < _tie_break(wide, problem)[1:]


def test_one_buffer_twins_of_narrow_tiles_unroll_by_6_over_long_k():
    """A two-buffer pick run with one buffer (selector.one_buffer_for_two_warpgroups) unrolls its
    k-loop by 6 over long K when its tiles are 64 or 96 columns wide and the problem has more than
    STREAM_MAX_M_BLOCKS m-blocks of them (selector.swap_unroll_for); else it keeps 3: wider tiles
    (128x128 measured slower by 6 at one tile per SM) and picks within two m-blocks (the H200's
    decode chain at M = 128 slower by 6)."""
    from deep_tile.select.selector import LONG_K_BLOCKS, STREAM_MAX_M_BLOCKS, SWAP_UNROLL_BLOCK_NS, swap_unroll_for

    def twin(block_m, block_n):
        return Candidate(block_m=block_m, block_n=block_n, num_stages=4, num_multicast=1, multicast_on_a=False,
                         split_k=1, wgmma_n=block_n, accum_buffers=2)

    assert SWAP_UNROLL_BLOCK_NS == (64, 96) and STREAM_MAX_M_BLOCKS == 2
    assert swap_unroll_for(Problem(384, 4096, 7168), twin(128, 64), LONG_K_BLOCKS) == 6
    assert swap_unroll_for(Problem(384, 4096, 7168), twin(128, 64), LONG_K_BLOCKS - 1) == 3
    assert swap_unroll_for(Problem(256, 4096, 7168), twin(128, 96), 56) == 3  # two m-blocks
    assert swap_unroll_for(Problem(384, 4096, 7168), twin(128, 128), 56) == 3
    for shape, label in (((512, 2112, 4608), "128x64 s8 ef u6"), ((1024, 2112, 7168), "256x64 s4 ef u6"),
                         ((384, 4096, 7168), "128x96 s7 ef u6")):
        for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
            cfg = select_config(Problem(*shape), 132, chip=chip)
            assert cfg.label == label and cfg.accum_buffers == 1, (chip.name, shape, cfg.label)
        assert "selector.swap_unroll_for" in explain_text(Problem(*shape), 132)
    for shape in ((128, 7168, 16384), (256, 4096, 7168), (512, 4096, 7168), (2048, 7168, 16384), (512, 2112, 2048)):
        cfg = select_config(Problem(*shape), 132)
        assert cfg.accum_buffers == 1 and cfg.k_unroll == 3, (shape, cfg.label)
        assert "unrolled as that loop was" in explain_text(Problem(*shape), 132)


def test_the_stage_ring_as_immediates_for_128x64_twins_over_long_k():
    """A 128x64 one-buffer twin unrolled by 6 (selector.swap_unroll_for) has K fixed and the stage
    ring as immediates (selector.static_ring_for) where its K blocks are at most
    STATIC_K_LONG_MAX_K_BLOCKS and a multiple of its stages; other tiles, K blocks that are no
    whole passes, longer K, the two-buffer loops and the other kinds and outputs keep K a run-time
    value."""
    from deep_tile.select.selector import STATIC_K_LONG_MAX_K_BLOCKS, STATIC_RING_TILES

    assert STATIC_RING_TILES == ((128, 64),) and STATIC_K_LONG_MAX_K_BLOCKS == 64
    for shape in ((512, 2112, 7168), (512, 2112, 4096), (512, 2112, 8192), (448, 2048, 6144)):
        for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
            cfg = select_config(Problem(*shape), 132, chip=chip)
            assert (cfg.block_m, cfg.block_n, cfg.accum_buffers) == (128, 64, 1), (chip.name, shape, cfg.label)
            assert cfg.static_ring and cfg.static_k_blocks == shape[2] // 128, (chip.name, shape, cfg.label)
            assert cfg.static_k_blocks % cfg.num_stages == 0 and cfg.k_unroll == 3, cfg.label
            assert cfg.defines()[family.STATIC_RING_DEFINE] == 1, cfg.label
        assert "selector.static_ring_for" in explain_text(Problem(*shape), 132)
    for shape in ((512, 2112, 4608),  # 36 K blocks: no whole passes over 8 stages
                  (512, 2112, 16384),  # 128 K blocks: past the long tier
                  (384, 4096, 7168), (1024, 2112, 7168),  # 128x96 and 256x64 twins
                  (128, 2112, 7168), (64, 2112, 7168), (4096, 7168, 16384)):
        cfg = select_config(Problem(*shape), 132)
        assert not cfg.static_ring and family.STATIC_RING_DEFINE not in cfg.defines(), (shape, cfg.label)
    ring = select_config(Problem(512, 2112, 7168), 132)
    for problem in (Problem(512, 2112, 7168, out_dtype="float32"), Problem(512, 2112, 7168, c_dtype="bfloat16")):
        assert not select_config(problem, 132).static_ring
    # the launcher's variants keep the ring only where its K blocks stay whole passes
    assert ring.with_row_major_a_scale().static_ring
    assert not ring.with_b_scale_1d().static_ring
    narrow = KernelConfig(block_m=128, block_n=96, num_stages=7, accum_buffers=1, grid_size=132,
                          static_k_blocks=56, static_ring=True)
    assert narrow.with_row_major_a_scale().num_stages == 6 and not narrow.with_row_major_a_scale().static_ring
    with pytest.raises(ValueError, match="static_ring needs"):
        dataclasses.replace(narrow, static_k_blocks=36)
    with pytest.raises(ValueError, match="static_ring needs"):
        dataclasses.replace(narrow, static_k_blocks=0)


def test_the_128x192_ring_tile_first_where_it_fits_n():
    """The one-buffer 128x192 tile runs the stage ring as immediates from RING_TILE_MIN_K_BLOCKS K
    blocks on (selector.static_ring_for), and goes before a first choice of 128x256 or 256x128
    where its columns fit N exactly and the model predicts it within RING_TILE_TOLERANCE
    (selector._ring_tile_first); K blocks that are no whole passes over its 4 stages, short or
    longer K, N it does not fit and the output variants keep the picks of before."""
    assert RING_TILE == (128, 192) and RING_TILE_MIN_K_BLOCKS == 28 and RING_TILE_TOLERANCE == 0.08
    moved = ((4096, 6144, 7168), (8192, 3072, 8192), (2048, 24576, 4096), (512, 24576, 7168), (8192, 1536, 4608),
             (8192, 6144, 3584))
    ringed = ((4096, 2112, 7168), (4096, 4608, 7168), (320, 7168, 7168), (896, 10240, 8192))
    for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
        for shape in moved + ringed:
            cfg = select_config(Problem(*shape), 132, chip=chip)
            assert (cfg.block_m, cfg.block_n, cfg.accum_buffers, cfg.split_k, cfg.num_multicast) == (128, 192, 1, 1, 1), (
                chip.name, shape, cfg.label)
            assert cfg.static_ring and cfg.static_k_blocks == shape[2] // 128 and cfg.num_stages == 4, cfg.label
            assert cfg.defines()[family.STATIC_RING_DEFINE] == 1, cfg.label
    for shape in moved:
        text = explain_text(Problem(*shape), 132)
        assert "selector._ring_tile_first" in text and "selector.static_ring_for" in text, shape
    for shape in ringed:
        assert "selector._ring_tile_first" not in explain_text(Problem(*shape), 132), shape
    for shape in ((4096, 4096, 7168),  # 128x192 does not fit N = 4096
                  (4096, 7168, 16384),  # 128 K blocks: past the long tier
                  (4096, 6144, 2048),  # 16 K blocks: below RING_TILE_MIN_K_BLOCKS
                  (4096, 6144, 4480)):  # 35 K blocks: no whole passes over 4 stages
        for chip in (arch.CHIPS["H100 SXM"], arch.CHIPS["H200"]):
            cfg = select_config(Problem(*shape), 132, chip=chip)
            assert not cfg.static_ring and (cfg.block_m, cfg.block_n) != RING_TILE, (chip.name, shape, cfg.label)
    for problem in (Problem(4096, 6144, 7168, out_dtype="float32"), Problem(4096, 6144, 7168, c_dtype="bfloat16"),
                    Problem(4096, 2112, 7168, out_dtype="float32")):
        assert not select_config(problem, 132).static_ring, problem
    # the launcher's variants keep the ring where its K blocks stay whole passes over the stages
    ring = select_config(Problem(4096, 6144, 7168), 132)
    assert ring.with_row_major_a_scale().static_ring and ring.with_row_major_a_scale().num_stages == 4
    assert not ring.with_b_scale_1d().static_ring


def test_one_buffer_for_two_warpgroups():
    """The dense bf16 GEMM's unsplit two-buffer picks of two consumer warpgroups run with one
    buffer at any M, the same tile otherwise; 64-row picks, split-K picks, the grouped kinds and
    the FP32 output keep the model's two."""
    def model_pick(problem):
        return rank_candidates(problem, 132)[0].candidate

    for m, n, k in ((512, 4096, 7168), (192, 7168, 7168), (2048, 7168, 16384), (1024, 2112, 7168),
                    (128, 7168, 2048), (65, 32768, 512), (96, 4096, 7168), (112, 24576, 1536)):
        problem = Problem(m, n, k)
        top, cfg = model_pick(problem), select_config(problem, 132)
        assert top.accum_buffers == 2 and top.block_m >= 128 and top.split_k == 1, (m, n, k, top)
        assert cfg.accum_buffers == 1 and (cfg.block_m, cfg.block_n, cfg.num_stages) == (top.block_m, top.block_n,
                                                                                          top.num_stages)
        assert "selector.one_buffer_for_two_warpgroups" in explain_text(problem, 132)
    for problem in (Problem(256, 2112, 7168), Problem(384, 1280, 8192), Problem(64, 7168, 2048)):  # 64-row picks
        cfg = select_config(problem, 132)
        assert cfg.block_m == 64 and cfg.accum_buffers == 2
    for problem in (Problem(128, 2112, 7168), Problem(512, 4096, 7168, out_dtype="float32"),
                    Problem(320, 4096, 7168, kind=ProblemKind.GROUPED_MASKED, num_groups=4, expected_m=256)):
        top, cfg = model_pick(problem), select_config(problem, 132)
        assert top.accum_buffers == 2 and top.block_m >= 128, (problem, top)
        assert cfg.accum_buffers == 2
    assert select_config(Problem(128, 2112, 7168), 132).split_k > 1  # the split-K pick above
