"""deep_tile.nn: the FP8 linear layer's checks, its wiring of casts and GEMMs (CPU, with the GEMMs
replaced by the float64 references), and on a GPU the real kernels against float64."""
import pytest
import torch

import deep_tile
import deep_tile.gemm
from conftest import run_child_cases
from deep_tile.nn import linear as dnn
from deep_tile.reference import ref_fp8_gemm, ref_fp8_gemm_1d1d
from deep_tile.testing.linear_check import compare, expected_linear


def _reference_gemms(monkeypatch):
    """Replace deep_tile's GEMMs by their float64 references (CPU): what the layer passes is then
    what is checked."""
    def fp8_gemm(a, a_scale, b, b_scale, out=None, **kwargs):
        assert not kwargs and out is None
        return ref_fp8_gemm(a, a_scale, b, b_scale).to(torch.bfloat16)

    def fp8_gemm_1d1d(a, a_scale, b, b_scale, out=None, *, c=None, out_dtype=None):
        result = ref_fp8_gemm_1d1d(a, a_scale, b, b_scale, c).float()
        if out is None:
            # without a main gradient the kernel writes the weight's dtype itself
            assert out_dtype == torch.bfloat16
            return result.to(out_dtype)
        out.copy_(result)
        return out

    monkeypatch.setattr(deep_tile.gemm, "fp8_gemm", fp8_gemm)
    monkeypatch.setattr(deep_tile.gemm, "fp8_gemm_1d1d", fp8_gemm_1d1d)


@pytest.mark.parametrize("tokens,k,n,main_grad", [(100, 272, 144, True), (256, 128, 256, False), (1, 16, 32, True)])
def test_linear_wiring_matches_float64(monkeypatch, tokens, k, n, main_grad):
    _reference_gemms(monkeypatch)
    gen = torch.Generator().manual_seed(tokens + k + n)
    x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16).requires_grad_(True)
    weight = torch.nn.Parameter(torch.randn(n, k, generator=gen).to(torch.bfloat16))
    start = torch.randn(n, k, generator=gen)
    if main_grad:
        weight.main_grad = start.clone()
    dy = torch.randn(tokens, n, generator=gen).to(torch.bfloat16)
    y = dnn._Fp8LinearFunction.apply(x, weight)
    y.backward(dy)
    want = expected_linear(x.detach(), weight.detach(), dy)
    assert y.dtype == torch.bfloat16 and y.shape == (tokens, n)
    assert compare(y, want["y"])["max_rel"] < 1e-2
    assert compare(x.grad, want["dx"])["max_rel"] < 1e-2
    if main_grad:
        assert weight.grad is None
        assert compare(weight.main_grad - start, want["dw"])["max_rel"] < 1e-5  # FP32 accumulation
    else:
        assert weight.grad.dtype == torch.bfloat16 and compare(weight.grad, want["dw"])["max_rel"] < 1e-2
    # and the quantised math is close to the unquantised product (the recipe's error, not a bug)
    exact = x.detach().double() @ weight.detach().double().t()
    assert compare(y, exact)["max_rel"] < 0.1


def test_linear_checks_its_arguments():
    x = torch.zeros(4, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16 CUDA tensor"):
        dnn.fp8_linear(x, torch.zeros(16, 32, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="torch.Tensor"):
        dnn.fp8_linear(x, [1, 2])
    with pytest.raises(ValueError, match="multiples of 16"):
        dnn.Fp8Linear(24, 32)
    layer = dnn.Fp8Linear(32, 16)
    assert layer.weight.main_grad.dtype == torch.float32 and layer.weight.main_grad.shape == (16, 32)
    assert dnn.Fp8Linear(32, 16, main_grad=False).weight.__dict__.get("main_grad") is None


@pytest.mark.gpu
def test_gpu_linear_against_float64():
    results = run_child_cases("gpu_nn_cases.py", "linear", [
        dict(tokens=4096, k=7168, n=2048), dict(tokens=1000, k=2048, n=7168), dict(tokens=1, k=512, n=256),
        dict(tokens=129, k=7168, n=576, main_grad=False), dict(tokens=127, k=256, n=128),
        # under torch.compile(fullgraph=True): the casts and GEMMs are custom ops, no graph break
        dict(tokens=1000, k=2048, n=512, main_grad=False, compiled=True),
        dict(tokens=1000, k=2048, n=512, main_grad=True, compiled=True),
    ], timeout=600)
    bad = [f"{r['case']}: y {r['y']}, dx {r['dx']}, dw {r['dw']}" for r in results if not r["ok"]]
    assert not bad, "\n".join(bad)


def _reference_grouped_gemms(monkeypatch):
    """The experts layer's M-grouped and K-grouped GEMMs replaced by their float64 references (CPU)."""
    from deep_tile.gemm import grouped, k_grouped
    from deep_tile.reference import ref_k_grouped_fp8_gemm_1d1d, ref_m_grouped_fp8_gemm_offsets

    def offsets_gemm(a, a_scale, b, b_scale, offsets, out=None):
        assert out is None
        return ref_m_grouped_fp8_gemm_offsets(a, a_scale, b, b_scale, offsets).to(torch.bfloat16)

    def k_grouped_gemm(a, a_scale, b, b_scale, group_sizes, out=None, *, c=None, out_dtype=None):
        result = ref_k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, c).float()
        if out is None:
            assert out_dtype == torch.bfloat16  # the weights' dtype, written by the kernel
            return result.to(out_dtype)
        out.copy_(result)
        return out

    monkeypatch.setattr(grouped, "m_grouped_fp8_gemm_offsets", offsets_gemm)
    monkeypatch.setattr(k_grouped, "k_grouped_fp8_gemm_1d1d", k_grouped_gemm)


@pytest.mark.parametrize("sizes,main_grad", [([100, 0, 3, 153], True), ([1, 127], False)])
def test_experts_wiring_matches_float64(monkeypatch, sizes, main_grad):
    from deep_tile.nn import experts
    from deep_tile.testing.linear_check import expected_experts

    _reference_grouped_gemms(monkeypatch)
    gen = torch.Generator().manual_seed(sum(sizes))
    e, h, inter, tokens = len(sizes), 256, 128, sum(sizes)
    x = torch.randn(tokens, h, generator=gen).to(torch.bfloat16).requires_grad_(True)
    w13 = torch.nn.Parameter((torch.randn(e, 2 * inter, h, generator=gen) / 16).to(torch.bfloat16))
    w2 = torch.nn.Parameter((torch.randn(e, h, inter, generator=gen) / 11).to(torch.bfloat16))
    starts = {}
    if main_grad:
        for name, w in (("w13", w13), ("w2", w2)):
            starts[name] = torch.randn(w.shape, generator=gen)
            w.main_grad = starts[name].clone()
    dy = torch.randn(tokens, h, generator=gen).to(torch.bfloat16)
    sizes_t = torch.tensor(sizes, dtype=torch.int32)
    offsets = torch.tensor([0] + [sum(sizes[:i + 1]) for i in range(e)], dtype=torch.int32)
    y = experts._Fp8ExpertsFunction.apply(x, sizes_t, offsets, w13, w2)
    y.backward(dy)
    want = expected_experts(x.detach(), sizes, w13.detach(), w2.detach(), dy)
    for got, name in ((y, "y"), (x.grad, "dx")):
        metrics = compare(got, want[name])
        assert metrics["diff"] < 1e-3 and metrics["max_rel"] < 2e-2, (name, metrics)
    for w, name in ((w13, "w13"), (w2, "w2")):
        got = w.main_grad - starts[name] if main_grad else w.grad
        metrics = compare(got, want["d" + name])
        assert metrics["diff"] < 1e-3 and metrics["max_rel"] < 2e-2, (name, metrics)
        assert (w.grad is None) == main_grad


@pytest.mark.gpu
def test_gpu_experts_against_float64():
    results = run_child_cases("gpu_nn_cases.py", "experts", [
        dict(sizes=[1000, 0, 129, 1, 2966], hidden=1024, inter=256),
        dict(sizes=[128] * 8, hidden=7168, inter=2048, main_grad=False),
        dict(sizes=[127, 1], hidden=256, inter=128),
    ], timeout=600)
    bad = [f"{r['case']}: " + ", ".join(f"{k} {r[k]}" for k in ("y", "dx", "dw13", "dw2")) for r in results if not r["ok"]]
    assert not bad, "\n".join(bad)


@pytest.mark.gpu
def test_gpu_swiglu_kernels_match_the_torch_math():
    results = run_child_cases("gpu_nn_cases.py", "swiglu", [
        dict(rows=4099, inter=2048), dict(rows=1, inter=8), dict(rows=300, inter=136),
    ], timeout=300)
    bad = [f"{r['case']}: forward {r['forward']}, backward {r['backward']}" for r in results if not r["ok"]]
    assert not bad, "\n".join(bad)


def test_swiglu_on_the_cpu_is_the_reference_and_checks_its_arguments():
    from deep_tile.casts import swiglu as sw

    h13 = torch.randn(5, 32).to(torch.bfloat16)
    dh = torch.randn(5, 16).to(torch.bfloat16)
    assert torch.equal(sw.swiglu(h13), sw.swiglu_reference(h13))
    assert torch.equal(sw.swiglu_backward(h13, dh), sw.swiglu_backward_reference(h13, dh))
    gate, up = h13.double().chunk(2, dim=-1)
    assert torch.allclose(sw.swiglu(h13).double(), gate * torch.sigmoid(gate) * up, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="multiple of 8"):
        sw.swiglu(torch.zeros(5, 12, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bf16"):
        sw.swiglu(h13.float())
    with pytest.raises(ValueError, match="dh must be"):
        sw.swiglu_backward(h13, dh[:, :8].contiguous())


def test_swiglu_launches_its_contract_geometry(monkeypatch):
    """The host side's launch (deep_tile.gemm.launch.launch_small_kernel, shared with the MoE layout
    kernels): the contract's symbol, grid, block and parameters, on the device's current stream."""
    import contextlib
    import types

    from deep_tile.gemm import launch
    from deep_tile.kernels import swiglu as contract

    calls = []

    class FakeKernel:
        def launch(self, **kwargs):
            calls.append(kwargs)

    monkeypatch.setattr(launch, "get_kernel", lambda entry, defines, symbol: calls.append((entry, defines, symbol))
                        or FakeKernel())
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: types.SimpleNamespace(cuda_stream=77))
    device = torch.device("cuda", 0)
    launch.launch_small_kernel(contract.ENTRY, contract.FORWARD_SYMBOL, contract.FORWARD_ARGUMENT_KINDS,
                               (1024, 2048, 300, 136), contract.grid(300, 136), contract.BLOCK_THREADS, device)
    assert calls[0] == ("swiglu", {}, "deep_tile_swiglu_forward")
    kwargs = calls[1]
    assert (kwargs["grid"], kwargs["block"], kwargs["smem_bytes"], kwargs["stream"], kwargs["device"]) == \
        (20, 256, 0, 77, 0)
    from deep_tile.pdl import get_pdl

    assert kwargs["pdl"] == get_pdl() and "cluster" not in kwargs
