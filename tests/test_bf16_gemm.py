"""deep_tile's BF16 GEMMs (deep_tile/bf16.py): argument checks, the CPU path against float64, the
kernel's contract and tile rule, the builds of every kernel variant for sm_90a (no spills, no
stack, BF16 wgmmas and setmaxnreg in the SASS), the generated wgmma header, and (marker ``gpu``)
the kernel on a Hopper GPU against float64 (tests/gpu_bf16_cases.py, in a child process).
"""
from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import pytest
import torch

import deep_tile
from conftest import assert_spill_free, compiler_params, run_child_cases
from deep_tile.kernels import bf16_gemm as contract
from gpu_bf16_cases import LAYOUTS, check, make_batched, make_contiguous, make_dense

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------
# The CPU path and the checks
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_cpu_path_matches_float64(layout, out):
    a_arg, b_arg, a, b = make_dense(37, 24, 72, layout, seed=1)
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    d = torch.full((37, 24), float("nan"), dtype=dtype)
    getattr(deep_tile, f"bf16_gemm_{layout}")(a_arg, b_arg, d)
    assert check(d, a, b)["ok"]


@pytest.mark.parametrize("inplace", [False, True])
def test_cpu_accumulation(inplace):
    _, _, a, b = make_dense(16, 40, 64, "nt", seed=2)
    c = torch.randn(16, 40)
    d = c.clone() if inplace else torch.empty(16, 40)
    deep_tile.bf16_gemm_nt(a, b, d, c=d if inplace else c)
    assert check(d, a, b, c)["ok"]


def test_k_zero_gives_c_or_zeros():
    a, b = torch.empty(4, 0, dtype=torch.bfloat16), torch.empty(8, 0, dtype=torch.bfloat16)
    d = torch.full((4, 8), float("nan"))
    deep_tile.bf16_gemm_nt(a, b, d)
    assert torch.equal(d, torch.zeros(4, 8))
    c = torch.randn(4, 8)
    deep_tile.bf16_gemm_nt(a, b, d, c=c)
    assert torch.equal(d, c)


def test_cpu_k_grouped_path():
    ks = [128, 0, 256]
    a = torch.randn(384, 24).to(BF)
    b = torch.randn(384, 40).to(BF)
    c = torch.randn(3, 24, 40)
    d = torch.full((3, 24, 40), float("nan"))
    deep_tile.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32), c)
    assert check(d[0], a[:128].T, b[:128].T, c[0])["ok"] and torch.equal(d[1], c[1])
    assert check(d[2], a[128:].T, b[128:].T, c[2])["ok"]
    with pytest.raises(ValueError, match="multiple of 128"):
        deep_tile.k_grouped_bf16_gemm_tn_contiguous(a, b, d, [64, 64, 256], torch.tensor(ks, dtype=torch.int32), c)
    with pytest.raises(NotImplementedError, match="psum"):
        deep_tile.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32), c,
                                                    use_psum_layout=True)


def test_cpu_grouped_paths():
    a, b, m_indices, _ = make_contiguous(3, 100, 32, 64, seed=3)
    d = torch.full((a.shape[0], 32), float("nan"), dtype=torch.bfloat16)
    deep_tile.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    for start in range(0, a.shape[0], 128):
        g = int(m_indices[start])
        assert check(d[start:start + 128], a[start:start + 128], b[g])["ok"]
    a3 = torch.randn(2, 50, 64).to(torch.bfloat16)
    b3 = torch.randn(2, 32, 64).to(torch.bfloat16)
    d3 = torch.full((2, 50, 32), float("nan"), dtype=torch.bfloat16)
    deep_tile.m_grouped_bf16_gemm_nt_masked(a3, b3, d3, torch.tensor([7, 0], dtype=torch.int32), 8)
    assert check(d3[0, :7], a3[0, :7], b3[0])["ok"]
    assert torch.isnan(d3[0, 7:]).all() and torch.isnan(d3[1]).all()


BF = torch.bfloat16
BAD_DENSE = [
    ("a not a tensor", lambda: ([1], torch.zeros(8, 8, dtype=BF), torch.zeros(1, 8, dtype=BF)), TypeError, "a must"),
    ("a float32", lambda: (torch.zeros(4, 8), torch.zeros(8, 8, dtype=BF), torch.zeros(4, 8, dtype=BF)), ValueError,
     "bfloat16"),
    ("k mismatch", lambda: (torch.zeros(4, 8, dtype=BF), torch.zeros(8, 16, dtype=BF), torch.zeros(4, 8, dtype=BF)),
     ValueError, "shapes disagree"),
    ("d float16", lambda: (torch.zeros(4, 8, dtype=BF), torch.zeros(8, 8, dtype=BF), torch.zeros(4, 8, dtype=torch.half)),
     ValueError, "d must be"),
    ("d column-major", lambda: (torch.zeros(4, 8, dtype=BF), torch.zeros(8, 8, dtype=BF), torch.zeros(8, 4, dtype=BF).T),
     ValueError, "unit column stride"),
    ("a 3-D", lambda: (torch.zeros(1, 4, 8, dtype=BF), torch.zeros(8, 8, dtype=BF), torch.zeros(4, 8, dtype=BF)),
     ValueError, "2-D"),
    ("a strided both ways", lambda: (torch.zeros(8, 16, dtype=BF)[::2, ::2], torch.zeros(8, 8, dtype=BF),
                                     torch.zeros(4, 8, dtype=BF)), ValueError, "unit stride"),
]


@pytest.mark.parametrize("label,make,error,match", BAD_DENSE, ids=[b[0] for b in BAD_DENSE])
def test_bad_dense_arguments_are_refused(label, make, error, match):
    a, b, d = make()
    with pytest.raises(error, match=match):
        deep_tile.bf16_gemm_nt(a, b, d)


def test_bad_c_is_refused():
    a, b = torch.zeros(4, 8, dtype=BF), torch.zeros(8, 8, dtype=BF)
    with pytest.raises(ValueError, match="c must match"):
        deep_tile.bf16_gemm_nt(a, b, torch.zeros(4, 8), c=torch.zeros(4, 8, dtype=BF))


def test_bad_grouped_arguments_are_refused():
    a, b, m_indices, _ = make_contiguous(2, 60, 32, 64, seed=4)
    d = torch.empty(a.shape[0], 32, dtype=BF)
    with pytest.raises(ValueError, match="m_indices"):
        deep_tile.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices.long())
    with pytest.raises(ValueError, match="K-major"):
        deep_tile.m_grouped_bf16_gemm_nt_contiguous(a.T.contiguous().T, b, d, m_indices)
    with pytest.raises(NotImplementedError, match="psum"):
        deep_tile.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, use_psum_layout=True)
    with pytest.raises(ValueError, match="d must be"):
        deep_tile.m_grouped_bf16_gemm_nt_contiguous(a, b, d.float(), m_indices)
    a3, b3 = torch.zeros(2, 16, 64, dtype=BF), torch.zeros(2, 32, 64, dtype=BF)
    d3 = torch.zeros(2, 16, 32, dtype=BF)
    with pytest.raises(ValueError, match="masked_m"):
        deep_tile.m_grouped_bf16_gemm_nt_masked(a3, b3, d3, torch.zeros(3, dtype=torch.int32), 4)
    with pytest.raises(TypeError, match="expected_m"):
        deep_tile.m_grouped_bf16_gemm_nt_masked(a3, b3, d3, torch.zeros(2, dtype=torch.int32), 4.0)
    with pytest.raises(ValueError, match="positive"):
        deep_tile.m_grouped_bf16_gemm_nt_masked(a3, b3, d3, torch.zeros(2, dtype=torch.int32), 0)
    with pytest.raises(ValueError, match="K-major"):
        deep_tile.m_grouped_bf16_gemm_nt_masked(a3, b3.transpose(1, 2).contiguous().transpose(1, 2), d3,
                                                torch.zeros(2, dtype=torch.int32), 4)


def test_compat_names_forward(monkeypatch):
    import deep_tile.compat.deepgemm as deep_gemm

    calls = []
    for name in ("bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
                 "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "psum_to_m_indices"):
        monkeypatch.setattr(deep_tile, name, lambda *args, _n=name: calls.append((_n, args)) or "m_idx")
    for layout in LAYOUTS:
        getattr(deep_gemm, f"bf16_gemm_{layout}")(1, 2, 3, c=4, compiled_dims="mn")
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(torch.zeros(256, 8), 2, 3, "ends", use_psum_layout=True)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(1, 2, 3, "m_indices")
    deep_gemm.bf16_m_grouped_gemm_nt_masked(1, 2, 3, 4, 5)
    names = [n for n, _ in calls]
    assert names == ["bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "psum_to_m_indices",
                     "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_contiguous",
                     "m_grouped_bf16_gemm_nt_masked"]
    assert calls[0][1] == (1, 2, 3, 4) and calls[4][1][1:] == (256, 128) and calls[5][1][3] == "m_idx"
    with pytest.raises(ValueError, match="psum"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(1, 2, 3, 4, expected_m_for_psum_layout=8)
    assert callable(deep_gemm.k_grouped_bf16_gemm_tn_contiguous)


# --------------------------------------------------------------------------------------------------
# The contract, the tile rule, the builds
# --------------------------------------------------------------------------------------------------

ODD_BLOCK_NS = (16, 48, 96, 144, 176, 240)
"""Widths beside the legacy three that the builds cover (K-major b; an MN-major b takes multiples of 64)."""


def all_configs() -> list:
    """The kernel variants the host launches: every legacy one, and the new widths, boxes and stores."""
    legacy = contract.LEGACY_BLOCK_NS
    cfgs = [contract.Bf16Config(ma, mb, bn, 0, f32, acc, "normal")
            for ma, mb, bn, f32, acc in itertools.product(contract.MAJORS, contract.MAJORS, legacy,
                                                          (False, True), (False, True))]
    cfgs += [contract.Bf16Config(ma, mb, bn, 0, f32, acc, "normal", True)
             for ma, mb, bn, (f32, acc) in itertools.product(contract.MAJORS, contract.MAJORS, legacy,
                                                             ((False, False), (True, False), (True, True)))]
    cfgs += [contract.Bf16Config("k", "k", bn, 0, f32, False, "normal", store and bn >= (32 if f32 else 64))
             for bn, f32, store in itertools.product(ODD_BLOCK_NS, (False, True), (False, True))]
    cfgs += [contract.Bf16Config("k", "k", 176, 0, True, True, "normal", True),
             contract.Bf16Config("mn", "mn", 192, 0, True, True, "normal", True)]
    # split-K partials (float32, no store staging) at tiny m: the short A boxes
    cfgs += [contract.Bf16Config("k", mb, bn, 0, True, False, "normal", False, box)
             for mb, bn, box in itertools.product(contract.MAJORS, (64, 128, 256), (16, 32, 64))]
    # B multicast to CTA pairs
    cfgs += [contract.Bf16Config(ma, "k", bn, 0, f32, acc, "normal", store, 128, 2)
             for ma, bn, (f32, acc, store) in itertools.product(
                 contract.MAJORS, (48, 144, 176, 256), ((False, False, True), (True, False, True), (True, True, True),
                                                        (False, True, False)))
             if not store or bn >= (32 if f32 else 64)]
    cfgs += [contract.Bf16Config("mn", "k", 96, 0, False, False, "normal", True, 64),
             contract.Bf16Config("k", "k", 32, 0, True, False, "normal", False, 16)]
    # the split-K plans' own widths and boxes (the last split's in-kernel sum and direct store)
    cfgs += [contract.Bf16Config("k", "k", 112, 0, False, False, "normal", True),
             contract.Bf16Config("k", "k", 192, 0, False, False, "normal", False, 16),
             contract.Bf16Config("k", "k", 176, 0, False, True, "normal", False, 16),
             contract.Bf16Config("k", "k", 64, 0, True, True, "normal", True, 32)]
    # the deep rings of narrow register-stored plans (contract.plan_stages)
    cfgs += [contract.Bf16Config("k", "k", bn, contract.deep_stages(bn), bn % 32 == 0, False, "normal", False,
                                 16 if bn <= 64 else 128) for bn in range(16, 129, 16)]
    cfgs += [contract.Bf16Config("k", "mn", 128, contract.deep_stages(128), False, False, "normal"),
             contract.Bf16Config("mn", "mn", 64, contract.deep_stages(64), True, False, "normal"),
             contract.Bf16Config("k", "k", 192, contract.deep_stages(192), False, True, "normal", False, 16)]
    # the batched GEMM (D from registers, the deep ring): short A boxes in 64-row tiles, 128-row tiles, an idle
    # second warpgroup at a forced short box, K- and MN-major b, bf16 and float32 d, widths off whole boxes
    cfgs += [contract.Bf16Config("k", mb, bn, contract.deep_stages(bn, bm), f32, False, "batched", False, box,
                                 block_m=bm)
             for mb, bn, f32, box, bm in (("k", 128, False, 16, 64), ("mn", 256, False, 16, 64), ("k", 48, True, 64, 64),
                                          ("mn", 64, True, 32, 64), ("k", 128, False, 128, 128),
                                          ("mn", 256, False, 128, 128), ("k", 192, True, 128, 128),
                                          ("k", 80, False, 128, 128), ("mn", 128, True, 32, 128))]
    # the batched GEMM's d through the 3-D map (the staged boxes, the ring batched_stages leaves beside them): the
    # einsum's plans (64-row tiles with short boxes, 128 x 128 / 256, MN-major b), float32, a partial last box, an
    # idle second warpgroup
    cfgs += [contract.Bf16Config("k", mb, bn, contract.batched_stages(bn, bm, True, f32), f32, False, "batched", True,
                                 box, block_m=bm)
             for mb, bn, f32, box, bm in (("k", 128, False, 16, 64), ("mn", 256, False, 32, 64), ("k", 64, True, 64, 64),
                                          ("k", 128, False, 128, 128), ("mn", 256, False, 128, 128),
                                          ("k", 256, False, 128, 128), ("k", 192, True, 128, 128),
                                          ("k", 80, False, 128, 128), ("mn", 128, True, 32, 128))]
    # d staged a buffer per box (store_all): bf16 and float32, every major, multicast, the reduce-add
    cfgs += [contract.Bf16Config(ma, mb, bn, 0, f32, acc, "normal", True, 128, 1, True)
             for ma, mb, bn, f32, acc in (("k", "k", 256, False, False), ("k", "k", 240, False, False),
                                          ("k", "k", 192, False, False), ("mn", "mn", 256, False, False),
                                          ("k", "k", 128, True, False), ("mn", "mn", 192, True, True),
                                          ("k", "mn", 256, True, True))]
    cfgs += [contract.Bf16Config("k", "k", 256, 0, False, False, "normal", True, 128, 2, True),
             contract.Bf16Config("k", "k", 176, 0, True, True, "normal", True, 128, 2, True)]
    # short A boxes with a 64-row A slot and the deeper rings it makes room for (forced rings)
    cfgs += [contract.Bf16Config(ma, mb, bn, st, f32, acc, "normal", False, box, 1, False, True)
             for ma, mb, bn, st, f32, acc, box in (("k", "k", 32, 16, False, False, 16), ("k", "k", 64, 14, False, False, 16),
                                                   ("k", "k", 128, 9, False, False, 16), ("mn", "k", 64, 14, True, True, 64),
                                                   ("k", "mn", 128, 9, True, False, 32), ("k", "k", 256, 5, False, True, 16))]
    # 64-row tiles (one consumer warpgroup): the plan's deep rings and short A boxes, split K, every major,
    # the staged store and reduce-add, a buffer per box
    cfgs += [contract.Bf16Config(ma, mb, bn, st, f32, acc, "normal", store, box, 1, all_, block_m=64)
             for ma, mb, bn, st, f32, acc, store, box, all_ in (
                 ("k", "k", 32, 16, False, False, False, 16, False), ("k", "k", 64, 14, False, False, False, 64, False),
                 ("k", "k", 48, 16, True, False, False, 32, False), ("k", "k", 128, 0, True, False, True, 64, False),
                 ("mn", "mn", 64, 0, False, True, False, 64, False), ("k", "mn", 128, 9, True, True, False, 64, False),
                 ("mn", "k", 256, 0, True, True, True, 64, False), ("k", "k", 256, 0, False, False, True, 64, True),
                 ("k", "k", 176, 0, False, False, True, 64, False))]
    cfgs += [contract.Bf16Config("k", "k", bn, contract.deep_stages(bn, 64), False, False, "normal", False, 64,
                                 block_m=64) for bn in (16, 32, 48, 96)]
    # stages of several 64-k blocks (k_merge): DeepGEMM's 64 x 32 and 16 x 32 rings, split K, 128-row tiles
    cfgs += [contract.Bf16Config("k", "k", bn, st, f32, False, "normal", store, box, 1, False, False, bm, km)
             for bn, st, f32, store, box, bm, km in (
                 (32, 6, False, False, 64, 64, 3), (32, 4, False, False, 16, 64, 4), (64, 4, False, False, 64, 64, 3),
                 (128, 0, True, True, 128, 128, 2), (64, 0, False, False, 16, 128, 2), (32, 8, False, False, 16, 64, 2))]
    cfgs += [contract.Bf16Config("k", mb, bn, 0, False, False, "contiguous", store)
             for mb, bn, store in itertools.product(contract.MAJORS, legacy, (False, True))]
    cfgs += [contract.Bf16Config("k", "k", 144, 0, False, False, "contiguous", True)]
    cfgs += [contract.Bf16Config("k", "k", bn, 0, False, False, "masked") for bn in legacy + (48,)]
    cfgs += [contract.Bf16Config("mn", "mn", bn, 0, True, True, "k_grouped") for bn in legacy + (192,)]
    return cfgs


def test_contract_geometry():
    assert [contract.stages_for(bn) for bn in contract.LEGACY_BLOCK_NS] == [8, 6, 4]
    assert [contract.stages_for(bn, True) for bn in contract.LEGACY_BLOCK_NS] == [8, 6, 4]
    assert contract.stages_for(192, True) == 4  # the staging's 32 KiB must still fit beside the ring
    assert [contract.deep_stages(bn) for bn in (16, 64, 128, 192, 256)] == [12, 9, 7, 5, 4]
    assert contract.plan_stages(contract.Bf16Plan(64)) == 9 and contract.plan_stages(contract.Bf16Plan(64), True) == 0
    assert contract.plan_stages(contract.Bf16Plan(256)) == 0 and contract.plan_stages(contract.Bf16Plan(192, 6, 16)) == 5
    for cfg in all_configs():
        assert cfg.smem <= contract.SMEM_LIMIT
        assert len(cfg.defines()) == 16
        assert cfg.defines()["DT_BF16_THREADS"] == cfg.threads == 128 * (1 + cfg.block_m // 64)
    # 64-row tiles: a 64-row A slot, one consumer warpgroup's staging, 16-stage rings where they fit
    cfg = contract.Bf16Config(block_n=32, stages=16, box_m=16, block_m=64)
    assert cfg.smem == 16 * (96 * 128 + 16) and cfg.threads == 256
    assert contract.Bf16Config(block_n=128, out_f32=True, tma_store=True, box_m=64, block_m=64).smem == \
        8 * (192 * 128 + 16) + 2 * 64 * 128
    assert contract.deep_stages(32, 64) == 16 and contract.deep_stages(128, 64) == 9
    assert contract.plan_stages(contract.Bf16Plan(32, 1, 16, block_m=64)) == 16
    assert contract.split_workspace_floats(19, 5, 112, 64) == 19 * 5 * 64 * 112
    for bad in (dict(block_m=64), dict(block_m=64, box_m=64, gemm_type="contiguous"), dict(block_m=96, box_m=64),
                dict(block_m=64, box_m=16, compact_a=True), dict(block_m=64, box_m=64, cluster_m=2)):
        with pytest.raises(ValueError, match="block_m|box_m|cluster_m"):
            contract.Bf16Config(**bad)
    with pytest.raises(ValueError):
        contract.Bf16Config(block_n=88)
    with pytest.raises(ValueError):
        contract.Bf16Config(major_b="mn", block_n=96)
    with pytest.raises(ValueError):
        contract.Bf16Config(box_m=16, gemm_type="contiguous")
    with pytest.raises(ValueError):
        contract.Bf16Config(major_a="mn", box_m=32)
    with pytest.raises(ValueError):
        contract.Bf16Config(major_b="mn", cluster_m=2)
    with pytest.raises(ValueError):
        contract.Bf16Config(box_m=64, cluster_m=2)
    with pytest.raises(ValueError):
        contract.Bf16Config(gemm_type="contiguous", cluster_m=2)
    with pytest.raises(ValueError):
        contract.Bf16Config(accumulate=True, tma_store=True)  # bf16 accumulation: no TMA add
    with pytest.raises(ValueError):
        contract.Bf16Config(block_n=48, tma_store=True)  # narrower than a bf16 box
    with pytest.raises(ValueError):
        contract.Bf16Config(major_a="mn", gemm_type="masked")
    with pytest.raises(ValueError):
        contract.Bf16Config(block_n=256, stages=5)
    with pytest.raises(ValueError):
        contract.Bf16Config(gemm_type="masked", tma_store=True)
    with pytest.raises(ValueError):
        contract.Bf16Config("mn", "mn", 128, 0, True, True, "k_grouped", True)
    assert contract.Bf16Config(out_f32=True, accumulate=True, tma_store=True).smem <= contract.SMEM_LIMIT
    # store_all: a buffer per box (64 KiB at 256 wide), so fewer stages; only where it differs from two
    cfg = contract.Bf16Config(block_n=256, tma_store=True, store_all=True)
    assert cfg.stages == 3 and cfg.smem == 3 * (384 * 128 + 16) + 2 * 4 * 64 * 128
    assert contract.Bf16Config(block_n=128, out_f32=True, tma_store=True, store_all=True).stages == 5
    # compact_a: a 64-row A slot at short A boxes, so 16 stages of 32 columns fit
    assert contract.Bf16Config(block_n=32, stages=16, box_m=16, compact_a=True).smem == 16 * (96 * 128 + 16)
    for bad in (dict(block_n=256, store_all=True), dict(block_n=128, tma_store=True, store_all=True),
                dict(block_n=256, tma_store=True, store_all=True, stages=4), dict(block_n=32, compact_a=True),
                dict(block_n=32, stages=16, box_m=16), dict(block_n=32, stages=17, box_m=16, compact_a=True)):
        with pytest.raises(ValueError):
            contract.Bf16Config(**bad)


def test_tile_rule():
    assert contract.select_block_n(1, 7168, 132) == 64      # one m-block: narrow tiles fill the SMs
    assert contract.select_block_n(32, 7168, 132) == 256    # 4096 rows: wide tiles
    assert contract.select_block_n(1, 256, 132) == 64
    assert contract.grid(5, 132) == 5 and contract.grid(10_000, 132) == 132 and contract.grid(0, 132) == 1


def test_plan():
    legacy = contract.legacy_plan(32, 4096, 132)
    # the shapes measured at parity keep the legacy tile
    for m, n, k in ((4096, 4096, 7168), (4096, 7168, 2048), (4096, 7168, 16384)):
        assert contract.plan(m, n, k, 32, 132) == contract.legacy_plan(32, n, 132) == legacy
    # short K over many 256-wide tiles: CTA pairs sharing B, a buffer per store box (measured faster);
    # 240 wide stores its last 48 columns from registers: measured slower than 256 at 4096 x 24576 x 1536
    paired = contract.Bf16Plan(256, 1, contract.BLOCK_M, 2, 0, 1)
    for n, k in ((24576, 1536), (32768, 512)):
        assert contract.plan(4096, n, k, 32, 132) == paired
        assert contract.plan(4096, n, k, 32, 132, out_f32=True).cluster_m == 1  # float32 d: not measured
        assert contract.plan(4096, n, k, 32, 132, major_b="mn").cluster_m == 1  # multicast: K-major b only
        assert contract.plan(4096, n, k, 32, 132, dense=False).cluster_m == 1
    assert contract.plan(256, 32768, 512, 2, 132).cluster_m == 1  # 256 tiles: too few for pairs
    # few n tiles: a width that fills the SMs in whole waves; B multicast only when forced (measured no faster)
    p = contract.plan(4096, 576, 7168, 32, 132)
    assert p == contract.Bf16Plan(144)
    assert 132 * 0.9 <= 32 * -(-576 // p.block_n) <= 132
    assert contract.plan(4096, 2112, 7168, 32, 132) == contract.Bf16Plan(176)
    # few columns over a long A: 64 x 128 tiles, each A row read by 2 CTAs instead of 4 (measured faster)
    rows64 = contract.Bf16Plan(128, 1, 64, block_m=64)
    assert contract.plan(4096, 256, 7168, 32, 132, out_f32=True) == rows64 == contract.plan(4096, 256, 7168, 32, 132)
    assert contract.plan(4096, 256, 7168, 32, 132, major_b="mn").block_m == contract.BLOCK_M  # measured K-major only
    assert contract.plan(8192, 256, 7168, 64, 132).block_m == contract.BLOCK_M  # 256 tiles of 64 rows: two waves
    assert contract.plan(4096, 128, 7168, 32, 132).block_m == contract.BLOCK_M  # fewer tiles than the 128-row plan
    assert contract.plan(4096, 256, 7168, 32, 132, dense=False).block_m == contract.BLOCK_M
    # the TN wgrad with float32 accumulation: the reduce-add epilogue makes 192 beat 256 (as measured)
    assert contract.plan(7168, 2048, 4096, 56, 132, "mn", "mn", True, True, True) == contract.Bf16Plan(192)
    assert contract.plan(7168, 2048, 4096, 56, 132, "mn", "mn") == contract.legacy_plan(56, 2048, 132)
    # no K split past MAX_SPLIT_M_BLOCKS m-blocks (4096 x 256 split measured slower)
    for m in (384, 1024, 4096):
        assert contract.plan(m, 256, 7168, -(-m // 128), 132).splits == 1
    # small m with rows64: 64-row tiles (one consumer warpgroup) fill most SMs with few splits or none, a short
    # A box at m = 1; by default (PLAN_ROWS64 off until timed) only 128-row tiles
    assert not contract.PLAN_ROWS64
    for m in (1, 128):
        p = contract.plan(m, 4096 if m == 1 else 2112, 7168, 1, 132, rows64=True)
        tiles = -(-m // 64) * -(-(4096 if m == 1 else 2112) // p.block_n) * p.splits
        assert p.block_m == 64 and p.splits <= 2 and 100 <= tiles <= 132, p
        assert contract.plan(m, 4096 if m == 1 else 2112, 7168, 1, 132, out_f32=True).block_m == 128
    # small m, long K, one wave of 64 x 32 tiles: the merged ring (3 64-k blocks a stage, 6 stages)
    assert contract.plan(128, 2112, 7168, 1, 132) == contract.Bf16Plan(32, 1, 64, 1, 6, 0, 64, 3)
    assert contract.plan(1, 4096, 7168, 1, 132) == contract.Bf16Plan(32, 1, 16, 1, 6, 0, 64, 3)
    assert contract.plan(40, 4096, 7168, 1, 132).box_m == 64
    for args, kwargs in (((1, 4096, 1024, 1, 132), {}), ((1, 2048, 7168, 1, 132), {}),
                         ((256, 1024, 7168, 2, 132), {}), ((1, 4096, 7168, 1, 132), dict(major_b="mn")),
                         ((128, 2112, 7168, 1, 132), dict(accumulate=True)),
                         ((128, 2112, 7168, 1, 132), dict(dense=False))):
        assert contract.plan(*args, **kwargs).k_merge == 1, (args, kwargs)  # short K, half a wave, ...
    # the memory-bound m = 1 plan: the split sum follows the HBM floor, so no split (DeepGEMM's 32 wide, unsplit)
    # (and then its ring merged, as without rows64)
    assert contract.plan(1, 4096, 7168, 1, 132, rows64=True) == contract.Bf16Plan(32, 1, 16, 1, 6, 0, 64, 3)
    assert contract.plan(1, 4096, 7168, 1, 132, "mn", rows64=True).box_m == 64
    # the split plans measured at 128 x 2112 x 7168 (us, within 8%): the partial sum's rate
    for block_n, splits, us in ((64, 4, 22.0), (48, 3, 20.5)):
        got = contract.plan_cost(128, 2112, 7168, 1, 132, block_n, splits)
        assert abs(got / us - 1) < 0.08, (block_n, splits, got)
    # many m-blocks: the 64-row tile reads B twice as often, so the 128-row one stays (the model ties at
    # 4096 x 256 float32, 64 x 128 against 128 x 64, where the few-columns rule above takes 64 x 128)
    for m, n in ((4096, 2112), (4096, 576)):
        assert contract.plan(m, n, 7168, 32, 132, rows64=True).block_m == 128
    assert contract.plan(4096, 256, 7168, 32, 132, out_f32=True, rows64=True) == rows64
    assert contract.plan(40, 2112, 7168, 1, 132, dense=False, rows64=True).block_m == 128  # the grouped GEMMs: 128 rows
    # the model's fit to the measured plans (us, within 6%; measured with the default ring)
    for args, us in (((4096, 2112, 7168, 32, 132, 176), 167.8), ((4096, 576, 7168, 32, 132, 144), 49.1),
                     ((4096, 4096, 7168, 32, 132, 256), 303.1), ((4096, 32768, 512, 32, 132, 256), 218.5),
                     ((4096, 7168, 2048, 32, 132, 256), 164.8), ((128, 2112, 7168, 1, 132, 64), 30.5),
                     ((4096, 24576, 1536, 32, 132, 240), 431.2), ((4096, 24576, 1536, 32, 132, 256), 415.8),
                     ((4096, 32768, 512, 32, 132, 240), 247.8)):
        assert abs(contract.plan_cost(*args) / us - 1) < 0.06, (args, contract.plan_cost(*args))
    for block_n, us in ((256, 218.3), (192, 212.2)):
        got = contract.plan_cost(7168, 2048, 4096, 56, 132, block_n, out_f32=True, accumulate=True)
        assert abs(got / us - 1) < 0.03, (block_n, got)
    # no splits for the grouped GEMMs, MN-major b widths in steps of 64, every split non-empty
    assert contract.plan(128, 2112, 7168, 1, 132, dense=False).splits == 1
    assert contract.plan(4096, 2112, 7168, 32, 132, dense=False).cluster_m == 1
    for n in range(64, 3000, 200):
        for k in (64, 320, 4096):
            p = contract.plan(1, n, k, 1, 132, "k", "mn")
            kb = -(-k // 64)
            assert p.block_n % 64 == 0 and p.splits == 1  # nn stays batch invariant: no split
            p = contract.plan(1, n, k, 1, 132)
            assert (p.splits - 1) * -(-kb // p.splits) < kb and p.splits <= contract.MAX_SPLITS  # non-empty splits


def test_split_workspace_and_arguments():
    assert contract.split_workspace_floats(19, 5, 112) == 19 * 5 * 128 * 112
    assert len(contract.ARGUMENT_KINDS) == 13 and contract.ARGUMENT_KINDS[-3:] == ("ptr", "ptr", "i32")


def test_bad_plans_are_refused():
    import deep_tile.bf16 as host

    for fields in ((64, 17), (64, 0), (88,), (64, 1, 48), (64, 1, 128, 4), (64, 1, 128, 1, 1), (64, 1, 128, 1, 17),
                   (256, 1, 128, 1, 0, 2), (64, 1, 128, 1, 0, 0, 64), (64, 1, 64, 2, 0, 0, 64), (64, 1, 64, 1, 0, 0, 32)):
        with pytest.raises(ValueError, match="a plan takes"):
            contract.Bf16Plan(*fields)
    with pytest.raises(ValueError, match="a plan takes"):
        host.parse_plan("64/17")
    a, b = torch.zeros(40, 64, dtype=BF), torch.zeros(64, 64, dtype=BF)
    d = torch.full((40, 64), float("nan"), dtype=BF)
    host.FORCE_PLAN = contract.Bf16Plan(64, 2, 32)
    try:
        with pytest.raises(ValueError, match="A box of 32 rows"):
            deep_tile.bf16_gemm_nt(a, b, d, c=torch.zeros(40, 64, dtype=BF))
    finally:
        host.FORCE_PLAN = None
    assert torch.isnan(d).all()  # refused before c was copied in
    host.FORCE_PLAN = contract.Bf16Plan(64, 1, 16, block_m=64)  # a 64-row tile's short A box holds m <= 16 only
    try:
        with pytest.raises(ValueError, match="A box of 16 rows"):
            deep_tile.bf16_gemm_nt(a, b, d)
    finally:
        host.FORCE_PLAN = None


def test_forced_plan_ring_and_staging():
    import deep_tile.bf16 as host

    assert host.parse_plan("256/1/128/1/3/1") == contract.Bf16Plan(256, 1, 128, 1, 3, 1)
    assert host.parse_plan("64/4") == contract.Bf16Plan(64, 4)
    assert host.parse_plan("32/1/16/1/16/0/64") == contract.Bf16Plan(32, 1, 16, 1, 16, 0, 64)
    # 64-row tiles: a forced ring takes no compact_a (the slot is 64 rows already); the plan's deep ring
    cfg = host._config(contract.Bf16Plan(32, 1, 16, 1, 16, 0, 64), "k", "k", False, False, "normal", True)
    assert cfg.stages == 16 and not cfg.compact_a and cfg.block_m == 64 and cfg.threads == 256
    cfg = host._config(contract.Bf16Plan(32, 1, 16, block_m=64), "k", "k", False, False, "normal", True, True)
    assert cfg.stages == 16 and not cfg.tma_store
    cfg = host._config(contract.Bf16Plan(256, 1, 64, 1, 0, 1, 64), "k", "k", False, False, "normal", True)
    assert cfg.store_all and cfg.block_m == 64 and cfg.smem == 4 * (320 * 128 + 16) + 4 * 64 * 128
    # a forced ring: d from registers; store_all: d staged a buffer per box where it can be
    cfg = host._config(contract.Bf16Plan(32, 2, 128, 1, 11), "k", "k", False, False, "normal", True)
    assert cfg.stages == 11 and not cfg.tma_store and not cfg.compact_a
    cfg = host._config(contract.Bf16Plan(32, 1, 16, 1, 16), "k", "k", False, False, "normal", True)
    assert cfg.stages == 16 and cfg.compact_a  # a short A box's forced ring: 64-row A slots
    assert not host._config(contract.Bf16Plan(32, 1, 16), "k", "k", False, False, "normal", True, True).compact_a
    cfg = host._config(contract.Bf16Plan(256, 1, 128, 1, 0, 1), "k", "k", False, False, "normal", True)
    assert cfg.store_all and cfg.tma_store and cfg.stages == 3
    cfg = host._config(contract.Bf16Plan(240, 1, 128, 2, 0, 1), "k", "k", False, False, "normal", True)
    assert cfg.store_all and cfg.cluster_m == 2
    # two boxes or fewer, or d not TMA-stored: the ordinary epilogue
    cfg = host._config(contract.Bf16Plan(128, 1, 128, 1, 0, 1), "k", "k", False, False, "normal", True)
    assert not cfg.store_all and cfg.tma_store
    cfg = host._config(contract.Bf16Plan(256, 1, 128, 1, 0, 1), "k", "k", False, True, "normal", False)
    assert not cfg.store_all and not cfg.tma_store


def test_batched_contract_plan_and_cpu_path():
    import deep_tile.bf16 as host

    # short A boxes in 64-row tiles at m <= 64, 128-row tiles past it; no wider than n needs (MN-major b: 64-steps)
    assert contract.batched_plan(128, 4, 128, 512, 132) == contract.Bf16Plan(128, 1, 16, block_m=64)
    assert contract.batched_plan(128, 32, 512, 128, 132, "mn").box_m == 32
    p = contract.batched_plan(3, 300, 520, 72, 132, "mn")
    assert p.block_m == 128 and p.box_m == 128 and p.block_n % 64 == 0
    assert contract.batched_plan(3, 1, 40, 200, 132).block_n <= 48
    assert contract.GEMM_TYPES["batched"] == 4
    cfg = contract.Bf16Config("k", "mn", 256, contract.deep_stages(256, 64), False, False, "batched", False, 16,
                              block_m=64)
    assert cfg.defines()["DT_BF16_GEMM_TYPE"] == 4 and cfg.threads == 256
    tma = contract.Bf16Config("k", "k", 256, contract.batched_stages(256, 128, True), False, False, "batched", True)
    assert tma.smem <= contract.SMEM_LIMIT and tma.stages == 4  # two staged boxes per warpgroup leave 4 of 48 KiB
    assert contract.batched_stages(128, 64, True) == 8 and contract.batched_stages(128, 128) == 7
    for kwargs in (dict(major_a="mn"), dict(accumulate=True, out_f32=True)):
        args = dict(major_a="k", major_b="k", block_n=128, gemm_type="batched") | kwargs
        with pytest.raises(ValueError, match="batched kernel"):
            contract.Bf16Config(**args)
    for major_b in ("k", "mn"):
        a, b = make_batched(3, 37, 72, 136, major_b, seed=1)
        d = torch.full((3, 37, 72), float("nan"), dtype=BF)
        assert host.batched_fits(a, b, d)
        host.batched_bf16_gemm_nt(a, b, d)
        for g in range(3):
            assert check(d[g], a[g], b[g])["ok"]
    with pytest.raises(ValueError, match="shapes disagree"):
        host.batched_bf16_gemm_nt(torch.zeros(2, 3, 8, dtype=BF), torch.zeros(3, 4, 8, dtype=BF),
                                  torch.zeros(2, 3, 4, dtype=BF))
    a = torch.zeros(2, 3, 8, dtype=BF)
    assert not host.batched_fits(a.transpose(1, 2).contiguous().transpose(1, 2), torch.zeros(2, 4, 8, dtype=BF),
                                 torch.zeros(2, 3, 4, dtype=BF))  # an MN-major a
    odd_d = torch.zeros(2, 3, 5, dtype=BF).as_strided((2, 3, 4), (15, 5, 1))
    assert not host.batched_fits(a, torch.zeros(2, 4, 8, dtype=BF), odd_d)  # odd strides of d (two-element stores)
    # d by TMA: 16-byte start and strides (an extent of one never steps) and a whole box per tile row
    heads = torch.zeros(5, 4, 136, dtype=BF)[:, :, :128].transpose(0, 1)  # [h, b, d] of a [b, h, d + 8]
    assert host.batched_store_fits(heads, 128) and not host.batched_store_fits(heads, 48)
    assert not host.batched_store_fits(heads, 128, 64) and not host.batched_store_fits(heads, 128, 64, 64)
    assert not host.batched_store_fits(torch.zeros(5, 4, 132, dtype=BF)[:, :, :128].transpose(0, 1), 128)
    assert host.batched_store_fits(torch.zeros(1, 1, 100, dtype=torch.float32), 64)
    # rows ending inside a 16-byte chunk (bf16 n 300, float32 n 98) stay on registers, whatever the strides
    assert not host.batched_store_fits(torch.zeros(5, 4, 304, dtype=BF)[:, :, :300].transpose(0, 1), 128)
    assert not host.batched_store_fits(torch.zeros(1, 1, 98, dtype=torch.float32), 64)
    assert host._tma_store_ok(torch.zeros(4, 304, dtype=BF), False)
    assert not host._tma_store_ok(torch.zeros(4, 304, dtype=BF)[:, :300], False)
    assert not host._tma_store_ok(torch.zeros(1, 300, dtype=BF), False)
    assert not host._tma_store_ok(torch.zeros(4, 300, dtype=torch.float32)[:, :298], True)
    with pytest.raises(ValueError, match="store must be"):
        host.batched_bf16_gemm_nt(a, torch.zeros(2, 4, 8, dtype=BF), torch.zeros(2, 3, 4, dtype=BF), store="smem")


def test_generated_wgmma_header_is_current():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_wgmma_bf16
    finally:
        sys.path.pop(0)
    assert (ROOT / "include/deep_tile/ptx/wgmma_bf16.cuh").read_text() == gen_wgmma_bf16.render()


def code_path(cfg: contract.Bf16Config) -> tuple:
    """What selects a variant's code in the kernel (its width only by whether it ends on a partial box)."""
    default_ring = cfg.stages == contract.stages_for(cfg.block_n, cfg.tma_store, cfg.store_all, cfg.out_f32, cfg.block_m)
    return (cfg.major_a, cfg.major_b, cfg.out_f32, cfg.accumulate, cfg.gemm_type, cfg.tma_store, cfg.box_m < 128,
            cfg.cluster_m, cfg.store_all, cfg.compact_a, default_ring, cfg.block_n % 64 != 0, cfg.block_m,
            cfg.k_merge > 1)


def smoke_configs() -> list:
    """One variant of each code path of :func:`all_configs` (the kernel sweep builds these with nvcc and
    every variant with NVRTC; tests/test_kernel_build.py --kernel-sweep)."""
    seen = {}
    for cfg in all_configs():
        seen.setdefault(code_path(cfg), cfg)
    return list(seen.values())


def _value_pairs(path: tuple) -> set:
    return {(i, path[i], j, path[j]) for i, j in itertools.combinations(range(len(path)), 2)}


def pair_cover_configs() -> list:
    """Variants of :func:`smoke_configs` that together hold every pair of code-path choices the smoke set
    holds (two layouts, or a gemm type with a store kind, ...), picked greedily: the suite builds these,
    about a fifth of the smoke set, and the sweep builds the rest (the suite's time on 2 cores)."""
    cfgs = smoke_configs()
    pairs = [_value_pairs(code_path(c)) for c in cfgs]
    missing = set().union(*pairs)
    chosen = []
    while missing:
        best = max(range(len(cfgs)), key=lambda k: len(pairs[k] & missing))  # first of the best: stable
        chosen.append(cfgs[best])
        missing -= pairs[best]
    return chosen


def check_build(cfg: contract.Bf16Config, name: str) -> None:
    """``cfg`` compiles with compiler ``name``: no ptxas problem, stack or spill; its SASS has the
    wgmmas, the register split, the transposed reads and the TMA stores its configuration asks for."""
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), cfg.defines(), contract.SYMBOL, name)
    assert compiler.ptxas_problems(result.log) == [], (cfg.label, result.log)
    # C7518: ptxas serialized the wgmmas (a wait after each one), which doubled the 64-row tiles' k-loop time
    assert "C7518" not in result.log, (cfg.label, result.log)
    assert contract.SYMBOL in compiler.elf_functions(result.cubin)
    assert_spill_free(result.log)
    sass = compiler.disassemble(result.cubin)
    if sass is not None:  # four k16 wgmmas per 64-k block of a stage, the register split, MN-major read through transposes
        assert sass.count("HGMMA.64x") == 4 * cfg.k_merge and "USETMAXREG" in sass, cfg.label
        # a stage's A and B boxes, one TMA each per 64-k block (a 128-row tile's second warpgroup reads no B there)
        assert sass.count("UTMALDG") >= 2 * cfg.k_merge or cfg.major_a == "mn" or cfg.major_b == "mn", cfg.label
        # one stage's wgmmas stay in flight while the next stage's issue (wgmma.wait_group 1)
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass, cfg.label
        assert ("tnspA" in sass) == (cfg.major_a == "mn") and ("tnspB" in sass) == (cfg.major_b == "mn"), cfg.label
        stored = cfg.tma_store and cfg.block_n >= (32 if cfg.out_f32 else 64)
        assert ("UTMASTG" in sass) == (stored and not cfg.accumulate), cfg.label
        assert ("UTMAREDG" in sass) == (stored and cfg.accumulate), cfg.label


def check_builds(cfgs: list, name: str) -> None:
    """:func:`check_build` of each of ``cfgs``, over the usable CPUs (build_check.in_workers, so
    NVRTC's compiles run side by side); the first failed check fails the call with its message."""
    from deep_tile.testing.build_check import in_workers

    in_workers(functools.partial(check_build, name=name), cfgs, chunksize=4)


@pytest.mark.parametrize("name", compiler_params())
def test_gemv_builds_spill_free(name):
    """The m <= 4 stream over B: every instance compiles clean, its B loads 16 bytes wide past L1, A's chunks
    of each batch asked of L1 beside them (prefetch.global.L1: CCTL.E.PF1)."""
    from deep_tile.jit import compiler, paths

    for m, out_f32, acc in itertools.product((1, 2, 4), (False, True), (False, True)):
        result = compiler.compile_cubin(paths.entry_path(contract.GEMV_ENTRY), contract.gemv_defines(m, out_f32, acc),
                                        contract.GEMV_SYMBOL, name)
        assert compiler.ptxas_problems(result.log) == [], result.log
        assert_spill_free(result.log)
        sass = compiler.disassemble(result.cubin)
        if sass is not None:
            assert sass.count("LDG.E.NA.128") >= 8 and sass.count("CCTL.E.PF1") >= 8, (m, out_f32, acc)


def test_gemv_contract_and_refusals():
    import deep_tile.bf16 as host

    assert [contract.gemv_defines(m, False, False)["DT_GEMV_ROWS"] for m in (1, 2, 3, 4)] == [1, 2, 4, 4]
    assert contract.gemv_defines(1, True, True)["DT_GEMV_THREADS"] == contract.GEMV_THREADS == 256
    assert contract.gemv_grid(4096) == 512 and contract.gemv_grid(1) == 1
    with pytest.raises(ValueError, match="m <= 4"):
        contract.gemv_defines(5, False, False)
    assert host.parse_plan("32/1/16/1/0/0/4").block_m == contract.GEMV_BLOCK_M
    a, b = torch.zeros(5, 64, dtype=BF), torch.zeros(64, 64, dtype=BF)
    d = torch.full((5, 64), float("nan"), dtype=BF)
    host.FORCE_PLAN = contract.Bf16Plan(32, block_m=contract.GEMV_BLOCK_M)
    try:
        with pytest.raises(ValueError, match="stream over B"):  # m > 4
            deep_tile.bf16_gemm_nt(a, b, d)
        with pytest.raises(ValueError, match="stream over B"):  # an MN-major a
            deep_tile.bf16_gemm_tt(torch.zeros(64, 3, dtype=BF), b, d[:3])
        with pytest.raises(ValueError, match="stream over B"):  # k not a multiple of 8
            deep_tile.bf16_gemm_nt(torch.zeros(2, 60, dtype=BF), torch.zeros(64, 60, dtype=BF), d[:2])
        _, _, a2, b2 = make_dense(3, 40, 72, "nt", seed=5)
        d2 = torch.full((3, 40), float("nan"))
        deep_tile.bf16_gemm_nt(a2, b2, d2)  # the CPU path: the plan is accepted
        assert check(d2, a2, b2)["ok"]
    finally:
        host.FORCE_PLAN = None


def test_k_merge_geometry_and_refusals():
    cfg = contract.Bf16Config("k", "k", 32, 6, False, False, "normal", False, 64, block_m=64, k_merge=3)
    assert cfg.smem == 6 * (64 + 32) * 64 * 2 * 3 + 16 * 6 and cfg.defines()["DT_BF16_K_MERGE"] == 3
    assert contract.Bf16Config("k", "k", 32, box_m=16, block_m=64, k_merge=2).stages == 4  # the default ring's bytes
    assert contract.deep_stages(32, 64, 3) == 6 and contract.deep_stages(32, 64, 4) == 4
    import deep_tile.bf16 as host

    assert host.parse_plan("32/1/64/1/6/0/64/3") == contract.Bf16Plan(32, 1, 64, 1, 6, 0, 64, 3)
    cfg = host._config(contract.Bf16Plan(32, 1, 64, 1, 6, 0, 64, 3), "k", "k", False, False, "normal", True)
    assert cfg.k_merge == 3 and cfg.stages == 6 and cfg.block_m == 64 and not cfg.tma_store
    host.FORCE_PLAN = contract.Bf16Plan(32, 1, 64, 1, 6, 0, 64, 3)
    try:  # the CPU path takes the plan
        _, _, a, b = make_dense(5, 40, 200, "nt", seed=3)
        d = torch.full((5, 40), float("nan"))
        deep_tile.bf16_gemm_nt(a, b, d)
        assert check(d, a, b)["ok"]
    finally:
        host.FORCE_PLAN = None
    for kwargs in (dict(major_a="mn", box_m=64), dict(major_b="mn", block_n=64), dict(gemm_type="contiguous"),
                   dict(cluster_m=2, block_n=64), dict(k_merge=9)):
        with pytest.raises(ValueError, match="k_merge"):
            contract.Bf16Config(**{"block_n": 32, "k_merge": 3, **kwargs})
    with pytest.raises(ValueError):
        contract.Bf16Plan(64, 1, 128, 2, k_merge=2)


def test_smoke_configs_take_every_code_path():
    cfgs = smoke_configs()
    assert {code_path(c) for c in cfgs} == {code_path(c) for c in all_configs()}
    assert len(cfgs) < len(all_configs())


def test_pair_cover_holds_every_pair_of_code_path_choices():
    cover, smoke = pair_cover_configs(), smoke_configs()
    held = set().union(*(_value_pairs(code_path(c)) for c in cover))
    assert held == set().union(*(_value_pairs(code_path(c)) for c in smoke))
    assert all(c in smoke for c in cover) and len(cover) < len(smoke) // 3
    for i in range(len(code_path(smoke[0]))):  # so every single choice too (each gemm type, each layout, ...)
        assert {code_path(c)[i] for c in cover} == {code_path(c)[i] for c in smoke}


@pytest.mark.parametrize("name", [p for p in compiler_params() if p.values == ("nvrtc",)])
def test_code_path_pairs_build_spill_free(name):
    """With NVRTC, :func:`pair_cover_configs`; the kernel sweep builds every variant with NVRTC and every
    code path with nvcc (test_kernel_build.py)."""
    check_builds(pair_cover_configs(), name)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------

DENSE_CASES = (
    [dict(m=m, n=n, k=k, layout=layout) for layout in LAYOUTS
     for m, n, k in ((1, 576, 7168), (129, 2112, 1536), (300, 264, 200), (4096, 4096, 512), (8, 64, 64))]
    + [dict(m=257, n=520, k=136, layout=layout, block_n=bn) for layout in LAYOUTS for bn in contract.LEGACY_BLOCK_NS]
    # widths past the legacy three (K-major b), the float32 staged store and reduce-add, their column tails
    # (n 520: a row pitch TMA takes; n 530 below: one it does not, stored from registers)
    + [dict(m=257, n=520, k=200, layout=layout, block_n=bn, out=out) for layout in ("nt", "tt")
       for bn in (16, 48, 176, 240) for out in ("bf16", "f32")]
    + [dict(m=300, n=460, k=264, layout=layout, block_n=bn, out="f32", accumulate=acc)
       for layout, bn in (("tn", 192), ("nt", 144), ("nn", 128), ("tt", 208)) for acc in ("c", "inplace")]
    # split K (float32 partials summed in the kernel by the last split), with and without c, short A boxes at tiny m
    + [dict(m=m, n=n, k=k, layout=layout, block_n=bn, splits=sp, box_m=box, out=out, accumulate=acc)
       for m, n, k, layout, bn, sp, box, out, acc in (
           (1, 576, 7168, "nt", 64, 7, 16, "bf16", "none"), (1, 1000, 640, "tt", 128, 3, 64, "f32", "inplace"),
           (30, 264, 1000, "nt", 96, 4, 32, "bf16", "c"), (64, 300, 704, "tn", 64, 5, 64, "f32", "none"),
           (61, 520, 2048, "nn", 256, 2, 64, "bf16", "inplace"), (200, 136, 1536, "tn", 64, 3, 128, "bf16", "none"),
           (129, 2112, 7168, "nt", 96, 4, 128, "f32", "c"), (7, 64, 200, "nt", 48, 4, 16, "bf16", "none"),
           # the in-kernel sum's column tails (n odd at one row, n - 2 of a quad) and every split count kind
           (1, 1001, 2048, "nt", 128, 5, 16, "bf16", "c"), (1, 999, 1024, "nt", 192, 16, 16, "f32", "inplace"),
           (100, 1002, 1024, "nt", 112, 3, 128, "f32", "none"), (256, 530, 1024, "nt", 256, 2, 128, "bf16", "inplace"),
           (1, 4096, 7168, "nt", 192, 6, 16, "bf16", "none"),
           # a quad per thread (a row or two): splits loaded 4 at a time over wide tiles, 16 over narrow
           (1, 700, 1024, "nt", 256, 9, 16, "bf16", "c"), (2, 600, 2048, "nt", 240, 7, 16, "f32", "none"),
           (2, 300, 2048, "nt", 64, 16, 16, "bf16", "inplace"))]
    # B multicast to CTA pairs: an odd m-block count (the last pair's twin past m), every store kind
    + [dict(m=m, n=n, k=k, layout=layout, block_n=bn, cluster_m=2, out=out, accumulate=acc)
       for m, n, k, layout, bn, out, acc in (
           (300, 530, 520, "nt", 176, "bf16", "none"), (257, 400, 264, "tt", 144, "bf16", "none"),
           (384, 300, 200, "nt", 96, "f32", "none"), (200, 520, 640, "tt", 176, "f32", "inplace"),
           (129, 264, 136, "nt", 48, "bf16", "c"), (1000, 2112, 1024, "nt", 256, "bf16", "none"))]
    # d staged a buffer per box (store_all): several tiles per CTA (the wait on the previous tile's stores),
    # column tails past the last box, float32 reduce-add, multicast; forced rings (d from registers)
    + [dict(m=m, n=n, k=k, layout=layout, block_n=bn, cluster_m=cl, store_all=1, out=out, accumulate=acc)
       for m, n, k, layout, bn, cl, out, acc in (
           (1100, 2200, 320, "nt", 256, 1, "bf16", "none"), (1100, 2100, 320, "tt", 240, 1, "bf16", "none"),
           (600, 1000, 200, "nn", 192, 1, "bf16", "none"), (700, 1100, 264, "tn", 256, 1, "f32", "inplace"),
           (300, 530, 1024, "nt", 128, 1, "f32", "c"), (1000, 2112, 512, "nt", 256, 2, "bf16", "none"),
           (300, 700, 200, "tt", 176, 2, "f32", "inplace"))]
    + [dict(m=m, n=n, k=k, layout=layout, block_n=bn, splits=sp, box_m=box, stages=st, out=out, accumulate=acc)
       for m, n, k, layout, bn, sp, box, st, out, acc in (
           (1, 4096, 7168, "nt", 32, 1, 16, 16, "bf16", "none"), (1, 4096, 7168, "nt", 64, 2, 16, 14, "bf16", "none"),
           (1, 4096, 7168, "nt", 128, 4, 16, 9, "bf16", "none"), (30, 1000, 2048, "nt", 64, 3, 32, 14, "f32", "c"),
           (50, 600, 1024, "tn", 64, 2, 64, 14, "f32", "inplace"), (7, 520, 640, "nn", 128, 1, 16, 9, "bf16", "none"),
           (128, 2112, 7168, "nt", 32, 2, 128, 11, "bf16", "none"), (128, 2112, 7168, "nt", 16, 1, 128, 12, "bf16", "none"),
           (300, 600, 1024, "nt", 256, 1, 128, 3, "bf16", "none"))]
    # 64-row tiles (one consumer warpgroup): every layout, a partial last 64-row tile, short A boxes, split K
    # (with and without c), the staged store, reduce-add and a buffer per box, the deep and default rings
    + [dict(m=m, n=n, k=k, layout=layout, block_n=bn, splits=sp, box_m=box, stages=st, store_all=sa, out=out,
            accumulate=acc, block_m=64)
       for m, n, k, layout, bn, sp, box, st, sa, out, acc in (
           (1, 4096, 7168, "nt", 32, 1, 16, 16, 0, "bf16", "none"), (128, 2112, 7168, "nt", 32, 1, 64, 16, 0, "bf16", "none"),
           (128, 2112, 7168, "nt", 64, 2, 64, 0, 0, "bf16", "none"), (100, 2112, 1024, "nt", 48, 3, 64, 0, 0, "f32", "c"),
           (30, 1000, 2048, "nt", 64, 3, 32, 0, 0, "bf16", "inplace"), (1, 999, 1024, "nt", 192, 6, 16, 0, 0, "f32", "none"),
           (300, 256, 1024, "nt", 128, 1, 64, 0, 0, "f32", "none"), (300, 256, 1024, "nt", 128, 1, 64, 8, 0, "f32", "none"),
           (257, 520, 200, "tn", 64, 1, 64, 0, 0, "bf16", "none"), (257, 520, 264, "nn", 128, 1, 64, 0, 0, "f32", "inplace"),
           (200, 700, 320, "tt", 256, 1, 64, 0, 0, "f32", "c"), (190, 1296, 320, "nt", 256, 1, 64, 0, 1, "bf16", "none"),
           (150, 530, 136, "nt", 176, 1, 64, 0, 0, "bf16", "none"), (65, 460, 264, "nt", 144, 1, 64, 0, 0, "bf16", "c"),
           (50, 600, 1024, "tn", 64, 2, 64, 14, 0, "f32", "inplace"), (7, 520, 640, "nn", 128, 1, 64, 9, 0, "bf16", "none"))]
    # stages of several 64-k blocks (k_merge): DeepGEMM's rings at its shapes, k not a multiple of a stage (whole
    # boxes past k, zero-filled), split K, 128-row tiles with the staged store, a short box in a 128-row tile
    + [dict(m=m, n=n, k=k, layout="nt", block_n=bn, splits=sp, box_m=box, stages=st, out=out, accumulate=acc,
            block_m=bm, k_merge=km)
       for m, n, k, bn, sp, box, st, out, acc, bm, km in (
           (128, 2112, 7168, 32, 1, 64, 6, "bf16", "none", 64, 3), (1, 4096, 7168, 32, 1, 16, 6, "bf16", "none", 64, 3),
           (128, 2112, 7168, 32, 1, 64, 4, "bf16", "none", 64, 4), (1, 4096, 7168, 32, 1, 16, 8, "bf16", "none", 64, 2),
           (100, 520, 1000, 32, 1, 64, 6, "f32", "c", 64, 3), (128, 2112, 7168, 64, 2, 64, 4, "bf16", "none", 64, 3),
           (30, 1000, 2056, 64, 3, 32, 0, "bf16", "inplace", 64, 2), (300, 520, 1000, 128, 1, 128, 0, "f32", "none", 128, 2),
           (3, 700, 1000, 64, 1, 16, 0, "bf16", "c", 128, 2))]
    + [dict(m=m, n=n, k=k, layout="nt", out=out) for m, n, k, out in ((64, 2112, 7168, "bf16"), (40, 4096, 2048, "f32"),
                                                                     (4096, 256, 1024, "f32"))]
    # the m <= 4 stream over B (forced): one, two and three rows, k tails of a batch, c, float32 d
    + [dict(m=m, n=n, k=k, layout="nt", block_n=32, out=out, accumulate=acc, block_m=contract.GEMV_BLOCK_M)
       for m, n, k, out, acc in ((1, 4096, 7168, "bf16", "none"), (1, 1000, 200, "f32", "inplace"),
                                 (2, 520, 1024, "bf16", "c"), (3, 300, 72, "f32", "none"), (4, 4096, 7168, "f32", "c"),
                                 (1, 13, 8, "bf16", "none"), (4, 258, 2056, "bf16", "inplace"))]
    # the shapes the benchmark times, small enough to check: the plan's own choice and the legacy one
    + [dict(m=m, n=n, k=k, layout=layout, out=out, legacy=legacy) for legacy in (False, True)
       for m, n, k, layout, out in ((1, 4096, 7168, "nt", "bf16"), (128, 2112, 7168, "nt", "bf16"),
                                    (512, 576, 7168, "nt", "bf16"), (512, 256, 7168, "nt", "f32"),
                                    (1024, 2112, 2048, "nt", "bf16"))]
    + [dict(m=130, n=256, k=7168, layout="nt", out="f32"), dict(m=1, n=1000, k=256, layout="tn", out="f32"),
       dict(m=200, n=328, k=512, layout="nt", accumulate="c"), dict(m=200, n=328, k=512, layout="nn", accumulate="inplace"),
       dict(m=77, n=96, k=64, layout="tt", out="f32", accumulate="inplace"),
       dict(m=64, n=20, k=72, layout="nt", out="f32"),
       dict(m=100, n=36, k=64, layout="nt"), dict(m=300, n=36, k=64, layout="tn", block_n=64)]
    # d's rows ending inside a 16-byte chunk (n 300 bf16, 298 float32) in a padded d whose pitch TMA takes: a
    # 64-row tile one box wide and a float32 reduce-add; and the plan's own 64-row tile one float32 box wide (reduce-add)
    + [dict(m=257, n=300, k=200, layout="nt", block_n=64, box_m=64, block_m=64, d_pad=4),
       dict(m=200, n=298, k=264, layout="nt", block_n=128, out="f32", accumulate="c", d_pad=2),
       dict(m=96, n=32, k=256, layout="nt", out="f32", accumulate="c")]
)
GROUPED_CASES = [
    # the batched GEMM (one launch over (batch, m-block, n-block)): b 1, 4, 37, 300 rows, 3 and 128 batches,
    # k and n past whole blocks, K- and MN-major b, float32 d, forced tiles (an idle second warpgroup, 64-row tiles)
    ("batched", dict(groups=3, m=1, n=72, k=200)),
    ("batched", dict(groups=128, m=4, n=128, k=512)),
    ("batched", dict(groups=128, m=4, n=512, k=128, major_b="mn")),
    ("batched", dict(groups=3, m=37, n=520, k=40, major_b="mn")),
    ("batched", dict(groups=3, m=300, n=136, k=192, out="f32")),
    ("batched", dict(groups=128, m=37, n=72, k=520)),
    ("batched", dict(groups=3, m=300, n=200, k=72, major_b="mn", out="f32")),
    ("batched", dict(groups=5, m=30, n=300, k=264, block_n=64, box_m=32, stages=6)),
    ("batched", dict(groups=5, m=130, n=200, k=136, major_b="mn", block_n=128, stages=3)),
    ("batched", dict(groups=4, m=60, n=100, k=300, block_n=48, box_m=64, block_m=64)),
    # d through the 3-D TMA map (bf16 rows 8 elements wider keep 16-byte strides): 64-row tiles with a short box,
    # 128 x 256 MN-major (the bhd,hdr->bhr shape), n and m off whole boxes and tiles (clipped per batch), a forced
    # 64-row tile one box wide, and the register epilogue forced beside it
    ("batched", dict(groups=128, m=4, n=128, k=512, d_pad=8)),
    ("batched", dict(groups=128, m=37, n=512, k=128, major_b="mn", d_pad=8)),
    ("batched", dict(groups=3, m=300, n=200, k=136, d_pad=8)),
    ("batched", dict(groups=5, m=130, n=520, k=72, major_b="mn", d_pad=8)),
    ("batched", dict(groups=4, m=60, n=100, k=296, block_n=64, box_m=64, block_m=64)),
    ("batched", dict(groups=3, m=300, n=200, k=136, d_pad=8, store="registers")),
    # the per-head einsum's auto path (many heads of 128+ rows): D by TMA, two and four boxes a tile, m and n off
    ("batched", dict(groups=130, m=130, n=136, k=192, d_pad=8)),
    ("batched", dict(groups=130, m=200, n=520, k=128, major_b="mn", d_pad=8)),
    # rows ending inside a 16-byte chunk (n 300, d_pad 4: 16-byte strides) in 128-row tiles (the plan's 80 wide: a
    # box and a register tail), float32 (n 298, d_pad 2)
    ("batched", dict(groups=16, m=130, n=300, k=128)),
    ("batched", dict(groups=5, m=130, n=298, k=136, out="f32", block_n=128, d_pad=2)),
    ("contiguous", dict(groups=4, expected_m=300, n=512, k=256)),
    ("contiguous", dict(groups=3, expected_m=200, n=1000, k=448, major_b="mn")),
    ("contiguous", dict(groups=8, expected_m=130, n=256, k=128, block_n=64)),
    ("masked", dict(groups=4, max_m=512, expected_m=192, n=512, k=256)),
    ("masked", dict(groups=6, max_m=64, expected_m=20, n=1024, k=2048, block_n=128)),
    ("compat_psum", dict()),
    ("k_grouped", dict(ks=[256, 0, 384, 128], m=200, n=264)),
    ("k_grouped", dict(ks=[1024, 2048], m=1024, n=768, inplace=True)),
    ("repeat_graph", dict()),
    ("repeat_graph", dict(m=1, n=4096, k=7168, layout="nt")),
    ("repeat_graph", dict(m=128, n=2112, k=7168, layout="nt", out="f32", accumulate=True)),
    ("repeat_graph", dict(m=700, n=2048, k=1024, layout="tn", out="f32", accumulate=True)),
    ("split_counters", dict()),
    ("split_counters", dict(m=1, n=4096, k=7168, block_n=192, splits=6, box_m=16, out="f32")),
    ("split_counters", dict(m=128, n=2112, k=7168, block_n=64, splits=2, box_m=64, block_m=64)),
    ("repeat_graph", dict(m=1, n=4096, k=7168, layout="nt", out="f32")),
]


def test_dense_cases_meet_the_d_rules():
    """Every GPU dense case's d is one the call takes: bf16_gemm refuses an odd row stride of d only for
    CUDA tensors (the CPU path skips the alignment rules), so a bad case would first fail on the device,
    taking the cases after it with it (one child runs them all)."""
    bad = [c for c in DENSE_CASES if c["m"] > 1 and c["n"] % 2]
    assert not bad, bad


@pytest.mark.gpu
def test_gpu_dense_matches_float64():
    results = run_child_cases("gpu_bf16_cases.py", "dense", DENSE_CASES, timeout=900)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
@pytest.mark.parametrize("function,case", GROUPED_CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(GROUPED_CASES)])
def test_gpu_grouped_matches_float64(function, case):
    results = run_child_cases("gpu_bf16_cases.py", function, [case], timeout=600)
    assert all(r["ok"] for r in results), results
