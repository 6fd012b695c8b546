"""The fused casts (deep_tile/casts/cast_transpose.py): host side and GPU.

CPU: the torch reference against an independent float64 formulation (per-group Python loops,
e4m3 rounding written out), bitwise, over ragged shapes, zero / inf / huge rows and both scale
kinds; the public functions' layouts (the GEMMs' zero-copy ones) and errors; the contract against
the entry file. GPU (marker ``gpu``, in a child process: tests/gpu_cast_cases.py): the kernels
against the torch reference, bitwise, on poisoned outputs, and their outputs fed to the GEMMs.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

from conftest import run_child_cases
from deep_tile.gemm import layouts
from deep_tile.casts.cast_transpose import per_block_cast_transpose_to_fp8, per_token_cast_transpose_to_fp8
from deep_tile.casts.cast_transpose_ref import block_cast_transpose_ref, token_cast_transpose_ref
from deep_tile.jit import paths
from deep_tile.kernels import cast_transpose as contract

AMAX_MIN32 = float(torch.tensor(1e-4, dtype=torch.float32))


# ---- an independent float64 formulation ---------------------------------------------------------

def e4m3_f64(y: torch.Tensor) -> torch.Tensor:
    """Round float64 ``y`` to float8_e4m3fn values (nearest even, saturating at 448), in float64."""
    a = y.abs()
    exp = torch.floor(torch.log2(torch.where(a > 0, a, torch.ones_like(a)))).clamp(min=-6)
    quantum = torch.exp2(exp - 3)
    r = torch.round(a / quantum) * quantum  # torch.round: half to even
    r = torch.where(a > 0, r, torch.zeros_like(r)).clamp(max=448.0)
    return torch.where(torch.isnan(y), y, torch.copysign(r, y))


def f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float64).float())


def group_f64(values: torch.Tensor, power_of_two: bool):
    """(q as float64, scale) of one group (float64 values of bf16 inputs)."""
    amax = max(float(values.abs().max()), AMAX_MIN32)
    inv = f32(448.0 / amax)  # a division in float64 rounded once to float32 is correctly rounded
    if power_of_two:
        inv = 0.0 if inv == 0 else 2.0 ** (math.frexp(inv)[1] - 1)
        scale = f32(1.0 / inv) if inv else math.inf
    else:
        scale = f32(amax / 448.0)
    products = (values * inv).float().double()  # exact in float64, then the kernel's float32 rounding
    if math.isinf(amax):
        products = torch.where(torch.isinf(values), torch.full_like(values, math.nan), values * 0.0)
    return e4m3_f64(products), scale


def token_f64(x: torch.Tensor, power_of_two: bool):
    rows, cols = x.shape
    xd = x.double()
    q = torch.empty(rows, cols, dtype=torch.float64)
    s = torch.empty(rows, -(-cols // 128), dtype=torch.float64)
    for i in range(rows):
        for g in range(0, cols, 128):
            q[i, g:g + 128], s[i, g // 128] = group_f64(xd[i, g:g + 128], power_of_two)
    tp = -(-rows // 16) * 16
    qt = torch.zeros(cols, tp, dtype=torch.float64)
    st = torch.empty(cols, -(-rows // 128), dtype=torch.float64)
    for j in range(cols):
        for g in range(0, rows, 128):
            qt[j, g:g + 128][: min(128, rows - g)], st[j, g // 128] = group_f64(xd[g:g + 128, j], power_of_two)
    return q, s, qt, st


def block_f64(w: torch.Tensor, power_of_two: bool):
    rows, cols = w.shape
    wd = w.double()
    q = torch.empty(rows, cols, dtype=torch.float64)
    s = torch.empty(-(-rows // 128), -(-cols // 128), dtype=torch.float64)
    for r in range(0, rows, 128):
        for c in range(0, cols, 128):
            block = wd[r:r + 128, c:c + 128]
            qb, s[r // 128, c // 128] = group_f64(block.reshape(-1), power_of_two)
            q[r:r + 128, c:c + 128] = qb.reshape(block.shape)
    return q, s


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values (float64 view), NaN matching NaN."""
    got, want = got.double(), want.double()
    return got.shape == want.shape and bool(((got == want) | (got.isnan() & want.isnan())).all())


def sample(rows: int, cols: int, seed: int, special: bool) -> torch.Tensor:
    """bf16 data whose rows span many magnitudes; with ``special``, a zero row, a zero column,
    a row of huge values and (when there are 3+ rows) an inf and a -inf."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=gen).float())
    if special:
        x[0] = 0
        x[:, min(5, cols - 1)] = 0
        if rows > 2:
            x[1] = 3e38
            x[2, 3] = math.inf
            x[rows - 1, cols - 1] = -math.inf
    return x.bfloat16()


SHAPES = [(1, 16), (1, 128), (127, 128), (128, 144), (129, 272), (300, 128), (17, 256)]


@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_token_reference_matches_float64(rows, cols, power_of_two):
    for special in (False, True):
        x = sample(rows, cols, rows * cols, special)
        want = token_f64(x, power_of_two)
        got = token_cast_transpose_ref(x, True, power_of_two)
        for name, g, w in zip(("q", "s", "qt", "st"), got, want):
            assert same(g, w), (name, rows, cols, special)


@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("rows,cols", [(1, 16), (128, 128), (144, 272), (256, 400), (16, 128)])
def test_block_reference_matches_float64(rows, cols, power_of_two):
    for special in (False, True):
        w = sample(rows, cols, rows + cols, special)
        q_want, s_want = block_f64(w, power_of_two)
        q, s, qt, st = block_cast_transpose_ref(w, True, power_of_two)
        assert same(q, q_want) and same(s, s_want), (rows, cols, special)
        assert torch.equal(qt.view(torch.uint8), q.view(torch.uint8).t()) and torch.equal(st, s.t())


def test_power_of_two_scales_are_powers_of_two_and_cover_the_amax():
    x = sample(300, 256, 7, False)
    q, s, qt, st = per_token_cast_transpose_to_fp8(x, power_of_two_scales=True)
    plain = per_token_cast_transpose_to_fp8(x)
    for scale, ref in ((s, plain.s), (st, plain.st)):
        mantissa, _ = torch.frexp(scale)
        assert bool((mantissa == 0.5).all())
        assert bool((scale >= ref).all()) and bool((scale < 2 * ref).all())
    assert q.float().abs().max() <= 448


@pytest.mark.parametrize("rows", [1, 127, 129])
def test_public_token_layouts_are_the_gemms_zero_copy_ones(rows):
    x = sample(rows, 256, rows, True)
    q, s, qt, st = per_token_cast_transpose_to_fp8(x)
    assert q.shape == (rows, 256) and q.is_contiguous() and q.dtype == torch.float8_e4m3fn
    tp = -(-rows // 16) * 16
    assert qt.shape == (256, tp) and qt.is_contiguous() and not qt.view(torch.uint8)[:, rows:].any()
    assert s.shape == (rows, 2) and s.stride() == (1, -(-rows // 4) * 4) and layouts.is_tma_aligned(s)
    assert st.shape == (256, -(-rows // 128)) and st.stride() == (1, 256) and layouts.is_tma_aligned(st)
    assert layouts.get_tma_aligned_a_scale(s) is s and layouts.get_tma_aligned_a_scale(st) is st
    no_t = per_token_cast_transpose_to_fp8(x, transpose=False)
    assert no_t.qt is None and no_t.st is None and same(no_t.q.float(), q.float()) and torch.equal(no_t.s, s)


def test_dequantised_transpose_approximates_the_input():
    x = torch.randn(200, 384, generator=torch.Generator().manual_seed(3)).bfloat16()
    _, _, qt, st = per_token_cast_transpose_to_fp8(x)
    scale = st.double().repeat_interleave(128, dim=1)[:, :200]
    xt = x.double().t()
    err = (qt[:, :200].double() * scale - xt).abs()
    # e4m3 rounding: half an ulp (3 mantissa bits) for normals, half of 2^-9 (times the scale) below
    assert bool((err <= xt.abs() * 2 ** -4 + scale * 2 ** -10).all())
    assert int((qt[:, :200].float() != 0).sum()) > 0.9 * 200 * 384


@pytest.mark.parametrize("call,arg,message", [
    (per_token_cast_transpose_to_fp8, torch.zeros(4, 16), "bfloat16"),
    (per_token_cast_transpose_to_fp8, torch.zeros(4, 24, dtype=torch.bfloat16), "multiple of 16"),
    (per_token_cast_transpose_to_fp8, torch.zeros(4, 0, dtype=torch.bfloat16), "multiple of 16"),
    (per_token_cast_transpose_to_fp8, torch.zeros(2, 4, 16, dtype=torch.bfloat16), "2-D"),
    (per_block_cast_transpose_to_fp8, torch.zeros(24, 16, dtype=torch.bfloat16), "multiple of 16 rows"),
    (per_block_cast_transpose_to_fp8, [[1.0]], "torch.Tensor"),
])
def test_errors_name_the_function_and_argument(call, arg, message):
    with pytest.raises((TypeError, ValueError), match=message) as info:
        call(arg)
    assert call.__name__ in str(info.value)


def test_flags_must_be_bools():
    with pytest.raises(TypeError, match="transpose must be a bool"):
        per_token_cast_transpose_to_fp8(torch.zeros(4, 16, dtype=torch.bfloat16), transpose=1)
    with pytest.raises(TypeError, match="power_of_two_scales must be a bool"):
        per_block_cast_transpose_to_fp8(torch.zeros(16, 16, dtype=torch.bfloat16), power_of_two_scales=None)


@pytest.mark.parametrize("transpose", [False, True])
def test_no_rows_gives_empty_outputs(transpose):
    x = torch.zeros(0, 272, dtype=torch.bfloat16)
    q, s, qt, st = per_token_cast_transpose_to_fp8(x, transpose=transpose)
    assert q.shape == (0, 272) and s.shape == (0, 3)
    assert not transpose or (qt.shape == (272, 0) and st.shape == (272, 0))
    q, s, qt, st = per_block_cast_transpose_to_fp8(x, transpose=transpose)
    assert q.shape == (0, 272) and s.shape == (0, 3)
    assert not transpose or (qt.shape == (272, 0) and st.shape == (3, 0))


@pytest.mark.parametrize("transpose", [False, True])
def test_a_stack_of_weights_is_each_matrix_cast_on_its_own(transpose):
    w = torch.stack([sample(144, 272, 30 + e, e == 1) for e in range(3)])
    stacked = per_block_cast_transpose_to_fp8(w, transpose=transpose, power_of_two_scales=True)
    assert stacked.q.shape == (3, 144, 272) and stacked.s.shape == (3, 2, 3)
    assert not transpose or (stacked.qt.shape == (3, 272, 144) and stacked.st.shape == (3, 3, 2))
    for e in range(3):
        alone = per_block_cast_transpose_to_fp8(w[e], transpose=transpose, power_of_two_scales=True)
        for got, want in zip(stacked, alone):
            assert (got is None and want is None) or same(got[e], want), e
    with pytest.raises(ValueError, match="2-D or 3-D"):
        per_block_cast_transpose_to_fp8(w[None])


def test_grouped_cast_places_each_group_in_its_own_bands():
    """CPU (the reference path): every 128-row block of qt holds one group's rows, the groups
    start at their padded offsets, zeros elsewhere; q and s are the plain cast's."""
    from deep_tile.casts.cast_transpose import padded_group_sizes

    x = sample(300, 272, 41, True)
    offsets = [0, 100, 100, 229, 300]
    cast = per_token_cast_transpose_to_fp8(x, group_offsets=torch.tensor(offsets, dtype=torch.int32))
    plain = per_token_cast_transpose_to_fp8(x)
    assert same(cast.q, plain.q) and same(cast.s, plain.s)
    assert cast.qt.shape == (272, 128 * (3 + 4)) and cast.st.shape == (272, 7)
    assert padded_group_sizes(torch.tensor(offsets, dtype=torch.int32)).tolist() == [128, 0, 256, 128]
    for (first, end), start in zip(((0, 100), (100, 229), (229, 300)), (0, 128, 384)):
        alone = per_token_cast_transpose_to_fp8(x[first:end].contiguous())
        n = end - first
        assert same(cast.qt[:, start:start + n], alone.qt[:, :n])
        assert same(cast.st[:, start // 128:start // 128 + alone.st.shape[1]], alone.st)
        pad_end = start + (n + 127) // 128 * 128
        assert int(cast.qt[:, start + n:pad_end].float().abs().sum()) == 0
    assert int(cast.qt[:, 512:].float().abs().sum()) == 0
    with pytest.raises(ValueError, match="transpose=True"):
        per_token_cast_transpose_to_fp8(x, transpose=False, group_offsets=torch.tensor(offsets, dtype=torch.int32))
    with pytest.raises(ValueError, match="group_offsets"):
        per_token_cast_transpose_to_fp8(x, group_offsets=torch.tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match="group_offsets"):
        per_token_cast_transpose_to_fp8(x, group_offsets=torch.tensor(offsets, dtype=torch.int64))


def test_block_without_transpose_takes_any_rows():
    w = sample(24, 16, 1, False)
    q, s, qt, st = per_block_cast_transpose_to_fp8(w, transpose=False)
    assert qt is None and st is None and q.shape == (24, 16) and s.shape == (1, 1)


def test_contract_matches_the_entry_file():
    text = paths.entry_path(contract.ENTRY).read_text()
    params = re.search(r"#define DT_CAST_TRANSPOSE_PARAMS(.*?)\n\n", text, re.S).group(1)
    names = [n for n in re.findall(r"\b(\w+)\s*(?=,|$)", " ".join(params.replace("\\", " ").split()))]
    assert tuple(names) == contract.ARGUMENTS
    for symbol in contract.SYMBOLS:
        assert re.search(rf"__global__ void __launch_bounds__\(DT_CT_THREADS, DT_CT_MIN_BLOCKS\)\s+{symbol}\(", text)
    assert contract.DESIGN in contract.DESIGNS
    for design in contract.DESIGNS:
        stages = contract.STAGES[design]
        assert contract.defines(design) == {"DT_CT_THREADS": contract.THREADS, "DT_CT_MIN_BLOCKS": contract.MIN_BLOCKS,
                                            "DT_CT_STAGES": stages, "DT_CT_LINES": contract.LINES[design]}
        assert stages or not contract.LINES[design]
        # without a transposed copy every design runs one CTA per tile, no dynamic shared memory
        assert contract.grid(129, 7168, False, 132, design) == (56, 2, 1)
        assert contract.grid(1, 16, False, 0, design) == (1, 1, 1) and contract.grid(1, 16, False, 0, design, 5) == (1, 1, 5)
        assert contract.smem_bytes(False, design) == 0
        if stages:  # the persistent grid: at most MIN_BLOCKS CTAs per SM, never more than the tiles
            assert contract.grid(129, 7168, True, 132, design) == (112, 1, 1)
            assert contract.grid(16384, 18432, True, 132, design) == (contract.MIN_BLOCKS * 132, 1, 1)
            # a stack's tiles all go to one persistent grid
            assert contract.grid(128, 256, True, 132, design, 3) == (6, 1, 1)
            assert contract.smem_bytes(True, design) == stages * 128 * 128 * 2
            # MIN_BLOCKS CTAs fit an SM's 228 KiB (1 KiB reserved per CTA, 2 KiB of static smem)
            assert contract.MIN_BLOCKS * (contract.smem_bytes(True, design) + 3 * 1024) <= 228 * 1024
        else:
            assert contract.grid(129, 7168, True, 132, design) == (56, 2, 1) and contract.smem_bytes(True, design) == 0
    with pytest.raises(ValueError, match="design"):
        contract.defines("fast")
    with pytest.raises(ValueError, match="SM count"):
        contract.grid(128, 128, True, 0, "pipe")


# ---- GPU -------------------------------------------------------------------------------------------

def _run(function: str, cases: list) -> list:
    return run_child_cases("gpu_cast_cases.py", function, cases, timeout=900.0)


def _check(results: list) -> None:
    bad = [r for r in results if not r["ok"]]
    assert not bad, f"{len(bad)}/{len(results)} cases failed:\n" + "\n".join(map(str, bad))


@pytest.mark.gpu
def test_token_kernel_bitwise():
    cases = [dict(kind="token", rows=t, cols=d, transpose=tr, power_of_two=p2, special=sp, seed=i)
             for i, (t, d, tr, p2, sp) in enumerate(
                 [(t, d, True, False, False) for t in (1, 127, 128, 129, 4097) for d in (128, 7168, 2048)]
                 + [(t, 2048, True, True, False) for t in (1, 129, 4097)]
                 + [(t, 7168, False, p2, False) for t in (129, 4096) for p2 in (False, True)]
                 + [(t, d, True, p2, True) for t in (3, 129, 300) for d in (128, 272) for p2 in (False, True)]
                 + [(4097, 2048, True, False, True), (129, 7168, True, True, True), (1, 7168, True, False, True)])]
    _check(_run("cast_case", cases))


@pytest.mark.gpu
def test_block_kernel_bitwise():
    cases = [dict(kind="block", rows=n, cols=k, transpose=tr, power_of_two=p2, special=sp, seed=i)
             for i, (n, k, tr, p2, sp) in enumerate(
                 [(n, k, True, False, False) for n, k in ((128, 128), (7168, 2048), (2048, 7168), (4112, 2064))]
                 + [(n, k, True, True, sp) for n, k in ((144, 272), (2048, 7168)) for sp in (False, True)]
                 + [(n, k, False, False, False) for n, k in ((129, 7168), (1, 16))])]
    _check(_run("cast_case", cases))


@pytest.mark.gpu
def test_every_design_bitwise():
    """Each kernel design (contract.DESIGNS) on ragged shapes, from one tile to more tiles than
    the persistent grid has CTAs (several tiles per CTA: the pipelined buffers are reused)."""
    shapes = [(1, 128), (129, 272), (4097, 2048), (2200, 2448)]
    cases = [dict(kind=kind, rows=r if kind == "token" else r + (-r) % 16, cols=c, transpose=True,
                  power_of_two=i % 2 == 1, special=i % 3 == 0, seed=100 + i, design=design)
             for design in contract.DESIGNS for kind in ("token", "block") for i, (r, c) in enumerate(shapes)]
    _check(_run("cast_case", cases))


@pytest.mark.gpu
def test_a_stack_of_weights_casts_each_matrix_bitwise():
    """A 3-D weight stack in one launch (each design; the experts' weights): every matrix's four
    outputs equal that matrix's own cast, tails and stacks of more tiles than the persistent grid
    has CTAs included."""
    shapes = [(1, 128, 128), (3, 144, 272), (5, 2064, 400), (4, 2048, 7168)]
    cases = [dict(experts=e, rows=r, cols=c, power_of_two=i % 2 == 1, seed=200 + i, design=design)
             for design in contract.DESIGNS for i, (e, r, c) in enumerate(shapes)]
    _check(_run("stack_case", cases))


@pytest.mark.gpu
def test_grouped_transposed_cast_bitwise():
    """Row groups (the experts' tokens) in their own 128-row bands of the transposed copy, each
    design: empty groups, groups of 1, 127, 128 and 129 rows, rows before the first group and
    after the last (left unwritten in q and s), and more bands than the persistent grid's CTAs."""
    groups = [(1, 128, [0, 1]), (300, 272, [0, 100, 100, 229, 300]), (300, 144, [5, 5, 133, 260, 261]),
              (700, 2048, [0, 127, 255, 384, 513, 700]), (4100, 2048, [0] + [128 * i + 7 for i in range(1, 32)] + [4100])]
    cases = [dict(rows=r, cols=c, offsets=o, power_of_two=i % 2 == 1, seed=300 + i, design=design)
             for design in contract.DESIGNS for i, (r, c, o) in enumerate(groups)]
    # no rows at all: the transposed copy is all zeros (its bands still written)
    cases += [dict(rows=0, cols=256, offsets=[0, 0, 0], power_of_two=False, seed=400, design=design)
              for design in contract.DESIGNS]
    _check(_run("grouped_case", cases))


@pytest.mark.gpu
def test_outputs_feed_the_gemms_without_a_copy():
    """fprop, dgrad and the weight gradient of a linear layer from the fused casts' outputs, against
    the float64 references of the same quantised operands (T not a multiple of 128 or 16)."""
    cases = [dict(tokens=t, n=n, k=k, seed=i) for i, (t, n, k) in
             enumerate([(129, 256, 512), (1, 256, 128), (4097, 2048, 7168), (300, 512, 2048)])]
    _check(_run("gemm_case", cases))
