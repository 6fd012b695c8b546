"""deep_tile.reference.ref_fp8_gemm against an element-wise float64 definition."""
import pytest
import torch

from deep_tile.reference import ref_fp8_gemm
from deep_tile.testing.data import make_fp8_problem, to_tma_layout

SHAPES = [(1, 8, 16), (3, 136, 144), (5, 24, 128), (130, 260, 300), (0, 8, 16), (4, 0, 16)]


def _direct(a, a_scale, b, b_scale):
    """sum_k a[i,k] a_scale[i,k//128] b[j,k] b_scale[j//128,k//128] by gathering the scales."""
    m, k = a.shape
    n = b.shape[0]
    kg = torch.arange(k) // 128
    sa = a_scale.double()[:, kg]                                   # [m, k]
    sb = b_scale.double()[torch.arange(n) // 128][:, kg]           # [n, k]
    return torch.einsum("ik,jk->ij", a.double() * sa, b.double() * sb)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matches_direct_definition(m, n, k):
    a, sa, b, sb = make_fp8_problem(m, n, k, "cpu", seed=m * 1000 + n + k)
    out = ref_fp8_gemm(a, sa, b, sb)
    assert out.dtype == torch.float64 and out.shape == (m, n)
    torch.testing.assert_close(out, _direct(a, sa, b, sb), rtol=1e-12, atol=1e-12)


def test_tiny_loop():
    """A 2x3x130 problem against a plain Python triple loop."""
    a, sa, b, sb = make_fp8_problem(2, 3, 130, "cpu", seed=5)
    out = ref_fp8_gemm(a, sa, b, sb)
    for i in range(2):
        for j in range(3):
            acc = sum(
                a[i, kk].double().item() * sa[i, kk // 128].item() * b[j, kk].double().item() * sb[0, kk // 128].item()
                for kk in range(130)
            )
            assert out[i, j].item() == pytest.approx(acc, rel=1e-12, abs=1e-12)


def test_scale_layout_does_not_matter():
    a, sa, b, sb = make_fp8_problem(7, 136, 300, "cpu", seed=1)
    sa_tma = to_tma_layout(sa)
    assert sa_tma.stride() == (1, 8)
    torch.testing.assert_close(ref_fp8_gemm(a, sa_tma, b, sb), ref_fp8_gemm(a, sa, b, sb), rtol=0, atol=0)
    sb_t = sb.t().contiguous().t()                                 # column-major b_scale
    torch.testing.assert_close(ref_fp8_gemm(a, sa, b, sb_t), ref_fp8_gemm(a, sa, b, sb), rtol=0, atol=0)


def test_close_to_unquantised_product():
    x = torch.randn(64, 512, dtype=torch.float64)
    w = torch.randn(256, 512, dtype=torch.float64)
    from deep_tile.casts.quant import per_block_cast_to_fp8, per_token_cast_to_fp8

    a, sa = per_token_cast_to_fp8(x.float())
    b, sb = per_block_cast_to_fp8(w.float())
    out, exact = ref_fp8_gemm(a, sa, b, sb), x @ w.t()
    assert (out - exact).norm() / exact.norm() < 0.05


def test_inputs_not_modified():
    a, sa, b, sb = make_fp8_problem(5, 130, 200, "cpu", seed=3)
    copies = [t.clone() for t in (a, sa, b, sb)]
    ref_fp8_gemm(a, sa, b, sb)
    for t, c in zip((a, sa, b, sb), copies):
        assert torch.equal(t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t,
                           c.view(torch.uint8) if c.dtype == torch.float8_e4m3fn else c)


def test_float64_operands_not_modified():
    a = torch.randn(3, 130, dtype=torch.float64)
    b = torch.randn(4, 130, dtype=torch.float64)
    sa, sb = torch.full((3, 2), 2.0), torch.full((1, 2), 3.0)
    a0, b0 = a.clone(), b.clone()
    torch.testing.assert_close(ref_fp8_gemm(a, sa, b, sb), 6 * a0 @ b0.t())
    assert torch.equal(a, a0) and torch.equal(b, b0)


@pytest.mark.parametrize(
    "change,exc,words",
    [
        ({"a_scale": torch.ones(4, 3)}, ValueError, ["a_scale must have shape (4, 2)", "got (4, 3)"]),
        ({"b_scale": torch.ones(2, 2)}, ValueError, ["b_scale must have shape (1, 2)", "got (2, 2)"]),
        ({"b": torch.ones(8, 129)}, ValueError, ["b must have shape (n, k) with k = 200", "got (8, 129)"]),
        ({"a": torch.ones(4, 200, 1)}, ValueError, ["a must be 2-D"]),
        ({"a": torch.ones(4, 200, dtype=torch.int8)}, TypeError, ["a must have a floating dtype", "int8"]),
        ({"b_scale": [[1.0, 1.0]]}, TypeError, ["b_scale must be a torch.Tensor", "list"]),
        ({"a_scale": torch.ones(4, 2, device="meta")}, ValueError, ["one device", "meta"]),
    ],
)
def test_bad_input_errors(change, exc, words):
    args = {"a": torch.ones(4, 200), "a_scale": torch.ones(4, 2), "b": torch.ones(8, 200), "b_scale": torch.ones(1, 2)}
    args.update(change)
    with pytest.raises(exc) as info:
        ref_fp8_gemm(**args)
    msg = str(info.value)
    assert msg.startswith("ref_fp8_gemm:")
    for word in words:
        assert word in msg
