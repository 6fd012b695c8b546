"""deep_tile.testing: metrics, problem builder, shape lists, table printer, timing guards."""
import math

import pytest
import torch

from deep_tile.testing import shapes
from deep_tile.testing.data import align4, make_fp8_problem, to_tma_layout
from deep_tile.testing.numeric import assert_gemm_close, calc_diff, max_rel_error
from deep_tile.testing.table import format_table, geomean
from deep_tile.testing.timing import bench_gpu, kernel_device_us


# --- numeric -----------------------------------------------------------------------------------

def test_calc_diff_properties():
    x = torch.randn(33, 17, dtype=torch.float64)
    y = torch.randn(33, 17, dtype=torch.float64)
    assert calc_diff(x, x) == pytest.approx(0.0, abs=1e-15)
    assert calc_diff(x, -x) == pytest.approx(2.0)
    assert calc_diff(x, 2 * x) == pytest.approx(0.2)          # 1 - 2*2/(1+4)
    assert calc_diff(x, y) == pytest.approx(calc_diff(y, x))
    assert 0.0 <= calc_diff(x, y) <= 2.0
    assert calc_diff(torch.zeros(3), torch.zeros(3)) == 0.0
    expected = 1 - 2 * (x * y).sum() / (x * x + y * y).sum()
    assert calc_diff(x, y) == pytest.approx(expected.item(), rel=1e-12)


def test_calc_diff_is_float64_and_mixed_dtypes():
    x = torch.randn(1000, dtype=torch.float64)
    y = (x * (1 + 1e-3 * torch.randn(1000, dtype=torch.float64)))
    d = calc_diff(y.to(torch.bfloat16), x)
    assert isinstance(d, float) and 0 < d < 1e-4
    with pytest.raises(ValueError, match="calc_diff: x and y must have the same shape"):
        calc_diff(torch.ones(2, 3), torch.ones(3, 2))


def test_max_rel_error():
    ref = torch.tensor([[1.0, -4.0], [2.0, 0.5]], dtype=torch.float64)
    out = ref.clone()
    out[1, 1] += 0.2
    assert max_rel_error(out, ref) == pytest.approx(0.2 / 4.0)
    assert max_rel_error(ref, ref) == 0.0
    assert max_rel_error(torch.zeros(2), torch.zeros(2)) == 0.0
    assert max_rel_error(torch.ones(2), torch.zeros(2)) == math.inf
    assert max_rel_error(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    with pytest.raises(ValueError, match="max_rel_error: out and ref must have the same shape"):
        max_rel_error(torch.ones(2), torch.ones(3))


def test_assert_gemm_close():
    ref = torch.randn(16, 24, dtype=torch.float64)
    assert_gemm_close(ref.to(torch.bfloat16), ref)
    with pytest.raises(AssertionError, match=r"calc_diff = .*max_rel_error = "):
        assert_gemm_close((ref + 0.5 * torch.randn_like(ref)).to(torch.bfloat16), ref)
    bad = ref.clone()
    bad[3, 4] = float("nan")
    bad[0, 0] = float("inf")
    with pytest.raises(AssertionError, match="2 non-finite"):
        assert_gemm_close(bad, ref)
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_gemm_close(ref[:, :3], ref)
    # rel_tol alone can fail a result whose calc_diff is fine (one big outlier)
    out = ref.clone()
    out[0, 0] += 0.2 * ref.abs().max()
    with pytest.raises(AssertionError, match="max_rel_error"):
        assert_gemm_close(out, ref, diff_tol=1.0)


# --- data --------------------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 136, 144), (65, 24, 300), (0, 8, 128)])
def test_make_fp8_problem_row(m, n, k):
    a, sa, b, sb = make_fp8_problem(m, n, k, "cpu", seed=0)
    kb = -(-k // 128)
    assert a.shape == (m, k) and a.dtype == torch.float8_e4m3fn and a.is_contiguous()
    assert b.shape == (n, k) and b.dtype == torch.float8_e4m3fn and b.is_contiguous()
    assert sa.shape == (m, kb) and sa.dtype == torch.float32 and sa.is_contiguous()
    assert sb.shape == (-(-n // 128), kb) and sb.dtype == torch.float32 and sb.is_contiguous()
    if m:
        assert a.float().abs().max() == 448.0                   # randn data, never zeros


@pytest.mark.parametrize("m", [1, 4, 7, 64, 65])
def test_make_fp8_problem_tma_layout(m):
    a, sa, b, sb = make_fp8_problem(m, 24, 300, "cpu", seed=1, a_scale_layout="tma")
    _, sa_row, _, _ = make_fp8_problem(m, 24, 300, "cpu", seed=1, a_scale_layout="row")
    assert sa.shape == (m, 3) and sa.stride() == (1, align4(m))
    assert torch.equal(sa, sa_row)
    assert sa.untyped_storage().nbytes() >= 4 * 3 * align4(m)


def test_make_fp8_problem_seed_and_errors():
    p1 = make_fp8_problem(5, 8, 16, "cpu", seed=7)
    p2 = make_fp8_problem(5, 8, 16, "cpu", seed=7)
    p3 = make_fp8_problem(5, 8, 16, "cpu", seed=8)
    assert torch.equal(p1[0].view(torch.uint8), p2[0].view(torch.uint8)) and torch.equal(p1[1], p2[1])
    assert not torch.equal(p1[0].view(torch.uint8), p3[0].view(torch.uint8))
    with pytest.raises(ValueError, match="make_fp8_problem: a_scale_layout must be one of"):
        make_fp8_problem(4, 8, 16, "cpu", a_scale_layout="col")
    with pytest.raises(ValueError, match="make_fp8_problem: k must be an int >= 1"):
        make_fp8_problem(4, 8, 0, "cpu")


def test_align4_and_to_tma_layout():
    assert [align4(v) for v in (0, 1, 4, 5, 4097)] == [0, 4, 4, 8, 4100]
    s = torch.arange(10.0).reshape(5, 2)
    t = to_tma_layout(s)
    assert torch.equal(t, s) and t.stride() == (1, 8)


# --- shapes ------------------------------------------------------------------------------------

def test_shape_lists():
    assert len(shapes.MODEL_NK) == 6 and len(shapes.MODEL_SHAPES) == 18
    assert shapes.MODEL_SHAPES[0] == (64, 2112, 7168) and shapes.MODEL_SHAPES[-1] == (4096, 7168, 2048)
    assert {m for m, _, _ in shapes.MODEL_SHAPES} == {64, 128, 4096}
    assert shapes.BENCH_SHAPES == shapes.MODEL_SHAPES + [(8192, 8192, 8192)]
    assert shapes.EDGE_M == [1, 7, 63, 65, 127, 129, 1000, 4097]
    assert shapes.EDGE_N == [8, 24, 136, 2112] and shapes.EDGE_K == [16, 144, 7168]
    assert len(shapes.EDGE_SHAPES) == 96 and len(set(shapes.EDGE_SHAPES)) == 96


# --- table -------------------------------------------------------------------------------------

def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.5, None, 1.5]) == pytest.approx(1.5)
    assert math.isnan(geomean([]))
    with pytest.raises(ValueError, match="geomean: values must be positive"):
        geomean([1.0, 0.0])


def test_format_table():
    text = format_table(["M", "config", "us"], [[64, "128x160 s6 A2", "12.5"], [4096, "64x64 s8"]], "><>")
    lines = text.splitlines()
    assert lines[0] == "   M | config        |   us"
    assert lines[1] == "-----+---------------+-----"
    assert lines[2] == "  64 | 128x160 s6 A2 | 12.5"
    assert lines[3] == "4096 | 64x64 s8      |"
    assert len({len(line) for line in lines[:3]}) == 1
    with pytest.raises(ValueError, match="format_table: a row has 3 cells but there are 2 headers"):
        format_table(["a", "b"], [[1, 2, 3]])


# --- timing ------------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_bench_gpu_needs_cuda():
    with pytest.raises(RuntimeError, match="bench_gpu: needs a CUDA device"):
        bench_gpu(lambda: None)


def test_kernel_device_us_checks_the_flush_kind_first():
    with pytest.raises(ValueError, match="flush_kind must be 'write' or 'read'"):
        kernel_device_us(lambda: None, flush_kind="none")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_device_us_on_gpu():
    x = torch.randn(1024, 1024, device="cuda")
    us = kernel_device_us(lambda: x @ x, reps=3, name="")  # every kernel of the call (the matmul)
    assert us > 0
    with pytest.raises(RuntimeError, match="no kernel named like"):
        kernel_device_us(lambda: x @ x, reps=1, name="no such kernel")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bench_gpu_on_gpu():
    x = torch.randn(1024, 1024, device="cuda")
    r = bench_gpu(lambda: x @ x, warmup=2, iters=5)
    assert r["iters"] == 5 and len(r["samples_us"]) == 5
    assert 0 < r["min_us"] <= r["median_us"] <= r["max_us"]


def test_parse_and_format_config_round_trip():
    from deep_tile.testing.configs import format_config, parse_config
    for text in ("256x128:s3:b1:w128:mcA", "128x256:s3:b1:w128:g16:gM", "64x64:s13:b2:w64:k4", "128x128:s4:b2:w128:mcB",
                 "64x32:s16:b2:w32:ef", "128x256:s3:b1:w128:g16:gM:u6", "64x64:s13:b2:w64:k2:ef:p128",
                 "64x64:s13:b2:w64:k3:ef:p128:sw8", "64x128:s8:b2:w128:gM:sw16", "256x128:s3:b1:w128:kb16"):
        config = parse_config(text, 4096, 7168, 132)
        assert format_config(config) == text
        assert parse_config(format_config(config), 4096, 7168, 132) == config
    assert parse_config("128x256:gM", 4096, 7168, 132).raster_along_m is True
    assert parse_config("64x32:ef", 64, 2112, 132).evict_first_b is True
    assert parse_config("256x128:u6", 4096, 7168, 132).k_unroll == 6
    assert parse_config("64x64:p0", 64, 7168, 132).l2_promotion == 0
    assert parse_config("64x64:b2:sw16", 16, 7168, 132).swap_n == 16
    assert parse_config("256x128:kb4", 4096, 7168, 132).static_k_blocks == 4
    with pytest.raises(ValueError, match="static_k_blocks"):
        parse_config("64x64:b2:kb4", 4096, 7168, 132)
    with pytest.raises(ValueError, match="swap_n"):
        parse_config("64x96:sw8", 1, 7168, 132)
    with pytest.raises(ValueError, match="l2_promotion"):
        parse_config("64x64:p100", 64, 7168, 132)
    with pytest.raises(ValueError, match="k_unroll"):
        parse_config("64x64:b2:u6", 4096, 7168, 132)
    assert parse_config("128x128:mcB", 4096, 7168, 132).raster_along_m is True  # the pair shares B
    with pytest.raises(ValueError, match="raster_along_m must be False with multicast of A"):
        parse_config("256x128:mcA:gM", 4096, 7168, 132)
    with pytest.raises(ValueError, match="unknown option"):
        parse_config("256x128:gX", 4096, 7168, 132)
