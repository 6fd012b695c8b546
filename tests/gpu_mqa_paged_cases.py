"""GPU checks of deep_tile.fp8_paged_mqa_logits and get_paged_mqa_logits_metadata, run in a child
process by tests/test_mqa_logits_paged.py (protocol: gpu_cases.serve); the input makers and the
float64 formula serve the CPU tests too.

Each case draws fresh random inputs as DeepGEMM's test does (a fused FP8 cache with a float32
scale per row, blocks handed out from a random permutation, per-token lengths at most the
sequence's last one, which is drawn around ``avg_kv``; drawn on the GPU, whose float64 also
computes the expectation), poisons the memory the logits will land in
(a NaN-filled buffer of the same size is freed just before the call, so torch's caching allocator
hands it back), runs the kernels and compares with :func:`expected_logits` (float64): every entry
inside a row's length within a bound relative to the sum of the absolute terms, ``-inf`` past it
with ``clean_logits``, and DeepGEMM's padded layout.
"""
from __future__ import annotations

import torch

REL_BOUND = 1e-3
"""The error allowed per entry, relative to scale[p] * sum_h |w| * sum_d |q * kv|: Hopper's FP8
MMA adds its products with about 14 mantissa bits (four k32 steps), the head sum is float32."""
CPU_REL_BOUND = 3e-5
"""The same for the CPU path (float32 sums)."""
LENGTHS = ("random", "zero", "full", "tiny")
"""How the lengths are drawn: the last token's around avg_kv (0.7x to 1.3x) and the others at most
it (DeepGEMM's test); every length zero; every token of a sequence at its last one's; lengths 0 to
3 (most sequences under one block)."""


def make_inputs(batch: int, next_n: int, heads: int, avg_kv: int, lengths: str, seed: int, device: str = "cpu",
                spare_blocks: int = 3, block_stride: int = 0) -> dict:
    """The arguments of fp8_paged_mqa_logits (less the schedule), drawn on ``device`` from ``seed``:
    ``q, kv_cache, weights, context_lens, block_table, max_context_len``. The cache has
    ``spare_blocks`` blocks no sequence uses; ``block_stride`` > 0 spaces the blocks that many bytes
    apart (a view of a larger buffer)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if lengths == "zero":
        last = torch.zeros(batch, dtype=torch.int64, device=device)
    elif lengths == "tiny":
        last = torch.randint(0, 4, (batch,), generator=gen, device=device)
    else:
        last = torch.randint(int(0.7 * avg_kv), int(1.3 * avg_kv) + 1, (batch,), generator=gen, device=device)
    if lengths == "random":
        lens = ((last[:, None] + 1) * torch.rand(batch, next_n, generator=gen, device=device)).long()
        lens = torch.minimum(lens, last[:, None])
    else:
        lens = last[:, None].expand(batch, next_n).clone()
    lens[:, -1] = last
    blocks_per_seq = (last + 63) // 64
    max_blocks = max(1, int(blocks_per_seq.max()) if batch else 1)
    num_blocks = int(blocks_per_seq.sum()) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    first = torch.cumsum(blocks_per_seq, 0) - blocks_per_seq  # each sequence's run of the permutation
    column = torch.arange(max_blocks, device=device)
    index = (first[:, None] + column[None, :]).clamp(max=num_blocks - 1)
    block_table = torch.where(column[None, :] < blocks_per_seq[:, None], order[index], 0).to(torch.int32)
    block_bytes = 64 * 132
    stride = block_stride or block_bytes
    raw = torch.zeros(num_blocks * stride, dtype=torch.uint8, device=device)
    flat = torch.as_strided(raw, (num_blocks, block_bytes), (stride, 1))
    for begin in range(0, num_blocks, 16384):  # bounded float32 temporaries
        end = min(num_blocks, begin + 16384)
        values = torch.randn(end - begin, 64, 128, generator=gen, device=device)
        scales = values.abs().amax(dim=2).clamp(min=1e-4) / 448.0
        fp8 = (values / scales[:, :, None]).to(torch.float8_e4m3fn)
        flat[begin:end, :64 * 128] = fp8.view(torch.uint8).reshape(end - begin, -1)
        flat[begin:end, 64 * 128:] = scales.float().contiguous().view(torch.uint8).reshape(end - begin, -1)
    q = torch.randn(batch, next_n, heads, 128, generator=gen, device=device).to(torch.float8_e4m3fn)
    weights = torch.randn(batch * next_n, heads, generator=gen, device=device)
    return dict(q=q, weights=weights, context_lens=lens.to(torch.int32), block_table=block_table,
                kv_cache=torch.as_strided(raw, (num_blocks, 64, 1, 132), (stride, 132, 132, 1)),
                max_context_len=max_blocks * 64)


def expected_logits(inputs: dict) -> tuple:
    """(values, bound, inside) in float64 on the inputs' device, [B * next_n, max_context_len] each:
    the formula written out from the cache's bytes (relu of each head's dot product, weighted,
    summed, times the row's scale), the error scale of each entry, and which entries are inside
    their row's length."""
    q = inputs["q"].double()
    weights = inputs["weights"].double()
    lens = inputs["context_lens"].long()
    table = inputs["block_table"].long()
    cache = inputs["kv_cache"]
    batch, next_n, heads, dim = q.shape
    width = inputs["max_context_len"]
    num_blocks = cache.shape[0]
    stride = cache.stride(0) if num_blocks > 1 else 64 * 132
    flat = torch.as_strided(cache, (num_blocks, 64 * 132), (stride, 1))
    kv_all = flat[:, :64 * 128].contiguous().view(torch.float8_e4m3fn).view(num_blocks, 64, dim)
    scale_all = flat[:, 64 * 128:].contiguous().view(torch.float32)
    values = torch.zeros(batch * next_n, width, dtype=torch.float64, device=q.device)
    bound = torch.zeros_like(values)
    cols = torch.arange(width, device=q.device)
    limit = min(width, 64 * table.shape[1])
    inside = cols[None, :] < lens.reshape(-1, 1).clamp(max=limit)
    extents = lens.clamp(min=0, max=limit).amax(dim=1).tolist() if batch else []
    for b in range(batch):
        extent = extents[b]
        if extent == 0:
            continue
        nblocks = -(-extent // 64)
        entries = table[b, :nblocks]
        valid = ((entries >= 0) & (entries < num_blocks)).double()  # other entries read as zero rows
        entries = entries.clamp(0, max(num_blocks - 1, 0))
        kv = (kv_all[entries].double() * valid[:, None, None]).reshape(-1, dim)[:extent]
        scale = (scale_all[entries].double() * valid[:, None]).reshape(-1)[:extent]
        qb, wb = q[b].reshape(next_n * heads, dim), weights[b * next_n:(b + 1) * next_n]
        scores = (qb @ kv.T).reshape(next_n, heads, extent)
        magnitude = (qb.abs() @ kv.abs().T).reshape(next_n, heads, extent)
        rows = slice(b * next_n, (b + 1) * next_n)
        values[rows, :extent] = (scores.clamp(min=0) * wb[:, :, None]).sum(dim=1) * scale[None, :]
        bound[rows, :extent] = (magnitude * wb.abs()[:, :, None]).sum(dim=1) * scale[None, :]
    return values, bound, inside


def check(got: torch.Tensor, inputs: dict, clean: bool, rel_bound: float = REL_BOUND) -> dict:
    """How ``got`` (float32 logits from fp8_paged_mqa_logits) meets the expectation; ``ok`` says all."""
    values, bound, inside = expected_logits(inputs)
    got = got.double()
    err = (got - values).abs()
    in_range = err[inside]
    worst = float((in_range / (bound[inside] + 1e-30)).max()) if in_range.numel() else 0.0
    in_ok = bool(in_range.numel() == 0 or (in_range <= rel_bound * bound[inside] + 1e-6).all())
    out_ok = bool((got[~inside] == float("-inf")).all()) if clean else True
    nan_inside = bool(torch.isnan(got[inside]).any())
    return {"ok": in_ok and out_ok and not nan_inside, "worst_rel": worst, "in_range": int(inside.sum()),
            "in_ok": in_ok, "out_ok": out_ok, "nan_inside": nan_inside}


def paged(batch: int, next_n: int, heads: int, avg_kv: int, lengths: str = "random", clean: bool = False,
          num_sms: int = 0, block_stride: int = 0, one_d: bool = False, bad_entries: bool = False,
          seed: int = 0, design: str = "four_ctas", same_as: str = "") -> dict:
    """One call of deep_tile.fp8_paged_mqa_logits (kernel design ``design``) on the GPU against the float64 formula, with the
    schedule from get_paged_mqa_logits_metadata over ``num_sms`` slots (0: the device's SMs);
    ``one_d``: the older 1-D ``context_lens`` (the sequences' lengths) is passed instead;
    ``bad_entries``: some block-table entries point outside the cache (-1, num_blocks); ``same_as``:
    also run that design on the same inputs (NaN-poisoned too) and ask for the same bits everywhere."""
    import deep_tile
    from deep_tile.paged_attention import paged_logits_stride, paged_schedule_reference, per_token_lengths

    inputs = make_inputs(batch, next_n, heads, avg_kv, lengths, seed, "cuda", block_stride=block_stride)
    given = inputs["context_lens"]
    if bad_entries:
        table = inputs["block_table"]
        table[0::2, 0] = -1
        table[1::2, 0] = inputs["kv_cache"].shape[0]
    if one_d:
        given = inputs["context_lens"][:, -1].contiguous()
        inputs["context_lens"] = per_token_lengths(given, next_n)  # what the expectation reads
    slots = num_sms or deep_tile.get_num_sms()
    schedule = deep_tile.get_paged_mqa_logits_metadata(given, 64, slots)
    schedule_ok = torch.equal(schedule.cpu(), paged_schedule_reference(inputs["context_lens"].cpu(), slots))
    width = inputs["max_context_len"]
    stride = paged_logits_stride(width)
    poison = torch.full((batch * next_n, max(stride, 1)), float("nan"), device="cuda")
    del poison  # the allocator hands this block to the logits: unwritten entries stay NaN
    got = deep_tile.fp8_paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"], given,
                                         inputs["block_table"], schedule, width, clean_logits=clean, design=design)
    torch.cuda.synchronize()
    layout_ok = (tuple(got.shape) == (batch * next_n, width) and (batch * next_n <= 1 or got.stride(0) == stride)
                 and got.stride(1) == 1)
    result = check(got, inputs, clean)
    result.update(layout_ok=layout_ok, schedule_ok=schedule_ok)
    result["ok"] = result["ok"] and layout_ok and schedule_ok
    if same_as:  # NaN where neither writes (clean off): compare the bits, NaN included
        got = got.clone()
        poison = torch.full((batch * next_n, max(stride, 1)), float("nan"), device="cuda")
        del poison
        other = deep_tile.fp8_paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"], given,
                                               inputs["block_table"], schedule, width, clean_logits=clean,
                                               design=same_as)
        torch.cuda.synchronize()
        same_bits = bool(torch.equal(got.contiguous().view(torch.int32), other.contiguous().view(torch.int32)))
        result.update(same_bits=same_bits)
        result["ok"] = result["ok"] and same_bits
    return {"case": f"paged B={batch} next_n={next_n} H={heads} avg_kv={avg_kv} {lengths} clean={clean} "
                    f"slots={slots} block_stride={block_stride} one_d={one_d} bad_entries={bad_entries} "
                    f"design={design} same_as={same_as or '-'}", **result}


def timed_graph(batch: int = 64, next_n: int = 2, heads: int = 64, avg_kv: int = 4096) -> dict:
    """Metadata and logits twice on a stream and once under a CUDA graph (both kernels captured):
    the same schedule and bit-identical logits inside the lengths each time."""
    import deep_tile

    inputs = make_inputs(batch, next_n, heads, avg_kv, "random", 1, "cuda")
    args = (inputs["q"], inputs["kv_cache"], inputs["weights"], inputs["context_lens"], inputs["block_table"])
    width = inputs["max_context_len"]
    slots = deep_tile.get_num_sms()
    schedule = deep_tile.get_paged_mqa_logits_metadata(inputs["context_lens"], 64, slots)
    first = deep_tile.fp8_paged_mqa_logits(*args, schedule, width, clean_logits=True).clone()
    second = deep_tile.fp8_paged_mqa_logits(*args, schedule, width, clean_logits=True).clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured_schedule = deep_tile.get_paged_mqa_logits_metadata(inputs["context_lens"], 64, slots)
        captured = deep_tile.fp8_paged_mqa_logits(*args, captured_schedule, width, clean_logits=True)
    graph.replay()
    torch.cuda.synchronize()
    ok = torch.equal(first, second) and torch.equal(first, captured) and torch.equal(schedule, captured_schedule)
    return {"case": f"repeat+graph B={batch} next_n={next_n} H={heads} avg_kv={avg_kv}", "ok": bool(ok)}


def occupancy(design: str = "tma_loader") -> dict:
    """The driver's resident CTAs per SM for each of ``design``'s logits kernels: a slot's CTAs
    together on one SM (four; ``tma_loader_wg``'s one) for every next_n and H."""
    from deep_tile.jit import runtime
    from deep_tile.jit.loader import get_kernel
    from deep_tile.kernels import paged_mqa_logits as contract

    device, per_sm = torch.cuda.current_device(), {}
    for next_n in contract.NEXT_N:
        for heads in contract.HEADS:
            kernel = get_kernel(contract.ENTRY, {}, contract.symbol(next_n, heads, design))
            smem = contract.smem_bytes(next_n, heads, design)
            kernel.ensure_smem_limit(device, smem)
            runtime._ensure_current_context(device)
            function = runtime.check(runtime.driver().cuKernelGetFunction(kernel.handle), "cuKernelGetFunction")
            per_sm[f"{next_n}:{heads}"] = int(runtime.check(runtime.driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                function, contract.threads(design), smem), "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    per_slot = contract.grid(1, design)[0]
    return {"case": f"occupancy {design}", "ok": all(v >= per_slot for v in per_sm.values()),
            "per_sm": per_sm}


if __name__ == "__main__":
    from gpu_cases import serve

    serve(globals())
