"""GPU checks of deep_tile.compat.deepgemm, run in a child process by tests/test_compat_deepgemm.py.

Each check calls the module the way a DeepGEMM user does -- ``(tensor, scale)`` pairs, the output
third, ``m_indices`` with -1 on the padding rows of each 128-row block, ``masked_m`` -- into an
output poisoned with NaN, and compares with deep_tile's float64 references (NaN where the GEMM
must leave the output untouched). Protocol: see tests/gpu_cases.py ``serve``.
"""
from __future__ import annotations

import random

import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from deep_tile.reference import ref_k_grouped_fp8_gemm_1d1d
from deep_tile.testing.numeric import calc_diff
from gpu_cases import serve

DEVICE = "cuda"


def _compare(d: torch.Tensor, ref: torch.Tensor) -> dict:
    """calc_diff over the computed entries (ref not NaN); NaN counts there and in the untouched ones."""
    computed = ~torch.isnan(ref)
    out = d.double()
    return {
        "computed": int(computed.sum().item()),
        "diff": calc_diff(out[computed], ref[computed]) if computed.any() else 0.0,
        "nan_computed": int(torch.isnan(out[computed]).sum().item()),
        "untouched_written": int((~torch.isnan(out[~computed])).sum().item()),
    }


def _randn(shape, gen) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)


def _weights(num_groups: int, n: int, k: int, gen):
    """``b`` [G, N, K] float8_e4m3fn and ``sfb`` [G, ceil(N/128), ceil(K/128)] float32, per-block cast."""
    casts = [deep_tile.per_block_cast_to_fp8(_randn((n, k), gen)) for _ in range(num_groups)]
    return torch.stack([b for b, _ in casts]), torch.stack([s for _, s in casts])


def _generator(seed: int) -> torch.Generator:
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    return gen


def gemm_nt(m: int, n: int, k: int, api: str = "latest", sfa_layout: str = "row", seed: int = 0) -> dict:
    """``fp8_gemm_nt`` (api "latest") or ``gemm_fp8_fp8_bf16_nt`` ("2025"); ``sfa_layout`` "tma" passes
    sfa through ``get_mn_major_tma_aligned_tensor`` first (DeepGEMM's zero-copy layout)."""
    gen = _generator(seed)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((m, k), gen))
    b, sfb = deep_tile.per_block_cast_to_fp8(_randn((n, k), gen))
    if sfa_layout == "tma":
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    gemm = deep_gemm.fp8_gemm_nt if api == "latest" else deep_gemm.gemm_fp8_fp8_bf16_nt
    returned = gemm((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    ref = deep_tile.ref_fp8_gemm(a, sfa, b, sfb)
    return {"case": f"{api} gemm m={m} n={n} k={k} sfa={sfa_layout}", "returned_none": returned is None,
            **_compare(d, ref)}


def contiguous(num_groups: int, expected_m: int, n: int, k: int, api: str = "latest", seed: int = 0) -> dict:
    """``m_grouped_fp8_gemm_nt_contiguous`` / ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous``: each group's
    rows padded up to the alignment, the padding rows marked -1 in m_indices."""
    gen, rng = _generator(seed), random.Random(seed)
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    sizes = [max(1, int(expected_m * rng.uniform(0.7, 1.3))) for _ in range(num_groups)]
    aligned = [-(-size // alignment) * alignment for size in sizes]
    m_indices = torch.full((sum(aligned),), -1, dtype=torch.int32)
    start = 0
    for group, (size, span) in enumerate(zip(sizes, aligned)):
        m_indices[start:start + size] = group
        start += span
    m_indices = m_indices.to(DEVICE)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((sum(aligned), k), gen))
    b, sfb = _weights(num_groups, n, k, gen)
    d = torch.full((sum(aligned), n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    if api == "latest":
        returned = deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    else:
        returned = deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    torch.cuda.synchronize()
    ref = deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, sfa, b, sfb, m_indices)
    return {"case": f"{api} contiguous sizes={sizes} n={n} k={k}", "returned_none": returned is None,
            **_compare(d, ref)}


def masked(max_m: int, masked_rows: list, expected_m: int, n: int, k: int, api: str = "latest",
           sfa_layout: str = "row", seed: int = 0) -> dict:
    """``m_grouped_fp8_gemm_nt_masked`` / ``m_grouped_gemm_fp8_fp8_bf16_nt_masked``: ``a`` [G, max_m, K]
    with ``masked_rows[g]`` valid rows in group g; ``sfa_layout`` "tma" as in :func:`gemm_nt` (3-D)."""
    gen, num_groups = _generator(seed), len(masked_rows)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((num_groups * max_m, k), gen))
    a, sfa = a.view(num_groups, max_m, k), sfa.view(num_groups, max_m, -1)
    if sfa_layout == "tma":
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    b, sfb = _weights(num_groups, n, k, gen)
    masked_m = torch.tensor(masked_rows, dtype=torch.int32, device=DEVICE)
    d = torch.full((num_groups, max_m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    if api == "latest":
        returned = deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    else:
        returned = deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    torch.cuda.synchronize()
    ref = deep_tile.ref_m_grouped_fp8_gemm_masked(a, sfa, b, sfb, masked_m)
    return {"case": f"{api} masked max_m={max_m} masked_m={masked_rows} n={n} k={k} sfa={sfa_layout}",
            "returned_none": returned is None, **_compare(d, ref)}


def psum(sizes: list, n: int, k: int, alignment: int = 128, tail: int = 0, graph: bool = False,
         seed: int = 0) -> dict:
    """``m_grouped_fp8_gemm_nt_contiguous(..., use_psum_layout=True)`` as vLLM calls it: expert g has
    ``sizes[g]`` rows (0: an empty expert) starting at the previous end rounded up to ``alignment``
    (set by ``set_mk_alignment_for_contiguous_layout``), ``tail`` more padding rows after the last;
    ``grouped_layout`` holds each expert's end. ``graph``: the call is captured in a CUDA graph with
    other ends first and replayed after the real ends are copied in (no host sync inside)."""
    gen, num_groups = _generator(seed), len(sizes)
    ends, start = [], 0
    for size in sizes:
        start = -(-start // alignment) * alignment
        ends.append(start + size)
        start += size
    m = ends[-1] + tail if ends else tail
    ends_gpu = torch.tensor(ends, dtype=torch.int32, device=DEVICE)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((m, k), gen))
    b, sfb = _weights(num_groups, n, k, gen)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    previous = deep_gemm.get_mk_alignment_for_contiguous_layout()
    deep_gemm.set_mk_alignment_for_contiguous_layout(alignment)
    try:
        call = lambda: deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends_gpu,  # noqa: E731
                                                                  use_psum_layout=True)
        if graph:
            real = ends_gpu.clone()
            ends_gpu.zero_()  # captured with every expert empty
            returned = call()  # compile and warm outside the capture
            torch.cuda.synchronize()
            graph_ = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph_):
                call()
            ends_gpu.copy_(real)
            d.fill_(float("nan"))
            graph_.replay()
        else:
            returned = call()
        torch.cuda.synchronize()
    finally:
        deep_gemm.set_mk_alignment_for_contiguous_layout(previous)
    m_indices = deep_tile.psum_to_m_indices(ends_gpu.cpu(), m, alignment).to(DEVICE)
    ref = deep_tile.ref_m_grouped_fp8_gemm_contiguous(a, sfa, b, sfb, m_indices)
    return {"case": f"psum sizes={sizes} tail={tail} align={alignment} n={n} k={k} graph={graph}",
            "returned_none": returned is None, **_compare(d, ref)}


def psum_layout(sizes: list, alignment: int, m: int, seed: int = 0) -> dict:
    """The device psum -> m_indices kernel against its CPU rule, on random or given ends (ends past
    m, equal ends); reported in _compare's form (diff 0 when equal, mismatches as written entries)."""
    ends = torch.tensor(sizes, dtype=torch.int32)
    want = deep_tile.psum_to_m_indices(ends, m, alignment)
    got = deep_tile.psum_to_m_indices(ends.to(DEVICE), m, alignment).cpu()
    bad = int((got != want).sum().item())
    return {"case": f"psum_to_m_indices ends={sizes} m={m} align={alignment}", "returned_none": True,
            "computed": m, "diff": float(bad), "nan_computed": 0, "untouched_written": bad}


def masked_signal(max_m: int, masked_rows: list, expected_m: int, n: int, k: int, seed: int = 0,
                  max_block_n: int = 256) -> dict:
    """SGLang's single-batch-overlap call: ``enable_overlap=True, max_block_n=..., signal=...`` into a
    zeroed signal of ``G * ceil(max_m / 64)`` int32 (SGLang's size) plus 3 guard entries; checks the
    GEMM as :func:`masked` and that exactly the real blocks' counters equal the returned threshold
    (the others and the guards stay 0), the combine's read ``signal[g * ceil(max_m / block_m) + j]``;
    the threshold is at least ``ceil(n / max_block_n)`` (tiles no wider than the cap)."""
    gen, num_groups = _generator(seed), len(masked_rows)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((num_groups * max_m, k), gen))
    a, sfa = a.view(num_groups, max_m, k), sfa.view(num_groups, max_m, -1)
    b, sfb = _weights(num_groups, n, k, gen)
    masked_m = torch.tensor(masked_rows, dtype=torch.int32, device=DEVICE)
    d = torch.full((num_groups, max_m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    size = num_groups * -(-max_m // 64)
    signal = torch.zeros(size + 3, dtype=torch.int32, device=DEVICE)
    block_m, threshold = deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m,
                                                                max_block_n=max_block_n, enable_overlap=True,
                                                                signal=signal)
    torch.cuda.synchronize()
    per_group = -(-max_m // block_m)
    want = torch.zeros(size + 3, dtype=torch.int32)
    for g, rows in enumerate(masked_rows):
        want[g * per_group: g * per_group + -(-min(rows, max_m) // block_m)] = threshold
    wrong_flags = int((signal.cpu() != want).sum().item())
    ref = deep_tile.ref_m_grouped_fp8_gemm_masked(a, sfa, b, sfb, masked_m)
    result = _compare(d, ref)
    result["untouched_written"] += wrong_flags  # a wrong flag fails the case like a stray store
    sane = block_m in (64, 128) and threshold >= -(-n // max_block_n)
    return {"case": f"masked+signal max_m={max_m} masked_m={masked_rows} n={n} k={k} max_block_n={max_block_n} "
                    f"block_m={block_m} threshold={threshold} wrong_flags={wrong_flags}",
            "returned_none": sane, **result}


_consumer = None


def _consumer_kernel():
    """tests/data/csrc/entry/signal_consumer.cu, compiled once per process."""
    global _consumer
    if _consumer is None:
        from pathlib import Path

        from deep_tile.jit import compiler
        from deep_tile.jit.runtime import load_kernel

        data = Path(__file__).resolve().parent / "data"
        built = compiler.compile_cubin(data / "csrc" / "entry" / "signal_consumer.cu", {}, "dt_signal_consumer",
                                       include_dir=data / "include")
        _consumer = load_kernel(built.cubin, "dt_signal_consumer")
    return _consumer


def signal_consumer(max_m: int, masked_rows: list, expected_m: int, n: int, k: int, watch: int = 8,
                    seed: int = 0, budget_kcycles: int = 2_000_000, allow_timeout: bool = False) -> dict:
    """A consumer on another stream, as SGLang's combine: ``watch`` CTAs (one per real block, spread
    over them, the last included) spin (acquire, a clock64 budget: a missing signal fails the case
    instead of hanging) on their block's counter while the signalling GEMM runs on ``watch`` fewer
    SMs (SGLang's set_num_sms), then copy the block's rows of ``d``. Checks: every CTA saw its
    counter at the threshold, each copy equals the final ``d`` bit for bit (the rows were complete
    when the counter said so; ``d`` is NaN-poisoned before), and the GEMM against float64. Reports
    how many CTAs were released while other counters were still below the threshold (the in-kernel
    signal's head start; informational). ``allow_timeout``: a CTA whose budget runs out is not a
    failure (compute-sanitizer may run the two kernels one after the other); it copies nothing."""
    from deep_tile.jit.runtime import KernelArgs

    gen, num_groups = _generator(seed), len(masked_rows)
    a, sfa = deep_tile.per_token_cast_to_fp8(_randn((num_groups * max_m, k), gen))
    a, sfa = a.view(num_groups, max_m, k), sfa.view(num_groups, max_m, -1)
    b, sfb = _weights(num_groups, n, k, gen)
    masked_m = torch.tensor(masked_rows, dtype=torch.int32, device=DEVICE)
    d = torch.full((num_groups, max_m, n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    signal = torch.zeros(num_groups * -(-max_m // 64), dtype=torch.int32, device=DEVICE)
    total_sms = deep_gemm.get_num_sms()

    def gemm():
        return deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m,
                                                      enable_overlap=True, signal=signal)

    kernel = _consumer_kernel()
    deep_gemm.set_num_sms(total_sms - watch)
    try:
        block_m, threshold = gemm()  # compiles the GEMM before the consumer spins
        torch.cuda.synchronize()
        per_group = -(-max_m // block_m)
        blocks = [(g, j) for g, rows in enumerate(masked_rows) for j in range(-(-min(rows, max_m) // block_m))]
        picked = sorted({blocks[round(i * (len(blocks) - 1) / max(1, watch - 1))] for i in range(watch)})
        ints = lambda values: torch.tensor(values, dtype=torch.int32, device=DEVICE)  # noqa: E731
        watch_index = ints([g * per_group + j for g, j in picked])
        row0 = ints([g * max_m + j * block_m for g, j in picked])
        rows = ints([min(block_m, min(masked_rows[g], max_m) - j * block_m) for g, j in picked])
        real = ints([g * per_group + j for g, j in blocks])
        copy = torch.zeros((len(picked), block_m, n), dtype=torch.int16, device=DEVICE)
        status = torch.zeros(2 * len(picked), dtype=torch.int32, device=DEVICE)
        d.fill_(float("nan"))
        signal.zero_()
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        args = KernelArgs([("ptr", signal.data_ptr()), ("ptr", watch_index.data_ptr()), ("ptr", row0.data_ptr()),
                           ("ptr", rows.data_ptr()), ("i32", threshold), ("ptr", d.data_ptr()), ("i32", n),
                           ("i32", block_m), ("ptr", copy.data_ptr()), ("ptr", real.data_ptr()), ("i32", len(blocks)),
                           ("i32", budget_kcycles), ("ptr", status.data_ptr())])
        kernel.launch(grid=len(picked), block=256, smem_bytes=0, stream=side.cuda_stream, args=args,
                      device=torch.cuda.current_device())
        gemm()
        torch.cuda.synchronize()
    finally:
        deep_gemm.set_num_sms(total_sms)
    state = status.view(-1, 2).cpu()
    timed_out = int((state[:, 0] != 1).sum().item())
    early = int((state[:, 1] > 0).sum().item())
    flat = d.view(num_groups * max_m, n).view(torch.int16)
    mismatched = 0
    for i, (g, j) in enumerate(picked):
        if state[i, 0] != 1:
            continue
        r0, count = g * max_m + j * block_m, int(rows[i].item())
        mismatched += int((copy[i, :count] != flat[r0:r0 + count]).sum().item())
    ref = deep_tile.ref_m_grouped_fp8_gemm_masked(a, sfa, b, sfb, masked_m)
    result = _compare(d, ref)
    result["untouched_written"] += (0 if allow_timeout else timed_out) + mismatched  # either fails the case
    return {"case": f"signal consumer max_m={max_m} masked_m={masked_rows} n={n} k={k} block_m={block_m} "
                    f"threshold={threshold} watched={len(picked)} timed_out={timed_out} stale_copied={mismatched} "
                    f"released_early={early}/{len(picked)}",
            "returned_none": True, "released_early": early, **result}


def k_grouped(form: str, m: int, n: int, ks: list, in_place: bool = True, seed: int = 0,
              transpose: str = "kernel") -> dict:
    """``k_grouped_fp8_gemm_{form}_contiguous`` as a trainer calls DeepGEMM's: dY [sum_k, m] and X
    [sum_k, n] quantised per channel along 128 tokens, NT form each group's K-major block in a flat
    buffer (scales [m, sum_k/128]), TN form the token rows as they are (scales [sum_k/128, m]);
    ``d`` [G, m, n] FP32 accumulated in place (``c=d``, as DeepGEMM's test) or, without ``c``,
    NaN-poisoned and written. ``transpose``: the TN form's DEEP_TILE_KGROUPED_TN_TRANSPOSE."""
    import os

    os.environ["DEEP_TILE_KGROUPED_TN_TRANSPOSE"] = transpose
    gen = _generator(seed)
    total = sum(ks)
    a_t, sfa = deep_tile.per_token_cast_to_fp8(_randn((m, total), gen))  # [m, T]: tokens contiguous
    b_t, sfb = deep_tile.per_token_cast_to_fp8(_randn((n, total), gen))
    ref = ref_k_grouped_fp8_gemm_1d1d(a_t, sfa, b_t, sfb, ks)
    if form == "nt":
        starts = [sum(ks[:g]) for g in range(len(ks))]
        a = (torch.cat([a_t[:, s:s + k].contiguous().view(-1) for s, k in zip(starts, ks)]), sfa)
        b = (torch.cat([b_t[:, s:s + k].contiguous().view(-1) for s, k in zip(starts, ks)]), sfb)
    else:
        a = (a_t.view(torch.uint8).t().contiguous().view(torch.float8_e4m3fn), sfa.t().contiguous())
        b = (b_t.view(torch.uint8).t().contiguous().view(torch.float8_e4m3fn), sfb.t().contiguous())
    layout = torch.tensor(ks, dtype=torch.int32, device=DEVICE)
    if in_place:
        d = torch.randn((len(ks), m, n), generator=gen, device=DEVICE, dtype=torch.float32)
        ref = ref + d.double()
        fn = getattr(deep_gemm, f"k_grouped_fp8_gemm_{form}_contiguous")
        returned = fn(a, b, d, ks, layout, d, recipe=(1, 1, 128))
    else:
        d = torch.full((len(ks), m, n), float("nan"), dtype=torch.float32, device=DEVICE)
        returned = getattr(deep_gemm, f"k_grouped_fp8_gemm_{form}_contiguous")(a, b, d, ks, layout)
    torch.cuda.synchronize()
    return {"case": f"k_grouped {form} m={m} n={n} ks={ks} in_place={in_place} transpose={transpose}",
            "returned_none": returned is None, **_compare(d, ref)}


def transpose_bytes(shapes: list, seed: int = 0) -> dict:
    """deep_tile.gemm.moe_layout.transpose_bytes_into on random bytes (every value, NaN patterns
    included) of one or two [rows, cols] matrices into outputs pre-filled with 0xA5: the number of
    bytes that differ from torch's transposed copy, and whether the kernel could run at all."""
    from deep_tile.gemm.moe_layout import transposable, transpose_bytes_into

    gen = _generator(seed)
    pairs = []
    for rows, cols in shapes:
        src = torch.randint(0, 256, (rows, cols), generator=gen, device=DEVICE, dtype=torch.int32)
        src = src.to(torch.uint8).view(torch.float8_e4m3fn)
        pairs.append((src, torch.full((cols, rows), 0xA5, dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn)))
    transpose_bytes_into(pairs)
    torch.cuda.synchronize()
    wrong = sum(int((dst.view(torch.uint8) != src.view(torch.uint8).t()).sum().item()) for src, dst in pairs)
    return {"case": f"transpose_bytes {shapes}", "wrong": wrong, "kernel": all(transposable(s) for s, _ in pairs)}


if __name__ == "__main__":
    serve(globals())
