"""CPU tests of the configuration selector (deep_tile.select), deep_tile.device, get_config / explain
(deep_tile.select.api) and the CLI."""
import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest

from deep_tile import arch, device
from deep_tile.__main__ import main
from deep_tile.select import api
from deep_tile.select.api import explain, get_config
from deep_tile.select.cost import fastest_compute, tile_efficiency
from deep_tile.select.selector import choose_multicast
from deep_tile.select import KernelConfig, enumerate_candidates, explain_text, rank_candidates, select_config
from deep_tile.select.config import smem_bytes
from deep_tile.select.cost import roofline, why_lost

ROOT = Path(__file__).resolve().parents[1]

GRID_M = (1, 2, 7, 63, 64, 65, 127, 128, 129, 255, 256, 511, 512, 1000, 1024, 2048, 4096, 4097, 8192, 16384)
GRID_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
           (576, 7168), (1536, 7168), (7168, 1536), (8, 16), (24, 144), (136, 7168), (2048, 4096))
GRID_SMS = (132, 114, 78, 7)


def _straddle_ok(block_n):
    return block_n <= 128 or block_n - math.gcd(block_n, 128) <= 128


def _check_invariants(m, n, k, num_sms, max_smem):
    cfg = select_config(m, n, k, num_sms, max_smem)
    m_blocks, n_blocks = math.ceil(m / cfg.block_m), math.ceil(n / cfg.block_n)
    tiles = m_blocks * n_blocks
    # tile shape and resources
    assert cfg.block_m in (64, 128, 256) and cfg.block_k == 128
    assert cfg.block_n % 16 == 0 and 16 <= cfg.block_n <= 256 and _straddle_ok(cfg.block_n)
    assert cfg.accum_registers == (cfg.block_m // cfg.num_math_warpgroups) * cfg.block_n // 64 <= 168
    assert cfg.num_math_warpgroups == (1 if cfg.block_m == 64 else 2)
    assert cfg.num_threads == 128 * (1 + cfg.num_math_warpgroups)
    assert cfg.smem_bytes <= min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    assert 3 <= cfg.num_stages <= 8
    limit = min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    assert cfg.num_stages == 8 or smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages + 1) > limit
    # multicast rule: only for tiles that need it to compile spill-free, and only where legal
    if cfg.num_multicast == 2:
        assert (cfg.block_m, cfg.block_n) in arch.SPILLS_WITHOUT_MULTICAST
        assert num_sms % 2 == 0 and m >= 512
        assert (n_blocks % 2 == 0) if cfg.multicast_on_a else (m_blocks % 2 == 0 and n_blocks % 2 == 1)
    else:
        assert cfg.num_multicast == 1 and cfg.multicast_on_a is False
        assert (cfg.block_m, cfg.block_n) not in arch.SPILLS_WITHOUT_MULTICAST
    # launch
    assert cfg.group_size % 2 == 0 and cfg.group_size >= 2
    assert cfg.num_sms == min(num_sms, tiles)
    if cfg.num_multicast == 2:
        assert cfg.num_sms % 2 == 0 and cfg.num_sms >= 2
    defines = cfg.defines()
    assert set(defines) == {"DT_BLOCK_M", "DT_BLOCK_N", "DT_NUM_STAGES", "DT_NUM_MULTICAST", "DT_MULTICAST_ON_A"}
    assert all(type(v) is int for v in defines.values())
    assert defines == {"DT_BLOCK_M": cfg.block_m, "DT_BLOCK_N": cfg.block_n, "DT_NUM_STAGES": cfg.num_stages,
                       "DT_NUM_MULTICAST": cfg.num_multicast, "DT_MULTICAST_ON_A": int(cfg.multicast_on_a)}
    # rule 0 (compute-bound problems): no buildable candidate has a lower estimated time;
    # rule 1 (otherwise): none needs fewer waves
    buildable = [c for c in enumerate_candidates(max_smem)
                 if (c.block_m, c.block_n) not in arch.SPILLS_WITHOUT_MULTICAST
                 or choose_multicast(m, n, c.block_m, c.block_n, num_sms)[0] == 2]
    waves = {c: math.ceil(math.ceil(m / c.block_m) * math.ceil(n / c.block_n) / num_sms) for c in buildable}
    if 2 * m * n / (m + n) >= arch.COMPUTE_BOUND_INTENSITY:
        est = {c: round(waves[c] * c.block_m * c.block_n / tile_efficiency(c.block_m, c.block_n), 3)
               for c in buildable}
        chosen = next(c for c in buildable if (c.block_m, c.block_n) == (cfg.block_m, cfg.block_n))
        assert est[chosen] == min(est.values())
    else:
        assert math.ceil(tiles / num_sms) == min(waves.values())


@pytest.mark.parametrize("num_sms", GRID_SMS)
@pytest.mark.parametrize("n,k", GRID_NK)
def test_invariants_over_shape_grid(n, k, num_sms):
    for m in GRID_M:
        _check_invariants(m, n, k, num_sms, arch.MAX_SMEM_PER_BLOCK)


@pytest.mark.parametrize("max_smem", [101376, 166912, 200000])
def test_invariants_with_smaller_smem_limit(max_smem):
    for m, (n, k) in itertools.product((64, 1000, 4096), GRID_NK[:6]):
        _check_invariants(m, n, k, 132, max_smem)


# Golden configs on 132 SMs: (m, n, k) -> (block_m, block_n, num_stages, num_multicast, multicast_on_a, grid)
GOLDEN = {
    # Compute-bound (rule 0): 128x128 runs faster per tile than 128x144 (0.92) and 128x160 (0.965)
    # (TILE_EFFICIENCY, measured), which outweighs 14 waves vs 11-13.
    (4096, 7168, 2048): (128, 128, 5, 1, False, 132),
    (4096, 4096, 7168): (128, 128, 5, 1, False, 132),
    # 16 x 33 = 528 tiles = exactly 4 full waves at 0.92 efficiency beat 128x128's 4.1 waves (5).
    (4096, 2112, 7168): (256, 64, 4, 1, False, 132),
    # Memory-bound small M: 2112 / 16 = 132 tiles fill every SM once; each SM streams
    # (64 + 16) x K bytes. This is what DeepGEMM's wave rules pick too.
    (64, 2112, 7168): (64, 16, 8, 1, False, 132),
    # 1 wave needs block_n >= 187, above the register limit; 96 gives 256 tiles = 2 waves
    # with 124/132 SMs busy in the second.
    (64, 24576, 1536): (64, 96, 8, 1, False, 132),
    # 2 x 64 = 128 tiles in one wave (128x64 would give only 112).
    (128, 7168, 16384): (64, 112, 8, 1, False, 128),
    # 256 tiles, 2 waves; 128 rows avoid the padding a 256-row tile would load.
    (128, 32768, 512): (128, 128, 5, 1, False, 132),
}


@pytest.mark.parametrize("shape", sorted(GOLDEN))
def test_golden_configs(shape):
    cfg = select_config(*shape, 132)
    got = (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_multicast, cfg.multicast_on_a, cfg.num_sms)
    assert got == GOLDEN[shape]


def test_select_config_is_cached_and_pure():
    assert select_config(4096, 7168, 2048, 132) is select_config(4096, 7168, 2048, 132)
    assert select_config(4096, 7168, 2048, 114).num_sms == 114


def test_kernel_config_derived_values():
    # design.md 3.1: 32768 (D) + 5 x (16384 + 16384 + 512) + 5 x 16 = 199248
    cfg = KernelConfig(block_m=128, block_n=128, num_stages=5, num_sms=132)
    assert cfg.smem_bytes == 199248 and cfg.num_threads == 384 and cfg.accum_registers == 128
    assert cfg.smem_breakdown()["total"] == 199248
    small = KernelConfig(block_m=64, block_n=16, num_stages=8, num_sms=1, multicast_on_a=True)
    assert small.multicast_on_a is False and small.num_math_warpgroups == 1 and small.num_threads == 256
    assert small.defines()["DT_MULTICAST_ON_A"] == 0
    assert KernelConfig(block_m=256, block_n=64, num_stages=4, num_sms=2, num_multicast=2,
                        multicast_on_a=True).label == "256x64 s4 mcA"
    with pytest.raises(ValueError, match="block_n must be <= 64"):  # spills (measured)
        KernelConfig(block_m=256, block_n=80, num_stages=4, num_sms=2)
    # 128x160 compiles spill-free without multicast since the straddle point is compile-time
    assert KernelConfig(block_m=128, block_n=160, num_stages=5, num_sms=2).num_multicast == 1


@pytest.mark.parametrize("kwargs,name", [
    (dict(block_m=96), "block_m"), (dict(block_n=24), "block_n"), (dict(block_n=176), "block_n"),
    (dict(block_n=192), "accumulator registers"), (dict(block_m=256, block_n=96), "accumulator registers"),
    (dict(block_k=64), "block_k"), (dict(num_stages=0), "num_stages"), (dict(num_multicast=3), "num_multicast"),
    (dict(multicast_on_a=1), "multicast_on_a"), (dict(num_math_warpgroups=1), "num_math_warpgroups"),
    (dict(group_size=7), "group_size"), (dict(num_sms=0), "num_sms"),
    (dict(num_multicast=2, num_sms=131), "num_sms"), (dict(num_stages=7), "shared memory"),
    (dict(block_m=128.0), "block_m"),
])
def test_kernel_config_rejects_bad_fields(kwargs, name):
    fields = dict(block_m=128, block_n=128, num_stages=4, num_sms=132)
    fields.update(kwargs)
    with pytest.raises(ValueError, match=name):
        KernelConfig(**fields)


@pytest.mark.parametrize("index,name", [(0, "m"), (1, "n"), (2, "k"), (3, "num_sms")])
@pytest.mark.parametrize("bad", [0, -4, 1.5, True, "64"])
def test_select_config_bad_arguments_name_the_argument(index, name, bad):
    args = [64, 2112, 7168, 132]
    args[index] = bad
    with pytest.raises(ValueError, match=rf"\b{name} must be a positive int; got {bad!r}"):
        select_config(*args)


# get_config and explain check shapes with fp8_gemm's check (deep_tile.checks.check_problem_shape).
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
    assert get_config(4096, 7168, 2048, num_sms=500).num_sms == 500
    assert "500 SMs" in explain(4096, 7168, 2048, num_sms=500)


def test_explain_contains_the_key_facts():
    text = explain_text(4096, 7168, 2048, 132)
    for fact in ("M=4096 N=7168 K=2048", "config: 128x128 s5", "DT_BLOCK_N=128", "DT_NUM_MULTICAST=1",
                 "199,248 of 232,448 bytes", "D staging", "A-scale stages", "barriers",
                 "128 accumulators", "of the 232", "32 x 56 = 1792", "waves: 14", "76/132 SMs busy",
                 "128.0 FLOP/B", "ridge point 591", "compute-bound 62.7 us", "memory-bound 24.5 us",
                 "-> compute-bound", "runners-up", "2. 128x160 s5", "lost on estimated time",
                 "128x160 at efficiency 0.96"):
        assert fact in text, fact
    assert len([line for line in text.splitlines() if "lost on" in line]) == 3
    assert "-> memory-bound" in explain_text(64, 2112, 7168, 132)


def test_ranking_and_roofline_helpers():
    ranked = rank_candidates(4096, 7168, 2048, 132)
    assert len(ranked) == len(enumerate_candidates()) == 23
    assert "estimated time: 13 waves x 128x144 at efficiency 0.92" in why_lost(ranked[0], ranked[3])
    # memory-bound problems skip rule 0 and rank by waves first
    small = rank_candidates(64, 2112, 7168, 132)
    assert all(fastest_compute(s) == 0.0 for s in small) and small[0].waves == 1
    roof = roofline(64, 2112, 7168, rank_candidates(64, 2112, 7168, 132)[0], arch.CHIPS["H200"])
    assert roof.bound == "memory" and roof.memory_s == pytest.approx(roof.bytes / 4.8e12)


def test_chip_facts_lookup():
    cases = {"NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H100 NVL": "H100 NVL",
             "NVIDIA H200": "H200", "NVIDIA GH200 480GB": "H200", "NVIDIA H800": "H800 SXM", "NVIDIA H20": "H20",
             "Tesla V100-SXM2-16GB": "H100 SXM", "": "H100 SXM"}
    for device_name, chip in cases.items():
        assert arch.chip_facts(device_name).name == chip, device_name
    assert arch.CHIPS["H100 PCIe"].num_sms == 114 and arch.CHIPS["H200"].hbm_bytes_per_s == 4.8e12
    assert arch.LEGAL_BLOCK_N == tuple(range(16, 129, 16)) + (144, 160, 192, 256)


def test_set_num_sms_validation():
    device.set_num_sms(None)
    full = device.get_num_sms()
    try:
        for bad in (0, -1, full + 1, 1.0, True, "8"):
            with pytest.raises(ValueError, match=r"set_num_sms: num_sms must be an int in 1\.\."):
                device.set_num_sms(bad)
        device.set_num_sms(8)
        assert device.get_num_sms() == 8
        assert get_config(4096, 7168, 2048).num_sms == 8
    finally:
        device.set_num_sms(None)
    assert device.get_num_sms() == full


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
    assert "config: 128x128 s5" in capsys.readouterr().out
    assert main(["explain", "64,2112,7168", "--num-sms", "0"]) == 2
    assert "num_sms must be a positive int" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["explain", "64,2112"])


def test_cli_subprocess():
    result = subprocess.run([sys.executable, "-m", "deep_tile", "explain", "4096,7168,2048", "--num-sms", "132"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "config: 128x128" in result.stdout and "shared memory: 199,248 of 232,448" in result.stdout


def test_select_imports_neither_torch_nor_cuda():
    code = ("import sys, deep_tile.select, deep_tile.select.report, deep_tile.arch\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'cuda'))\n"
            "print(bad)\nsys.exit(1 if bad else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_device_starts_no_cuda():
    code = ("import sys, deep_tile.device\n"
            "sys.exit(1 if 'torch' in sys.modules or 'deep_tile.select' in sys.modules else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
