"""deep_tile.testing.moe: routing and permutation helpers (exact, CPU), the layer's glue through the
float64 reference GEMMs (CPU), and the layer on the GPU kernels against the float64 reference MoE.

GPU tolerances (tests/gpu_moe_cases.py computes the metrics). Against the *mirror* reference
(every rounding of the deep_tile path repeated, see ``ref_moe_forward``) only the kernels'
accumulation error differs, carried through later bf16/FP8 roundings. A CPU simulation (64 tokens,
H 1024, I 512, 16 experts, top-4) that perturbs each GEMM output by relative noise before its bf16
rounding gives, at noise 1e-5 / 1e-4 / 1e-3: calc_diff 2.4e-6 / 1.2e-5 / 9.7e-5, max_rel 5.6e-3 /
8.6e-3 / 1.6e-2, worst row 7.7e-3 / 1.1e-2 / 2.0e-2 (the bf16 output alone: calc_diff 1.5e-6). FP32
accumulation with 128-wide promotion sits at or below 1e-4, so MIRROR_TOL allows about 10x that in
calc_diff. Against the float64-intermediate (*ideal*) reference the path also carries its bf16
intermediate: calc_diff about 1e-4 and row errors about 2e-2 in the same simulation (IDEAL_TOL).
A token combined from a wrong expert row, a dropped pair or an unscaled group moves its row by
order 1, and calc_diff by at least about 1/T, far above both.
"""
import pytest
import torch
import torch.nn.functional as F

from deep_tile.common import align4, align_up
from deep_tile.casts.quant import dequantize_per_block, per_block_cast_to_fp8, per_token_cast_to_fp8
from deep_tile.testing import moe
from deep_tile.testing.numeric import calc_diff, max_rel_error

MIRROR_TOL = {"diff": 2e-4, "rel": 5e-2, "row": 5e-2}
"""GPU kernels vs the mirror reference: calc_diff, max_rel_error, worst row's relative error."""
IDEAL_TOL = {"diff": 1e-3, "rel": 1e-1, "row": 1e-1}
"""GPU kernels vs the float64-intermediate reference."""


def _ids(num_tokens, num_experts, top_k, seed=0, skew=False):
    """Distinct expert ids per token from random logits; ``skew`` crowds most tokens onto experts 0..2
    (runs longer than 128 rows, many empty experts)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_tokens, num_experts, generator=gen)
    if skew:
        logits[:, :3] += 6.0
    return moe.route(logits, top_k)


PLAN_CASES = [  # (T, E, top_k, skew)
    (1, 8, 2, False),
    (37, 8, 3, False),
    (200, 16, 4, False),
    (300, 8, 2, True),
    (64, 64, 8, False),
    (5, 32, 6, False),
]


# --------------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scoring", moe.SCORINGS)
def test_route_picks_top_scores_and_normalises(scoring):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(50, 16, generator=gen)
    ids, weights = moe.route(logits, 4, scoring, scaling_factor=2.5)
    assert ids.dtype == torch.int32 and ids.shape == (50, 4) and weights.dtype == torch.float32
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, -1)
    expected = scores.topk(4, dim=-1)
    assert torch.equal(ids.long(), expected.indices)
    torch.testing.assert_close(weights, expected.values / expected.values.sum(-1, keepdim=True) * 2.5)
    torch.testing.assert_close(weights.sum(-1), torch.full((50,), 2.5))
    raw_ids, raw = moe.route(logits, 4, scoring, renormalize=False)
    torch.testing.assert_close(raw, expected.values)


def test_route_bias_moves_the_choice_not_the_weights():
    logits = torch.zeros(3, 8)
    logits[:, 0] = 1.0
    bias = torch.zeros(8)
    bias[5] = 10.0
    ids, weights = moe.route(logits, 2, correction_bias=bias, renormalize=False)
    assert set(ids[0].tolist()) == {5, 0}
    assert torch.allclose(weights[0].sort().values, torch.tensor([0.5, torch.sigmoid(torch.tensor(1.0)).item()]))


def test_route_group_limited_keeps_the_best_groups():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(40, 32, generator=gen)
    ids, _ = moe.route(logits, 8, num_groups=8, topk_groups=3)
    scores = torch.sigmoid(logits).view(40, 8, 4)
    best_groups = scores.topk(2, dim=-1).values.sum(-1).topk(3, dim=-1).indices
    for t in range(40):
        groups = set((ids[t] // 4).tolist())
        assert groups <= set(best_groups[t].tolist())
        assert len(set(ids[t].tolist())) == 8


@pytest.mark.parametrize("kwargs, match", [
    ({"top_k": 0}, "top_k"), ({"top_k": 9}, "top_k"), ({"top_k": 2, "scoring": "relu"}, "scoring"),
    ({"top_k": 2, "num_groups": 3}, "num_groups"), ({"top_k": 8, "num_groups": 4, "topk_groups": 1}, "topk_groups"),
    ({"top_k": 2, "scoring": "softmax", "correction_bias": torch.zeros(8)}, "correction_bias"),
])
def test_route_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        moe.route(torch.zeros(4, 8), **kwargs)


# --------------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------------

def _naive_counts(ids, num_experts):
    return torch.tensor([(ids == e).sum().item() for e in range(num_experts)], dtype=torch.int32)


def _check_common(perm, ids, num_experts):
    """Every layout: counts, one distinct row per pair, token order within an expert."""
    flat = ids.reshape(-1).long()
    assert perm.row_of_pair.dtype == torch.int64 and perm.row_of_pair.shape == (flat.numel(),)
    assert torch.equal(perm.counts, _naive_counts(ids, num_experts))
    assert perm.row_of_pair.unique().numel() == flat.numel()
    assert int(perm.row_of_pair.min()) >= 0 and int(perm.row_of_pair.max()) < perm.num_rows
    for e in range(num_experts):
        rows = perm.row_of_pair[flat == e]
        assert torch.equal(rows, rows.sort().values)  # pairs keep token order within an expert


@pytest.mark.parametrize("case", PLAN_CASES)
@pytest.mark.parametrize("alignment", [128, 64])
def test_plan_contiguous_runs_are_aligned_and_padded_with_minus_one(case, alignment):
    num_tokens, num_experts, top_k, skew = case
    ids, _ = _ids(num_tokens, num_experts, top_k, skew=skew)
    flat = ids.reshape(-1).long()
    for exact in (False, True):
        perm = moe.plan_contiguous(ids, num_experts, alignment, exact_rows=exact)
        _check_common(perm, ids, num_experts)
        counts = perm.counts.tolist()
        padded = [align_up(c, alignment) for c in counts]
        bound = moe.contiguous_rows_bound(flat.numel(), num_experts, alignment)
        assert perm.num_rows == (sum(padded) if exact else bound) and sum(padded) <= bound
        assert perm.num_rows % alignment == 0
        m_indices = perm.m_indices
        assert m_indices.dtype == torch.int32 and m_indices.shape == (perm.num_rows,)
        assert torch.equal(m_indices[perm.row_of_pair], ids.reshape(-1))
        assert int((m_indices == -1).sum()) == perm.num_rows - flat.numel()
        start = 0
        for e in range(num_experts):  # one run per expert, in expert order, starting aligned
            if counts[e]:
                assert start % alignment == 0
                assert torch.equal(perm.row_of_pair[flat == e].sort().values, torch.arange(start, start + counts[e]))
                assert (m_indices[start:start + counts[e]] == e).all()
                assert (m_indices[start + counts[e]:start + padded[e]] == -1).all()
            start += padded[e]
        assert (m_indices[start:] == -1).all()


@pytest.mark.parametrize("case", PLAN_CASES)
def test_plan_offsets_is_unpadded_and_consistent(case):
    num_tokens, num_experts, top_k, skew = case
    ids, _ = _ids(num_tokens, num_experts, top_k, skew=skew)
    flat = ids.reshape(-1).long()
    perm = moe.plan_offsets(ids, num_experts)
    _check_common(perm, ids, num_experts)
    offsets = perm.offsets
    assert offsets.dtype == torch.int32 and offsets.shape == (num_experts + 1,)
    assert int(offsets[0]) == 0 and int(offsets[-1]) == flat.numel() == perm.num_rows
    assert torch.equal(offsets.diff(), perm.counts)
    assert torch.equal(perm.row_of_pair.sort().values, torch.arange(flat.numel()))
    for e in range(num_experts):
        rows = perm.row_of_pair[flat == e]
        assert bool(((rows >= offsets[e]) & (rows < offsets[e + 1])).all())


@pytest.mark.parametrize("case", PLAN_CASES)
def test_plan_masked_fills_each_slab_from_row_zero(case):
    num_tokens, num_experts, top_k, skew = case
    ids, _ = _ids(num_tokens, num_experts, top_k, skew=skew)
    flat = ids.reshape(-1).long()
    for max_m in (None, num_tokens + 5):
        perm = moe.plan_masked(ids, num_experts, max_m=max_m)
        _check_common(perm, ids, num_experts)
        assert perm.max_m == (max_m or num_tokens) and perm.num_rows == num_experts * perm.max_m
        assert perm.masked_m.dtype == torch.int32 and torch.equal(perm.masked_m, _naive_counts(ids, num_experts))
        assert perm.expected_m == max(1, -(-num_tokens * top_k // num_experts))
        expert, row = perm.row_of_pair // perm.max_m, perm.row_of_pair % perm.max_m
        assert torch.equal(expert, flat)
        for e in range(num_experts):
            assert torch.equal(row[flat == e].sort().values, torch.arange(int(perm.masked_m[e])))


def test_plan_masked_rejects_a_slab_that_could_overflow():
    ids, _ = _ids(10, 8, 2)
    with pytest.raises(ValueError, match="max_m"):
        moe.plan_masked(ids, 8, max_m=9)


def test_plan_rejects_bad_inputs():
    ids, _ = _ids(4, 8, 2)
    with pytest.raises(ValueError, match="layout"):
        moe.plan(ids, 8, "ragged")
    with pytest.raises(ValueError, match="topk_ids"):
        moe.plan_offsets(ids.float(), 8)
    with pytest.raises(ValueError, match="alignment"):
        moe.plan_contiguous(ids, 8, alignment=0)
    assert torch.equal(moe.expert_counts(ids, 8), _naive_counts(ids, 8))


# --------------------------------------------------------------------------------------------------
# Permute / un-permute
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", moe.LAYOUTS)
@pytest.mark.parametrize("case", PLAN_CASES)
def test_permute_then_unpermute_is_identity(layout, case):
    num_tokens, num_experts, top_k, skew = case
    ids, weights = _ids(num_tokens, num_experts, top_k, skew=skew)
    perm = moe.plan(ids, num_experts, layout)
    x = torch.randn(num_tokens, 48, generator=torch.Generator().manual_seed(3))
    grouped = moe.permute(x, perm)
    assert tuple(grouped.shape) == perm.buffer_shape(48)
    flat_rows = grouped.reshape(perm.num_rows, 48)
    assert torch.equal(flat_rows[perm.row_of_pair], x.repeat_interleave(top_k, dim=0))
    unused = torch.ones(perm.num_rows, dtype=torch.bool)
    unused[perm.row_of_pair] = False
    assert (flat_rows[unused] == 0).all()
    for j in range(top_k):  # one-hot weights select slot j: exactly x back
        one_hot = torch.zeros(num_tokens, top_k)
        one_hot[:, j] = 1.0
        assert torch.equal(moe.unpermute(grouped, perm, one_hot, torch.float32), x)
    expected = torch.stack([sum(weights[t, j] * x[t] for j in range(top_k)) for t in range(num_tokens)])
    torch.testing.assert_close(moe.unpermute(grouped, perm, weights, torch.float32), expected)


@pytest.mark.parametrize("layout", moe.LAYOUTS)
def test_permute_fp8_writes_scales_in_the_tma_layout(layout):
    ids, _ = _ids(37, 8, 3)
    perm = moe.plan(ids, 8, layout)
    x = torch.randn(37, 384, generator=torch.Generator().manual_seed(4))
    q, s = per_token_cast_to_fp8(x)
    a, a_scale = moe.permute_fp8(q, s, perm)
    assert a.dtype == torch.float8_e4m3fn and tuple(a.shape) == perm.buffer_shape(384)
    assert tuple(a_scale.shape) == perm.buffer_shape(3)
    if layout == "masked":
        pitch = align4(perm.max_m)
        assert a_scale.stride() == (3 * pitch, 1, pitch)
        expert, row = perm.row_of_pair // perm.max_m, perm.row_of_pair % perm.max_m
        got_s = a_scale[expert, row]
    else:
        assert a_scale.stride() == (1, align4(perm.num_rows))
        got_s = a_scale[perm.row_of_pair]
    tokens = torch.arange(37 * 3) // 3
    assert torch.equal(got_s, s[tokens])
    got_q = a.reshape(perm.num_rows, 384).view(torch.uint8)[perm.row_of_pair]
    assert torch.equal(got_q, q.view(torch.uint8)[tokens])


def test_silu_and_mul_splits_gate_then_up():
    h = torch.randn(5, 8, dtype=torch.bfloat16)
    out = moe.silu_and_mul(h)
    assert out.dtype == torch.float32 and out.shape == (5, 4)
    torch.testing.assert_close(out, F.silu(h[:, :4].float()) * h[:, 4:].float())
    assert moe.silu_and_mul(h.double()).dtype == torch.float64


# --------------------------------------------------------------------------------------------------
# The layer, with float64 reference GEMMs in place of the kernels (CPU)
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_layer():
    torch.manual_seed(0)
    num_tokens, hidden, inter, num_experts, top_k = 40, 256, 256, 8, 2
    weights = moe.make_moe_weights(num_experts, hidden, inter, "cpu", seed=1)
    x = torch.randn(num_tokens, hidden, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    ids, topk_weights = _ids(num_tokens, num_experts, top_k, seed=6)
    return x, ids, topk_weights, weights


def test_make_moe_weights_shapes(small_layer):
    _, _, _, w = small_layer
    assert (w.num_experts, w.hidden, w.intermediate) == (8, 256, 256)
    assert w.w13.shape == (8, 512, 256) and w.w13_scale.shape == (8, 4, 2)
    assert w.w2.shape == (8, 256, 256) and w.w2_scale.shape == (8, 2, 2)
    assert w.w13.dtype == w.w2.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("layout", moe.LAYOUTS)
def test_layer_glue_matches_the_mirror_reference(small_layer, layout):
    """With the reference GEMMs the path and the mirror reference do the same arithmetic: only the
    float32 (path) vs float64 (reference) combine differs."""
    x, ids, topk_weights, w = small_layer
    ref = moe.ref_moe_forward(x, ids, topk_weights, w)
    out = moe.moe_forward(x, ids, topk_weights, w, layout, gemms=moe.reference_gemms(), out_dtype=torch.float32)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert calc_diff(out, ref) < 1e-12 and max_rel_error(out, ref) < 1e-6
    bf16 = moe.moe_forward(x, ids, topk_weights, w, layout, gemms=moe.reference_gemms())
    assert bf16.dtype == torch.bfloat16 and max_rel_error(bf16, ref) < 2 ** -8


def test_layer_glue_exact_rows_and_given_plan(small_layer):
    x, ids, topk_weights, w = small_layer
    gemms = moe.reference_gemms()
    base = moe.moe_forward(x, ids, topk_weights, w, "contiguous", gemms=gemms, out_dtype=torch.float32)
    exact = moe.moe_forward(x, ids, topk_weights, w, "contiguous", gemms=gemms, out_dtype=torch.float32,
                            exact_rows=True)
    assert torch.equal(base, exact)
    perm = moe.plan_masked(ids, w.num_experts, max_m=64)
    masked = moe.moe_forward(x, ids, topk_weights, w, "masked", gemms=gemms, out_dtype=torch.float32, perm=perm)
    torch.testing.assert_close(masked, base, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="perm"):
        moe.moe_forward(x, ids, topk_weights, w, "offsets", gemms=gemms, perm=perm)


def test_reference_against_a_token_by_token_float64_layer(small_layer):
    """The ideal reference against an independent per-token loop on the dequantised weights and the
    unquantised tokens: they differ by the two FP8 activation casts only (about 3% per element,
    calc_diff about 1e-3); a swapped gate/up, a wrong weight or a missing slot is far above."""
    x, ids, topk_weights, w = small_layer
    ideal = moe.ref_moe_forward(x, ids, topk_weights, w, mirror_roundings=False)
    inter = w.intermediate
    out = torch.zeros_like(ideal)
    for e in range(w.num_experts):
        w13 = dequantize_per_block(w.w13[e], w.w13_scale[e]).double()
        w2 = dequantize_per_block(w.w2[e], w.w2_scale[e]).double()
        for t, j in (ids == e).nonzero().tolist():
            h = w13 @ x[t].double()
            out[t] += topk_weights[t, j].double() * (w2 @ (F.silu(h[:inter]) * h[inter:]))
    assert calc_diff(ideal, out) < 5e-3
    mirror = moe.ref_moe_forward(x, ids, topk_weights, w)
    assert calc_diff(mirror, ideal) < 1e-3


def test_quantize_expert_weights_is_the_per_expert_block_cast():
    w = torch.randn(3, 200, 300, generator=torch.Generator().manual_seed(7))
    q, s = moe.quantize_expert_weights(w)
    assert q.shape == (3, 200, 300) and s.shape == (3, 2, 3)
    for e in range(3):
        q_e, s_e = per_block_cast_to_fp8(w[e])
        assert torch.equal(q[e].view(torch.uint8), q_e.view(torch.uint8)) and torch.equal(s[e], s_e)
    with pytest.raises(ValueError, match="3-D"):
        moe.quantize_expert_weights(w[0])


def test_moe_flops():
    assert moe.moe_flops(10, 8, 7168, 2048) == 2.0 * 80 * (2 * 2048 * 7168 + 7168 * 2048)


# --------------------------------------------------------------------------------------------------
# GPU: the kernels (child process, tests/gpu_moe_cases.py)
# --------------------------------------------------------------------------------------------------

GPU_LAYER_CASES = [
    {"num_tokens": 200, "hidden": 1024, "intermediate": 512, "num_experts": 16, "top_k": 4},
    {"num_tokens": 1, "hidden": 1024, "intermediate": 512, "num_experts": 16, "top_k": 4},
    {"num_tokens": 300, "hidden": 512, "intermediate": 256, "num_experts": 8, "top_k": 2, "skew": True},
    {"num_tokens": 96, "hidden": 1024, "intermediate": 256, "num_experts": 32, "top_k": 6, "scoring": "softmax"},
    {"num_tokens": 128, "hidden": 7168, "intermediate": 2048, "num_experts": 32, "top_k": 8,
     "num_groups": 8, "topk_groups": 4},
]


@pytest.mark.gpu
def test_gpu_layer_matches_the_float64_reference():
    from conftest import run_child_cases

    results = run_child_cases("gpu_moe_cases.py", "moe_layer", GPU_LAYER_CASES, timeout=1500)
    failures = []
    for case, result in zip(GPU_LAYER_CASES, results):
        for layout in moe.LAYOUTS:
            r = result[layout]
            if "error" in r:
                failures.append(f"{case} {layout}: {r['error']}")
                continue
            checks = [r["nan"] == 0, r["bitwise_repeat"]]
            checks += [r[f"mirror_{key}"] < tol for key, tol in MIRROR_TOL.items()]
            checks += [r[f"ideal_{key}"] < tol for key, tol in IDEAL_TOL.items()]
            if not all(checks):
                failures.append(f"{case} {layout}: {r}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_gpu_helpers_need_no_host_sync_and_match_cpu():
    from conftest import run_child_cases

    cases = [{"layout": layout, "num_tokens": t, "num_experts": e, "top_k": k}
             for layout in moe.LAYOUTS for t, e, k in ((256, 64, 8), (3, 16, 4))]
    results = run_child_cases("gpu_moe_cases.py", "helpers_sync_free", cases, timeout=600)
    bad = [r for r in results if not (r["sync_free"] and r["same_as_cpu"])]
    assert not bad, bad


@pytest.mark.gpu
def test_gpu_layer_replays_in_a_cuda_graph():
    """Routing, planning, both GEMMs and the combine captured in one CUDA graph (possible only without
    host syncs) and replayed on new tokens and logits: bitwise equal to the eager forward."""
    from conftest import run_child_cases

    cases = [{"layout": layout} for layout in moe.LAYOUTS]
    results = run_child_cases("gpu_moe_cases.py", "graph_replay", cases, timeout=900)
    bad = [r for r in results if not r.get("bitwise_equal")]
    assert not bad, bad
