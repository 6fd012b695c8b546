"""benchmarks/bench_decode.py on the CPU: the routing it simulates, the chain it builds, the bytes
it counts and its command line (the timing itself needs a GPU)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
bench = pytest.importorskip("bench_decode")


def test_routing_is_seeded_and_bounded():
    counts = bench.routed_counts(64, seed=3)
    assert counts == bench.routed_counts(64, seed=3) and counts != bench.routed_counts(64, seed=4)
    assert len(counts) == bench.LOCAL_EXPERTS
    assert all(0 <= c <= 64 * bench.EP for c in counts)  # an expert gets each token at most once
    # 64 * 8 tokens x 8 experts each over 256: 32 local experts get about 64 * 8 * 8 / 8 = 512 rows.
    assert 400 < sum(counts) < 624 and bench.expected_m(64) == 16 and bench.expected_m(1) == 1


def test_chain_and_bytes():
    gemms = bench.chain_gemms(16, seed=0, with_experts=True)
    assert [(g.n, g.k) for g in gemms] == list(bench.DENSE_NK) + list(bench.EXPERT_NK)
    assert [g.masked for g in gemms] == [False] * 6 + [True] * 2
    dense = gemms[0]
    ops = {"rows": 16}
    kb = 7168 // 128
    assert bench.compulsory_bytes(dense, ops) == 2112 * 7168 + 17 * kb * 4 + 16 * (7168 + kb * 4 + 2112 * 2)
    expert = bench.Gemm("e", 256, 512, (3, 0, 5))
    rows = {"rows": 8}
    assert bench.compulsory_bytes(expert, rows) == 2 * (256 * 512 + 2 * 4 * 4) + 8 * (512 + 4 * 4 + 256 * 2)


def test_sms_variant_plans_for_its_sms_and_restores_the_limit(monkeypatch):
    """A variant's SMS pseudo-define sets deep_tile's SM limit around each call (the defines it
    passes on lose it) and puts the limit back afterwards."""
    import deep_tile

    seen = []
    monkeypatch.setattr(bench.launch, "run", lambda *a, extra_defines=None: seen.append(
        (deep_tile.get_num_sms(), extra_defines)))
    gemm = bench.Gemm("g", 256, 512)
    ops = {"a": None, "a_scale": None, "b": None, "b_scale": None}
    before = deep_tile.get_num_sms()
    bench.deep_tile_call(gemm, ops, None, {"SMS": 66, "DT_TRACE": 1})()
    assert seen == [(66, {"DT_TRACE": 1})] and deep_tile.get_num_sms() == before


def test_l2p_variant_forces_the_selected_config_with_that_promotion(monkeypatch):
    """A variant's L2P pseudo-define runs the selector's config with that L2 promotion (the other
    defines passed on)."""
    import deep_tile

    seen = []
    monkeypatch.setattr(bench.launch, "run", lambda *a, config=None, extra_defines=None: seen.append(
        (config, extra_defines)))
    gemm = bench.Gemm("g", 7168, 2048)
    ops = {"a": None, "a_scale": None, "b": None, "b_scale": None, "rows": 64}
    bench.deep_tile_call(gemm, ops, None, {"L2P": 128, "DT_TRACE": 2})()
    (config, defines), = seen
    selected = deep_tile.get_config(64, 7168, 2048)
    assert config.l2_promotion == 128 and defines == {"DT_TRACE": 2}
    assert (config.block_m, config.block_n, config.num_stages) == (selected.block_m, selected.block_n,
                                                                    selected.num_stages)


def test_command_line():
    args = bench.parse_args(["--m", "1,64", "--variant", "pf0:DT_L2_PREFETCH_KBLOCKS=0"])
    assert args.m_list == [1, 64] and args.variants == {"pf0": {"DT_L2_PREFETCH_KBLOCKS": 0}}
    assert args.flush == "write"  # the benchmarks' flush unless asked otherwise
    args = bench.parse_args(["--flush", "read", "--variant", "half:SMS=66,DT_L2_PREFETCH_KBLOCKS=8"])
    assert args.flush == "read" and args.variants == {"half": {"SMS": 66, "DT_L2_PREFETCH_KBLOCKS": 8}}
    with pytest.raises(SystemExit):
        bench.parse_args(["--m", "0"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--flush", "none"])
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_decode.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "CUDA graph" in out.stdout
