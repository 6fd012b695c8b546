"""deep_tile.casts.quant: FP8 casts against an independent float64 definition (CPU), CUDA vs CPU bitwise (GPU)."""
import math

import pytest
import torch

from deep_tile.common import ceil_div
from deep_tile.casts.quant_impl import per_block_cast_torch, per_token_cast_torch
from deep_tile.casts.quant import (
    dequantize_per_block,
    dequantize_per_token,
    per_block_cast_to_fp8,
    per_token_cast_to_fp8,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOKEN_SHAPES = [(1, 128), (7, 144), (3, 16), (129, 7168 // 4), (2, 384)]
BLOCK_SHAPES = [(136, 144), (128, 128), (8, 16), (257, 300)]


def _expected_amax64(x, rows_per_group):
    """float64 amax per (rows_per_group x 128) group, by explicit slicing."""
    n, k = x.shape
    x64 = x.double().abs()
    out = torch.empty(ceil_div(n, rows_per_group), ceil_div(k, 128), dtype=torch.float64)
    for p in range(out.shape[0]):
        for g in range(out.shape[1]):
            blk = x64[p * rows_per_group:(p + 1) * rows_per_group, g * 128:(g + 1) * 128]
            out[p, g] = max(blk.max().item(), 1e-4)
    return out


def _check_cast(x, q, s, rows_per_group):
    n, k = x.shape
    assert q.dtype == torch.float8_e4m3fn and q.shape == (n, k) and q.is_contiguous()
    assert s.dtype == torch.float32 and s.shape == (ceil_div(n, rows_per_group), ceil_div(k, 128))
    amax64 = _expected_amax64(x, rows_per_group)
    scale64 = amax64 / 448.0
    torch.testing.assert_close(s.double(), scale64, rtol=2 ** -23, atol=0)
    # dequantisation error: half an e4m3 ulp (2^-4 relative) in the normal range, half the
    # smallest subnormal step (2^-10 of the scale) below it; plus float32 rounding slack.
    s_full = scale64.repeat_interleave(rows_per_group, 0).repeat_interleave(128, 1)[:n, :k]
    deq = q.double() * s.double().repeat_interleave(rows_per_group, 0).repeat_interleave(128, 1)[:n, :k]
    x64 = x.double()
    bound = x64.abs() * 2 ** -4 * (1 + 1e-6) + s_full * 2 ** -10 * (1 + 1e-6)
    assert bool(((deq - x64).abs() <= bound).all())
    assert bool(torch.isfinite(q.float()).all())
    assert q.float().abs().max().item() <= 448.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", TOKEN_SHAPES)
def test_per_token_matches_float64_definition(shape, dtype):
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    q, s = per_token_cast_to_fp8(x)
    _check_cast(x, q, s, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BLOCK_SHAPES)
def test_per_block_matches_float64_definition(shape, dtype):
    w = (torch.randn(shape, generator=torch.Generator().manual_seed(2)) / 7).to(dtype)
    q, s = per_block_cast_to_fp8(w)
    _check_cast(w, q, s, 128)


def test_per_token_exact_formula_bytes():
    """q is exactly float8(float32(x) * (448 / amax)) with an IEEE float32 division, group by group."""
    x = torch.randn(7, 144, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(3))
    q, s = per_token_cast_to_fp8(x)
    for i in range(7):
        for g in range(2):
            seg = x[i, g * 128:(g + 1) * 128].float()
            amax = torch.clamp(seg.abs().max(), min=1e-4)
            inv = torch.div(torch.tensor(448.0), amax)
            expect = (seg * inv).to(torch.float8_e4m3fn)
            assert torch.equal(q[i, g * 128:(g + 1) * 128].view(torch.uint8), expect.view(torch.uint8))
            assert s[i, g].item() == torch.div(amax, torch.tensor(448.0)).item()


def test_amax_maps_to_448():
    x = torch.zeros(2, 256)
    x[0, 5], x[0, 200], x[1, 7] = -3.5, 0.25, 1e-6
    q, s = per_token_cast_to_fp8(x)
    assert q[0, 5].float().item() == -448.0 and q[0, 200].float().item() == 448.0
    assert q[1, 7].float().item() == pytest.approx(1e-6 * 448 / 1e-4, rel=2 ** -3)


def test_zero_groups_give_exact_zeros_and_positive_scale():
    x = torch.randn(3, 300)
    x[1] = 0
    x[:, 128:256] = 0
    q, s = per_token_cast_to_fp8(x)
    zero_scale = torch.tensor(1e-4, dtype=torch.float32) / 448.0
    assert torch.equal(q[1].view(torch.uint8), torch.zeros(300, dtype=torch.uint8))
    assert torch.equal(q[:, 128:256].view(torch.uint8), torch.zeros(3, 128, dtype=torch.uint8))
    assert (s > 0).all() and s[1, 0].item() == zero_scale.item() and s[0, 1].item() == zero_scale.item()

    w = torch.zeros(136, 144)
    qb, sb = per_block_cast_to_fp8(w)
    assert torch.equal(qb.view(torch.uint8), torch.zeros(136, 144, dtype=torch.uint8))
    assert (sb == zero_scale).all()


def test_tails_do_not_leak_between_blocks():
    """A large value in the 128-row tail block must not change the scale of the block above."""
    w = torch.ones(136, 144)
    w[130, 140] = 1000.0
    q, s = per_block_cast_to_fp8(w)
    assert s[0, 0].item() == s[0, 1].item() == s[1, 0].item() == pytest.approx(1 / 448)
    assert s[1, 1].item() == pytest.approx(1000 / 448)


def test_non_contiguous_input_matches_contiguous():
    base = torch.randn(300, 40)
    x = base.t()                                         # [40, 300], strides (1, 40)
    q1, s1 = per_token_cast_to_fp8(x)
    q2, s2 = per_token_cast_to_fp8(x.contiguous())
    assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s1, s2)


def test_input_not_modified():
    x = torch.randn(5, 130)
    before = x.clone()
    per_token_cast_to_fp8(x)
    per_block_cast_to_fp8(x)
    assert torch.equal(x, before)


@pytest.mark.parametrize("fn,arg", [(per_token_cast_to_fp8, "x"), (per_block_cast_to_fp8, "w")])
def test_empty_rows(fn, arg):
    q, s = fn(torch.empty(0, 300, dtype=torch.bfloat16))
    assert q.shape == (0, 300) and q.dtype == torch.float8_e4m3fn
    assert s.shape == (0, 3) and s.dtype == torch.float32


@pytest.mark.parametrize("fn,arg", [(per_token_cast_to_fp8, "x"), (per_block_cast_to_fp8, "w")])
@pytest.mark.parametrize(
    "bad,exc,words",
    [
        (torch.randn(128), ValueError, ["2-D", "1-D"]),
        (torch.randn(2, 2, 128), ValueError, ["2-D", "3-D"]),
        (torch.ones(2, 128, dtype=torch.int32), TypeError, ["float32", "torch.int32"]),
        (torch.ones(2, 128, dtype=torch.float64), TypeError, ["bfloat16", "torch.float64"]),
        (torch.ones(2, 128).to(torch.float8_e4m3fn), TypeError, ["float16", "float8_e4m3fn"]),
        (torch.ones(2, 0), ValueError, ["k >= 1", "(2, 0)"]),
        ([[1.0] * 128], TypeError, ["torch.Tensor", "list"]),
    ],
)
def test_bad_input_errors(fn, arg, bad, exc, words):
    with pytest.raises(exc) as info:
        fn(bad)
    msg = str(info.value)
    assert fn.__name__ in msg and f"{arg} must" in msg
    for word in words:
        assert word in msg


def test_dequantize_helpers():
    x = torch.randn(9, 200)
    q, s = per_token_cast_to_fp8(x)
    deq = dequantize_per_token(q, s)
    assert deq.dtype == torch.float32 and deq.shape == x.shape
    assert (deq - x).abs().max() <= x.abs().max() * 2 ** -4
    qb, sb = per_block_cast_to_fp8(x)
    deqb = dequantize_per_block(qb, sb)
    assert deqb.shape == x.shape and (deqb - x).abs().max() <= x.abs().max() * 2 ** -4
    with pytest.raises(ValueError, match="dequantize_per_token: s must have shape"):
        dequantize_per_token(q, s[:, :1])
    with pytest.raises(ValueError, match="dequantize_per_block: s must have shape"):
        dequantize_per_block(qb, s)


# ---------------------------------------------------------------------------------------------
# GPU: the CUDA cast kernels must reproduce the torch implementation bit for bit.

def _has_sm90():
    try:
        return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    except Exception:  # noqa: BLE001 -- broken driver counts as no GPU
        return False


needs_sm90 = pytest.mark.skipif(not _has_sm90(), reason="needs an sm_90 (Hopper) GPU")
GPU_SHAPES = [(1, 128), (7, 144), (129, 7168), (4096, 7168)]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("kind", ["token", "block"])
def test_cuda_cast_bitwise_equals_cpu(kind, shape, dtype):
    gen = torch.Generator().manual_seed(math.prod(shape))
    x = (torch.randn(shape, generator=gen) * 5).to(dtype)
    x[0, : min(shape[1], 128)] = 0                       # one zero group
    cuda_fn = per_token_cast_to_fp8 if kind == "token" else per_block_cast_to_fp8
    cpu_fn = per_token_cast_torch if kind == "token" else per_block_cast_torch
    q_gpu, s_gpu = cuda_fn(x.cuda())
    q_cpu, s_cpu = cpu_fn(x)
    assert q_gpu.is_cuda and q_gpu.dtype == torch.float8_e4m3fn and q_gpu.shape == q_cpu.shape
    assert s_gpu.dtype == torch.float32 and s_gpu.shape == s_cpu.shape
    assert torch.equal(s_gpu.cpu(), s_cpu)
    mismatch = (q_gpu.cpu().view(torch.uint8) != q_cpu.view(torch.uint8)).sum().item()
    assert mismatch == 0, f"{mismatch} fp8 bytes differ between CUDA and CPU casts"
