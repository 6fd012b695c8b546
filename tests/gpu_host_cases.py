"""GPU checks of the host paths (custom ops, native extension; the dense and the grouped GEMMs), run
in a child process by tests/conftest.py::run_host_cases (a kernel that traps poisons its whole CUDA
context: it must fail one test, not the whole pytest run).

Like tests/gpu_cases.py, whose ``serve`` it uses: reads {"function": name, "cases": [kwargs, ...]}
as JSON on stdin and prints one ``RESULT {json}`` line per case.
"""
from __future__ import annotations

import contextlib
import io
import os

import torch

import deep_tile
from deep_tile import native
from deep_tile.gemm.launch import run
from deep_tile.gemm.problem import Problem
from deep_tile.testing.data import make_fp8_problem
from deep_tile.testing.numeric import calc_diff
from gpu_cases import _grouped_activations, _grouped_info, _grouped_weights, _metrics, _poisoned_out
from gpu_cases import serve


def _problem(m: int, n: int, k: int, seed: int, layout: str = "tma"):
    return make_fp8_problem(m, n, k, "cuda", seed=seed, a_scale_layout=layout)


def _same(x, y) -> bool:
    return bool(torch.equal(x.view(torch.int16), y.view(torch.int16)))


def _native():
    """The loaded native extension (built now if needed); raises when it cannot be."""
    if not native.build(wait=True):
        raise RuntimeError(f"the native extension is not available: {native.status()}")
    return native.module()


def native_vs_python(m: int, n: int, k: int, layout: str = "tma", seed: int = 0) -> dict:
    """The native path (through the op, and directly) against the Python path: bitwise equal,
    repeated calls bitwise equal, and the native path really taken."""
    extension = _native()
    a, a_scale, b, b_scale = _problem(m, n, k, seed, layout)
    python = run(a, a_scale, b, b_scale, _poisoned_out(m, n))
    before = extension.stats()
    op_out = _poisoned_out(m, n)
    torch.ops.deep_tile.fp8_gemm_out(a, a_scale, b, b_scale, op_out)
    op_new = torch.ops.deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    public = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    direct = extension.fp8_gemm(a, a_scale, b, b_scale, _poisoned_out(m, n))
    repeats = [deep_tile.fp8_gemm(a, a_scale, b, b_scale, _poisoned_out(m, n)) for _ in range(3)]
    torch.cuda.synchronize()
    after = extension.stats()
    ref = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    return {"m": m, "n": n, "k": k, "layout": layout,
            "native_equals_python": all(_same(x, python) for x in (op_out, op_new, public, direct)),
            "repeat_bitwise": all(_same(x, op_out) for x in repeats),
            "native_calls": after["native_calls"] - before["native_calls"],
            "python_calls": after["python_calls"] - before["python_calls"],
            "a_scale_copies": after["a_scale_copies"] - before["a_scale_copies"],
            "nan": int(torch.isnan(op_out).sum().item()),
            "diff": calc_diff(op_out.double(), ref) if ref.numel() else 0.0}


def sms_limit_on_native(m: int, n: int, k: int, seed: int = 0) -> dict:
    """deep_tile.set_num_sms while the native library is loaded: its next call plans with the new
    limit (the launch grid shrinks) and matches the Python path under the same limit bitwise."""
    from deep_tile import device
    from deep_tile.gemm import planner

    extension = _native()
    a, a_scale, b, b_scale = _problem(m, n, k, seed)
    deep_tile.fp8_gemm(a, a_scale, b, b_scale)  # the unlimited plan exists before counting
    torch.cuda.synchronize()
    before = extension.stats()
    device.set_num_sms(66)
    try:
        limited = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
        limited_python = run(a, a_scale, b, b_scale, _poisoned_out(m, n))
        limited_grid = planner.plan(Problem(m, n, k), 66).grid
    finally:
        device.set_num_sms(None)
    full = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    full_again = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    full_python = run(a, a_scale, b, b_scale, _poisoned_out(m, n))
    torch.cuda.synchronize()
    after = extension.stats()
    return {"native_calls": after["native_calls"] - before["native_calls"],
            "python_calls": after["python_calls"] - before["python_calls"],
            "plans_created": after["plans_created"] - before["plans_created"],
            "limited_grid": limited_grid, "full_grid": planner.plan(Problem(m, n, k), device.get_num_sms()).grid,
            "limited_equals_python": _same(limited, limited_python),
            "full_equals_python": _same(full, full_python) and _same(full_again, full_python)}


def _raised(calls) -> dict:
    """name -> ``"none"`` or the ``TypeError`` / ``ValueError`` each ``(name, call)`` raised (then
    the device is synchronised, so an error of a launch shows here)."""
    raised = {}
    for name, call in calls:
        try:
            call()
            raised[name] = "none"
        except (TypeError, ValueError) as exc:
            raised[name] = f"{type(exc).__name__}: {exc}"
    torch.cuda.synchronize()
    return raised


def errors_match(case: str) -> dict:
    """A bad CUDA argument raises the same type and message on both paths, before writing out."""
    extension = _native()
    a, a_scale, b, b_scale = _problem(256, 256, 256, 3)
    out = _poisoned_out(256, 256)
    if case == "misaligned_a":
        a = torch.empty(256 * 256 + 16, dtype=torch.uint8, device="cuda")[1:256 * 256 + 1].view(256, 256).view(
            torch.float8_e4m3fn)
    elif case == "cpu_b":
        b = b.cpu()
    elif case == "a_scale_shape":
        a_scale = a_scale[:, :1]
    elif case == "out_dtype":
        out = out.float()
    raised = _raised((("python", lambda: run(a, a_scale, b, b_scale, out)),
                      ("op", lambda: torch.ops.deep_tile.fp8_gemm_out(a, a_scale, b, b_scale, out)),
                      ("direct", lambda: extension.fp8_gemm(a, a_scale, b, b_scale, out))))
    untouched = bool(torch.isnan(out.float()).all().item()) if out.dtype != torch.float32 else True
    return {"case": case, "raised": raised, "out_untouched": untouched}


def cuda_graph_replay(m: int, n: int, k: int, seed: int = 0) -> dict:
    """Both ops captured in a CUDA graph on a side stream, replayed with new data."""

    _native()
    a, a_scale, b, b_scale = _problem(m, n, k, seed)
    out = _poisoned_out(m, n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside capture: plan, kernel load, tensor maps
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
        deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        torch.ops.deep_tile.fp8_gemm_out(a, a_scale, b, b_scale, out)
        fresh = torch.ops.deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    a2, a_scale2, b2, b_scale2 = _problem(m, n, k, seed + 1)
    a.copy_(a2), a_scale.copy_(a_scale2), b.copy_(b2), b_scale.copy_(b_scale2)
    out.fill_(float("nan"))
    fresh.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    eager = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
    torch.cuda.synchronize()
    return {"m": m, "n": n, "k": k, "out_ok": _same(out, eager), "new_ok": _same(fresh, eager),
            "nan": int(torch.isnan(out).sum().item())}


def compiled_module(m: int, n: int, k: int, seed: int = 0, backend: str = "inductor") -> dict:
    """torch.compile(fullgraph=True) of a module that quantises its input and calls both GEMM
    ops: traces with no graph break; equal to eager bitwise; replays under CUDA graphs too."""

    _native()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    b, b_scale = deep_tile.per_block_cast_to_fp8(w)

    class Linear(torch.nn.Module):
        def forward(self, x):
            a, a_scale = deep_tile.per_token_cast_to_fp8(x)
            out = torch.empty(x.shape[0], b.shape[0], dtype=torch.bfloat16, device=x.device)
            deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
            return out, deep_tile.fp8_gemm(a, a_scale, b, b_scale)

    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend(backend)
    module = Linear()
    compiled = torch.compile(module, fullgraph=True, backend=counter)
    x = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    got = compiled(x)
    want = module(x)
    x2 = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    got2, want2 = compiled(x2), module(x2)
    graphs = torch.compile(module, fullgraph=True, mode="reduce-overhead")
    replayed = [graphs(x2) for _ in range(3)][-1]
    torch.cuda.synchronize()
    return {"m": m, "n": n, "k": k, "frames": counter.frame_count,
            "equal": all(_same(g, w_) for g, w_ in zip(got + got2, want + want2)),
            "cudagraph_equal": all(_same(g, w_) for g, w_ in zip(replayed, want2))}


def compiled_dynamic_m(ms: list, n: int, k: int, seed: int = 0, backend: str = "inductor",
                       size_oblivious: bool = False) -> dict:
    """torch.compile(dynamic=True, fullgraph=True) of a function calling deep_tile.fp8_gemm (with
    an ``out`` argument, and returning a new output) over the row counts ``ms``: one graph for all
    of them (the fake implementations keep m symbolic); each m with fresh random data, ``out``
    poisoned first, both outputs against the float64 reference and bitwise equal to eager.

    ``size_oblivious``: compile under ``torch.fx.experimental._config.backed_size_oblivious``, so
    that m = 1 shares the graph too (Dynamo otherwise specialises sizes 0 and 1 of its inputs)."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch.fx.experimental import _config as shape_config

    _native()

    def gemm(a, a_scale, b, b_scale, out):
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
        return deep_tile.fp8_gemm(a, a_scale, b, b_scale)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(gemm, dynamic=True, fullgraph=True, backend=counter)
    results = []
    with shape_config.patch(backed_size_oblivious=size_oblivious):
        for i, m in enumerate(ms):
            a, a_scale, b, b_scale = _problem(m, n, k, seed + i)
            out = _poisoned_out(m, n)
            new = compiled(a, a_scale, b, b_scale, out)
            torch.cuda.synchronize()
            ref = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
            eager = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
            torch.cuda.synchronize()
            results.append({"m": m, "frames": counter.frame_count, "out": _metrics(out, ref),
                            "new": _metrics(new, ref), "shape": list(new.shape),
                            "equal_eager": _same(out, eager) and _same(new, eager)})
    return {"n": n, "k": k, "frames": counter.frame_count, "results": results}


def debug_phases() -> dict:
    """DEEP_TILE_DEBUG prints the phases of the first call of a new plan (native path)."""

    _native()
    os.environ["DEEP_TILE_DEBUG"] = "1"
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        a, a_scale, b, b_scale = _problem(192, 384, 1024, 5)
        deep_tile.fp8_gemm(a, a_scale, b, b_scale)
        torch.cuda.synchronize()
    del os.environ["DEEP_TILE_DEBUG"]
    return {"stderr": captured.getvalue()[-3000:]}


def native_ready() -> dict:
    """Build the native extension into this process's cache if needed; its key and library path."""
    _native()
    status = native.status()
    return {"key": status["key"], "library": status["library"]}


def gemm_while_native_rebuilds(m: int, n: int, k: int, seed: int = 0, timeout: float = 600.0) -> dict:
    """deep_tile.fp8_gemm (DEEP_TILE_NATIVE=auto) called until the native library is loaded: the
    first call starts its build in the background; every result must equal the Python path's."""
    import time
    import warnings

    a, a_scale, b, b_scale = _problem(m, n, k, seed)
    python = run(a, a_scale, b, b_scale, _poisoned_out(m, n))
    calls, equal = 0, True
    deadline = time.monotonic() + timeout
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while time.monotonic() < deadline:
            out = deep_tile.fp8_gemm(a, a_scale, b, b_scale)
            torch.cuda.synchronize()
            calls += 1
            equal = equal and _same(out, python)
            if native.status()["state"] != "building":
                break
            time.sleep(0.2)
        loaded = native.module(start_build=False)
        native_equal = loaded is not None and _same(deep_tile.fp8_gemm(a, a_scale, b, b_scale), python)
    return {"calls": calls, "equal": equal, "state": native.status()["state"], "native_equal": native_equal,
            "warnings": [str(w.message) for w in caught]}


def gemm_with_unusable_cache(m: int, n: int, k: int, seed: int = 0) -> dict:
    """The first CUDA call with DEEP_TILE_CACHE_DIR unusable: what it raises and warns."""
    import warnings

    # operands quantised on the CPU: the CUDA casts would meet the unusable cache first
    a, a_scale, b, b_scale = (t.cuda() for t in make_fp8_problem(m, n, k, "cpu", seed=seed, a_scale_layout="tma"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raised = []
        for _ in range(2):
            try:
                deep_tile.fp8_gemm(a, a_scale, b, b_scale)
                raised.append("none")
            except Exception as exc:  # noqa: BLE001 - reported to the test
                raised.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
    return {"raised": raised, "state": native.status()["state"],
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}


# ---- grouped (Mixture-of-Experts) ops on the native path --------------------------------------

def _grouped_problem(kind: str, counts: list, n: int, k: int, layout: str, max_m: int, tail: int, bad_ids: bool,
                     gaps: bool, seed: int) -> tuple:
    """``(a, a_scale, b, b_scale, info, expected_m)`` of a grouped GEMM of ``kind`` (contiguous /
    offsets / masked) with ``counts[g]`` real rows per expert (as tests/gpu_cases.py ``grouped``)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    b, b_scale = _grouped_weights(len(counts), n, k, gen)
    info = _grouped_info(kind, counts, tail, bad_ids, gaps, gen)
    if kind == "masked":
        shape = (len(counts), max_m)
    elif kind == "offsets":
        shape = (int(info[-1].item()) + tail,)
    else:
        shape = (info.numel(),)
    a, a_scale = _grouped_activations(shape, k, gen, layout)
    expected_m = max(1, sum(counts) // len(counts)) if kind == "masked" else None
    return a, a_scale, b, b_scale, info, expected_m


def _grouped_op(kind: str, args: tuple, out=None):
    """``torch.ops.deep_tile.m_grouped_fp8_gemm_<kind>`` (``_out`` when ``out`` is given) on
    ``args`` = (a, a_scale, b, b_scale, info, expected_m); returns the output."""
    *tensors, expected_m = args
    hint = () if expected_m is None else (expected_m,)
    op = getattr(torch.ops.deep_tile, f"m_grouped_fp8_gemm_{kind}")
    if out is None:
        return op(*tensors, *hint)
    getattr(torch.ops.deep_tile, f"m_grouped_fp8_gemm_{kind}_out")(*tensors, *hint, out)
    return out


def _grouped_reference(kind: str, args: tuple):
    """The float64 reference (NaN in the rows of no expert) and the mask of the real rows."""
    ref = getattr(deep_tile, f"ref_m_grouped_fp8_gemm_{kind}")(*args[:5])
    return ref, ~torch.isnan(ref[..., 0])


def _grouped_poisoned(args: tuple, n: int):
    return torch.full(tuple(args[0].shape[:-1]) + (n,), float("nan"), dtype=torch.bfloat16, device="cuda")


def _grouped_rows(out, ref, real) -> dict:
    """The real rows of ``out`` against the reference, and whether the others are still NaN."""
    got = out[real]
    return {"rows": int(real.sum().item()), "nan": int(torch.isnan(got).sum().item()),
            "diff": calc_diff(got.double(), ref[real]) if got.numel() else 0.0,
            "untouched": bool(torch.isnan(out[~real].float()).all().item())}


def grouped_native_vs_python(kind: str, counts: list, n: int, k: int, layout: str = "tma", max_m: int = 0,
                             tail: int = 0, bad_ids: bool = False, gaps: bool = False, seed: int = 0) -> dict:
    """A grouped GEMM on the native path (the ``_out`` op, the public function, the extension
    directly, the op allocating its output, repeats) against the Python path (run_grouped):
    bitwise equal, the rows of no expert untouched, and the native path really taken."""
    from deep_tile.gemm.launch import run_grouped
    from deep_tile.gemm.problem import ProblemKind

    extension = _native()
    args = _grouped_problem(kind, counts, n, k, layout, max_m, tail, bad_ids, gaps, seed)
    a, a_scale, b, b_scale, info, expected_m = args
    python = run_grouped(ProblemKind(f"grouped_{kind}"), a, a_scale, b, b_scale, info, _grouped_poisoned(args, n),
                         expected_m)
    torch.cuda.synchronize()
    hint = () if expected_m is None else (expected_m,)
    before = extension.stats()
    outs = [_grouped_op(kind, args, _grouped_poisoned(args, n)),
            getattr(deep_tile, f"m_grouped_fp8_gemm_{kind}")(*args[:5], *hint, out=_grouped_poisoned(args, n)),
            extension.m_grouped_fp8_gemm(f"grouped_{kind}", *args[:5], expected_m, _grouped_poisoned(args, n))]
    new = _grouped_op(kind, args)  # its rows of no expert hold whatever the allocator gave
    repeats = [_grouped_op(kind, args, _grouped_poisoned(args, n)) for _ in range(2)]
    torch.cuda.synchronize()
    after = extension.stats()
    ref, real = _grouped_reference(kind, args)
    return {"kind": kind, "layout": layout, "calls": len(outs) + 1 + len(repeats),
            "native_equals_python": all(_same(x, python) for x in outs) and _same(new[real], python[real]),
            "repeat_bitwise": all(_same(x, outs[0]) for x in repeats),
            **_grouped_rows(outs[0], ref, real),
            **{name: after[name] - before[name] for name in ("native_calls", "python_calls", "a_scale_copies")}}


def grouped_graph_replay(kind: str, counts: list, new_counts: list, n: int, k: int, layout: str = "tma",
                         max_m: int = 0, tail: int = 0, seed: int = 0) -> dict:
    """Both ops of ``kind`` (``_out`` and the allocating one) captured in a CUDA graph on a side
    stream through the native path, replayed after the counts tensor was refilled in place with
    ``new_counts``: equal to an eager call on the new counts, real rows against the reference,
    the rows of no expert untouched."""
    extension = _native()
    args = _grouped_problem(kind, counts, n, k, layout, max_m, tail, False, False, seed)
    info = args[4]
    out = _grouped_poisoned(args, n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside capture: plan, kernel load, tensor maps
        _grouped_op(kind, args, out)
        _grouped_op(kind, args)
    torch.cuda.synchronize()
    before = extension.stats()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        _grouped_op(kind, args, out)
        fresh = _grouped_op(kind, args)
    captured = extension.stats()
    new_info = _grouped_info(kind, new_counts, tail, False, False, None)
    if new_info.shape != info.shape:
        raise ValueError("grouped_graph_replay: new_counts must keep the layout's size")
    info.copy_(new_info)
    out.fill_(float("nan"))
    fresh.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    eager = _grouped_op(kind, args, _grouped_poisoned(args, n))
    torch.cuda.synchronize()
    ref, real = _grouped_reference(kind, args)
    return {"kind": kind, "out_ok": _same(out, eager), "new_ok": _same(fresh, eager),
            "captured_native": captured["native_calls"] - before["native_calls"],
            "captured_python": captured["python_calls"] - before["python_calls"],
            **_grouped_rows(out, ref, real)}


def grouped_errors_match(kind: str, case: str) -> dict:
    """A bad CUDA argument of a grouped op raises the same type and message on the Python path,
    through the op and through the extension directly, before writing out."""
    from deep_tile.gemm.launch import run_grouped
    from deep_tile.gemm.problem import ProblemKind

    extension = _native()
    args = list(_grouped_problem(kind, [130, 0, 60], 256, 512, "tma", 192, 0, False, False, 4))
    if case == "misaligned_a":
        a = args[0]
        raw = torch.empty(a.numel() + 16, dtype=torch.uint8, device="cuda")[1:a.numel() + 1]
        args[0] = raw.view(torch.float8_e4m3fn).view(a.shape)
    elif case == "cpu_info":
        args[4] = args[4].cpu()
    elif case == "info_shape":
        args[4] = args[4][:-1]
    out = _grouped_poisoned(args, 256)
    a, a_scale, b, b_scale, info, expected_m = args
    raised = _raised((("python", lambda: run_grouped(ProblemKind(f"grouped_{kind}"), a, a_scale, b, b_scale, info,
                                                     out, expected_m)),
                      ("op", lambda: _grouped_op(kind, tuple(args), out)),
                      ("direct", lambda: extension.m_grouped_fp8_gemm(f"grouped_{kind}", *args[:5], expected_m, out))))
    return {"kind": kind, "case": case, "raised": raised, "out_untouched": bool(torch.isnan(out.float()).all().item())}


if __name__ == "__main__":
    serve(globals())
