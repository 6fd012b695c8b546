"""deep_tile.fp8_paged_mqa_logits and get_paged_mqa_logits_metadata (DeepSeek-V3.2's paged indexer
logits, DeepGEMM's names): argument checks before anything runs, the CPU path against the float64
formula (tests/gpu_mqa_paged_cases.py), DeepGEMM's output layout, the schedule (the schedule
kernel's arithmetic and the logits kernel's walk, transcribed, cover every cache block once),
the kernels' builds for sm_90a (no spills, no stack), the DeepGEMM compat names, and (marker
``gpu``) the kernels on a Hopper GPU against the float64 formula, in a child process with a timeout.
"""
from __future__ import annotations

import random

import pytest
import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from conftest import assert_spill_free, compiler_params, run_child_cases
from deep_tile.kernels import paged_mqa_logits as contract
from deep_tile.paged_attention import (fp8_paged_mqa_logits, get_paged_mqa_logits_metadata, paged_logits_stride,
                                       paged_schedule_reference)
from gpu_mqa_paged_cases import CPU_REL_BOUND, check, make_inputs


def _call(inputs: dict, schedule=None, clean: bool = False, **override):
    args = dict(inputs, **override)
    if schedule is None:
        schedule = get_paged_mqa_logits_metadata(args["context_lens"], 64, 5)
    return fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                args["block_table"], schedule, args["max_context_len"], clean)


# --------------------------------------------------------------------------------------------------
# The CPU path
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch,next_n,heads,avg_kv,lengths", [
    (3, 1, 32, 300, "random"), (4, 2, 64, 200, "random"), (2, 2, 32, 100, "zero"), (5, 1, 64, 100, "tiny"),
    (3, 2, 32, 130, "full"), (1, 1, 64, 64, "full"),
])
@pytest.mark.parametrize("clean", [True, False])
def test_cpu_path_matches_the_float64_formula(batch, next_n, heads, avg_kv, lengths, clean):
    inputs = make_inputs(batch, next_n, heads, avg_kv, lengths, seed=batch + next_n)
    got = _call(inputs, clean=clean)
    result = check(got, inputs, clean=True, rel_bound=CPU_REL_BOUND)  # the CPU path writes -inf past either way
    assert result["ok"], result


def test_float64_expectation_reads_bad_table_entries_as_zero_rows():
    inputs = make_inputs(4, 2, 32, 150, "random", seed=8)
    table = inputs["block_table"]
    table[0::2, 0], table[1::2, 0] = -1, inputs["kv_cache"].shape[0]
    got = _call(inputs, clean=True)  # the CPU path, itself held to zero rows above
    assert check(got, inputs, clean=True, rel_bound=CPU_REL_BOUND)["ok"]


def test_cpu_path_with_spaced_blocks_and_bad_table_entries():
    inputs = make_inputs(3, 2, 32, 200, "random", seed=9, block_stride=64 * 132 + 512)
    assert inputs["kv_cache"].stride(0) == 64 * 132 + 512
    assert check(_call(inputs, clean=True), inputs, clean=True, rel_bound=CPU_REL_BOUND)["ok"]
    # entries outside the cache read as zero rows: logits 0 there
    table = inputs["block_table"].clone()
    table[0, 0], table[1, 0] = -1, inputs["kv_cache"].shape[0]
    got = _call(inputs, block_table=table, clean=True)
    lens = inputs["context_lens"]
    for b in (0, 1):
        for t in range(2):
            n = min(64, int(lens[b, t]))
            assert torch.equal(got[2 * b + t, :n], torch.zeros(n)), (b, t)


def test_float64_formula_by_hand():
    # one sequence, one token, one row: two heads spelled out, relu drops the negative one
    inputs = make_inputs(1, 1, 32, 1, "full", seed=0)
    q = torch.zeros(1, 1, 32, 128)
    q[0, 0, 0, 0], q[0, 0, 1, 0] = 2.0, -1.0
    inputs["q"] = q.to(torch.float8_e4m3fn)
    w = torch.zeros(1, 32)
    w[0, 0], w[0, 1] = 3.0, 7.0
    inputs["weights"] = w
    cache = inputs["kv_cache"]
    flat = torch.as_strided(cache, (cache.shape[0], 64 * 132), (cache.stride(0), 1))
    block = int(inputs["block_table"][0, 0])
    row = torch.zeros(128)
    row[0] = 1.5
    flat[block, :128] = row.to(torch.float8_e4m3fn).view(torch.uint8)
    flat[block, 64 * 128:64 * 128 + 4] = torch.tensor([0.5]).view(torch.uint8)
    inputs["context_lens"] = torch.ones(1, 1, dtype=torch.int32)
    got = _call(inputs, clean=True)
    assert got[0, 0].item() == 0.5 * 3.0 * 2.0 * 1.5  # 7 * relu(-1.5) adds nothing
    assert got[0, 1:].eq(float("-inf")).all()


@pytest.mark.parametrize("max_context_len", [1, 64, 255, 256, 257, 1000])
def test_output_layout_is_deepgemms(max_context_len):
    stride = paged_logits_stride(max_context_len)
    assert stride % 256 == 0 and stride >= max_context_len and stride - max_context_len < 256
    inputs = make_inputs(3, 2, 32, 40, "random", seed=1)
    got = _call(inputs, max_context_len=max_context_len)
    assert tuple(got.shape) == (6, max_context_len) and got.dtype == torch.float32
    assert got.stride() == (stride, 1)


def test_lengths_past_max_context_len_or_the_table_are_cut():
    inputs = make_inputs(2, 1, 32, 300, "full", seed=4)
    got = _call(inputs, max_context_len=100, clean=True)
    full = _call(inputs, clean=True)
    assert torch.equal(got, full[:, :100])
    short = inputs["block_table"][:, :2]
    got = _call(inputs, block_table=short, clean=True)
    assert torch.equal(got[:, :128], full[:, :128]) and got[:, 128:].eq(float("-inf")).all()


# --------------------------------------------------------------------------------------------------
# The schedule
# --------------------------------------------------------------------------------------------------

def _device_schedule(lens: list, num_slots: int, threads: int = contract.SCHEDULE_THREADS) -> list:
    """paged_mqa_logits_schedule transcribed: per-thread chunks of sequences, their exclusive
    prefix, and the slots whose start falls inside each sequence."""
    batch = len(lens)
    units = [contract.units(max(row)) for row in lens]
    out = [None] * (num_slots + 1)
    total = sum(units)
    if total == 0:
        return [(batch, 0)] * (num_slots + 1)
    per = -(-batch // threads)
    for tid in range(threads):
        begin, end = min(batch, tid * per), min(batch, tid * per + per)
        prefix = sum(units[:begin])
        for b in range(begin, end):
            lo = -(-(prefix * num_slots) // total)
            hi = -(-((prefix + units[b]) * num_slots) // total)
            for i in range(lo, hi):
                assert out[i] is None, "two threads wrote one slot"
                out[i] = (b, i * total // num_slots - prefix)
            prefix += units[b]
    out[num_slots] = (batch, 0)
    assert all(entry is not None for entry in out), "a slot was not written"
    return out


def _seq_extent(lens: list, max_blocks: int, max_context_len: int) -> tuple:
    """(units(b), blocks(b)) of the cursors' walks: sequence b's 256-row units, and its 64-row blocks
    within the logits' width and the table."""
    def units(b):
        return contract.units(max(lens[b]))

    def blocks(b):
        extent = max(0, max(lens[b]))
        return min(min(extent, max_context_len) + 63, 64 * max_blocks) // 64

    return units, blocks


def _walk(lens: list, schedule: list, max_blocks: int, max_context_len: int) -> list:
    """The logits CTAs' cursors transcribed (PagedCursor): the (sequence, block) pairs each CTA takes."""
    units, blocks = _seq_extent(lens, max_blocks, max_context_len)
    taken = []
    for slot in range(len(schedule) - 1):
        (b, s), (end_b, end_s) = schedule[slot], schedule[slot + 1]
        for group in range(contract.CTAS_PER_SLOT):
            cb, cs = b, s
            has = lambda: cb < end_b or (cb == end_b and cs < end_s)  # noqa: E731
            while has():
                if cs >= units(cb):
                    cb, cs = cb + 1, 0
                elif cs * 4 + group >= blocks(cb):
                    cs += 1
                else:
                    taken.append((cb, cs * 4 + group, slot))
                    cs += 1
    return taken


@pytest.mark.parametrize("seed", range(12))
def test_schedule_covers_every_block_once_and_balances(seed):
    rng = random.Random(seed)
    batch = rng.choice([0, 1, 3, 17, 132, 1025, 2500])
    next_n = rng.choice([1, 2])
    num_slots = rng.choice([1, 4, 78, 132])
    scale = rng.choice([0, 3, 64, 256, 300, 5000])
    lens = [[rng.randint(0, scale) for _ in range(next_n)] for _ in range(batch)]
    if batch and seed % 3 == 0:
        lens[rng.randrange(batch)] = [0] * next_n  # a zero-length sequence inside the batch
    context_lens = torch.tensor(lens, dtype=torch.int32).reshape(batch, next_n)
    ref = [tuple(map(int, row)) for row in paged_schedule_reference(context_lens, num_slots).tolist()]
    assert ref == _device_schedule(lens, num_slots)
    assert ref == [tuple(row) for row in get_paged_mqa_logits_metadata(context_lens, 64, num_slots).tolist()]
    assert ref[-1] == (batch, 0)
    max_blocks = max([-(-max(row) // 64) for row in lens] + [1])
    taken = _walk(lens, ref, max_blocks, 64 * max_blocks)
    pairs = [(b, blk) for b, blk, _ in taken]
    wanted = [(b, blk) for b in range(batch) for blk in range(-(-max(lens[b]) // 64))]
    assert sorted(pairs) == sorted(wanted) and len(set(pairs)) == len(pairs)
    per_slot = [0] * num_slots
    for b, blk, slot in taken:
        per_slot[slot] += 1
    units = [sum(1 for b, blk, sl in taken if sl == i and blk % 4 == 0) for i in range(num_slots)]
    if taken:  # the slots' 256-row units differ by at most one (their last blocks may be partial)
        assert max(units) - min(units) <= 1, units


def _fast_walk(lens: list, schedule: list, max_blocks: int, max_context_len: int) -> list:
    """kPagedTmaLean's walk transcribed (PagedCursor with PagedFastWalk): ++s while s + 1 is under
    the walk's bound, PagedCursor::next at it, and "has a unit" read as s < bound."""
    units, blocks = _seq_extent(lens, max_blocks, max_context_len)
    taken = []
    for slot in range(len(schedule) - 1):
        (b0, s0), (end_b, end_s) = schedule[slot], schedule[slot + 1]
        for group in range(contract.CTAS_PER_SLOT):
            c = {"b": b0, "s": s0, "units": 0, "blocks": 0}

            def has():
                return c["b"] < end_b or (c["b"] == end_b and c["s"] < end_s)

            def load():
                c["units"], c["blocks"] = units(c["b"]), blocks(c["b"])

            def settle():
                while has():
                    if c["s"] >= c["units"]:
                        c["b"], c["s"] = c["b"] + 1, 0
                        if has():
                            load()
                    elif c["s"] * 4 + group >= c["blocks"]:
                        c["s"] += 1
                    else:
                        break

            def bound():
                if not has():
                    return 0
                splits = (c["blocks"] - group + 3) // 4 if c["blocks"] > group else 0
                limit = min(c["units"], splits)
                return min(limit, end_s) if c["b"] == end_b else limit

            if has():
                load()
            settle()
            limit = bound()
            while True:
                assert has() == (c["s"] < limit), (slot, group, c, limit)
                if c["s"] >= limit:
                    break
                taken.append((c["b"], c["s"] * 4 + group, slot))
                if c["s"] + 1 < limit:
                    c["s"] += 1
                else:
                    c["s"] += 1
                    settle()
                    limit = bound()
    return taken


@pytest.mark.parametrize("seed", range(24))
def test_fast_walk_takes_the_cursors_blocks_in_their_order(seed):
    rng = random.Random(1000 + seed)
    batch = rng.choice([0, 1, 3, 17, 132, 700])
    next_n = rng.choice([1, 2])
    num_slots = rng.choice([1, 3, 4, 78, 132, 300])
    scale = rng.choice([0, 3, 64, 256, 300, 5000])
    lens = [[rng.randint(-2 if seed % 5 == 0 else 0, scale) for _ in range(next_n)] for _ in range(batch)]
    if batch and seed % 3 == 0:
        lens[rng.randrange(batch)] = [0] * next_n
    context_lens = torch.tensor(lens, dtype=torch.int32).reshape(batch, next_n)
    schedule = [tuple(map(int, row)) for row in paged_schedule_reference(context_lens, num_slots).tolist()]
    full_blocks = max([-(-max(row) // 64) for row in lens] + [1])
    for max_blocks, max_context_len in ((full_blocks, 64 * full_blocks), (max(1, full_blocks // 2), 64 * full_blocks),
                                        (full_blocks, max(1, scale // 3)), (1, 1)):
        assert _fast_walk(lens, schedule, max_blocks, max_context_len) == _walk(lens, schedule, max_blocks,
                                                                                  max_context_len)


def _quad_halve(x: list, kbit: int, upper: list, offset: int) -> list:
    """mqa_quad_halve over a warp transcribed: x[lane] -> y[lane], float32 adds in its order."""
    m = len(x[0])
    out = []
    for lane in range(32):
        y = []
        for t in range(m // 2):
            lo = ((t >> kbit) << (kbit + 1)) | (t & ((1 << kbit) - 1))
            hi = lo | (1 << kbit)
            keep = x[lane][hi] if upper[lane] else x[lane][lo]
            partner = lane ^ offset
            give = x[partner][lo] if upper[partner] else x[partner][hi]
            y.append(torch.tensor(keep, dtype=torch.float32) + torch.tensor(give, dtype=torch.float32))
        out.append([float(v) for v in y])
    return out


@pytest.mark.parametrize("next_n", contract.NEXT_N)
def test_lean_reduce_scatter_gives_each_lane_the_butterflys_sum(next_n):
    # paged_block_lean: x[2 t + h] per lane (token t at kv row r0 + 8 h, the lane's columns); lane q
    # stores token paged_lean_token(q) at half paged_lean_half(q), only q % 4 < 2 with one token
    gen = torch.Generator().manual_seed(next_n)
    x = [[float(v) for v in torch.randn(2 * next_n, generator=gen, dtype=torch.float32) * 1e3] for _ in range(32)]

    def f32(a, b):
        return float(torch.tensor(a, dtype=torch.float32) + torch.tensor(b, dtype=torch.float32))

    # paged_store_rows' butterfly: s += shfl_xor(s, 1); s += shfl_xor(s, 2), per (token, half)
    pair = [[f32(x[q][i], x[q ^ 1][i]) for i in range(2 * next_n)] for q in range(32)]
    full = [[f32(pair[q][i], pair[q ^ 2][i]) for i in range(2 * next_n)] for q in range(32)]
    if next_n == 2:
        y = _quad_halve(x, 1, [q & 1 != 0 for q in range(32)], 1)
        z = [v[0] for v in _quad_halve(y, 0, [q & 2 != 0 for q in range(32)], 2)]
    else:
        y = [v[0] for v in _quad_halve(x, 0, [q & 1 != 0 for q in range(32)], 1)]
        z = [f32(y[q], y[q ^ 2]) for q in range(32)]
    stored = {}
    for q in range(32):
        token, half = (q & 1, (q >> 1) & 1) if next_n == 2 else (0, q & 1)
        if next_n == 2 or q & 2 == 0:
            key = (q >> 2, token, half)  # (row quad, token, kv row half)
            assert key not in stored, "two lanes store one logit"
            stored[key] = z[q]
            assert z[q] == full[q][2 * token + half]  # the same bits as the butterfly's
    assert len(stored) == 8 * 2 * next_n  # every (row quad, token, half) once


def test_schedule_uses_the_longest_token():
    # DeepGEMM reads the last token's length; deep_tile the longest, the same when the last is longest
    context_lens = torch.tensor([[300, 10], [0, 513]], dtype=torch.int32)
    schedule = get_paged_mqa_logits_metadata(context_lens, 64, 3)
    assert schedule.tolist() == [[0, 0], [0, 1], [1, 1], [2, 0]]  # units 2 and 3: slots start at 0, 1, 3


def _pipeline(seqs: list, stages: int, q_slots: int) -> int:
    """The logits kernel's copy pipeline transcribed (issue / wait / consume over the CTA's blocks,
    ``seqs[i]`` the sequence of block i), asserting at every step that the block in use has been
    issued and waited for, that no copy lands in a stage whose block is unconsumed and that no
    q slot is rewritten while a block of its sequence is unconsumed. Returns the largest number of
    blocks in flight."""
    numbers = []  # the sequence number of each block: sequence changes along the walk
    for i, b in enumerate(seqs):
        numbers.append(0 if i == 0 else numbers[-1] + (b != seqs[i - 1]))
    issued, most = 0, 0
    slot_owner = {}
    stage_block = {}

    def can_issue(last, consumer_seq):
        return issued < len(seqs) and issued <= last and numbers[issued] - consumer_seq < q_slots

    def issue(consumed_before):
        nonlocal issued
        t = issued
        old = stage_block.get(t % stages)
        assert old is None or old < consumed_before, ("stage reused too early", t, old)
        stage_block[t % stages] = t
        if t == 0 or numbers[t] != numbers[t - 1]:  # a new sequence: its q slot is written
            slot = numbers[t] % q_slots
            owner = slot_owner.get(slot)
            in_use = [i for i in range(consumed_before, t) if numbers[i] == owner]
            assert owner is None or not in_use, ("q slot rewritten in use", t, owner)
            slot_owner[slot] = numbers[t]
        issued += 1

    while can_issue(stages - 2, 0):
        issue(0)
    for it in range(len(seqs)):
        ahead = issued - 1 - it
        late = ahead < 0
        # two q slots: every block is in flight before its wait; one slot: a sequence's first block
        # is issued after the wait (then waited for again)
        assert not late or (q_slots == 1 and ahead == -1 and numbers[it] != numbers[it - 1]), \
            ("block not issued before its wait", it)
        assert ahead <= stages - 2
        while can_issue(it + stages - 1, numbers[it]):
            issue(it)
        if late:
            ahead = issued - 1 - it
            assert 0 <= ahead <= stages - 1, ("late block not issued", it)
        most = max(most, ahead + 1)
        assert slot_owner[numbers[it] % q_slots] == numbers[it], ("q slot holds another sequence", it)
        assert stage_block[it % stages] == it
    return most


@pytest.mark.parametrize("seed", range(40))
def test_copy_pipeline_never_overwrites_what_is_in_use(seed):
    rng = random.Random(seed)
    seqs, b = [], 0
    for _ in range(rng.randint(1, 12)):  # runs of blocks per sequence, many of them short
        seqs += [b] * rng.choice([1, 1, 2, 3, 7, 40])
        b += rng.randint(1, 3)
    pairs = {(contract.STAGES[d][n], contract.Q_SLOTS[d][n]) for d in contract.DESIGNS for n in contract.STAGES[d]}
    for stages, q_slots in sorted(pairs | {(s, q) for s in (2, 3) for q in (1, 2)}):
        most = _pipeline(seqs, stages, q_slots)
        if len(set(seqs)) == 1:  # one sequence: the ring runs full
            assert most == min(len(seqs), stages - 1)


# --------------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------------

def _inputs():
    return make_inputs(2, 2, 32, 100, "random", seed=2)


@pytest.mark.parametrize("change,error,match", [
    (dict(q="no"), TypeError, "q must be a torch.Tensor"),
    (dict(q=torch.zeros(2, 2, 32, 128)), ValueError, "float8_e4m3fn"),
    (dict(q=torch.zeros(2, 3, 32, 128, dtype=torch.float8_e4m3fn)), ValueError, "next_n"),
    (dict(q=torch.zeros(2, 2, 16, 128, dtype=torch.float8_e4m3fn)), ValueError, "H in"),
    (dict(q=torch.zeros(2, 2, 32, 64, dtype=torch.float8_e4m3fn)), ValueError, "128"),
    (dict(kv_cache=torch.zeros(4, 64, 1, 132)), ValueError, "uint8"),
    (dict(kv_cache=torch.zeros(4, 32, 1, 132, dtype=torch.uint8)), ValueError, "kv_cache must be"),
    (dict(kv_cache=torch.zeros(4, 64, 1, 68, dtype=torch.uint8)), ValueError, "kv_cache must be"),
    (dict(kv_cache=torch.as_strided(torch.zeros(4 * 8452, dtype=torch.uint8), (4, 64, 1, 132), (8452, 132, 132, 1))),
     ValueError, "16 bytes"),
    (dict(weights=torch.zeros(4, 32, dtype=torch.float64)), ValueError, "weights"),
    (dict(weights=torch.zeros(32, 4).t()), ValueError, "weights"),
    (dict(weights=torch.zeros(2, 32)), ValueError, "weights"),
    (dict(context_lens=torch.zeros(3, dtype=torch.int32)), ValueError, "context_lens must be"),
    (dict(context_lens=torch.zeros(2, 2, 1, dtype=torch.int32)), ValueError, "int32 \\[batch, next_n\\]"),
    (dict(context_lens=torch.zeros(2, 2, dtype=torch.int64)), ValueError, "int32"),
    (dict(context_lens=torch.zeros(2, 1, dtype=torch.int32)), ValueError, "context_lens must be"),
    (dict(context_lens=torch.zeros(2, 4, dtype=torch.int32)[:, ::2]), ValueError, "contiguous"),
    (dict(block_table=torch.zeros(2, 4, dtype=torch.int64)), ValueError, "block_table"),
    (dict(block_table=torch.zeros(3, 4, dtype=torch.int32)), ValueError, "block_table"),
    (dict(block_table=torch.zeros(4, 2, dtype=torch.int32).t()), ValueError, "block_table"),
    (dict(max_context_len=2.0), TypeError, "max_context_len"),
    (dict(max_context_len=True), TypeError, "max_context_len"),
    (dict(max_context_len=-1), ValueError, "max_context_len"),
])
def test_bad_arguments_raise_before_anything_runs(change, error, match):
    inputs = _inputs()
    schedule = get_paged_mqa_logits_metadata(inputs["context_lens"], 64, 4)
    with pytest.raises(error, match=match):
        _call(inputs, schedule=schedule, **change)


def test_bad_schedule_and_flags_raise():
    inputs = _inputs()
    for bad in (torch.zeros(5, 2, dtype=torch.int64), torch.zeros(5, 3, dtype=torch.int32),
                torch.zeros(1, 2, dtype=torch.int32), torch.zeros(2, 5, dtype=torch.int32).t()):
        with pytest.raises(ValueError, match="schedule_meta"):
            _call(inputs, schedule=bad)
    with pytest.raises(TypeError, match="clean_logits"):
        _call(inputs, clean=1)
    schedule = get_paged_mqa_logits_metadata(inputs["context_lens"], 64, 5)
    with pytest.raises(ValueError, match="design"):
        fp8_paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"], inputs["context_lens"],
                             inputs["block_table"], schedule, inputs["max_context_len"], design="fast")
    with pytest.raises(ValueError, match="block_kv"):
        get_paged_mqa_logits_metadata(inputs["context_lens"], 32, 4)
    with pytest.raises(ValueError, match="num_sms"):
        get_paged_mqa_logits_metadata(inputs["context_lens"], 64, 0)
    with pytest.raises(TypeError, match="num_sms"):
        get_paged_mqa_logits_metadata(inputs["context_lens"], 64, 4.0)
    with pytest.raises(ValueError, match="context_lens"):
        get_paged_mqa_logits_metadata(inputs["context_lens"][:, :, None], 64, 4)
    with pytest.raises(TypeError, match="context_lens"):
        get_paged_mqa_logits_metadata([1, 2], 64, 4)


def test_one_dimensional_context_lens_is_deepgemms_older_form():
    # [B]: token t of sequence b sees context_lens[b] - next_n + t + 1 rows (causal within the step)
    inputs = make_inputs(3, 2, 64, 200, "full", seed=6)
    last = inputs["context_lens"][:, -1].contiguous()
    two_d = torch.stack([last - 1, last], dim=1).to(torch.int32)
    schedule = get_paged_mqa_logits_metadata(last, 64, 4)
    assert torch.equal(schedule, get_paged_mqa_logits_metadata(two_d, 64, 4))
    got = _call(inputs, schedule=schedule, context_lens=last, clean=True)
    assert torch.equal(got, _call(inputs, schedule=schedule, context_lens=two_d, clean=True))


def test_empty_batch_and_zero_width():
    inputs = make_inputs(0, 1, 32, 100, "random", seed=0)
    got = _call(inputs)
    assert tuple(got.shape) == (0, inputs["max_context_len"])
    inputs = make_inputs(2, 1, 32, 100, "random", seed=0)
    got = _call(inputs, max_context_len=0, clean=True)
    assert tuple(got.shape) == (2, 0)


# --------------------------------------------------------------------------------------------------
# The kernels' contract and builds
# --------------------------------------------------------------------------------------------------

def test_contract_geometry():
    assert contract.symbol(1, 32, "four_ctas") == "deep_tile_paged_mqa_logits_n1_h32"
    assert contract.symbol(2, 64) == "deep_tile_paged_mqa_logits_n2_h64_tma_loader"
    for bad in ((3, 64), (1, 16), (0, 32)):
        with pytest.raises(ValueError):
            contract.symbol(*bad)
    assert contract.SPLIT_KV == contract.BLOCK_KV * contract.CTAS_PER_SLOT
    assert contract.grid(132) == (528, 1, 1) and contract.grid(132, "tma_loader_wg") == (132, 1, 1)
    assert contract.symbol(2, 64, "two_slots") == "deep_tile_paged_mqa_logits_n2_h64_two_slots"
    with pytest.raises(ValueError, match="design"):
        contract.symbol(1, 32, "other")
    assert contract.smem_bytes(2, 64) == contract.smem_bytes(2, 64, "tma_loader") and contract.DESIGNS[0] == "tma_loader"
    assert contract.symbol(1, 32, contract.FALLBACK) == "deep_tile_paged_mqa_logits_n1_h32"
    # a call naming no design: tma_loader_wg at N 128 (its weights in registers), tma_loader elsewhere
    for next_n, heads, want in ((2, 64, "tma_loader_wg"), (1, 64, "tma_loader"), (2, 32, "tma_loader"),
                                (1, 32, "tma_loader")):
        assert contract.pick_design(next_n, heads) == want, (next_n, heads)
        # ... and tma_loader_wg at every N for a long call (from LONG_BLOCKS_PER_SLOT blocks per slot)
        assert contract.pick_design(next_n, heads, contract.LONG_BLOCKS_PER_SLOT - 1) == want, (next_n, heads)
        assert contract.pick_design(next_n, heads, contract.LONG_BLOCKS_PER_SLOT) == "tma_loader_wg", (next_n, heads)
    # the host's bound of a call's blocks per slot: DeepGEMM's test shapes fall on either side of the threshold
    assert contract.blocks_per_slot(256, 10650, 10 ** 6, 132) == 256 * 167 // 132 < contract.LONG_BLOCKS_PER_SLOT
    assert contract.blocks_per_slot(256, 85200, 10 ** 6, 132) >= contract.LONG_BLOCKS_PER_SLOT
    assert contract.blocks_per_slot(4096, 10650, 10 ** 6, 132) >= contract.LONG_BLOCKS_PER_SLOT
    assert contract.blocks_per_slot(4096, 10650, 10, 132) == 4096 * 10 // 132  # the table's blocks bound it
    assert contract.blocks_per_slot(3, 0, 5, 132) == 0 and contract.blocks_per_slot(7, 64, 1, 0) == 7
    assert contract.symbol(1, 32) == "deep_tile_paged_mqa_logits_n1_h32_tma_loader"
    for design in contract.DESIGNS:
        for next_n in contract.NEXT_N:
            for heads in contract.HEADS:
                smem = contract.smem_bytes(next_n, heads, design)
                n = next_n * heads
                if design == "tma_loader_wg":  # four tma_loader layouts, each on the swizzle's 1024-byte period
                    one = contract.smem_bytes(next_n, heads, "tma_loader") - 1024
                    assert smem == 1024 + 4 * ((one + 1023) // 1024 * 1024) <= 227 * 1024, (n, smem)
                    assert contract.threads(design) == 640 and contract.STAGES[design] == contract.STAGES["tma_loader"]
                    assert contract.Q_SLOTS[design] == contract.Q_SLOTS["tma_loader"]
                    continue
                loader = design == "tma_loader"  # an empty mbarrier and a record per stage, an mbarrier per q slot
                assert smem == 1024 + contract.Q_SLOTS[design][n] * (n * 128 + 4 * n + (8 if loader else 0)) + \
                    contract.STAGES[design][n] * (8192 + 256 + (32 if loader else 8 if design in contract.TMA_DESIGNS
                                                                else 0))
                per_sm = 228 * 1024 // (smem + 1024)  # the SM's shared memory, 1 KiB reserved per CTA
                want = 2 if (n == 128 and design == "two_slots") else contract.CTAS_PER_SLOT
                # the loader's two stages leave room for more CTAs than a slot's four
                assert per_sm >= want if loader else per_sm == want, (design, n, per_sm)
                if design in contract.TMA_DESIGNS and not loader:
                    assert smem == contract.smem_bytes(next_n, heads, "four_ctas") + 8 * contract.STAGES[design][n]
                assert contract.threads(design) == (160 if loader else 128)
    assert contract.units(0) == 0 and contract.units(-5) == 0 and contract.units(256) == 1 and contract.units(257) == 2
    assert contract.clean_grid(0, 132) == (1, 1, 1) and contract.clean_grid(10 ** 6, 132) == (1056, 1, 1)
    assert len(contract.LOGITS_ARGUMENT_KINDS) == 14 and len(contract.SCHEDULE_ARGUMENT_KINDS) == 5
    assert len(contract.CLEAN_ARGUMENT_KINDS) == 6


SYMBOLS = [contract.symbol(n, h, d) for d in contract.DESIGNS for n in contract.NEXT_N for h in contract.HEADS]
ALL_SYMBOLS = SYMBOLS + [contract.SCHEDULE_SYMBOL, contract.CLEAN_SYMBOL]


@pytest.mark.parametrize("name", compiler_params())
def test_kernels_build_spill_free(name):
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), {}, SYMBOLS[0], name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert set(ALL_SYMBOLS) <= compiler.elf_functions(result.cubin)
    assert_spill_free(result.log, len(ALL_SYMBOLS))
    function = ""
    for line in result.log.splitlines():  # 128-thread CTAs, four per SM: at most 128 registers (160: 96)
        if "Compiling entry function" in line:
            function = line.split("'")[1]
        if "Used" in line and "registers" in line:
            used = int(line.split("Used ")[1].split(" registers")[0])
            assert used <= (96 if function.endswith(("_tma_loader", "_tma_loader_wg")) else 128), (function, result.log)
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("no SASS tools here")
    bodies = {chunk.split()[0]: chunk for chunk in sass.split("Function : ")[1:]}
    for next_n in contract.NEXT_N:  # four k32 wgmmas per block, in two N / 2 chains for N >= 64 (tma, four_ctas)
        for heads in contract.HEADS:
            for design in contract.DESIGNS:
                chains = 2 if next_n * heads >= 64 and design in ("tma", "four_ctas") else 1
                width = next_n * heads // chains
                body = bodies[contract.symbol(next_n, heads, design)]
                assert body.count("QGMMA") == 4 * chains and body.count(f"QGMMA.64x{width}x32") == 4 * chains
                assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in body) == (chains == 2), (next_n, heads, design)
    for symbol in SYMBOLS:  # operands by 16-byte cp.async or (tma) by TMA
        if symbol.endswith(("_tma", "_tma_one_chain", "_tma_lean", "_tma_loader", "_tma_loader_wg")):
            assert "UTMALDG.2D" in bodies[symbol] and "LDGSTS" not in bodies[symbol], symbol
        else:
            assert "LDGSTS" in bodies[symbol] and "UTMALDG" not in bodies[symbol], symbol
    for next_n in contract.NEXT_N:  # tma_lean: one logit store per lane, the quad reduce-scatter's shuffles
        for heads in contract.HEADS:
            for design in ("tma_lean", "tma_loader", "tma_loader_wg"):
                body = bodies[contract.symbol(next_n, heads, design)]
                assert body.count("STG.E") == 1 and body.count("SHFL.BFLY") == (3 if next_n == 2 else 2), (next_n, heads)
                assert body.count("FMNMX") == next_n * heads // 2, (next_n, heads)  # a relu per accumulator
            # tma_loader: one CTA barrier (after the mbarriers' init), N 128's weights by 8-byte loads
            body = bodies[contract.symbol(next_n, heads, "tma_loader")]
            assert body.count("BAR.SYNC") == 1, (next_n, heads)
            if next_n * heads == 128:
                assert body.count("LDS.64") == 16, body.count("LDS.64")
            # tma_loader_wg: setmaxnreg in both roles, the weights in registers (16 LDS.64 once per
            # sequence at N 128, none per block: the kv-block loop's common path has only the record's
            # and the scale's loads), four loader threads' TMA
            body = bodies[contract.symbol(next_n, heads, "tma_loader_wg")]
            assert body.count("BAR.SYNC") == 1 and body.count("USETMAXREG") == 2, (next_n, heads)
            assert "USETMAXREG.DEALLOC.CTAPOOL 0x20" in body and "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0x70" in body


# --------------------------------------------------------------------------------------------------
# DeepGEMM's names
# --------------------------------------------------------------------------------------------------

def test_public_names():
    assert deep_tile.fp8_paged_mqa_logits is fp8_paged_mqa_logits
    assert deep_tile.get_paged_mqa_logits_metadata is get_paged_mqa_logits_metadata


def test_compat_names_forward_to_deep_tile():
    inputs = _inputs()
    schedule = deep_gemm.get_paged_mqa_logits_metadata(inputs["context_lens"], 64, deep_gemm.get_num_sms()
                                                      if torch.cuda.is_available() else 4)
    assert torch.equal(schedule, get_paged_mqa_logits_metadata(inputs["context_lens"], 64, schedule.shape[0] - 1))
    want = _call(inputs, schedule=schedule, clean=True)
    got = deep_gemm.fp8_paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"], inputs["context_lens"],
                                         inputs["block_table"], schedule, inputs["max_context_len"], clean_logits=True)
    assert torch.equal(got, want)
    got = deep_gemm.fp8_fp4_paged_mqa_logits((inputs["q"], None), inputs["kv_cache"], inputs["weights"],
                                             inputs["context_lens"], inputs["block_table"], schedule,
                                             inputs["max_context_len"], clean_logits=True)
    assert torch.equal(got, want)
    with pytest.raises(NotImplementedError, match="indices"):
        deep_gemm.get_paged_mqa_logits_metadata(inputs["context_lens"], 64, 4, indices=torch.zeros(2))
    with pytest.raises(NotImplementedError, match="indices"):
        deep_gemm.fp8_paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"], inputs["context_lens"],
                                       inputs["block_table"], schedule, 10, indices=torch.zeros(2))
    with pytest.raises(NotImplementedError, match="FP4"):
        deep_gemm.fp8_fp4_paged_mqa_logits((inputs["q"], torch.zeros(1)), inputs["kv_cache"], inputs["weights"],
                                           inputs["context_lens"], inputs["block_table"], schedule, 10)
    with pytest.raises(NotImplementedError, match="logits_dtype"):
        deep_gemm.fp8_fp4_paged_mqa_logits((inputs["q"], None), inputs["kv_cache"], inputs["weights"],
                                           inputs["context_lens"], inputs["block_table"], schedule, 10,
                                           logits_dtype=torch.bfloat16)


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------

GPU_CASES = [
    # DeepGEMM's test shapes (batch 256 / 4096, next_n 1 / 2, H 32 / 64, avg_kv 8192; the
    # 65536 ones in the benchmark), lengths not a multiple of 64 throughout
    dict(batch=256, next_n=1, heads=32, avg_kv=8192),
    dict(batch=256, next_n=2, heads=64, avg_kv=8192),
    dict(batch=4096, next_n=1, heads=64, avg_kv=8192),
    dict(batch=4096, next_n=2, heads=32, avg_kv=8192, clean=True),
    dict(batch=256, next_n=2, heads=32, avg_kv=65536),
    # edge cases
    dict(batch=1, next_n=1, heads=32, avg_kv=1),
    dict(batch=3, next_n=2, heads=64, avg_kv=100, clean=True),
    dict(batch=7, next_n=1, heads=64, avg_kv=300, lengths="zero", clean=True),
    dict(batch=9, next_n=2, heads=32, avg_kv=300, lengths="zero"),
    dict(batch=33, next_n=2, heads=64, avg_kv=2, lengths="tiny", clean=True),
    dict(batch=64, next_n=2, heads=64, avg_kv=1000, lengths="full", clean=True),
    dict(batch=500, next_n=1, heads=32, avg_kv=700, num_sms=7),
    dict(batch=5, next_n=2, heads=64, avg_kv=5000, num_sms=300, clean=True),
    dict(batch=40, next_n=2, heads=32, avg_kv=900, block_stride=64 * 132 + 256, clean=True),
    dict(batch=2000, next_n=1, heads=64, avg_kv=64, num_sms=1),
    dict(batch=100, next_n=2, heads=64, avg_kv=3000, one_d=True, clean=True),
    dict(batch=10, next_n=1, heads=32, avg_kv=500, bad_entries=True, clean=True),
    # one q slot (N 128 in four_ctas and the TMA designs): many short sequences per CTA, each change of
    # sequence waits for its q rows; and the earlier design, still selectable
    dict(batch=300, next_n=2, heads=64, avg_kv=70, lengths="tiny", clean=True, num_sms=3),
    dict(batch=50, next_n=2, heads=64, avg_kv=400, lengths="zero", clean=True, num_sms=11),
    dict(batch=256, next_n=2, heads=64, avg_kv=2000, design="two_slots", clean=True),
    dict(batch=9, next_n=2, heads=32, avg_kv=300, lengths="zero", design="two_slots"),
    dict(batch=10, next_n=1, heads=64, avg_kv=500, bad_entries=True, clean=True, design="two_slots"),
]
LEAN_BLOCK_CASES = [
    # the lean block's cases: every N, DeepGEMM's shapes, lengths off the block (random, tiny), empty
    # contexts, slots ending inside sequences, one q slot with many short sequences, spaced blocks,
    # bad entries, 1-D lengths, a slot walking many sequences
    dict(batch=256, next_n=2, heads=64, avg_kv=8192, clean=True),
    dict(batch=64, next_n=1, heads=32, avg_kv=8192),
    dict(batch=64, next_n=1, heads=64, avg_kv=3000, clean=True),
    dict(batch=64, next_n=2, heads=32, avg_kv=3000),
    dict(batch=300, next_n=2, heads=32, avg_kv=3000, one_d=True),
    dict(batch=1, next_n=1, heads=32, avg_kv=1),
    dict(batch=7, next_n=1, heads=64, avg_kv=300, lengths="zero", clean=True),
    dict(batch=7, next_n=2, heads=64, avg_kv=300, lengths="zero", clean=True),
    dict(batch=33, next_n=2, heads=64, avg_kv=2, lengths="tiny", clean=True),
    dict(batch=33, next_n=1, heads=32, avg_kv=2, lengths="tiny"),
    dict(batch=300, next_n=2, heads=64, avg_kv=70, lengths="tiny", clean=True, num_sms=3),
    dict(batch=500, next_n=1, heads=32, avg_kv=700, num_sms=7),
    dict(batch=5, next_n=2, heads=64, avg_kv=5000, num_sms=300, clean=True),
    dict(batch=64, next_n=2, heads=64, avg_kv=1000, lengths="full", clean=True),
    dict(batch=40, next_n=2, heads=64, avg_kv=900, block_stride=64 * 132 + 256, clean=True),
    dict(batch=12, next_n=2, heads=64, avg_kv=600, bad_entries=True, clean=True, num_sms=2),
    dict(batch=10, next_n=1, heads=32, avg_kv=500, bad_entries=True, clean=True),
    dict(batch=2000, next_n=1, heads=64, avg_kv=64, num_sms=1),
]
LOADER_CASES = [
    # tma_loader only: sequences shorter than its ring (the q copy waiting for its slot while the
    # next blocks' copies go), and many two-token sequences through one slot
    dict(batch=300, next_n=2, heads=64, avg_kv=150, clean=True, num_sms=5),
    dict(batch=2000, next_n=2, heads=64, avg_kv=100, num_sms=1),
]
TMA_CASES = [
    # the tma design: DeepGEMM's shapes, edge cases, spaced blocks (on 128-byte rows, and off them:
    # the cp.async design runs), bad entries, one q slot with many short sequences
    dict(batch=64, next_n=1, heads=32, avg_kv=8192, design="tma"),
    dict(batch=256, next_n=2, heads=64, avg_kv=8192, design="tma", clean=True),
    dict(batch=2048, next_n=1, heads=64, avg_kv=1000, design="tma"),
    dict(batch=300, next_n=2, heads=32, avg_kv=3000, design="tma", one_d=True),
    dict(batch=1, next_n=1, heads=32, avg_kv=1, design="tma"),
    dict(batch=7, next_n=1, heads=64, avg_kv=300, lengths="zero", clean=True, design="tma"),
    dict(batch=33, next_n=2, heads=64, avg_kv=2, lengths="tiny", clean=True, design="tma"),
    dict(batch=300, next_n=2, heads=64, avg_kv=70, lengths="tiny", clean=True, num_sms=3, design="tma"),
    dict(batch=5, next_n=2, heads=64, avg_kv=5000, num_sms=300, clean=True, design="tma"),
    dict(batch=40, next_n=2, heads=32, avg_kv=900, block_stride=64 * 132 + 256, clean=True, design="tma"),
    dict(batch=40, next_n=1, heads=64, avg_kv=900, block_stride=64 * 132 + 16, clean=True, design="tma"),
    dict(batch=10, next_n=1, heads=32, avg_kv=500, bad_entries=True, clean=True, design="tma"),
    dict(batch=12, next_n=2, heads=64, avg_kv=600, bad_entries=True, clean=True, num_sms=2, design="tma"),
    dict(batch=2000, next_n=1, heads=64, avg_kv=64, num_sms=1, design="tma"),
    # tma_one_chain: every N, one q slot with short sequences, spaced blocks, bad entries
    dict(batch=256, next_n=2, heads=64, avg_kv=8192, design="tma_one_chain", clean=True),
    dict(batch=64, next_n=1, heads=32, avg_kv=3000, design="tma_one_chain"),
    dict(batch=64, next_n=1, heads=64, avg_kv=3000, design="tma_one_chain", clean=True),
    dict(batch=64, next_n=2, heads=32, avg_kv=3000, design="tma_one_chain", one_d=True),
    dict(batch=300, next_n=2, heads=64, avg_kv=70, lengths="tiny", clean=True, num_sms=3, design="tma_one_chain"),
    dict(batch=40, next_n=2, heads=64, avg_kv=900, block_stride=64 * 132 + 256, clean=True, design="tma_one_chain"),
    dict(batch=12, next_n=2, heads=64, avg_kv=600, bad_entries=True, clean=True, num_sms=2, design="tma_one_chain"),
    dict(batch=7, next_n=2, heads=64, avg_kv=300, lengths="zero", clean=True, design="tma_one_chain"),
    # tma_lean, each against the float64 formula and bit for bit against tma_one_chain; tma_loader (the
    # same block and sums) bit for bit against tma_lean, with two more cases of its own
    *[dict(case, design="tma_lean", same_as="tma_one_chain") for case in LEAN_BLOCK_CASES],
    *[dict(case, design="tma_loader", same_as="tma_lean") for case in LEAN_BLOCK_CASES + LOADER_CASES],
    # tma_loader_wg (one CTA of four groups, the weights in registers): bit for bit against tma_loader
    *[dict(case, design="tma_loader_wg", same_as="tma_loader") for case in LEAN_BLOCK_CASES + LOADER_CASES],
]


@pytest.mark.gpu
def test_gpu_kernels_match_the_float64_formula():
    results = run_child_cases("gpu_mqa_paged_cases.py", "paged", GPU_CASES, timeout=900)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_tma_design_matches_the_float64_formula():
    results = run_child_cases("gpu_mqa_paged_cases.py", "paged", TMA_CASES, timeout=900)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_tma_designs_hold_four_ctas_per_sm():
    results = run_child_cases("gpu_mqa_paged_cases.py", "occupancy",
                              [dict(design=d) for d in ("tma_lean", "tma_loader", "tma_loader_wg")], timeout=300)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_gpu_kernels_are_deterministic_and_graph_capturable():
    results = run_child_cases("gpu_mqa_paged_cases.py", "timed_graph", [{}], timeout=300)
    assert all(r["ok"] for r in results), results


# --------------------------------------------------------------------------------------------------
# tma_loader's handover, transcribed: the loader thread and the math warpgroup as two coroutines over
# mbarriers with their phase rules, TMA copies landing at random later steps
# --------------------------------------------------------------------------------------------------

class _Barrier:
    """An mbarrier: phase completes when `count` arrivals came and no transaction bytes are pending."""

    def __init__(self, count):
        self.count, self.arrived, self.tx, self.phase = count, 0, 0, 0

    def done(self, parity):  # mbarrier.try_wait.parity: the phase of that parity completed
        return (self.phase & 1) != parity

    def _check(self):
        if self.arrived == self.count and self.tx == 0:
            self.phase, self.arrived = self.phase + 1, 0

    def arrive(self, tx=0):
        self.arrived += 1
        self.tx += tx
        self._check()

    def complete_tx(self, tx):
        self.tx -= tx
        self._check()


def _loader_model(blocks, stages, q_slots, rng, early_q=False):
    """Runs paged_mqa_logits_loader's protocol on the CTA's walk `blocks` [(sequence, block)]; asserts
    that no copy lands where the math warps read and that every block sees its own rows and q.
    early_q (tma_loader_wg): the weights read into registers at a sequence's first block, its q slot
    freed once its last block's wgmmas completed, before the head sums."""
    full = [_Barrier(1) for _ in range(stages)]
    empty = [_Barrier(1) for _ in range(stages)]
    q_empty = [_Barrier(1) for _ in range(q_slots)]
    records, stage_data, q_data = [None] * stages, [None] * stages, [None] * q_slots
    stage_busy, q_busy, flight, done = [False] * stages, [False] * q_slots, [], []

    def copy(bar, tx, where, index, value):
        flight.append((bar, tx, where, index, value))

    def land(i):
        bar, tx, where, index, value = flight.pop(i)
        busy = stage_busy if where == "kv" else q_busy
        assert not busy[index], ("a copy lands where the math reads", where, index)
        (stage_data if where == "kv" else q_data)[index] = value
        bar.complete_tx(tx)

    def loader():
        prev_b, seq, pending = -1, -1, None
        for it, (b, block) in enumerate(blocks):
            last = it + 1 == len(blocks) or blocks[it + 1][0] != b
            stage = it % stages
            while not empty[stage].done(((it // stages) & 1) ^ 1):
                if pending and q_empty[pending[0]].done(pending[1]):
                    copy(full[pending[2]], 1, "q", pending[0], pending[3]), pending.clear()
                yield
            new = b != prev_b
            if new:
                if pending:
                    while not q_empty[pending[0]].done(pending[1]):
                        yield
                    copy(full[pending[2]], 1, "q", pending[0], pending[3])
                seq, prev_b = seq + 1, b
                pending = [seq % q_slots, ((seq // q_slots) & 1) ^ 1, stage, b]
            records[stage] = (b, block, new, last)
            full[stage].arrive(tx=1 + (1 if new else 0))
            copy(full[stage], 1, "kv", stage, (b, block))
            if pending and q_empty[pending[0]].done(pending[1]):
                copy(full[pending[2]], 1, "q", pending[0], pending[3]), pending.clear()
        if pending:
            while not q_empty[pending[0]].done(pending[1]):
                yield
            copy(full[pending[2]], 1, "q", pending[0], pending[3])
        stage = len(blocks) % stages
        while not empty[stage].done(((len(blocks) // stages) & 1) ^ 1):
            yield
        records[stage] = None
        full[stage].arrive()

    def math():
        q_seq, it, weights = -1, 0, None
        while True:
            stage = it % stages
            while not full[stage].done((it // stages) & 1):
                yield
            if records[stage] is None:
                return
            b, block, new, last = records[stage]
            q_seq += new
            slot = q_seq % q_slots
            assert stage_data[stage] == (b, block) and q_data[slot] == b, (it, b, block)
            if new:
                weights = q_data[slot]
            stage_busy[stage] = q_busy[slot] = True
            yield  # the wgmmas run
            stage_busy[stage] = False
            empty[stage].arrive()
            if early_q and last:
                q_busy[slot] = False
                q_empty[slot].arrive()
            yield  # the head sums read the weights: in the q slot, or (early_q) in registers
            assert (weights if early_q else q_data[slot]) == b
            done.append((b, block))
            if last and not early_q:
                q_busy[slot] = False
                q_empty[slot].arrive()
            it += 1

    agents = {"loader": loader(), "math": math()}
    for _ in range(100000):
        choices = list(agents) + list(range(len(flight)))
        if not choices:
            break
        pick = rng.choice(choices)
        if isinstance(pick, int):
            land(pick)
            continue
        try:
            next(agents[pick])
        except StopIteration:
            del agents[pick]
    assert not agents and not flight, ("deadlock", list(agents), len(flight))
    assert done == list(blocks)


@pytest.mark.parametrize("early_q", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_loader_handover_never_overwrites_and_never_deadlocks(seed, early_q):
    rng = random.Random(seed)
    blocks, b = [], rng.randint(0, 3)
    for _ in range(rng.randint(0, 10)):  # runs of this CTA's blocks per sequence, many shorter than the ring
        blocks += [(b, 4 * i + rng.randint(0, 3)) for i in range(rng.choice([1, 1, 2, 3, 5, 9, 30]))]
        b += rng.randint(1, 3)
    design = "tma_loader_wg" if early_q else "tma_loader"  # each group of tma_loader_wg: a tma_loader CTA
    for stages, q_slots in sorted({(contract.STAGES[design][n], contract.Q_SLOTS[design][n])
                                   for n in contract.STAGES[design]} | {(2, 1), (3, 2)}):
        _loader_model(blocks, stages, q_slots, random.Random(seed * 7 + stages), early_q)
