"""torch.ops.deep_tile: schemas, fake implementations (opcheck on meta and fake CUDA tensors),
torch.compile(fullgraph=True) tracing with no graph break, and the same errors as before the
ops existed. GPU tests (marker ``gpu``): compiled module and CUDA-graph replay on a Hopper GPU."""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

import deep_tile
from deep_tile import ops
from deep_tile.gemm.checks import check_fp8_gemm_args
from deep_tile.casts.quant_impl import per_block_cast_torch, per_token_cast_torch
from conftest import run_host_cases, run_python

M, N, K = 96, 256, 640


def operands(device, m=M, n=N, k=K):
    """(a, a_scale, b, b_scale) of an m x n x k problem on ``device`` (values irrelevant)."""
    g = -(-k // 128)
    return (torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device), torch.empty(m, g, device=device),
            torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device), torch.empty(-(-n // 128), g, device=device))


def test_schemas_are_registered():
    for name, schema in ops.SCHEMAS.items():
        op = getattr(torch.ops.deep_tile, name).default
        assert str(op._schema) == f"deep_tile::{schema}"
    assert ops.fp8_gemm_out._schema.arguments[-1].alias_info.is_write  # out is declared mutated


@pytest.mark.parametrize("device", ["meta", "fake-cuda"])
def test_opcheck_gemm(device):
    mode = FakeTensorMode() if device == "fake-cuda" else None
    with mode or torch.device("meta"):
        args = operands("cuda" if mode else "meta")
        out = torch.empty(M, N, dtype=torch.bfloat16, device=args[0].device)
        for op, call_args in ((ops.fp8_gemm, args), (ops.fp8_gemm_out, args + (out,))):
            result = torch.library.opcheck(op, call_args)
            assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("name", ["per_token_cast_to_fp8", "per_block_cast_to_fp8"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_opcheck_casts(name, device):
    x = torch.randn(130, 300).to(device)
    result = torch.library.opcheck(getattr(torch.ops.deep_tile, name).default, (x,))
    assert set(result.values()) == {"SUCCESS"}, result


def test_fake_shapes_and_strides():
    with FakeTensorMode():
        a, a_scale, b, b_scale = operands("cuda")
        out = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
        assert out.shape == (M, N) and out.dtype == torch.bfloat16 and out.stride() == (N, 1)
        assert out.device.type == "cuda"
        x = torch.empty(300, 1000, dtype=torch.bfloat16, device="cuda")
        q, s = deep_tile.per_token_cast_to_fp8(x)
        assert (q.shape, q.dtype, s.shape, s.dtype) == ((300, 1000), torch.float8_e4m3fn, (300, 8), torch.float32)
        q, s = deep_tile.per_block_cast_to_fp8(x)
        assert (q.shape, s.shape) == ((300, 1000), (3, 8))


class QuantLinear(torch.nn.Module):
    """Quantise activations, then both GEMM ops against pre-quantised weights."""

    def __init__(self, b, b_scale):
        super().__init__()
        self.b, self.b_scale = b, b_scale

    def forward(self, x):
        a, a_scale = deep_tile.per_token_cast_to_fp8(x)
        out = torch.empty(x.shape[0], self.b.shape[0], dtype=torch.bfloat16, device=x.device)
        deep_tile.fp8_gemm(a, a_scale, self.b, self.b_scale, out)
        direct = torch.ops.deep_tile.fp8_gemm(a, a_scale, self.b, self.b_scale)
        return out + direct


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_traces_without_graph_break(backend):
    _, _, b, b_scale = operands("meta")
    module = QuantLinear(b, b_scale)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(module, fullgraph=True, backend=counter)
    y = compiled(torch.empty(M, K, dtype=torch.bfloat16, device="meta"))
    assert y.shape == (M, N) and y.dtype == torch.bfloat16
    assert counter.frame_count == 1  # one graph: fullgraph=True would have raised on a break
    names = {str(node.target) for graph in ([counter.graphs[0]] if hasattr(counter, "graphs") else [])
             for node in graph.graph.nodes}
    assert not names or any("deep_tile" in n for n in names)


def test_compile_with_fake_cuda_tensors():
    with FakeTensorMode(allow_non_fake_inputs=True):
        _, _, b, b_scale = operands("cuda")
        x = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
    gm, _ = torch._dynamo.export(QuantLinear(b, b_scale), aten_graph=False)(x)
    targets = [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]
    assert any("deep_tile.fp8_gemm_out" in t for t in targets) and any("deep_tile.fp8_gemm" in t for t in targets)


def check_message(a, a_scale, b, b_scale, out):
    """The type and message of deep_tile.gemm.checks for these arguments (CPU tensors)."""
    with pytest.raises((TypeError, ValueError)) as info:
        check_fp8_gemm_args(a, a_scale, b, b_scale, out)
    return info.type, str(info.value)


def bad_cases():
    """(label, args, out) of calls fp8_gemm rejects, from every family of its checks."""
    a, a_scale, b, b_scale = operands("cpu")
    out = torch.empty(M, N, dtype=torch.bfloat16)
    return [
        ("cpu", (a, a_scale, b, b_scale), out),
        ("cpu_no_out", (a, a_scale, b, b_scale), None),
        ("a_dtype", (a.float(), a_scale, b, b_scale), out),
        ("a_list", ([1], a_scale, b, b_scale), None),
        ("b_none", (a, a_scale, None, b_scale), None),
        ("out_int", (a, a_scale, b, b_scale), 5),
        ("a_scale_shape", (a, a_scale[:, :2], b, b_scale), out),
        ("b_scale_3d", (a, a_scale, b, b_scale[None]), out),
        ("k_mismatch", (a, a_scale, b[:, :512], b_scale), out),
        ("n_not_multiple", (a, a_scale, b[:250], b_scale), None),
        ("a_stride", (torch.empty(M, K + 8, dtype=torch.float8_e4m3fn)[:, :K], a_scale, b, b_scale), out),
        ("out_shape", (a, a_scale, b, b_scale), out[:, :128]),
    ]  # an out of another dtype goes to the output variants: tests/test_training.py checks its errors


@pytest.mark.parametrize("label,args,out", bad_cases(), ids=[c[0] for c in bad_cases()])
def test_public_errors_are_the_checks_errors(label, args, out):
    expected = check_message(*args, out)
    with pytest.raises((TypeError, ValueError)) as info:
        deep_tile.fp8_gemm(*args, out=out)
    assert (info.type, str(info.value)) == expected


def schema_callable_cases() -> list:
    """The bad cases the op's schema can express: every operand a tensor (b too), out a tensor or None."""
    return [c for c in bad_cases()
            if all(isinstance(x, torch.Tensor) or x is None for x in c[1]) and c[1][2] is not None
            and (c[2] is None or isinstance(c[2], torch.Tensor))]


@pytest.mark.parametrize("label,args,out", schema_callable_cases(), ids=[c[0] for c in schema_callable_cases()])
def test_op_errors_are_the_checks_errors(label, args, out):
    expected = check_message(*args, out)
    with pytest.raises((TypeError, ValueError)) as info:
        if out is None:
            torch.ops.deep_tile.fp8_gemm(*args)
        else:
            torch.ops.deep_tile.fp8_gemm_out(*args, out)
    assert (info.type, str(info.value)) == expected


def test_fake_implementation_raises_the_same_shape_errors():
    with FakeTensorMode():
        a, a_scale, b, b_scale = operands("cuda")
        with pytest.raises(ValueError, match=r"^fp8_gemm: a_scale must have shape \(m, ceil\(k/128\)\)"):
            torch.ops.deep_tile.fp8_gemm(a, torch.empty(M, 1, device="cuda"), b, b_scale)
        with pytest.raises(TypeError, match=r"^fp8_gemm: a must have dtype torch.float8_e4m3fn"):
            torch.ops.deep_tile.fp8_gemm(a_scale, a_scale, b, b_scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cast_ops_on_cpu_equal_the_torch_casts(dtype):
    x = (torch.randn(70, 390, generator=torch.Generator().manual_seed(1)) * 5).to(dtype)
    for public, reference in ((deep_tile.per_token_cast_to_fp8, per_token_cast_torch),
                              (deep_tile.per_block_cast_to_fp8, per_block_cast_torch)):
        (q, s), (q_ref, s_ref) = public(x), reference(x)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)


def test_cast_errors_are_unchanged():
    with pytest.raises(TypeError, match=r"^per_token_cast_to_fp8: x must be a torch.Tensor; got list\.$"):
        deep_tile.per_token_cast_to_fp8([1.0])
    with pytest.raises(ValueError, match=r"^per_block_cast_to_fp8: w must be 2-D \[rows, k\]; got 1-D"):
        deep_tile.per_block_cast_to_fp8(torch.ones(4))
    with pytest.raises(ValueError, match=r"^per_token_cast_to_fp8: x must be 2-D"):
        torch.ops.deep_tile.per_token_cast_to_fp8(torch.ones(4))


def test_import_registers_the_ops_without_cuda():
    code = ("import torch, deep_tile, sys\n"
            "assert hasattr(torch.ops.deep_tile, 'fp8_gemm_out')\n"
            "assert not torch.cuda.is_initialized()\n"
            "print(sorted(n for n in sys.modules if n.startswith('deep_tile.select')))\n")
    result = run_python(code, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"  # the selector is not imported by `import deep_tile`


@pytest.mark.gpu
def test_compiled_module_on_gpu():
    for r in run_host_cases("compiled_module", [dict(m=64, n=2112, k=7168), dict(m=200, n=512, k=1040, seed=1)]):
        assert r["frames"] == 1, r
        assert r["equal"] and r["cudagraph_equal"], r


@pytest.mark.gpu
def test_ops_in_cuda_graph_replay_new_data():
    for r in run_host_cases("cuda_graph_replay", [dict(m=64, n=2112, k=7168), dict(m=129, n=384, k=272, seed=2)]):
        assert r["out_ok"] and r["new_ok"] and r["nan"] == 0, r
