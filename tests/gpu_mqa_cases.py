"""GPU checks of deep_tile.fp8_mqa_logits, run in a child process by tests/test_mqa_logits.py
(protocol: gpu_cases.serve); the input makers and the float64 formula serve the CPU tests too.

Each case draws fresh random inputs, poisons the memory the logits will land in (a NaN-filled
buffer of the same size is freed just before the call, so torch's caching allocator hands it back),
runs the kernel and compares with :func:`expected_logits` (float64): every entry inside a row's
range within a bound relative to the sum of the absolute terms, ``-inf`` outside with
``clean_logits``, and DeepGEMM's padded layout.
"""
from __future__ import annotations

import torch

RANGES = ("random", "causal", "empty", "full", "wide")
"""How the per-row ranges are drawn: random [ks, ke) inside the kv; causal (row i of the last
seq_len rows sees kv rows 0..seq_len_kv - seq_len + i); every range empty (ks == ke, some past
the end); the whole kv; ranges reaching past both ends (negative starts, ends past seq_len_kv:
the kernel clamps them)."""

REL_BOUND = 3e-5
"""The error allowed per entry, relative to kv_scale[j] * sum_h |w| * sum_d |q * kv| (float32 sums
of 128 products and then H heads)."""
WGMMA_REL_BOUND = 1e-3
"""The same for the wgmma and ring designs: Hopper's FP8 MMA adds its products with about 14 mantissa bits
(four k32 steps per dot product), the head sum is float32."""


def make_inputs(seq_len: int, seq_len_kv: int, heads: int, ranges: str, seed: int, device: str = "cpu") -> tuple:
    """(q, (kv, kv_scale), weights, ks, ke) on ``device``, drawn on the CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(seq_len, heads, 128, generator=gen).to(torch.float8_e4m3fn)
    kv = torch.randn(seq_len_kv, 128, generator=gen).to(torch.float8_e4m3fn)
    kv_scale = torch.rand(seq_len_kv, generator=gen) + 0.05
    weights = torch.randn(seq_len, heads, generator=gen)
    if ranges == "random":
        a = torch.randint(0, seq_len_kv + 1, (seq_len,), generator=gen)
        b = torch.randint(0, seq_len_kv + 1, (seq_len,), generator=gen)
        ks, ke = torch.minimum(a, b), torch.maximum(a, b)
    elif ranges == "causal":
        ks = torch.zeros(seq_len, dtype=torch.int64)
        ke = (torch.arange(seq_len) + seq_len_kv - seq_len + 1).clamp(0, seq_len_kv)
    elif ranges == "empty":
        ks = torch.randint(0, seq_len_kv + 2, (seq_len,), generator=gen)
        ke = ks.clone()
    elif ranges == "full":
        ks = torch.zeros(seq_len, dtype=torch.int64)
        ke = torch.full((seq_len,), seq_len_kv)
    elif ranges == "wide":
        ks = -torch.randint(0, 300, (seq_len,), generator=gen)
        ke = seq_len_kv + torch.randint(0, 300, (seq_len,), generator=gen)
    else:
        raise ValueError(ranges)
    tensors = (q, kv, kv_scale, weights, ks.to(torch.int32), ke.to(torch.int32))
    q, kv, kv_scale, weights, ks, ke = (t.to(device) for t in tensors)
    return q, (kv, kv_scale), weights, ks, ke


def expected_logits(q, kv_pair, weights, ks, ke) -> tuple:
    """(values, bound, inside) in float64 on the CPU, [seq_len, seq_len_kv] each: the formula
    written out (relu of each head's dot product, weighted, summed, times the kv row's scale), the
    error scale of each entry, and which entries are inside their row's clamped range."""
    kv, scale = (t.cpu().double() for t in kv_pair)
    q, weights = q.cpu().double(), weights.cpu().double()
    seq_len, heads, dim = q.shape
    values = torch.empty(seq_len, kv.shape[0], dtype=torch.float64)
    bound = torch.empty_like(values)
    for begin in range(0, seq_len, 32):  # [32, H, seq_len_kv] float64 at a time
        qc, wc = q[begin:begin + 32], weights[begin:begin + 32]
        rows = qc.shape[0]
        scores = (qc.reshape(rows * heads, dim) @ kv.T).reshape(rows, heads, -1)
        values[begin:begin + rows] = (scores.clamp(min=0) * wc[:, :, None]).sum(dim=1) * scale[None, :]
        magnitude = (qc.abs().reshape(rows * heads, dim) @ kv.abs().T).reshape(rows, heads, -1)
        bound[begin:begin + rows] = (magnitude * wc.abs()[:, :, None]).sum(dim=1) * scale[None, :]
    cols = torch.arange(kv.shape[0])
    inside = (cols[None, :] >= ks.cpu().long()[:, None]) & (cols[None, :] < ke.cpu().long()[:, None])
    return values, bound, inside


def check(got: torch.Tensor, q, kv_pair, weights, ks, ke, clean: bool, max_seqlen_k: int = 0,
          rel_bound: float = REL_BOUND) -> dict:
    """How ``got`` (float32 logits from fp8_mqa_logits) meets the expectation; ``ok`` says all."""
    values, bound, inside = expected_logits(q, kv_pair, weights, ks, ke)
    got = got.cpu().double()
    seq_len, seq_len_kv = values.shape
    if max_seqlen_k:
        # compressed: row i's column c holds kv row ks[i] + c, for c < min(ke - ks, max_seqlen_k)
        lo, hi = ks.cpu().long(), ke.cpu().long()
        wanted = torch.zeros(seq_len, max_seqlen_k, dtype=torch.bool)
        want = torch.zeros(seq_len, max_seqlen_k, dtype=torch.float64)
        scale = torch.zeros_like(want)
        for i in range(seq_len):
            start, end = max(int(lo[i]), 0), min(int(hi[i]), seq_len_kv)
            for j in range(start, end):
                c = j - int(lo[i])
                if c < max_seqlen_k:
                    wanted[i, c], want[i, c], scale[i, c] = True, values[i, j], bound[i, j]
        values, bound, inside = want, scale, wanted
    err = (got - values).abs()
    in_range = err[inside]
    worst = float((in_range / (bound[inside] + 1e-30)).max()) if in_range.numel() else 0.0
    in_ok = bool(in_range.numel() == 0 or (in_range <= rel_bound * bound[inside] + 1e-6).all())
    out_ok = True
    if clean:
        out_ok = bool((got[~inside] == float("-inf")).all())
    return {"ok": in_ok and out_ok and not bool(torch.isnan(got[inside]).any()), "worst_rel": worst,
            "in_range": int(inside.sum()), "in_ok": in_ok, "out_ok": out_ok}


def mqa(seq_len: int, seq_len_kv: int, heads: int, ranges: str, clean: bool = True, max_seqlen_k: int = 0,
        seed: int = 0, design: str = "cuda_core") -> dict:
    """One call of deep_tile.fp8_mqa_logits (kernel ``design``) on the GPU against the float64 formula."""
    import deep_tile
    from deep_tile.attention import logits_layout
    from deep_tile.kernels import mqa_logits as contract

    contract.DESIGN = design

    q, kv_pair, weights, ks, ke = make_inputs(seq_len, seq_len_kv, heads, ranges, seed, "cuda")
    rows, stride, columns = logits_layout(seq_len, seq_len_kv, heads, max_seqlen_k)
    poison = torch.full((rows, stride), float("nan"), device="cuda")
    del poison  # the allocator hands this block to the logits: unwritten entries stay NaN
    got = deep_tile.fp8_mqa_logits(q, kv_pair, weights, ks, ke, clean_logits=clean, max_seqlen_k=max_seqlen_k)
    torch.cuda.synchronize()
    layout_ok = (tuple(got.shape) == (seq_len, columns) and (seq_len <= 1 or got.stride(0) == stride)
                 and got.stride(1) == 1)
    result = check(got, q, kv_pair, weights, ks, ke, clean, max_seqlen_k,
                   REL_BOUND if design == "cuda_core" else WGMMA_REL_BOUND)
    result["layout_ok"] = layout_ok
    result["ok"] = result["ok"] and layout_ok
    return {"case": f"mqa {design} S={seq_len} S_kv={seq_len_kv} H={heads} {ranges} clean={clean} "
                    f"max_seqlen_k={max_seqlen_k}", **result}


def same_logits(seq_len: int, seq_len_kv: int, heads: int, ranges: str, clean: bool = True,
                max_seqlen_k: int = 0, seed: int = 0, design: str = "persistent_lean",
                base: str = "persistent") -> dict:
    """``design`` and ``base`` write the same bits: every logit (NaN-poisoned buffers, so an entry
    one writes and the other skips differs too)."""
    import deep_tile
    from deep_tile.attention import logits_layout
    from deep_tile.kernels import mqa_logits as contract

    q, kv_pair, weights, ks, ke = make_inputs(seq_len, seq_len_kv, heads, ranges, seed, "cuda")
    rows, stride, _ = logits_layout(seq_len, seq_len_kv, heads, max_seqlen_k)
    outs = []
    for name in (base, design):
        contract.DESIGN = name
        poison = torch.full((rows, stride), float("nan"), device="cuda")
        del poison  # the allocator hands this block to the logits: unwritten entries stay NaN
        got = deep_tile.fp8_mqa_logits(q, kv_pair, weights, ks, ke, clean_logits=clean, max_seqlen_k=max_seqlen_k)
        outs.append(got.cpu().contiguous())
        del got
    # the entries a call must write: all with cleaning, else those inside the rows' ranges
    lo, hi = ks.cpu().long().clamp(min=0), ke.cpu().long().clamp(max=seq_len_kv)
    cols = torch.arange(outs[0].shape[1])[None, :]
    if max_seqlen_k:
        written = (cols >= lo[:, None] - ks.cpu().long()[:, None]) & (cols < hi[:, None] - ks.cpu().long()[:, None])
    else:
        written = torch.ones_like(cols, dtype=torch.bool) if clean else (cols >= lo[:, None]) & (cols < hi[:, None])
    written = written.expand(outs[0].shape)
    same = outs[0].view(torch.int32) == outs[1].view(torch.int32)
    ok = outs[0].shape == outs[1].shape and bool(same[written].all())
    return {"case": f"same bits {design} vs {base} S={seq_len} S_kv={seq_len_kv} H={heads} {ranges} clean={clean} "
                    f"max_seqlen_k={max_seqlen_k}", "ok": bool(ok), "written": int(written.sum())}


def timed_graph(seq_len: int = 2048, seq_len_kv: int = 4096, heads: int = 64, design: str = "cuda_core") -> dict:
    """The call twice on a stream and once under a CUDA graph: the same logits each time."""
    import deep_tile
    from deep_tile.kernels import mqa_logits as contract

    contract.DESIGN = design

    q, kv_pair, weights, ks, ke = make_inputs(seq_len, seq_len_kv, heads, "causal", 1, "cuda")
    first = deep_tile.fp8_mqa_logits(q, kv_pair, weights, ks, ke).clone()
    second = deep_tile.fp8_mqa_logits(q, kv_pair, weights, ks, ke).clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = deep_tile.fp8_mqa_logits(q, kv_pair, weights, ks, ke)
    graph.replay()
    torch.cuda.synchronize()
    ok = torch.equal(first, second) and torch.equal(first, captured)
    return {"case": f"repeat+graph {design} S={seq_len} S_kv={seq_len_kv} H={heads}", "ok": bool(ok)}


if __name__ == "__main__":
    from gpu_cases import serve

    serve(globals())
