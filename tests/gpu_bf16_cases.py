"""GPU checks of deep_tile's BF16 GEMMs, run in a child process by tests/test_bf16_gemm.py
(protocol: gpu_cases.serve); the input makers serve the CPU tests and the benchmark too.

Each case draws fresh random bf16 inputs on the CPU, fills the output with NaN (unwritten entries
show), runs the kernel and compares with the float64 product: every entry within a bound relative
to the sum of the absolute terms (float32 accumulation; bf16 outputs add half an ulp of the value),
and DeepGEMM's calc_diff under 1e-5.
"""
from __future__ import annotations

import torch

LAYOUTS = ("nt", "nn", "tn", "tt")
"""DeepGEMM's layout suffixes: the first letter says whether ``a`` is given as [m, k] (n) or [k, m]
(t), the second whether ``b`` is given as [n, k] (t) or [k, n] (n)."""
F32_REL = 1e-5
"""Error allowed per entry relative to sum_k |a b| (+ |c|): float32 sums of exact bf16 products, with
room for the tensor cores' accumulation (one rounding per k16 step); a wrong operand tile gives O(1)."""
BF16_REL = 2.0 ** -8
"""The extra error of a bf16 output, relative to the entry (round to nearest)."""


def mn_major(x: torch.Tensor, device: str) -> torch.Tensor:
    """``x`` [rows, k] as a [k, rows] view on ``device`` whose row pitch is ``rows`` rounded up to 8
    elements (16 bytes: TMA's pitch rule, which DeepGEMM's layouts meet too), any ``rows``."""
    rows, k = x.shape
    buf = torch.zeros(k, -(-rows // 8) * 8, dtype=x.dtype, device=device)
    buf[:, :rows] = x.T.to(device)
    return buf[:, :rows]


def make_dense(m: int, n: int, k: int, layout: str, seed: int, device: str = "cpu") -> tuple:
    """(a_arg, b_arg, a [m, k] view, b [n, k] view): the operands as ``bf16_gemm_<layout>`` takes them."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    a_arg = mn_major(a, device) if layout[0] == "t" else a.to(device)
    b_arg = mn_major(b, device) if layout[1] == "n" else b.to(device)
    a_view = a_arg.T if layout[0] == "t" else a_arg
    b_view = b_arg.T if layout[1] == "n" else b_arg
    return a_arg, b_arg, a_view, b_view


def check(got: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None,
          rows: slice | None = None) -> dict:
    """``got`` against ``a @ b.T (+ c)`` in float64 (a [m, k], b [n, k] views): the per-entry bound
    and calc_diff."""
    from deep_tile.testing.numeric import calc_diff

    a64, b64 = a.double().cpu(), b.double().cpu()
    ref = a64 @ b64.T
    bound = a64.abs() @ b64.abs().T
    if c is not None:
        ref = ref + c.double().cpu()
        bound = bound + c.double().cpu().abs()
    out = got.double().cpu()
    if rows is not None:
        ref, bound, out = ref[rows], bound[rows], out[rows]
    allowed = F32_REL * bound + (BF16_REL * ref.abs() if got.dtype == torch.bfloat16 else 0) + 1e-30
    err = (out - ref).abs()
    nan = int(torch.isnan(out).sum())
    worst = float((err / allowed).max()) if out.numel() else 0.0
    diff = float(calc_diff(out, ref)) if out.numel() else 0.0
    ok = nan == 0 and worst <= 1.0 and diff < 1e-5
    return {"ok": ok, "nan": nan, "worst": worst, "diff": diff}


_RULE = {}


def _force_block_n(block_n: int | None, splits: int = 1, box_m: int = 128, legacy: bool = False,
                   cluster_m: int = 1, stages: int = 0, store_all: int = 0, block_m: int = 128,
                   k_merge: int = 1) -> None:
    """Run the next calls with tile width ``block_n``, ``splits``, ``box_m``, ``cluster_m``, ``stages``,
    ``store_all``, ``block_m`` and ``k_merge`` (block_n None: the plan's own choice); ``legacy``: the earlier
    selection (deep_tile.bf16.LEGACY)."""
    import deep_tile.bf16 as host
    from deep_tile.kernels import bf16_gemm as contract

    rules = _RULE.setdefault("rules", (contract.plan, contract.legacy_plan))
    host.LEGACY = True if legacy else None
    if block_n is None:
        contract.plan, contract.legacy_plan = rules
    else:
        forced = contract.Bf16Plan(block_n, splits, box_m, cluster_m, stages, store_all, block_m, k_merge)
        contract.plan = contract.legacy_plan = lambda *args, **kwargs: forced


def dense(m: int, n: int, k: int, layout: str = "nt", out: str = "bf16", accumulate: str = "none", seed: int = 0,
          block_n: int | None = None, splits: int = 1, box_m: int = 128, legacy: bool = False,
          cluster_m: int = 1, stages: int = 0, store_all: int = 0, block_m: int = 128, k_merge: int = 1,
          d_pad: int = 0) -> dict:
    """One ``bf16_gemm_<layout>`` call; ``accumulate``: "none", "c" (a separate c) or "inplace" (c is d);
    ``block_n`` / ``splits`` / ``box_m`` / ``cluster_m`` / ``stages`` / ``store_all`` / ``block_m`` /
    ``k_merge`` force the plan, ``legacy`` takes the earlier selection; ``d_pad`` > 0: d is a view of rows
    that many elements wider (its padding must stay untouched)."""
    import deep_tile

    _force_block_n(block_n, splits, box_m, legacy, cluster_m, stages, store_all, block_m, k_merge)
    a_arg, b_arg, a, b = make_dense(m, n, k, layout, seed, "cuda")
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    gen = torch.Generator().manual_seed(seed + 1)
    c = torch.randn(m, n, generator=gen).to(dtype).cuda() if accumulate != "none" else None
    full = torch.full((m, n + d_pad), float("nan"), dtype=dtype, device="cuda")
    d = full[:, :n]
    c_ref = c
    if accumulate == "inplace":
        d.copy_(c)
        c = d
    getattr(deep_tile, f"bf16_gemm_{layout}")(a_arg, b_arg, d, c=c)
    torch.cuda.synchronize()
    _force_block_n(None)
    result = check(d, a, b, c_ref)
    padding = bool(torch.isnan(full[:, n:].float()).all())
    return {"case": f"dense {layout} m={m} n={n} k={k} {out} acc={accumulate} block_n={block_n} splits={splits} "
                    f"box_m={box_m} cluster_m={cluster_m} stages={stages} store_all={store_all} block_m={block_m}"
                    f" d_pad={d_pad}{' legacy' if legacy else ''}", **result, "ok": result["ok"] and padding,
            "padding_untouched": padding}


def make_batched(groups: int, m: int, n: int, k: int, major_b: str, seed: int, device: str = "cpu",
                 pad: int = 8) -> tuple:
    """(a [G, m, k], b [G, n, k]): head-interleaved views as the per-head einsum passes them (a's rows
    hold every batch side by side, each ``pad`` elements wider; b K-major, or MN-major from [G, k, n + pad]);
    the padding is rounded up so that every stride stays a 16-byte multiple (TMA's rule) whatever k or n."""
    gen = torch.Generator().manual_seed(seed)
    inner_b = k if major_b == "k" else n
    pad_a, pad_b = pad + -(k + pad) % 8, pad + -(inner_b + pad) % 8
    a = torch.randn(m, groups, k + pad_a, generator=gen).to(torch.bfloat16).to(device)[:, :, :k].transpose(0, 1)
    if major_b == "k":
        b = torch.randn(groups, n, k + pad_b, generator=gen).to(torch.bfloat16).to(device)[:, :, :k]
    else:
        b = torch.randn(groups, k, n + pad_b, generator=gen).to(torch.bfloat16).to(device)[:, :, :n].transpose(1, 2)
    return a, b


def batched(groups: int, m: int, n: int, k: int, major_b: str = "k", out: str = "bf16", seed: int = 0,
            block_n: int | None = None, box_m: int = 128, stages: int = 0, block_m: int = 128, d_pad: int = 4,
            store: str = "auto") -> dict:
    """One ``batched_bf16_gemm_nt`` call on head-interleaved views (:func:`make_batched`) against float64,
    batch by batch, d's row padding untouched; ``block_n`` / ``box_m`` / ``stages`` / ``block_m`` force
    the plan (deep_tile.bf16.FORCE_PLAN); d's rows ``d_pad`` elements wider (bf16: 8 keeps the strides of
    an n a multiple of 8 16-byte, 4 those of an n of 4 past one, whose rows then end inside a 16-byte chunk);
    ``store``: BATCHED_STORES."""
    import deep_tile.bf16 as host
    from deep_tile.kernels import bf16_gemm as contract

    a, b = make_batched(groups, m, n, k, major_b, seed, "cuda")
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    full = torch.full((m, groups, n + d_pad), float("nan"), dtype=dtype, device="cuda")
    d = full[:, :, :n].transpose(0, 1)
    if block_n is not None:
        host.FORCE_PLAN = contract.Bf16Plan(block_n, 1, box_m, 1, stages, 0, block_m)
    try:
        assert host.batched_fits(a, b, d)
        plan = host.FORCE_PLAN or contract.batched_plan(groups, m, n, k, host.get_num_sms(), major_b)
        tma = store != "registers" and host.batched_store_fits(d, plan.block_n, plan.box_m, plan.block_m)
        host.batched_bf16_gemm_nt(a, b, d, store=store)
        torch.cuda.synchronize()
    finally:
        host.FORCE_PLAN = None
    results = [check(d[g], a[g], b[g]) for g in range(groups)]
    worst = max(results, key=lambda r: (not r["ok"], r["worst"]))
    padding = bool(torch.isnan(full[:, :, n:].float()).all())
    return {"case": f"batched G={groups} m={m} n={n} k={k} b:{major_b} {out} block_n={block_n} box_m={box_m} "
                    f"stages={stages} block_m={block_m} d_pad={d_pad} store={store}{' (tma)' if tma else ''}",
            **worst, "ok": all(r["ok"] for r in results) and padding, "padding_untouched": padding}


def make_contiguous(groups: int, expected_m: int, n: int, k: int, seed: int, major_b: str = "k",
                    device: str = "cpu") -> tuple:
    """(a [M, k], b [G, n, k] (MN-major storage when major_b is "mn"), m_indices [M], group sizes):
    each group's rows padded to 128 with ``-1`` rows of zeros, as DeepGEMM's tests draw them."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [max(1, int(expected_m * (0.7 + 0.6 * float(torch.rand(1, generator=gen))))) for _ in range(groups)]
    padded = [-(-s // 128) * 128 for s in sizes]
    m = sum(padded)
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(groups, n, k, generator=gen).to(torch.bfloat16)
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    start = 0
    for g, (s, p) in enumerate(zip(sizes, padded)):
        m_indices[start:start + s] = g
        a[start + s:start + p] = 0
        start += p
    if major_b == "mn":
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    return a.to(device), b.to(device), m_indices.to(device), sizes


def contiguous(groups: int, expected_m: int, n: int, k: int, major_b: str = "k", seed: int = 0,
               block_n: int | None = None) -> dict:
    """One ``m_grouped_bf16_gemm_nt_contiguous`` call; every row of every block checked (padding rows: zeros)."""
    import deep_tile

    _force_block_n(block_n)
    a, b, m_indices, _ = make_contiguous(groups, expected_m, n, k, seed, major_b, "cuda")
    d = torch.full((a.shape[0], n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_tile.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    torch.cuda.synchronize()
    result = {"ok": True, "nan": 0, "worst": 0.0, "diff": 0.0}
    idx = m_indices.cpu()
    for start in range(0, a.shape[0], 128):
        g = int(idx[start])
        r = check(d[start:start + 128], a[start:start + 128], b[g])
        result = {"ok": result["ok"] and r["ok"], "nan": result["nan"] + r["nan"],
                  "worst": max(result["worst"], r["worst"]), "diff": max(result["diff"], r["diff"])}
    return {"case": f"contiguous G={groups} m~{expected_m} n={n} k={k} b:{major_b} block_n={block_n}", **result}


def masked(groups: int, max_m: int, expected_m: int, n: int, k: int, seed: int = 0, block_n: int | None = None) -> dict:
    """One ``m_grouped_bf16_gemm_nt_masked`` call: rows below masked_m checked, the rest still NaN."""
    import deep_tile

    _force_block_n(block_n)
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(groups, max_m, k, generator=gen).to(torch.bfloat16).cuda()
    b = torch.randn(groups, n, k, generator=gen).to(torch.bfloat16).cuda()
    counts = [min(max_m, int(expected_m * (0.5 + float(torch.rand(1, generator=gen))))) for _ in range(groups)]
    counts[0] = 0 if groups > 1 else counts[0]  # an empty group
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    d = torch.full((groups, max_m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_tile.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    torch.cuda.synchronize()
    ok, worst, diff, untouched = True, 0.0, 0.0, True
    for g, rows in enumerate(counts):
        if rows:
            r = check(d[g, :rows], a[g, :rows], b[g])
            ok, worst, diff = ok and r["ok"], max(worst, r["worst"]), max(diff, r["diff"])
        untouched = untouched and bool(torch.isnan(d[g, rows:]).all())
    return {"case": f"masked G={groups} max_m={max_m} m~{expected_m} n={n} k={k} block_n={block_n}",
            "ok": ok and untouched, "worst": worst, "diff": diff, "untouched": untouched}


def compat_psum(groups: int = 4, expected_m: int = 300, n: int = 512, k: int = 256, seed: int = 0) -> dict:
    """DeepGEMM's psum-layout call through deep_tile.compat.deepgemm: each group's rows checked."""
    import deep_tile.compat.deepgemm as deep_gemm

    _force_block_n(None)
    a, b, m_indices, sizes = make_contiguous(groups, expected_m, n, k, seed, "k", "cuda")
    ends, start = [], 0
    for s in sizes:
        ends.append(start + s)
        start += -(-s // 128) * 128
    psum = torch.tensor(ends, dtype=torch.int32, device="cuda")
    d = torch.full((a.shape[0], n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)
    torch.cuda.synchronize()
    ok, worst, start = True, 0.0, 0
    for g, s in enumerate(sizes):
        r = check(d[start:start + s], a[start:start + s], b[g])
        ok, worst = ok and r["ok"], max(worst, r["worst"])
        start += -(-s // 128) * 128
    return {"case": f"compat psum G={groups}", "ok": ok, "worst": worst}


def k_grouped(ks: list, m: int, n: int, inplace: bool = False, seed: int = 0) -> dict:
    """One ``k_grouped_bf16_gemm_tn_contiguous`` call (c separate, or c is d) against float64 per group."""
    import deep_tile

    _force_block_n(None)
    gen = torch.Generator().manual_seed(seed)
    total = sum(ks)
    a = torch.randn(total, m, generator=gen).to(torch.bfloat16).cuda()
    b = torch.randn(total, n, generator=gen).to(torch.bfloat16).cuda()
    c = torch.randn(len(ks), m, n, generator=gen).cuda()
    d = c.clone() if inplace else torch.full_like(c, float("nan"))
    deep_tile.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"),
                                                d if inplace else c)
    torch.cuda.synchronize()
    ok, worst, start = True, 0.0, 0
    for g, kg in enumerate(ks):
        r = check(d[g], a[start:start + kg].T, b[start:start + kg].T, c[g])
        ok, worst = ok and r["ok"], max(worst, r["worst"])
        start += kg
    return {"case": f"k_grouped ks={ks} m={m} n={n} inplace={inplace}", "ok": ok, "worst": worst}


def repeat_graph(m: int = 1000, n: int = 2048, k: int = 1536, layout: str = "tn", out: str = "bf16",
                 accumulate: bool = False) -> dict:
    """The call twice on a stream and once under a CUDA graph (replayed twice, with new inputs copied
    in before the second replay): bitwise the same results, and the second replay right against float64.
    Small m takes the split-K plan (its workspace allocated under capture), float32 ``+=`` the TMA
    reduce-add."""
    import deep_tile

    _force_block_n(None)
    a_arg, b_arg, a, b = make_dense(m, n, k, layout, 3, "cuda")
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    c = torch.randn(m, n, generator=torch.Generator().manual_seed(4)).to(dtype).cuda() if accumulate else None
    fn = getattr(deep_tile, f"bf16_gemm_{layout}")

    def call(d):
        if c is not None:
            d.copy_(c)
        fn(a_arg, b_arg, d, c=d if c is not None else None)

    outs = []
    for _ in range(2):
        d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        call(d)
        outs.append(d)
    d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(d)
    graph.replay()
    torch.cuda.synchronize()
    same = bool(torch.equal(outs[0], outs[1]) and torch.equal(outs[0], d))
    a2_arg, b2_arg, a2, b2 = make_dense(m, n, k, layout, 5, "cuda")
    a_arg.copy_(a2_arg)
    b_arg.copy_(b2_arg)
    graph.replay()
    torch.cuda.synchronize()
    r = check(d, a2, b2, c)
    return {"case": f"repeat+graph {layout} m={m} n={n} k={k} {out} acc={accumulate}", **r, "ok": same and r["ok"],
            "same": same}


def split_counters(m: int = 100, n: int = 1000, k: int = 2048, block_n: int = 96, splits: int = 5, box_m: int = 128,
                   out: str = "bf16", repeats: int = 4, block_m: int = 128) -> dict:
    """The in-kernel split-K sum: ``repeats`` calls on the default stream and on a side stream, then a
    CUDA graph replayed with new inputs: every result right against float64, bitwise the same for the
    same inputs (the sum's order does not follow the splits' arrival), and every tile counter back at
    zero after each (the next launch and replay depend on it)."""
    import deep_tile
    import deep_tile.bf16 as host

    _force_block_n(block_n, splits, box_m, block_m=block_m)
    a_arg, b_arg, a, b = make_dense(m, n, k, "nt", 6, "cuda")
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    device = torch.device("cuda", torch.cuda.current_device())

    def counters_zero() -> bool:
        torch.cuda.synchronize()
        entry = host._counters.get(device.index)
        return entry is None or int(entry[0].count_nonzero()) == 0

    outs, zero = [], True
    side = torch.cuda.Stream()
    for i in range(2 * repeats):
        d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        with torch.cuda.stream(side if i % 2 else torch.cuda.current_stream()):
            deep_tile.bf16_gemm_nt(a_arg, b_arg, d)
        torch.cuda.synchronize()
        zero = zero and counters_zero()
        outs.append(d)
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    r0 = check(outs[0], a, b)
    d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_tile.bf16_gemm_nt(a_arg, b_arg, d)
    graph.replay()
    torch.cuda.synchronize()
    same = same and torch.equal(outs[0], d)
    zero = zero and counters_zero()
    a2_arg, b2_arg, a2, b2 = make_dense(m, n, k, "nt", 7, "cuda")
    a_arg.copy_(a2_arg)
    b_arg.copy_(b2_arg)
    d.fill_(float("nan"))
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    zero = zero and counters_zero()
    r = check(d, a2, b2)
    _force_block_n(None)
    return {"case": f"split counters m={m} n={n} k={k} {block_n}/{splits}/{box_m} {out}", **r,
            "ok": r["ok"] and r0["ok"] and same and zero, "same": same, "counters_zero": zero}


if __name__ == "__main__":
    from gpu_cases import serve

    serve(globals())
