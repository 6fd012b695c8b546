"""Dynamic shapes: the custom ops keep M (the GEMMs' row count, the casts' row count) symbolic.

torch.compile(dynamic=True, fullgraph=True) builds one graph for every M, torch.export accepts a
dynamic ``Dim`` for M, and bad shapes keep deep_tile's messages when traced. The CPU tests use
meta tensors (the fake implementations run, no kernel does); the GPU test (marker ``gpu``) runs
the compiled GEMM over several M on a Hopper GPU against the float64 reference.
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.export import Dim, export
from torch.fx.experimental import _config as shape_config
from torch.fx.experimental.proxy_tensor import make_fx

from deep_tile import ops  # noqa: F401 (registers torch.ops.deep_tile)
from deep_tile.gemm.checks import check_fp8_gemm_args
from deep_tile.common import SCALE_GROUP, align4, ceil_div
from conftest import DIFF_TOL, REL_TOL, run_host_cases

# The weight's shape (a graph is specialised to it). No size here equals the first M of a test:
# Dynamo's duck sizing gives equal sizes of a first call one symbol, and the check of the weight's
# scale rows (3) would then specialise M as well.
N, K = 384, 640
KB = ceil_div(K, SCALE_GROUP)
CAST_K = 300  # the casts' column count
CT_K = 304  # the fused cast-transpose's (a multiple of 16)

MS = list(range(2, 65)) + [129, 300, 1000]  # Dynamo specialises sizes 0 and 1 of backed inputs
UNBACKED_MS = [0, 1, 2, 7, 64, 129, 1000]

FP8 = torch.float8_e4m3fn
OPS = torch.ops.deep_tile


def weights():
    """(b, b_scale) of the N x K weight, on the meta device."""
    return torch.empty(N, K, dtype=FP8, device="meta"), torch.empty(ceil_div(N, SCALE_GROUP), KB, device="meta")


def a_operands(m: int, layout: str = "row"):
    """(a, a_scale) of m rows on the meta device; a_scale row-major or TMA-aligned column-major."""
    a = torch.empty(m, K, dtype=FP8, device="meta")
    if layout == "row":
        return a, torch.empty(m, KB, device="meta")
    return a, torch.empty(KB, align4(m), device="meta").t()[:m]  # strides (1, align4(m)): M-dependent


B, B_SCALE = weights()


def gemm(a, a_scale):
    """fp8_gemm against the meta weight."""
    return OPS.fp8_gemm(a, a_scale, B, B_SCALE)


def gemm_out(a, a_scale, out):
    """fp8_gemm_out against the meta weight; returns out."""
    OPS.fp8_gemm_out(a, a_scale, B, B_SCALE, out)
    return out


def per_token(x):
    """The per-token cast op."""
    return OPS.per_token_cast_to_fp8(x)


def per_block(w):
    """The per-block cast op."""
    return OPS.per_block_cast_to_fp8(w)


def token_transpose(x):
    """The fused activation cast with its transposed copy (the training layers' cast)."""
    return OPS.per_token_cast_transpose_to_fp8(x, True, False)


def token_transpose_grouped(x, offsets):
    """The grouped activation cast (the experts layer's): 4 row groups, whatever the rows."""
    return OPS.per_token_cast_transpose_grouped_to_fp8(x, offsets, False)


def call_args(op: str, m: int, layout: str) -> tuple:
    """The arguments of ``op`` (a function above) for m rows."""
    if op in ("gemm", "gemm_out"):
        args = a_operands(m, layout)
        return args + (torch.empty(m, N, dtype=torch.bfloat16, device="meta"),) if op == "gemm_out" else args
    cols = CT_K if op.startswith("token_transpose") else CAST_K
    x = torch.empty(m, cols, dtype=torch.bfloat16, device="meta")
    return (x, torch.empty(5, dtype=torch.int32, device="meta")) if op == "token_transpose_grouped" else (x,)


def expected_rows(op: str, m: int) -> tuple:
    """The first dimension of each output of ``op`` for m rows."""
    return {"gemm": (m,), "gemm_out": (m,), "per_token": (m, m), "per_block": (m, ceil_div(m, SCALE_GROUP)),
            "token_transpose": (m, m, CT_K, CT_K), "token_transpose_grouped": (m, m, CT_K, CT_K)}[op]


def run_compiled(op: str, ms: list, backend: str, layout: str = "row", unbacked: bool = False) -> int:
    """Call ``torch.compile(op, dynamic=True, fullgraph=True)`` for every m; return the frame count.

    ``unbacked``: M marked unbacked (``mark_unbacked``) in every input, so any guard on it (a branch
    on its value, an int() of it) would raise. The recompile limit is lifted so that a count above
    one shows how many graphs were built rather than failing at the limit."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(globals()[op], dynamic=True, fullgraph=True, backend=counter)
    with torch._dynamo.config.patch(recompile_limit=1000, accumulated_recompile_limit=10000):
        for m in ms:
            args = call_args(op, m, layout)
            if unbacked:
                for arg in args:
                    torch._dynamo.decorators.mark_unbacked(arg, 0)
            result = compiled(*args)
            outputs = result if isinstance(result, tuple) else (result,)
            assert tuple(t.shape[0] for t in outputs) == expected_rows(op, m), (op, m)
    torch._dynamo.reset()
    return counter.frame_count


COMPILE_CASES = [("gemm", "row"), ("gemm", "tma"), ("gemm_out", "row"), ("gemm_out", "tma"),
                 ("per_token", "row"), ("per_block", "row"), ("token_transpose", "row"),
                 ("token_transpose_grouped", "row")]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("op,layout", COMPILE_CASES, ids=[f"{op}-{layout}" for op, layout in COMPILE_CASES])
def test_compile_dynamic_m_builds_one_graph(op, layout, backend):
    """M = 2..64, 129, 300, 1000 (backed sizes): one graph, M-dependent a_scale strides included."""
    ms = MS
    if op in ("per_block", "token_transpose", "token_transpose_grouped") and backend == "aot_eager":
        # AOTAutograd's tensor metadata asks whether the scale's ceil(rows/128) rows (columns of the
        # transposed copy's scales) are 1: a guard torch adds (not the fake implementation), so M up
        # to 128 here; see the size-oblivious test.
        ms = [m for m in MS if m <= SCALE_GROUP]
    assert run_compiled(op, ms, backend, layout) == 1


@pytest.mark.parametrize("op", ["per_block", "token_transpose"])
def test_per_block_rows_cross_128_in_one_graph_when_size_oblivious(op):
    """With torch's size-oblivious option, the rows cross 128 in one graph under AOTAutograd."""
    with shape_config.patch(backed_size_oblivious=True):
        assert run_compiled(op, MS, "aot_eager") == 1


@pytest.mark.parametrize("op", ["gemm", "gemm_out", "per_token", "per_block", "token_transpose"])
def test_compile_unbacked_m_builds_one_graph(op):
    """M = 0 and 1 included: the fake implementations add no guard on M at all."""
    assert run_compiled(op, UNBACKED_MS, "aot_eager", unbacked=True) == 1


class QuantGemm(torch.nn.Module):
    """Quantise x [m, K], then both GEMM ops against a meta weight."""

    def __init__(self):
        super().__init__()
        b, b_scale = weights()
        self.register_buffer("b", b)
        self.register_buffer("b_scale", b_scale)

    def forward(self, x):
        a, a_scale = OPS.per_token_cast_to_fp8(x)
        out = torch.empty(x.shape[0], N, dtype=torch.bfloat16, device=x.device)
        OPS.fp8_gemm_out(a, a_scale, self.b, self.b_scale, out)
        return OPS.fp8_gemm(a, a_scale, self.b, self.b_scale), out, a_scale


def output_shapes(program) -> list:
    """The shapes (fake values) of an exported program's outputs."""
    outputs = next(node for node in program.graph.nodes if node.op == "output").args[0]
    return [node.meta["val"].shape for node in outputs]


def is_symbolic(size) -> bool:
    """Whether a size is a SymInt with a free symbol (not one specialised to a constant)."""
    return isinstance(size, torch.SymInt) and bool(size.node.expr.free_symbols)


def test_export_with_dynamic_m():
    """Export with Dim("m"): outputs keep a symbolic first dimension; the program runs for any m."""
    x = torch.empty(96, K, dtype=torch.bfloat16, device="meta")
    program = export(QuantGemm(), (x,), dynamic_shapes={"x": {0: Dim("m")}}, strict=False)
    shapes = output_shapes(program)
    assert [tuple(s[1:]) for s in shapes] == [(N,), (N,), (KB,)]
    assert all(is_symbolic(s[0]) for s in shapes), shapes
    assert len({str(s[0]) for s in shapes}) == 1  # the one m
    for m in (2, 7, 1000):  # the exported program serves any m
        y, out, a_scale = program.module()(torch.empty(m, K, dtype=torch.bfloat16, device="meta"))
        assert y.shape == out.shape == (m, N) and a_scale.shape == (m, KB)


class Casts(torch.nn.Module):
    """Both casts: (q, s) of x, then (q, s) of w."""

    def forward(self, x, w):
        return OPS.per_token_cast_to_fp8(x) + OPS.per_block_cast_to_fp8(w)


def test_export_casts_with_dynamic_rows():
    """Export both casts with dynamic rows: symbolic first dimensions; the program runs for any rows."""
    x = torch.empty(96, CAST_K, device="meta")
    w = torch.empty(300, CAST_K, device="meta")
    # backed_size_oblivious: otherwise torch's own metadata pass (not the fake implementation)
    # guards on whether per_block's ceil(rows/128) scale rows are 1, and export refuses the Dim.
    with shape_config.patch(backed_size_oblivious=True):
        program = export(Casts(), (x, w), dynamic_shapes={"x": {0: Dim("m")}, "w": {0: Dim("n")}}, strict=False)
    shapes = output_shapes(program)
    assert all(is_symbolic(s[0]) for s in shapes), shapes
    q, s, qw, sw = program.module()(torch.empty(7, CAST_K, device="meta"), torch.empty(1000, CAST_K, device="meta"))
    assert (q.shape[0], s.shape[0], qw.shape[0], sw.shape[0]) == (7, 7, 1000, 8)


# ---- bad shapes keep their messages when traced with a symbolic M -------------------------------

def concrete_message(a_shape, a_scale_shape, out_shape=None) -> str:
    """deep_tile's message for CPU tensors of these shapes (the eager path)."""
    b, b_scale = (torch.empty(t.shape, dtype=t.dtype) for t in weights())
    out = None if out_shape is None else torch.empty(out_shape, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as info:
        check_fp8_gemm_args(torch.empty(a_shape, dtype=FP8), torch.empty(a_scale_shape), b, b_scale, out)
    return str(info.value)


BAD_SHAPES = [  # (label, a_scale shape, out shape) for a of shape (96, K)
    ("a_scale_rows", (95, KB), None),
    ("a_scale_cols", (96, KB + 1), None),
    ("out_rows", (96, KB), (95, N)),
    ("out_cols", (96, KB), (96, N - 8)),
]


def traced_args(a_scale_shape, out_shape):
    """Meta arguments of fp8_gemm (or fp8_gemm_out, with out) for a of shape (96, K)."""
    b, b_scale = weights()
    args = [torch.empty(96, K, dtype=FP8, device="meta"), torch.empty(a_scale_shape, device="meta"), b, b_scale]
    if out_shape is not None:
        args.append(torch.empty(out_shape, dtype=torch.bfloat16, device="meta"))
    return args


def call_op(*args):
    """fp8_gemm for four arguments, fp8_gemm_out for five."""
    return OPS.fp8_gemm(*args) if len(args) == 4 else OPS.fp8_gemm_out(*args)


@pytest.mark.parametrize("label,a_scale_shape,out_shape", BAD_SHAPES, ids=[c[0] for c in BAD_SHAPES])
def test_symbolic_trace_raises_the_same_message(label, a_scale_shape, out_shape):
    """make_fx(tracing_mode="symbolic"): the eager ValueError and message, sizes as traced."""
    expected = concrete_message((96, K), a_scale_shape, out_shape)
    with pytest.raises(ValueError) as info:
        make_fx(call_op, tracing_mode="symbolic")(*traced_args(a_scale_shape, out_shape))
    assert str(info.value) == expected


@pytest.mark.parametrize("label,a_scale_shape,out_shape", BAD_SHAPES[:3], ids=[c[0] for c in BAD_SHAPES[:3]])
def test_compile_raises_the_same_message(label, a_scale_shape, out_shape):
    """torch.compile(dynamic=True): Dynamo's error carries the eager ValueError and message."""
    expected = concrete_message((96, K), a_scale_shape, out_shape)
    torch._dynamo.reset()
    compiled = torch.compile(call_op, dynamic=True, fullgraph=True, backend=CompileCounterWithBackend("eager"))
    with pytest.raises(Exception) as info:  # Dynamo wraps it: "... got ValueError('<message>')"
        compiled(*traced_args(a_scale_shape, out_shape))
    assert repr(ValueError(expected)) in str(info.value), str(info.value)
    torch._dynamo.reset()


def test_symbolic_cast_errors_keep_their_messages():
    """The casts' input errors under a symbolic trace: the eager messages."""
    with pytest.raises(ValueError, match=r"^per_token_cast_to_fp8: x must have at least one column \(k >= 1\); "
                                         r"got shape \(3, 0\)\.$"):
        make_fx(per_token, tracing_mode="symbolic")(torch.empty(3, 0, device="meta"))
    with pytest.raises(ValueError, match=r"^per_block_cast_to_fp8: w must be 2-D \[rows, k\]; got 3-D of shape "
                                         r"\(2, 3, 4\)\.$"):
        make_fx(per_block, tracing_mode="symbolic")(torch.empty(2, 3, 4, device="meta"))


# ---- GPU: the compiled GEMM over several M -------------------------------------------------------

@pytest.mark.gpu
def test_compiled_gemm_with_dynamic_m_on_gpu():
    """Compiled (inductor, dynamic=True) fp8_gemm over several m on the GPU: one graph, results
    within tolerance of the float64 reference and bitwise equal to eager (gpu_host_cases.py)."""
    # The first m of a case equals no other size or stride of that call (Dynamo's duck sizing would
    # relate them: m = ceil(k/128), or m a multiple of 4, the TMA a_scale's column stride, cost a
    # second graph). The last case shares the graph with m = 1 (see compiled_dynamic_m).
    cases = [dict(ms=[7, 64, 130, 1000], n=2112, k=7168),
             dict(ms=[10, 100, 257], n=512, k=1040, seed=1),
             dict(ms=[1, 7, 64, 130, 1000], n=2112, k=7168, seed=2, size_oblivious=True)]
    for case in run_host_cases("compiled_dynamic_m", cases):
        assert case["frames"] == 1, case
        for r in case["results"]:
            assert r["shape"] == [r["m"], case["n"]] and r["equal_eager"], (case["n"], case["k"], r)
            for metrics in (r["out"], r["new"]):
                assert metrics["nan"] == 0 and metrics["diff"] < DIFF_TOL and metrics["rel"] < REL_TOL, r
