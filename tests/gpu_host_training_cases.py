"""GPU checks of the training GEMMs on the native host path (the output variants, the 1D1D GEMM,
the K-grouped GEMM), run in a child process by tests/test_native.py (conftest.run_child_cases;
the protocol of tests/gpu_cases.py).

Each case draws fresh random data, runs the Python host path (deep_tile.gemm.launch.run_acc /
run_k_grouped) and the native one (the custom ops, the public function, the extension directly,
repeats) on NaN-poisoned outputs -- or, accumulating in place, on copies of one random C -- and
reports whether they are bitwise equal, whether every call took the native path, and the error
against the float64 reference.
"""
from __future__ import annotations

import torch

import deep_tile
from deep_tile import native
from deep_tile.gemm import fp8_gemm_1d1d
from deep_tile.gemm.k_grouped import k_grouped_fp8_gemm_1d1d
from deep_tile.gemm.launch import run_acc, run_k_grouped
from deep_tile.reference import ref_fp8_gemm_1d1d, ref_k_grouped_fp8_gemm_1d1d
from deep_tile.testing.data import make_fp8_problem
from deep_tile.testing.numeric import calc_diff
from gpu_cases import serve
from gpu_training_cases import k_grouped_operands, k_grouped_problem, operands_1d1d

DEVICE = "cuda"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
STATS = ("native_calls", "python_calls", "a_scale_copies")


def _native():
    """The loaded native extension (built now if needed); raises when it cannot be."""
    if not native.build(wait=True):
        raise RuntimeError(f"the native extension is not available: {native.status()}")
    return native.module()


def _same(x, y) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x.view(torch.uint8), y.view(torch.uint8)))


def _result(outs: list, python, ref, before: dict, after: dict) -> dict:
    """Bitwise equality of every native output with the Python path's, NaNs and error of the first."""
    first = outs[0].double()
    return {"calls": len(outs), "native_equals_python": all(_same(x, python) for x in outs),
            "nan": int(torch.isnan(first).sum().item()), "diff": calc_diff(first, ref) if ref.numel() else 0.0,
            **{name: after[name] - before[name] for name in STATS}}


def acc_native_vs_python(m: int, n: int, k: int, out_dtype: str, c_mode: str, one_d: bool = False,
                         layout: str = "tma", seed: int = 0) -> dict:
    """An output-variant GEMM (``one_d``: the 1D1D one) on both host paths. ``c_mode``: "none",
    "bfloat16" / "float32" (a separate C) or "inplace" (C is out: accumulate)."""
    extension = _native()
    if one_d:
        a, a_scale, b, b_scale = operands_1d1d(m, n, k, seed)
        product = ref_fp8_gemm_1d1d(a, a_scale, b, b_scale)
    else:
        a, a_scale, b, b_scale = make_fp8_problem(m, n, k, DEVICE, seed=seed, a_scale_layout=layout)
        product = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 7)
    scale = float(product.abs().max()) if product.numel() else 1.0
    start = (torch.randn((m, n), generator=gen, device=DEVICE, dtype=torch.float64) * scale / 3)
    dtype = DTYPES[out_dtype]
    inplace = c_mode == "inplace"
    c = None if c_mode in ("none", "inplace") else start.to(DTYPES[c_mode])
    ref = product + (start.to(dtype).double() if inplace else c.double() if c is not None else 0)

    def fresh():  # a NaN-poisoned out, or C itself when accumulating in place
        return start.to(dtype) if inplace else torch.full((m, n), float("nan"), dtype=dtype, device=DEVICE)

    python = run_acc(a, a_scale, b, b_scale, c, inplace, fresh(), b_scale_1d=one_d)
    torch.cuda.synchronize()
    name = "fp8_gemm_1d1d" if one_d else "fp8_gemm_acc"
    before = extension.stats()
    outs = []
    for _ in range(3):  # the _out op (then repeated), the public function, the extension directly
        out = fresh()
        getattr(torch.ops.deep_tile, name + "_out")(a, a_scale, b, b_scale, c, inplace, out)
        outs.append(out)
    out = fresh()
    (fp8_gemm_1d1d if one_d else deep_tile.fp8_gemm)(a, a_scale, b, b_scale, out, c=out if inplace else c)
    outs.append(out)
    outs.append(extension.fp8_gemm_acc(a, a_scale, b, b_scale, c, inplace, fresh(), None, one_d))
    if not inplace:  # the op allocating its output
        outs.append(getattr(torch.ops.deep_tile, name)(a, a_scale, b, b_scale, c, dtype))
    torch.cuda.synchronize()
    return {"m": m, "n": n, "k": k, "out_dtype": out_dtype, "c_mode": c_mode, "one_d": one_d,
            **_result(outs, python, ref, before, extension.stats())}


def k_grouped_native_vs_python(m: int, n: int, sizes: list, out_dtype: str, c_mode: str, pad: int = 0,
                               seed: int = 0) -> dict:
    """A K-grouped GEMM on both host paths. ``c_mode``: "none", "bfloat16" / "float32", "inplace"
    (accumulate=True) or "c_is_out" (the op given out as c). The tokens past the groups are FP8 NaN
    (tests/gpu_training_cases.k_grouped_operands); an empty group must hold C (zeros without)."""
    extension = _native()
    (a, a_scale, b, b_scale), product, start = k_grouped_problem(m, n, sizes, seed, pad)
    g = len(sizes)
    dtype = DTYPES[out_dtype]
    inplace = c_mode in ("inplace", "c_is_out")
    c = None if c_mode in ("none", "inplace", "c_is_out") else start.to(DTYPES[c_mode])
    ref = product + (start.to(dtype).double() if inplace else c.double() if c is not None else 0)
    group_sizes = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)

    def fresh():
        return start.to(dtype) if inplace else torch.full((g, m, n), float("nan"), dtype=dtype, device=DEVICE)

    def op(out):
        addend = out if c_mode == "c_is_out" else c
        torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d_out(a, a_scale, b, b_scale, group_sizes, addend,
                                                        c_mode == "inplace", out)
        return out

    python = run_k_grouped(a, a_scale, b, b_scale, group_sizes, fresh(), c, accumulate=inplace)
    torch.cuda.synchronize()
    before = extension.stats()
    outs = [op(fresh()) for _ in range(3)]
    out = fresh()
    outs.append(k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, out, c=out if inplace else c))
    outs.append(extension.k_grouped_fp8_gemm(a, a_scale, b, b_scale, group_sizes, c, inplace, fresh(), None))
    if c_mode == "none":  # the op allocating its output (it takes no C)
        outs.append(torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, None, dtype))
    torch.cuda.synchronize()
    empty = [i for i, size in enumerate(sizes) if size == 0]
    expect = ref.to(dtype).double()  # an empty group's product is 0: out[g] is C (rounded) or zeros
    return {"m": m, "n": n, "k": a.shape[1], "sizes": sizes, "out_dtype": out_dtype, "c_mode": c_mode,
            "empty_wrong": int(sum((outs[0][i].double() != expect[i]).sum().item() for i in empty)),
            **_result(outs, python, ref, before, extension.stats())}


def k_grouped_native_graph(m: int, n: int, sizes: list, new_sizes: list, seed: int = 0) -> dict:
    """The K-grouped op accumulating in place into FP32, captured once in a CUDA graph through the
    native path; replayed, then replayed again after new operands and group sizes were copied into
    the same tensors. Equal bitwise to the same two calls on the Python path, and to C + the two
    products (float64 reference)."""
    extension = _native()
    k_tokens = max(sum(sizes), sum(new_sizes))
    first_ops = k_grouped_operands(m, n, sizes, seed, k_tokens - sum(sizes))
    second_ops = k_grouped_operands(m, n, new_sizes, seed + 1, k_tokens - sum(new_sizes))
    first_sizes = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    second_sizes = torch.tensor(new_sizes, dtype=torch.int32, device=DEVICE)
    start = torch.randn((len(sizes), m, n), device=DEVICE, dtype=torch.float32)
    python = start.clone()
    run_k_grouped(*first_ops, first_sizes, python, accumulate=True)
    run_k_grouped(*second_ops, second_sizes, python, accumulate=True)
    a, a_scale, b, b_scale = (x.clone() for x in first_ops)
    group_sizes = first_sizes.clone()
    out = start.clone()

    def op():
        torch.ops.deep_tile.k_grouped_fp8_gemm_1d1d_out(a, a_scale, b, b_scale, group_sizes, None, True, out)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside capture: plan, kernel load, tensor maps
        op()
    torch.cuda.synchronize()
    out.copy_(start)
    before = extension.stats()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        op()
    captured = extension.stats()
    graph.replay()
    torch.cuda.synchronize()
    for dst, src in zip((a, a_scale, b, b_scale, group_sizes), (*second_ops, second_sizes)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    ref = (start.double() + ref_k_grouped_fp8_gemm_1d1d(*first_ops, sizes)
           + ref_k_grouped_fp8_gemm_1d1d(*second_ops, new_sizes))
    return {"captured_native": captured["native_calls"] - before["native_calls"],
            "captured_python": captured["python_calls"] - before["python_calls"],
            "graph_equals_python": _same(out, python), "nan": int(torch.isnan(out).sum().item()),
            "diff": calc_diff(out.double(), ref)}


if __name__ == "__main__":
    serve(globals())
