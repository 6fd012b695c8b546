"""deep_tile.compat.deepgemm: DeepGEMM's names and signatures, each call forwarded to the right
deep_tile function with the right tensors, every unsupported argument refused with
NotImplementedError before anything runs, and (marker ``gpu``) DeepGEMM-style calls on a Hopper
GPU against the float64 references (tests/gpu_compat_cases.py, in a child process).

The CPU tests replace the deep_tile functions the module calls (it looks them up on the package at
call time) with recorders, so they run without a GPU and without deep_tile.gemm.grouped.
"""
from __future__ import annotations

import inspect
import itertools
import re

import pytest
import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from conftest import run_child_cases

CURRENT = ["fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
           "fp8_m_grouped_gemm_nt_masked", "k_grouped_fp8_gemm_nt_contiguous", "k_grouped_fp8_gemm_tn_contiguous",
           "get_mk_alignment_for_contiguous_layout",
           "get_mn_major_tma_aligned_tensor", "transform_sf_into_required_layout", "set_num_sms", "get_num_sms",
           "set_pdl", "get_pdl", "set_mk_alignment_for_contiguous_layout",
           "get_theoretical_mk_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
           "get_tma_aligned_size", "get_compile_mode", "set_compile_mode", "install_alias",
           "fp8_mqa_logits", "fp8_fp4_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits",
           "fp8_fp4_paged_mqa_logits",
           "tf32_hc_prenorm_gemm", "einsum", "fp8_einsum",
           "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
           "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
           "k_grouped_bf16_gemm_tn_contiguous"]
OLD = ["gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
       "get_m_alignment_for_contiguous_layout", "get_col_major_tma_aligned_tensor"]

# DeepGEMM's parameters (names, order, defaults) of the GEMM entry points, current and 2025.
SIGNATURES = {
    "fp8_gemm_nt": [("a", None), ("b", None), ("d", None), ("c", None), ("recipe", None), ("recipe_a", None),
                    ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False)],
    "m_grouped_fp8_gemm_nt_contiguous": [
        ("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("recipe", None), ("recipe_a", None),
        ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False), ("use_psum_layout", False),
        ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)],
    "m_grouped_fp8_gemm_nt_masked": [
        ("a", None), ("b", None), ("d", None), ("masked_m", None), ("expected_m", None), ("recipe", None),
        ("recipe_a", None), ("recipe_b", None), ("compiled_dims", "nk"), ("disable_ue8m0_cast", False),
        ("max_block_n", 256), ("enable_overlap", False), ("signal", None)],
    "k_grouped_fp8_gemm_nt_contiguous": [
        ("a", None), ("b", None), ("d", None), ("ks_cpu", None), ("grouped_layout", None), ("c", None),
        ("recipe", (1, 1, 128)), ("compiled_dims", "mn"), ("use_psum_layout", False)],
    "k_grouped_fp8_gemm_tn_contiguous": [
        ("a", None), ("b", None), ("d", None), ("ks_cpu", None), ("grouped_layout", None), ("c", None),
        ("recipe", (1, 1, 128)), ("compiled_dims", "mn"), ("use_psum_layout", False)],
    "fp8_mqa_logits": [("q", None), ("kv", None), ("weights", None), ("cu_seq_len_k_start", None),
                       ("cu_seq_len_k_end", None), ("clean_logits", True), ("max_seqlen_k", 0)],
    "fp8_fp4_mqa_logits": [("q", None), ("kv", None), ("weights", None), ("cu_seq_len_k_start", None),
                           ("cu_seq_len_k_end", None), ("clean_logits", True), ("max_seqlen_k", 0),
                           ("logits_dtype", torch.float32)],
    "get_paged_mqa_logits_metadata": [("context_lens", None), ("block_kv", None), ("num_sms", None), ("indices", None)],
    "fp8_paged_mqa_logits": [("q", None), ("kv_cache", None), ("weights", None), ("context_lens", None),
                             ("block_table", None), ("schedule_meta", None), ("max_context_len", None),
                             ("clean_logits", False), ("indices", None)],
    "fp8_fp4_paged_mqa_logits": [("q", None), ("kv_cache", None), ("weights", None), ("context_lens", None),
                                 ("block_table", None), ("schedule_meta", None), ("max_context_len", None),
                                 ("clean_logits", False), ("logits_dtype", torch.float32), ("indices", None)],
    **{f"bf16_gemm_{layout}": [("a", None), ("b", None), ("d", None), ("c", None),
                                ("compiled_dims", "nk" if layout in ("nt", "nn") else "mn")]
       for layout in ("nt", "nn", "tn", "tt")},
    "m_grouped_bf16_gemm_nt_contiguous": [
        ("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("compiled_dims", "nk"),
        ("use_psum_layout", False), ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)],
    "m_grouped_bf16_gemm_nn_contiguous": [
        ("a", None), ("b", None), ("d", None), ("grouped_layout", None), ("compiled_dims", "nk"),
        ("use_psum_layout", False), ("ensure_zero_padding", True)],
    "m_grouped_bf16_gemm_nt_masked": [("a", None), ("b", None), ("d", None), ("masked_m", None), ("expected_m", None),
                                      ("compiled_dims", "nk")],
    "k_grouped_bf16_gemm_tn_contiguous": [("a", None), ("b", None), ("d", None), ("ks_cpu", None),
                                          ("grouped_layout", None), ("c", None), ("compiled_dims", "mn"),
                                          ("use_psum_layout", False)],
    "gemm_fp8_fp8_bf16_nt": [("lhs", None), ("rhs", None), ("out", None)],
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous": [("lhs", None), ("rhs", None), ("out", None), ("m_indices", None)],
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked": [("lhs", None), ("rhs", None), ("out", None), ("masked_m", None),
                                              ("expected_m", None)],
}

FORWARDED = ["fp8_gemm", "fp8_gemm_1d1d", "m_grouped_fp8_gemm_contiguous", "m_grouped_fp8_gemm_psum", "m_grouped_fp8_gemm_masked", "get_tma_aligned_a_scale",
             "set_num_sms", "get_num_sms", "get_m_alignment_for_contiguous_layout", "set_pdl", "get_pdl"]


@pytest.fixture
def calls(monkeypatch):
    """Replace the deep_tile functions the module calls with recorders; yields the list of
    ``(name, args, kwargs)`` they append to. (Set in the package's dict: ``setattr`` would first
    resolve the lazy attribute, which imports modules that may not exist yet.)"""
    recorded = []

    def recorder(name):
        def record(*args, **kwargs):
            recorded.append((name, args, kwargs))
            if name == "get_pdl":
                return False
            return 128 if name in ("get_num_sms", "get_m_alignment_for_contiguous_layout") else f"{name} result"
        return record

    for name in FORWARDED:
        monkeypatch.setitem(vars(deep_tile), name, recorder(name))
    yield recorded


def dense(m=8, n=16, k=256, d_dtype=torch.bfloat16, scale_dtype=torch.float32):
    """Tiny CPU ``(a, sfa), (b, sfb), d`` of a dense GEMM (values irrelevant)."""
    return ((torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.ones(m, k // 128, dtype=scale_dtype)),
            (torch.zeros(n, k, dtype=torch.float8_e4m3fn), torch.ones(1, k // 128, dtype=scale_dtype)),
            torch.empty(m, n, dtype=d_dtype))


def grouped(groups=2, m=8, n=16, k=256, masked=False, d_dtype=torch.bfloat16, scale_dtype=torch.float32):
    """Tiny CPU ``(a, sfa), (b, sfb), d`` of a grouped GEMM (masked: a and d have a group dim)."""
    rows = (groups, m) if masked else (m,)
    return ((torch.zeros(*rows, k, dtype=torch.float8_e4m3fn), torch.ones(*rows, k // 128, dtype=scale_dtype)),
            (torch.zeros(groups, n, k, dtype=torch.float8_e4m3fn), torch.ones(groups, 1, k // 128, dtype=scale_dtype)),
            torch.empty(*rows, n, dtype=d_dtype))


def same(got, want) -> bool:
    """The same objects, in order (tensors by identity, other values by equality)."""
    return len(got) == len(want) and all(g is w if isinstance(w, torch.Tensor) else g == w for g, w in zip(got, want))


# --------------------------------------------------------------------------------------------------
# Names and signatures
# --------------------------------------------------------------------------------------------------

def test_every_name_exists():
    for name in CURRENT + OLD:
        assert callable(getattr(deep_gemm, name)), name
        assert getattr(deep_gemm, name).__doc__, f"{name} has no docstring"
    assert sorted(deep_gemm.__all__) == sorted(CURRENT + OLD)
    assert deep_gemm.fp8_m_grouped_gemm_nt_masked is deep_gemm.m_grouped_fp8_gemm_nt_masked


def test_the_utils_helpers_are_at_the_top_level_too():
    # DeepGEMM's package star-imports its utils; engines look the helpers up on the package
    from deep_tile.compat.deepgemm import utils

    for name in utils.__all__:
        if name not in ("layout", "math"):
            assert getattr(deep_gemm, name) is getattr(utils, name), name


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_follow_deepgemm(name):
    params = inspect.signature(getattr(deep_gemm, name)).parameters.values()
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in params]
    assert got == SIGNATURES[name]


# --------------------------------------------------------------------------------------------------
# Forwarding
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt"])
def test_dense_gemm_forwards(calls, name):
    (a, sfa), (b, sfb), d = dense()
    assert getattr(deep_gemm, name)((a, sfa), (b, sfb), d) is None
    assert len(calls) == 1 and calls[0][0] == "fp8_gemm"
    assert same(calls[0][1], (a, sfa, b, sfb)) and calls[0][2].keys() == {"out"} and calls[0][2]["out"] is d


@pytest.mark.parametrize("name", ["m_grouped_fp8_gemm_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"])
def test_contiguous_forwards(calls, name):
    (a, sfa), (b, sfb), d = grouped()
    m_indices = torch.zeros(8, dtype=torch.int32)
    assert getattr(deep_gemm, name)((a, sfa), (b, sfb), d, m_indices) is None
    assert len(calls) == 1 and calls[0][0] == "m_grouped_fp8_gemm_contiguous"
    assert same(calls[0][1], (a, sfa, b, sfb, m_indices)) and calls[0][2].keys() == {"out"}
    assert calls[0][2]["out"] is d


@pytest.mark.parametrize("name", ["m_grouped_fp8_gemm_nt_masked", "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
                                  "fp8_m_grouped_gemm_nt_masked"])
def test_masked_forwards(calls, name):
    (a, sfa), (b, sfb), d = grouped(masked=True)
    masked_m = torch.tensor([3, 8], dtype=torch.int32)
    assert getattr(deep_gemm, name)((a, sfa), (b, sfb), d, masked_m, 5) is None
    assert len(calls) == 1 and calls[0][0] == "m_grouped_fp8_gemm_masked"
    assert same(calls[0][1], (a, sfa, b, sfb, masked_m, 5)) and calls[0][2].keys() == {"out"}
    assert calls[0][2]["out"] is d


def test_keyword_calls_forward(calls):
    (a, sfa), (b, sfb), d = grouped()
    m_indices = torch.zeros(8, dtype=torch.int32)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a=(a, sfa), b=(b, sfb), d=d, grouped_layout=m_indices)
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs=(a, sfa), rhs=(b, sfb), out=d, m_indices=m_indices)
    assert [c[0] for c in calls] == ["m_grouped_fp8_gemm_contiguous"] * 2
    assert all(same(c[1], (a, sfa, b, sfb, m_indices)) and c[2]["out"] is d for c in calls)


@pytest.mark.parametrize("options", [
    dict(recipe=(1, 128, 128)), dict(recipe=[1, 128, 128]), dict(recipe_a=(1, 128), recipe_b=(128, 128)),
    dict(compiled_dims="mnk"), dict(compiled_dims=""), dict(disable_ue8m0_cast=True)])
def test_options_accepted_and_ignored(calls, options):
    (a, sfa), (b, sfb), d = dense()
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, **options)
    (ga, gsfa), (gb, gsfb), gd = grouped(masked=True)
    deep_gemm.m_grouped_fp8_gemm_nt_masked((ga, gsfa), (gb, gsfb), gd, torch.ones(2, dtype=torch.int32), 1, **options)
    (ca, csfa), (cb, csfb), cd = grouped()
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((ca, csfa), (cb, csfb), cd, torch.zeros(8, dtype=torch.int32),
                                               ensure_zero_padding=False, **options)
    assert [c[0] for c in calls] == ["fp8_gemm", "m_grouped_fp8_gemm_masked", "m_grouped_fp8_gemm_contiguous"]
    assert same(calls[0][1], (a, sfa, b, sfb)) and calls[0][2]["out"] is d


@pytest.mark.parametrize("name", ["get_mn_major_tma_aligned_tensor", "get_col_major_tma_aligned_tensor"])
def test_tma_aligned_tensor_forwards(calls, name):
    sf = torch.ones(5, 3)
    assert getattr(deep_gemm, name)(sf) == "get_tma_aligned_a_scale result"
    assert len(calls) == 1 and calls[0][0] == "get_tma_aligned_a_scale" and same(calls[0][1], (sf,))


def test_num_sms_forwards(calls):
    assert deep_gemm.set_num_sms(100) is None
    assert deep_gemm.get_num_sms() == 128
    assert [(c[0], c[1]) for c in calls] == [("set_num_sms", (100,)), ("get_num_sms", ())]


def test_pdl_forwards(calls):
    assert deep_gemm.set_pdl(True) is None
    assert deep_gemm.get_pdl() is False
    assert [(c[0], c[1]) for c in calls] == [("set_pdl", (True,)), ("get_pdl", ())]


def test_alignment_default():
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_k_alignment_for_contiguous_layout() == 128


def test_alignment_values():
    pytest.importorskip("deep_tile.gemm.grouped", reason="deep_tile.gemm.grouped is not there yet")
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == deep_tile.get_m_alignment_for_contiguous_layout()


def test_transform_sf_into_required_layout(calls):
    sfa, sfb = torch.ones(300, 7), torch.ones(3, 24, 7)
    transform = deep_gemm.transform_sf_into_required_layout
    assert transform(sfa, 300, 896, (1, 128, 128), is_sfa=True) == "get_tma_aligned_a_scale result"
    assert transform(sfa, 300, 896, (1, 128)) == "get_tma_aligned_a_scale result"
    assert transform(sfb, 3072, 896, (1, 128, 128), num_groups=3, is_sfa=False) is sfb
    assert transform(sfb, 3072, 896, (128, 128), num_groups=3) is sfb
    assert [c[0] for c in calls] == ["get_tma_aligned_a_scale"] * 2 and same(calls[0][1], (sfa,))
    with pytest.raises(ValueError, match="is_sfa"):
        transform(sfa, 300, 896, (1, 128, 128))
    with pytest.raises(ValueError, match=r"shape \(300, 8\)"):
        transform(sfa, 300, 1024, (1, 128))
    for recipe, is_sfa in [((1, 1, 128), False), ((1, 128, 32), True), ((1, 32), None)]:
        with pytest.raises(NotImplementedError, match=r"recipe=\(1, .*supports only"):
            transform(sfa, 300, 896, recipe, is_sfa=is_sfa)
    with pytest.raises(NotImplementedError, match="sf .*torch.int32"):
        transform(sfa.int(), 300, 896, (1, 128))
    with pytest.raises(NotImplementedError, match="psum_layout"):
        transform(sfa, 300, 896, (1, 128), psum_layout=torch.zeros(3, dtype=torch.int32))
    assert len(calls) == 2


# --------------------------------------------------------------------------------------------------
# What deep_tile does not run
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("c_kind", [None, "d", "other"])
@pytest.mark.parametrize("recipe", [{}, {"recipe": (1, 128, 128)}, {"recipe": (1, 1, 128)},
                                    {"recipe_a": (1, 128), "recipe_b": (1, 128)}],
                         ids=["default", "1x128x128", "1x1x128", "recipe_ab_1d"])
def test_dense_gemm_accumulates_and_picks_the_recipe(calls, d_dtype, c_kind, recipe):
    """fp8_gemm_nt with ``c`` (``d`` itself or another tensor), a float32 ``d`` and the 1D1D recipe
    forwards to fp8_gemm / fp8_gemm_1d1d with ``out=d`` and ``c``, as a trainer calls it."""
    (a, sfa), (b, sfb), d = dense(d_dtype=d_dtype)
    c = {None: None, "d": d, "other": torch.zeros(8, 16, dtype=torch.float32)}[c_kind]
    assert deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c, **recipe) is None
    one_d = recipe.get("recipe") == (1, 1, 128) or recipe.get("recipe_b") == (1, 128)
    assert [name for name, _, _ in calls] == ["fp8_gemm_1d1d" if one_d else "fp8_gemm"]
    _, args, kwargs = calls[0]
    assert same(args, (a, sfa, b, sfb)) and kwargs["out"] is d
    if c is None:
        assert "c" not in kwargs
    else:
        assert kwargs["c"] is c


def _dense_call(name, **options):
    def call():
        overrides = dict(options)
        (a, sfa), (b, sfb), d = dense(d_dtype=overrides.pop("d_dtype", torch.bfloat16))
        sfa = overrides.pop("sfa", sfa)
        sfb = overrides.pop("sfb", sfb)
        getattr(deep_gemm, name)((a, sfa), (b, sfb), d, **overrides)
    return call


def _grouped_call(name, masked, **options):
    def call():
        overrides = dict(options)
        (a, sfa), (b, sfb), d = grouped(masked=masked, d_dtype=overrides.pop("d_dtype", torch.bfloat16))
        sfa = overrides.pop("sfa", sfa)
        sfb = overrides.pop("sfb", sfb)
        extra = (torch.ones(2, dtype=torch.int32), 4) if masked else (torch.zeros(8, dtype=torch.int32),)
        getattr(deep_gemm, name)((a, sfa), (b, sfb), d, *extra, **overrides)
    return call


PACKED = torch.ones(8, 2, dtype=torch.int32)  # packed UE8M0 scales, as DeepGEMM's SM100 kernels take

UNSUPPORTED = [
    # (call, words the message must contain)
    (_dense_call("fp8_gemm_nt", sfa=PACKED), ["a[1]", "torch.int32", "float32"]),
    (_dense_call("fp8_gemm_nt", sfb=torch.ones(1, 2, dtype=torch.int32)), ["b[1]", "torch.int32", "float32"]),
    (_dense_call("fp8_gemm_nt", sfa=torch.ones(8, 2, dtype=torch.bfloat16)), ["a[1]", "torch.bfloat16"]),
    (_dense_call("fp8_gemm_nt", recipe=(1, 128, 32)), ["recipe=(1, 128, 32)"]),
    (_dense_call("fp8_gemm_nt", recipe_a=(1, 128), recipe_b=(128, 1)), ["recipe_b=(128, 1)", "(128, 128)"]),
    (_dense_call("fp8_gemm_nt", recipe_a=(1, 32), recipe_b=(128, 128)), ["recipe_a=(1, 32)", "(1, 128)"]),
    (_dense_call("gemm_fp8_fp8_bf16_nt", sfa=PACKED), ["lhs[1]", "torch.int32"]),
    (_dense_call("gemm_fp8_fp8_bf16_nt", sfb=torch.ones(1, 2, dtype=torch.int32)), ["rhs[1]", "torch.int32"]),
    (_dense_call("gemm_fp8_fp8_bf16_nt", d_dtype=torch.float32), ["out", "torch.float32"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_contiguous", False, sfa=PACKED), ["a[1]", "torch.int32"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_contiguous", False, d_dtype=torch.float32), ["d", "torch.float32"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_contiguous", False, recipe=(1, 1, 128)), ["recipe=(1, 1, 128)"]),
    (_grouped_call("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", False, d_dtype=torch.float32), ["out"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_masked", True, sfb=torch.ones(2, 1, 2, dtype=torch.int32)),
     ["b[1]", "torch.int32"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_masked", True, d_dtype=torch.float32), ["d", "torch.float32"]),
    (_grouped_call("m_grouped_fp8_gemm_nt_masked", True, recipe_a=(1, 128), recipe_b=(1, 128)), ["recipe_b"]),
    (_grouped_call("m_grouped_gemm_fp8_fp8_bf16_nt_masked", True, sfa=torch.ones(2, 8, 2, dtype=torch.int32)),
     ["lhs[1]", "torch.int32"]),
]


@pytest.mark.parametrize("call, words", UNSUPPORTED, ids=range(len(UNSUPPORTED)))
def test_unsupported_raises_before_any_call(calls, call, words):
    with pytest.raises(NotImplementedError) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert "supports only" in str(info.value)
    assert calls == []


# --------------------------------------------------------------------------------------------------
# On a Hopper GPU (child process)
# --------------------------------------------------------------------------------------------------

def _check_gpu(function: str, cases: list) -> None:
    results = run_child_cases("gpu_compat_cases.py", function, cases, timeout=600)
    bad = [f"{r['case']}: diff {r['diff']:.2e}, {r['nan_computed']} NaN computed, "
           f"{r['untouched_written']} untouched entries written, returned None: {r['returned_none']}"
           for r in results
           if not (r["diff"] < 1e-3 and r["nan_computed"] == 0 and r["untouched_written"] == 0
                   and r["returned_none"] and r["computed"] > 0)]
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(bad)


@pytest.mark.gpu
def test_gpu_fp8_gemm_nt():
    _check_gpu("gemm_nt", [
        dict(m=128, n=4096, k=7168, seed=0), dict(m=4096, n=2112, k=7168, sfa_layout="tma", seed=1),
        dict(m=77, n=576, k=896, seed=2), dict(m=1, n=256, k=512, sfa_layout="tma", seed=3),
        dict(m=257, n=1024, k=1536, api="2025", seed=4), dict(m=64, n=7168, k=2048, api="2025", sfa_layout="tma"),
    ])


@pytest.mark.gpu
def test_gpu_k_grouped_as_a_trainer_calls_it():
    """DeepGEMM's K-grouped weight gradients, NT (its SM90 form) and TN, in place (c=d) and without
    c, with an empty group."""
    ks = [256, 0, 1024, 384, 128]
    _check_gpu("k_grouped", [
        dict(form="nt", m=4096, n=7168, ks=[1024, 0, 2048, 1536], seed=0),
        dict(form="nt", m=520, n=1160, ks=ks, in_place=False, seed=1),
        dict(form="tn", m=7168, n=2048, ks=ks, seed=2),
        dict(form="tn", m=256, n=384, ks=[128, 128, 0], in_place=False, seed=3),
        dict(form="tn", m=7168, n=2048, ks=ks, seed=2, transpose="torch"),
        dict(form="tn", m=528, n=1168, ks=[384, 0, 128, 256], seed=4),  # partial transposition tiles
        dict(form="tn", m=528, n=1168, ks=[384, 0, 128, 256], in_place=False, seed=5),
        dict(form="tn", m=520, n=1160, ks=[128, 256], seed=6),  # m % 16 != 0: torch's copy
    ])


@pytest.mark.gpu
def test_gpu_transpose_bytes_equals_torch():
    """The byte transposition of the TN form: bit-exact against torch's transposed copy over every
    byte value, one and two matrices, whole and partial 128x128 tiles, outputs pre-filled."""
    results = run_child_cases("gpu_compat_cases.py", "transpose_bytes", [
        dict(shapes=[(256, 384)], seed=0), dict(shapes=[(4096, 7168), (4096, 2048)], seed=1),
        dict(shapes=[(16, 16), (16, 48)], seed=2), dict(shapes=[(400, 528), (400, 1168)], seed=3),
        dict(shapes=[(384, 520)], seed=4)], timeout=240)
    assert [r["kernel"] for r in results] == [True, True, True, True, False], results
    assert not [r for r in results if r["wrong"]], results


@pytest.mark.gpu
def test_gpu_m_grouped_contiguous():
    _check_gpu("contiguous", [
        dict(num_groups=4, expected_m=192, n=4096, k=7168, seed=0),
        dict(num_groups=8, expected_m=100, n=576, k=896, seed=1),
        dict(num_groups=3, expected_m=300, n=1024, k=1536, api="2025", seed=2),
    ])


@pytest.mark.gpu
def test_gpu_m_grouped_masked():
    _check_gpu("masked", [
        dict(max_m=256, masked_rows=[0, 37, 128, 256], expected_m=128, n=4096, k=7168, seed=0),
        dict(max_m=128, masked_rows=[1, 64, 127], expected_m=64, n=576, k=896, sfa_layout="tma", seed=1),
        dict(max_m=192, masked_rows=[192, 5], expected_m=96, n=1024, k=1536, api="2025", seed=2),
    ])


@pytest.mark.gpu
def test_gpu_psum_layout():
    """vLLM's psum call: padding rows (between runs, after the last) untouched, empty experts,
    alignment 256, and a CUDA-graph replay with new ends."""
    _check_gpu("psum", [
        dict(sizes=[100, 0, 300, 128, 1], n=4096, k=7168, seed=0),
        dict(sizes=[0, 0, 77], n=576, k=896, tail=200, seed=1),
        dict(sizes=[129, 5, 0, 256], n=1024, k=1536, alignment=256, tail=3, seed=2),
        dict(sizes=[0, 0, 5], n=256, k=512, tail=128, seed=3),
        dict(sizes=[37, 250, 3, 0, 128, 90, 1, 64], n=2048, k=7168, graph=True, seed=4),
    ])
    _check_gpu("psum_layout", [
        dict(sizes=[3, 3, 130, 260], alignment=128, m=400), dict(sizes=[0, 5000, 7], alignment=256, m=1000),
        dict(sizes=list(range(0, 512 * 50, 50)), alignment=128, m=512 * 50 + 77),
    ])


@pytest.mark.gpu
def test_gpu_masked_with_signals():
    """SGLang's single-batch-overlap masked call: the GEMM right, every real block's flag at the
    threshold, every other flag (and the guard entries) 0."""
    _check_gpu("masked_signal", [
        dict(max_m=256, masked_rows=[0, 37, 128, 256], expected_m=128, n=4096, k=7168, seed=0),
        dict(max_m=200, masked_rows=[1, 64, 65, 200, 0], expected_m=64, n=7168, k=2048, seed=1),
        dict(max_m=200, masked_rows=[1, 64, 65, 200, 0], expected_m=64, n=7168, k=2048, max_block_n=64, seed=2),
        dict(max_m=1000, masked_rows=[1000, 513, 0, 129], expected_m=700, n=4096, k=7168, seed=3),  # 128-row tiles
        dict(max_m=96, masked_rows=[96, 1, 63, 64, 0, 95, 33, 2], expected_m=48, n=576, k=896, max_block_n=160,
             seed=4),
    ])


@pytest.mark.gpu
def test_gpu_signal_consumer_reads_complete_blocks():
    """A consumer on another stream that waits on a block's counter (acquire, with a clock budget)
    while the signalling GEMM runs, then copies the block's rows: none times out and every copy
    equals the final output bit for bit."""
    results = run_child_cases("gpu_compat_cases.py", "signal_consumer", [
        dict(max_m=256, masked_rows=[256, 200, 0, 129, 64, 1, 256, 77] * 4, expected_m=128, n=7168, k=2048, seed=0),
        dict(max_m=1024, masked_rows=[1024, 700, 333, 1], expected_m=512, n=4096, k=7168, watch=6, seed=1),
    ], timeout=600)
    bad = [r["case"] for r in results
           if not (r["diff"] < 1e-3 and r["nan_computed"] == 0 and r["untouched_written"] == 0 and r["computed"] > 0)]
    assert not bad, "\n".join(r["case"] for r in results)


# --------------------------------------------------------------------------------------------------
# The names engines probe: alignment, compile mode, psum layout, signals, module layout, alias
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def alignment():
    """Restore the compat module's alignment after a test that sets it."""
    before = deep_gemm.get_mk_alignment_for_contiguous_layout()
    yield
    deep_gemm.set_mk_alignment_for_contiguous_layout(before)


def test_set_mk_alignment(calls, alignment):
    for value in (256, 128, 384):
        assert deep_gemm.set_mk_alignment_for_contiguous_layout(value) is None
        assert deep_gemm.get_mk_alignment_for_contiguous_layout() == value
        assert deep_gemm.get_m_alignment_for_contiguous_layout() == value
        assert deep_gemm.utils.get_mk_alignment_for_contiguous_layout() == value
    for value in (64, 32, 192, 1):
        with pytest.raises(NotImplementedError, match=rf"alignment {value} is not supported.*multiples of 128"):
            deep_gemm.set_mk_alignment_for_contiguous_layout(value)
    for value, error in ((0, ValueError), (-128, ValueError), (128.0, TypeError), ("128", TypeError),
                         (True, TypeError)):
        with pytest.raises(error, match="new_value"):
            deep_gemm.set_mk_alignment_for_contiguous_layout(value)
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 384  # unchanged by the refusals


def test_alignment_scope_as_vllm_and_sglang_use_it(alignment):
    """vLLM's mk_alignment_scope and SGLang's contiguous_layout_alignment_scope: read, set, restore."""
    previous = deep_gemm.get_mk_alignment_for_contiguous_layout()
    deep_gemm.set_mk_alignment_for_contiguous_layout(256)
    try:
        assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 256
    finally:
        deep_gemm.set_mk_alignment_for_contiguous_layout(previous)
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == previous == 128


def test_theoretical_alignment_both_calling_forms():
    theoretical = deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout
    assert theoretical() == 128
    assert theoretical(7) == 128                             # SGLang: (per_group_m)
    assert theoretical(4096, 256) == 128                     # vLLM: (expected_m, num_groups)
    assert theoretical(expected_m=4096, num_groups=256) == 128  # SGLang's fallback, vLLM's keywords
    assert theoretical(expected_m=None, num_groups=None) == 128
    assert theoretical(0) == 128
    with pytest.raises(ValueError, match="num_groups"):
        theoretical(64, 0)
    with pytest.raises(ValueError, match="expected_m"):
        theoretical(-1)
    with pytest.raises(TypeError, match="expected_m"):
        theoretical(64.0)
    with pytest.raises(TypeError):
        theoretical(64, 8, 1)


def test_compile_mode():
    assert deep_gemm.get_compile_mode() == 0
    deep_gemm.set_compile_mode(1)
    try:
        assert deep_gemm.get_compile_mode() == 1
        for bad in (2, -1, True, "1"):
            with pytest.raises(ValueError, match="mode must be 0 or 1"):
                deep_gemm.set_compile_mode(bad)
        assert deep_gemm.get_compile_mode() == 1
    finally:
        deep_gemm.set_compile_mode(0)
    assert deep_gemm.get_compile_mode() == 0


def test_tma_aligned_size():
    assert [deep_gemm.get_tma_aligned_size(x, 4) for x in (0, 1, 4, 5, 8)] == [0, 4, 4, 8, 8]
    assert deep_gemm.get_tma_aligned_size(3, 1) == 16 and deep_gemm.get_tma_aligned_size(9, 2) == 16
    with pytest.raises(ValueError, match="divide 16"):
        deep_gemm.get_tma_aligned_size(5, 3)


def test_psum_layout_forwards(calls, alignment):
    (a, sfa), (b, sfb), d = grouped()
    ends = torch.tensor([3, 130], dtype=torch.int32)
    assert deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends, use_psum_layout=True) is None
    deep_gemm.set_mk_alignment_for_contiguous_layout(256)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends, use_psum_layout=True,
                                               expected_m_for_psum_layout=64)
    assert [c[0] for c in calls] == ["m_grouped_fp8_gemm_psum"] * 2
    assert same(calls[0][1], (a, sfa, b, sfb, ends, 128)) and calls[0][2]["out"] is d
    assert same(calls[1][1], (a, sfa, b, sfb, ends, 256)) and calls[1][2]["out"] is d


def test_psum_hint_checks(calls):
    (a, sfa), (b, sfb), d = grouped()
    layout = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(ValueError, match="without use_psum_layout=True"):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, expected_m_for_psum_layout=64)
    with pytest.raises(ValueError, match="int >= 0"):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout[:2], use_psum_layout=True,
                                                   expected_m_for_psum_layout=-1)
    assert calls == []


def test_masked_with_signal_returns_block_m_and_threshold(calls):
    """SGLang's single-batch overlap call: the flags of the real 64-row blocks reach the threshold,
    the others keep 0, and (block_m, threshold) index the signal as the combine reads it."""
    (a, sfa), (b, sfb), d = grouped(groups=3, m=200, masked=True)
    masked_m = torch.tensor([130, 0, 200], dtype=torch.int32)
    signal = torch.zeros(3 * 4 + 2, dtype=torch.int32)  # G * ceil(200 / 64) and two spare entries
    result = deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, 100, max_block_n=256,
                                                    enable_overlap=True, signal=signal)
    block_m, threshold = result
    assert [c[0] for c in calls] == ["m_grouped_fp8_gemm_masked"] and calls[0][2]["out"] is d
    per_group = -(-200 // block_m)
    want = torch.zeros_like(signal)
    for g, rows in enumerate(masked_m.tolist()):
        want[g * per_group: g * per_group + -(-rows // block_m)] = threshold
    assert threshold >= 1 and torch.equal(signal, want), signal.tolist()
    assert signal[:12].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]


def _psum_rows(ends, m, alignment):
    """Each row's expert by the psum rule, one Python loop (the test's own reference)."""
    rows, start = [-1] * m, 0
    for e, end in enumerate(ends):
        start = -(-start // alignment) * alignment
        for r in range(start, min(max(end, 0), m)):
            rows[r] = e
        start = max(end, 0)
    return rows


@pytest.mark.parametrize("alignment", [128, 256])
def test_psum_to_m_indices_cpu(alignment):
    import random

    rng = random.Random(alignment)
    cases = [([3, 3, 130, 260], 400), ([], 5), ([0, 0], 0), ([0, 0, 0], 300), ([500], 300), ([128, 256], 256)]
    for _ in range(30):
        ends, start = [], 0
        for _ in range(rng.randint(1, 12)):
            start = -(-start // alignment) * alignment + rng.choice([0, 0, 1, 5, 127, 128, 129, 300])
            ends.append(start)
        cases.append((ends, (ends[-1] if ends else 0) + rng.choice([0, 1, 200])))
    for ends, m in cases:
        got = deep_tile.psum_to_m_indices(torch.tensor(ends, dtype=torch.int32), m, alignment)
        assert got.dtype == torch.int32 and got.tolist() == _psum_rows(ends, m, alignment), (ends, m)


def test_psum_argument_checks():
    ends = torch.tensor([3, 130], dtype=torch.int32)
    for bad, error, words in ((ends.long(), ValueError, "int32"), (ends.view(2, 1), ValueError, "1-D"),
                              ([3, 130], TypeError, "torch.Tensor")):
        with pytest.raises(error, match=words):
            deep_tile.psum_to_m_indices(bad, 256)
    for alignment, error in ((64, ValueError), (0, ValueError), (128.0, TypeError)):
        with pytest.raises(error, match="alignment"):
            deep_tile.psum_to_m_indices(ends, 256, alignment)
    with pytest.raises(ValueError, match="m must be >= 0"):
        deep_tile.psum_to_m_indices(ends, -1)
    (a, sfa), (b, sfb), d = grouped(groups=3)
    with pytest.raises(ValueError, match="one entry per expert, 3"):
        deep_tile.m_grouped_fp8_gemm_psum(a, sfa, b, sfb, ends, out=d)


def test_masked_signal_checks(calls):
    (a, sfa), (b, sfb), d = grouped(groups=2, m=128, masked=True)
    masked_m = torch.ones(2, dtype=torch.int32)
    call = deep_gemm.m_grouped_fp8_gemm_nt_masked
    with pytest.raises(TypeError, match="signal"):
        call((a, sfa), (b, sfb), d, masked_m, 1, enable_overlap=True)
    with pytest.raises(ValueError, match="int32"):
        call((a, sfa), (b, sfb), d, masked_m, 1, enable_overlap=True, signal=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="4 are needed"):
        call((a, sfa), (b, sfb), d, masked_m, 1, enable_overlap=True, signal=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="without enable_overlap"):
        call((a, sfa), (b, sfb), d, masked_m, 1, signal=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="max_block_n"):
        call((a, sfa), (b, sfb), d, masked_m, 1, enable_overlap=True, max_block_n=8,
             signal=torch.zeros(4, dtype=torch.int32))
    assert calls == []
    assert call((a, sfa), (b, sfb), d, masked_m, 1, max_block_n=160) is None  # plain GEMM without overlap


def test_module_layout_and_helpers():
    import deep_tile.compat.deepgemm.utils as utils
    import deep_tile.compat.deepgemm.utils.layout as layout
    import deep_tile.compat.deepgemm.utils.math as dg_math

    assert utils.layout is layout and utils.math is dg_math and deep_gemm.utils is utils
    assert layout.get_mn_major_tma_aligned_tensor is deep_gemm.get_mn_major_tma_aligned_tensor
    assert utils.get_mn_major_tma_aligned_tensor is deep_gemm.get_mn_major_tma_aligned_tensor
    assert utils.set_mk_alignment_for_contiguous_layout is deep_gemm.set_mk_alignment_for_contiguous_layout
    assert utils.align(5, 4) == 8 and utils.ceil_div(9, 4) == 3 and utils.get_tma_aligned_size(5, 4) == 8
    for module in (utils, layout, dg_math):
        for name in module.__all__:
            assert getattr(module, name).__doc__, f"{module.__name__}.{name} has no docstring"
    with pytest.raises(NotImplementedError, match="UE8M0"):
        layout.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(4, 4))
    with pytest.raises(NotImplementedError, match="UE8M0"):
        dg_math.pack_ue8m0_to_int(torch.ones(4, 4))
    with pytest.raises(NotImplementedError, match="use_ue8m0"):
        dg_math.per_token_cast_to_fp8(torch.ones(4, 128), use_ue8m0=True)
    q, s = dg_math.per_token_cast_to_fp8(torch.ones(4, 256), use_ue8m0=False)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (4, 2) and s.dtype == torch.float32
    q, s = dg_math.per_block_cast_to_fp8(torch.ones(256, 256), use_ue8m0=False)
    assert s.shape == (2, 2)


def test_install_alias_in_a_child():
    """install_alias maps deep_gemm and its submodules onto these modules (one state); run in a child so
    this process's sys.modules stays clean (its refusal to hide an importable deep_gemm: the next test)."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        import deep_tile.compat.deepgemm as compat
        compat.install_alias()
        import deep_gemm, deep_gemm.utils.layout
        from deep_gemm.utils import align, get_tma_aligned_size
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
        assert deep_gemm is compat and deep_gemm.utils.layout is compat.utils.layout
        deep_gemm.set_mk_alignment_for_contiguous_layout(256)
        assert compat.get_mk_alignment_for_contiguous_layout() == 256
        compat.install_alias()  # again: harmless
        print("alias ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "alias ok" in done.stdout, done.stderr


def test_alias_distribution_in_a_child():
    """compat/deep_gemm_alias (the installable switch): on the path, ``install_alias()`` refuses to
    hide it (an importable deep_gemm), ``import deep_gemm`` and its submodules are deep_tile's; with
    DEEP_TILE_DEEPGEMM_ALIAS=0 the import raises ImportError (what the engines take as "not installed")."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    alias = Path(__file__).resolve().parents[1] / "compat" / "deep_gemm_alias"
    path = os.pathsep.join([str(alias), os.getcwd(), os.environ.get("PYTHONPATH", "")])
    code = ("import deep_tile.compat.deepgemm as c\n"
            "try:\n"
            "    c.install_alias()  # another deep_gemm (this one) is importable: refused\n"
            "except RuntimeError as e:\n"
            "    assert 'will not hide it' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('install_alias hid an importable deep_gemm')\n"
            "import deep_gemm, deep_gemm.utils.layout\n"
            "from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor\n"
            "assert deep_gemm is c and deep_gemm.utils.layout is c.utils.layout\n"
            "print('alias on')")
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, PYTHONPATH=path))
    assert on.returncode == 0 and "alias on" in on.stdout, on.stderr
    off = subprocess.run([sys.executable, "-c", "import deep_gemm"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=path, DEEP_TILE_DEEPGEMM_ALIAS="0"))
    assert off.returncode != 0 and "ImportError" in off.stderr and "turned off" in off.stderr, off.stderr


# --------------------------------------------------------------------------------------------------
# K-grouped GEMMs (MoE weight gradients), as a trainer calls DeepGEMM's
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def k_grouped_calls(monkeypatch):
    """deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d replaced by a recorder (the compat module looks
    it up at call time)."""
    import deep_tile.gemm.k_grouped

    recorded = []
    monkeypatch.setattr(deep_tile.gemm.k_grouped, "k_grouped_fp8_gemm_1d1d",
                        lambda *args, **kwargs: recorded.append((args, kwargs)))
    return recorded


def k_grouped_operands(ks, m=8, n=16):
    """DeepGEMM's test data of its K-grouped GEMM, on the CPU with distinct bytes: ``x [sum_k, rows]``
    (tokens are rows) for a (m) and b (n), their per-channel scales [sum_k / 128, rows], and the
    K-major form DeepGEMM's NT kernel takes (each group's [rows, k_g] block flattened, one after
    another; the scales transposed)."""
    total = sum(ks)
    out = {}
    for name, rows in (("a", m), ("b", n)):
        x = (torch.arange(total * rows, dtype=torch.int32) % 113).to(torch.uint8).view(total, rows)
        x = x.view(torch.float8_e4m3fn)
        sf = torch.rand(total // 128, rows)
        flat = torch.cat([x[s:s + k].t().reshape(-1) for s, k in zip([0, *itertools.accumulate(ks)], ks)]) \
            if total else torch.empty(0, dtype=torch.float8_e4m3fn)
        out[name] = dict(x=x, sf=sf, nt=(flat, sf.t()), tn=(x, sf))
    return out


def test_k_grouped_tn_forwards_with_tokens_side_by_side(k_grouped_calls):
    """The TN form reaches deep_tile's K-grouped GEMM with a [m, sum_k] / [n, sum_k] (the groups'
    tokens side by side, each row the transposed token column: one transposing copy, FP8 WGMMA
    takes K-major operands only), the scales as [rows, sum_k / 128], the device sizes, d as out
    and c (d itself: in place)."""
    ks = [256, 0, 128, 384]
    ops = k_grouped_operands(ks)
    d = torch.zeros(4, 8, 16)
    layout = torch.tensor(ks, dtype=torch.int32)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(ops["a"]["tn"], ops["b"]["tn"], d, ks, layout, d, recipe=(1, 1, 128))
    (args, kwargs), = k_grouped_calls
    a_rows, sfa, b_rows, sfb, sizes, out = args
    for got, want in ((a_rows, ops["a"]["x"]), (b_rows, ops["b"]["x"])):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8).t())
    assert torch.equal(sfa, ops["a"]["sf"].t()) and torch.equal(sfb, ops["b"]["sf"].t())
    assert sizes is layout and out is d and kwargs == {"c": d, "layout": "rows"}


def test_k_grouped_nt_forwards_deepgemm_blocks_without_a_copy(k_grouped_calls):
    """The NT form hands DeepGEMM's flat per-group blocks on as they are: the same storage (no copy
    of a or b), layout="blocks", the scales as given, the device sizes, d as out and c."""
    ks = [256, 0, 128, 384]
    ops = k_grouped_operands(ks)
    d = torch.zeros(4, 8, 16)
    layout = torch.tensor(ks, dtype=torch.int32)
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(ops["a"]["nt"], ops["b"]["nt"], d, ks, layout, d, recipe=(1, 1, 128))
    (args, kwargs), = k_grouped_calls
    a_flat, sfa, b_flat, sfb, sizes, out = args
    for got, (flat, sf) in ((a_flat, ops["a"]["nt"]), (b_flat, ops["b"]["nt"])):
        assert got.data_ptr() == flat.data_ptr() and got.numel() == flat.numel() and got.dtype == flat.dtype
    assert sfa is ops["a"]["nt"][1] and sfb is ops["b"]["nt"][1]
    assert sizes is layout and out is d and kwargs == {"c": d, "layout": "blocks"}


def test_k_grouped_host_sizes_and_empty_k(k_grouped_calls):
    """Without an int32 grouped_layout the host list is the sizes; all groups empty: d = c (zeros
    without c) and no kernel, as DeepGEMM's early return."""
    ks = [128, 128]
    ops = k_grouped_operands(ks)
    d = torch.zeros(2, 8, 16)
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(ops["a"]["nt"], ops["b"]["nt"], d, ks, None)
    (args, kwargs), = k_grouped_calls
    assert args[4] == [128, 128] and kwargs == {"c": None, "layout": "blocks"}
    empty = k_grouped_operands([0, 0])
    c = torch.randn(2, 8, 16)
    d = torch.full((2, 8, 16), float("nan"))
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous(empty["a"]["nt"], empty["b"]["nt"], d, [0, 0], None, c)
    assert torch.equal(d, c)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(empty["a"]["tn"], empty["b"]["tn"], d, [0, 0], None)
    assert (d == 0).all() and len(k_grouped_calls) == 1


@pytest.mark.parametrize("change, error, words", [
    (dict(recipe=(1, 128, 128)), NotImplementedError, "recipe=(1, 128, 128) is not supported"),
    (dict(use_psum_layout=True), NotImplementedError, "use_psum_layout=True is not supported"),
    (dict(ks_cpu=[100, 156]), ValueError, "multiple of 128"),
    (dict(ks_cpu=[256]), ValueError, "ks_cpu must be a host list of num_groups"),
    (dict(scale_dtype=torch.int32), NotImplementedError, "float32 scales"),
])
def test_k_grouped_refusals_before_any_call(k_grouped_calls, change, error, words):
    ks = change.pop("ks_cpu", [128, 128])
    ops = k_grouped_operands([128, 128])
    a, b = ops["a"]["nt"], ops["b"]["nt"]
    if change.pop("scale_dtype", None) is not None:
        a = (a[0], a[1].to(torch.int32))
    d = torch.zeros(2, 8, 16)
    with pytest.raises(error, match=re.escape(words)):
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, None, **change)
    assert k_grouped_calls == []
