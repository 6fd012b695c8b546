"""GPU checks run in a child process by tests/conftest.py::run_gpu_cases.

Reads {"function": name, "cases": [kwargs, ...]} as JSON on stdin, calls the named function for
each case and prints one ``RESULT {json}`` line per case. Every check draws fresh random data,
poisons the output with NaN before the run, and compares against the float64 reference.
"""
from __future__ import annotations

import json
import sys

import torch

import deep_tile
from deep_tile.gemm.launch import run, run_grouped
from deep_tile.select.config import KernelConfig
from deep_tile.testing.data import make_fp8_problem
from deep_tile.testing.numeric import calc_diff, max_rel_error

DEVICE = "cuda"


def _metrics(out: torch.Tensor, ref: torch.Tensor) -> dict:
    valid = out[:, : ref.shape[1]]
    return {
        "nan": int(torch.isnan(valid).sum().item()),
        "diff": calc_diff(valid.double(), ref) if ref.numel() else 0.0,
        "rel": max_rel_error(valid.double(), ref) if ref.numel() else 0.0,
    }


def _poisoned_out(m: int, n: int, row_stride: int | None = None) -> torch.Tensor:
    stride = row_stride or n
    storage = torch.full((m, stride), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    return storage[:, :n]


def gemm(m: int, n: int, k: int, layout: str = "tma", config: dict | None = None, row_stride: int | None = None,
         seed: int = 0, compare_cublas: bool = True) -> dict:
    """One fp8_gemm (optionally with a forced config) against the float64 reference."""
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, DEVICE, seed=seed, a_scale_layout=layout)
    forced = KernelConfig(**config) if config else None
    out = _poisoned_out(m, n, row_stride)
    run(a, a_scale, b, b_scale, out, config=forced)
    torch.cuda.synchronize()
    ref = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    result = {"m": m, "n": n, "k": k, "config": config, **_metrics(out, ref)}
    # Repeated runs must be bitwise identical (no races, no order-dependent accumulation).
    again = _poisoned_out(m, n, row_stride)
    run(a, a_scale, b, b_scale, again, config=forced)
    torch.cuda.synchronize()
    result["bitwise_repeat"] = bool(torch.equal(out.view(torch.int16), again.view(torch.int16)))
    if row_stride:  # the padding columns must be untouched (still NaN)
        full = out.as_strided((m, row_stride), (row_stride, 1))
        result["padding_untouched"] = bool(torch.isnan(full[:, n:]).all().item())
    if compare_cublas and m % 4 == 0 and n % 128 == 0 and k % 128 == 0:
        try:
            cublas = torch._scaled_mm(a, b.t(), scale_a=a_scale.t().contiguous().t(),
                                      scale_b=b_scale.contiguous().t(), out_dtype=torch.bfloat16)
            result["diff_vs_cublas"] = calc_diff(out.double(), cublas.double())
        except Exception as exc:  # cuBLAS refuses some shapes; recorded, not a failure
            result["cublas_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return result


def gemm_stream_and_graph(m: int, n: int, k: int, seed: int = 0) -> dict:
    """Launch on a non-default stream, then capture in a CUDA graph and replay with new data."""
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, DEVICE, seed=seed, a_scale_layout="tma")
    stream = torch.cuda.Stream()
    out = _poisoned_out(m, n)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    stream_metrics = _metrics(out, deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale))

    graph = torch.cuda.CUDAGraph()
    graph_out = _poisoned_out(m, n)
    with torch.cuda.stream(stream):  # warm-up outside capture (compiles, loads, encodes maps)
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, graph_out)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, graph_out)
    a2, a_scale2, b2, b_scale2 = make_fp8_problem(m, n, k, DEVICE, seed=seed + 1, a_scale_layout="tma")
    a.copy_(a2), a_scale.copy_(a_scale2), b.copy_(b2), b_scale.copy_(b_scale2)
    graph_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    graph_metrics = _metrics(graph_out, deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale))
    return {"m": m, "n": n, "k": k, "stream": stream_metrics, "graph": graph_metrics}


def cast_in_new_thread(m: int, k: int, seed: int = 0) -> dict:
    """The casts and an FP8 GEMM launched from a thread that never used the GPU before, on the
    default stream (as autograd's backward threads do): no context error, results equal to the
    main thread's."""
    import threading

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    want = deep_tile.per_token_cast_to_fp8(x)
    wq, ws = deep_tile.per_block_cast_to_fp8(torch.randn(256, k, generator=gen).to(torch.bfloat16).to(DEVICE))
    want_gemm = deep_tile.fp8_gemm(want[0], want[1], wq, ws)
    got, errors = {}, []

    def work():
        try:
            got["cast"] = deep_tile.per_token_cast_to_fp8(x)
            got["gemm"] = deep_tile.fp8_gemm(got["cast"][0], got["cast"][1], wq, ws)
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - reported
            errors.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    same = (not errors and torch.equal(got["cast"][0].view(torch.uint8), want[0].view(torch.uint8))
            and torch.equal(got["cast"][1], want[1]) and torch.equal(got["gemm"], want_gemm))
    return {"case": f"new thread m={m} k={k}", "errors": errors, "same": bool(same)}


def cast_stream_and_graph(m: int, k: int, dtype: str, seed: int = 0) -> dict:
    """FP8 casts on a non-default stream, then captured in a CUDA graph and replayed with new data;
    each result must be bitwise equal to the CPU (torch) implementation."""
    from deep_tile.casts.quant_impl import per_block_cast_torch, per_token_cast_torch
    torch_dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=gen) * 3).to(torch_dtype).to(DEVICE)

    def same(got, want) -> bool:
        return (torch.equal(got[0].cpu().view(torch.uint8), want[0].view(torch.uint8))
                and torch.equal(got[1].cpu(), want[1]))

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        token = deep_tile.per_token_cast_to_fp8(x)
        block = deep_tile.per_block_cast_to_fp8(x)
    stream.synchronize()
    on_stream = same(token, per_token_cast_torch(x.cpu())) and same(block, per_block_cast_torch(x.cpu()))

    from deep_tile.casts.quant_kernels import per_block_cast_cuda, per_token_cast_cuda
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):  # warm-up outside capture (compile, load)
        per_token_cast_cuda(x), per_block_cast_cuda(x)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        token_g = per_token_cast_cuda(x)
        block_g = per_block_cast_cuda(x)
    x.copy_((torch.randn(m, k, generator=gen) * 5).to(torch_dtype))  # new data, same buffer
    for t in (*token_g, *block_g):
        t.view(torch.uint8).fill_(0xFF)  # poison: 0xFF is NaN for e4m3 and for float32 bytes
    graph.replay()
    torch.cuda.synchronize()
    replayed = same(token_g, per_token_cast_torch(x.cpu())) and same(block_g, per_block_cast_torch(x.cpu()))
    return {"m": m, "k": k, "dtype": dtype, "stream_ok": on_stream, "graph_ok": replayed}


def launch_error_is_readable() -> dict:
    """A launch the driver refuses raises LaunchError naming the call, not a silent failure."""
    from deep_tile.errors import LaunchError
    from deep_tile.jit.runtime import KernelArgs
    from deep_tile.jit.loader import get_kernel
    kernel = get_kernel("cast_fp8", {"DT_IN_DTYPE": 0}, "deep_tile_per_token_cast")
    args = KernelArgs([("ptr", 0), ("ptr", 0), ("ptr", 0), ("i32", 0), ("i32", 0)])
    try:  # 2048 threads per block is above the hardware limit of 1024
        kernel.launch(grid=1, block=2048, smem_bytes=0, stream=torch.cuda.current_stream().cuda_stream, args=args,
                      device=torch.cuda.current_device())
        return {"raised": "none"}
    except LaunchError as exc:
        return {"raised": str(exc)}


def bad_input_leaves_out_untouched(case: str) -> dict:
    """A rejected call raises before writing anything to `out`."""
    a, a_scale, b, b_scale = make_fp8_problem(256, 256, 256, DEVICE, seed=3)
    out = _poisoned_out(256, 256)
    if case == "b_scale_shape":
        b_scale = b_scale[:, :1]
    elif case == "a_dtype":
        a = a.to(torch.bfloat16)
    elif case == "cpu_b":
        b = b.cpu()
    try:
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out)
        raised = "none"
    except (TypeError, ValueError) as exc:
        raised = f"{type(exc).__name__}: {exc}"
    torch.cuda.synchronize()
    return {"case": case, "raised": raised, "out_all_nan": bool(torch.isnan(out).all().item())}


def _grouped_weights(num_groups: int, n: int, k: int, gen) -> tuple:
    """Random [G, N, K] FP8 weights and [G, ceil(N/128), ceil(K/128)] scales, one expert at a time."""
    from deep_tile.casts.quant import per_block_cast_to_fp8

    qs, ss = [], []
    for _ in range(num_groups):
        w = torch.randn((n, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
        q, s = per_block_cast_to_fp8(w)
        qs.append(q)
        ss.append(s)
    return torch.stack(qs), torch.stack(ss)


def _grouped_activations(shape: tuple, k: int, gen, layout: str) -> tuple:
    """Random FP8 activations of ``shape + (k,)`` and their 1x128 scales, row-major or TMA-aligned."""
    from deep_tile.casts.quant import per_token_cast_to_fp8

    rows = 1
    for d in shape:
        rows *= d
    x = torch.randn((rows, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
    a, a_scale = per_token_cast_to_fp8(x)
    a, a_scale = a.view(*shape, k), a_scale.view(*shape, a_scale.shape[1])
    if layout == "tma":
        a_scale = deep_tile.get_tma_aligned_a_scale(a_scale)
    return a, a_scale


def _contiguous_ids(counts: list, num_groups: int, tail: int, bad_ids: bool, gen) -> torch.Tensor:
    """m_indices of the contiguous layout: each expert's rows padded to 128 with -1, ``tail``
    padding rows after the last run; ``bad_ids``: padding marked by ids out of range instead."""
    ids = []
    for expert, count in enumerate(counts):
        padded = -(-count // 128) * 128
        ids += [expert] * count + [-1] * (padded - count)
    ids += [-1] * tail
    t = torch.tensor(ids, dtype=torch.int32, device=DEVICE)
    if bad_ids:
        pad = t < 0
        junk = torch.randint(num_groups, 1 << 30, t.shape, generator=gen, device=DEVICE, dtype=torch.int32)
        t = torch.where(pad & (junk % 2 == 0), junk, t)  # out-of-range ids and -1 mixed
    return t


def _grouped_info(kind: str, counts: list, tail: int, bad_ids: bool, gaps: bool, gen) -> torch.Tensor:
    """The int32 per-expert tensor of ``kind`` (contiguous / offsets / masked) for ``counts[g]``
    real rows per expert: m_indices (:func:`_contiguous_ids`), offsets (``gaps``: 5 rows of no
    expert before the first run), masked_m, or psum expert ends (runs aligned to 128)."""
    if kind == "masked":
        return torch.tensor(counts, dtype=torch.int32, device=DEVICE)
    if kind == "offsets":
        bounds = [5 if gaps else 0]
        for count in counts:
            bounds.append(bounds[-1] + count)
        return torch.tensor(bounds, dtype=torch.int32, device=DEVICE)
    if kind == "psum":  # each expert's end; its start is the previous end rounded up to 128
        ends, end = [], 0
        for count in counts:
            end = -(-end // 128) * 128 + count
            ends.append(end)
        return torch.tensor(ends, dtype=torch.int32, device=DEVICE)
    return _contiguous_ids(counts, len(counts), tail, bad_ids, gen)


def grouped_reference(kind: str, a, a_scale, b, b_scale, info) -> torch.Tensor:
    """The float64 reference of a grouped GEMM of ``kind`` (contiguous / offsets / masked / psum),
    NaN in the rows of no expert."""
    if kind == "masked":
        return deep_tile.ref_m_grouped_fp8_gemm_masked(a, a_scale, b, b_scale, info)
    if kind == "offsets":
        return deep_tile.ref_m_grouped_fp8_gemm_offsets(a, a_scale, b, b_scale, info)
    if kind == "psum":  # the CPU rule of the layout kernel names each row's expert
        m_indices = deep_tile.psum_to_m_indices(info.cpu(), a.shape[0]).to(DEVICE)
        return deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, a_scale, b, b_scale, m_indices)
    return deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, a_scale, b, b_scale, info)


def grouped(kind: str, counts: list, n: int, k: int, layout: str = "tma", config: dict | None = None,
            max_m: int = 0, tail: int = 0, bad_ids: bool = False, gaps: bool = False, seed: int = 0,
            graph_counts: list | None = None, expected_m: int | None = None) -> dict:
    """One grouped GEMM of ``kind`` (contiguous / offsets / masked / psum) with ``counts[g]`` real rows
    per expert against the float64 reference: computed rows compared, the rows of no expert
    checked still NaN (untouched), a repeat checked bitwise. ``graph_counts``: also capture the
    call in a CUDA graph, change the counts in place and replay (the same checks). ``expected_m``:
    the masked kind's hint (default: the mean count)."""
    from deep_tile.gemm.problem import ProblemKind

    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    num_groups = len(counts)
    b, b_scale = _grouped_weights(num_groups, n, k, gen)
    forced = KernelConfig(**config) if config else None

    def layout_of(counts_now):
        return _grouped_info(kind, counts_now, tail, bad_ids, gaps, gen)

    info = layout_of(counts)
    if kind == "masked":
        shape = (num_groups, max_m)
    elif kind in ("offsets", "psum"):
        shape = ((int(info[-1].item()) if info.numel() else 0) + tail,)
    else:
        shape = (info.numel(),)
    a, a_scale = _grouped_activations(shape, k, gen, layout)
    kinds = {"contiguous": ProblemKind.GROUPED_CONTIGUOUS, "offsets": ProblemKind.GROUPED_OFFSETS,
             "masked": ProblemKind.GROUPED_MASKED, "psum": ProblemKind.GROUPED_PSUM}
    if kind == "masked" and expected_m is None:
        expected_m = max(1, sum(counts) // max(1, num_groups))
    elif kind != "masked":
        expected_m = None

    def call(info_now, out):
        return run_grouped(kinds[kind], a, a_scale, b, b_scale, info_now, out, expected_m, config=forced)

    def reference(info_now):
        return grouped_reference(kind, a, a_scale, b, b_scale, info_now)

    def check(out, ref) -> dict:
        real = ~torch.isnan(ref[..., 0])
        got, want = out[real].double(), ref[real]
        return {"rows": int(real.sum().item()),
                "nan": int(torch.isnan(got).sum().item()),
                "diff": calc_diff(got, want) if want.numel() else 0.0,
                "rel": max_rel_error(got, want) if want.numel() else 0.0,
                "untouched": bool(torch.isnan(out[~real].float()).all().item())}

    out = torch.full(shape + (n,), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    call(info, out)
    torch.cuda.synchronize()
    result = {"kind": kind, "counts": counts if len(counts) <= 8 else f"{len(counts)} groups", "n": n, "k": k,
              "config": config, "layout": layout, **check(out, reference(info))}
    again = torch.full_like(out, float("nan"))
    call(info, again)
    torch.cuda.synchronize()
    result["bitwise_repeat"] = bool(torch.equal(out.view(torch.int16), again.view(torch.int16)))
    if graph_counts is not None:
        graph_out = torch.full_like(out, float("nan"))
        call(info, graph_out)  # warm: compile and plan outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call(info, graph_out)
        new_info = layout_of(graph_counts)
        if new_info.shape != info.shape:
            raise ValueError("grouped: graph_counts must keep the layout's size")
        info.copy_(new_info)
        graph_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replay = check(graph_out, reference(info))
        result["graph"] = replay
    return result


def serve(namespace: dict) -> None:
    """Child side of conftest.run_child_cases: run ``namespace[function](**case)`` for the function
    and cases read from stdin, one ``RESULT {json}`` line per case."""
    spec = json.loads(sys.stdin.read())
    function = namespace[spec["function"]]
    for case in spec["cases"]:
        print("RESULT " + json.dumps(function(**case)), flush=True)


if __name__ == "__main__":
    serve(globals())
