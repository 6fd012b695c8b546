"""GPU checks of deep_tile.tf32_hc_prenorm_gemm and deep_tile.einsum, run in a child process by
tests/test_hc_einsum.py (protocol: gpu_cases.serve); the input makers and the float64 checks
serve the CPU tests too.

Each case draws fresh random inputs, fills the outputs with NaN (unwritten entries show), runs
the call and compares with float64: the pre-norm GEMM per entry within a bound relative to
``sum_k |a * b|`` (TF32 keeps 10 mantissa bits of b; a's bf16 is exact), the sums of squares
within float32 summation; with ``num_splits`` every split's partial against its own K range.
"""
from __future__ import annotations

import torch

TF32_REL_BOUND = 2.0 ** -9
"""Error allowed per entry of d, relative to sum_k |a * b|: b cut to TF32 (up to 2^-10 each) plus
float32 sums."""
SQR_REL_BOUND = 1e-5
"""Error allowed per row sum of squares, relative to the sum (exact squares, float32 sums)."""
EINSUM_REL_BOUND = 1e-5
"""Error allowed per entry of a float32 einsum result, relative to the sum of absolute terms."""
FP8_REL_BOUND = 1e-3
"""Error allowed per entry of fp8_einsum, relative to the sum of absolute terms: Hopper's FP8 MMA
adds its products with about 14 mantissa bits within each 128-wide K block."""
BF16_OUT_BOUND = 2.0 ** -7
"""Error allowed per entry of a bf16 result, relative to the entry: its rounding (half of 2^-7 at
most) with room for a library that rounds a partial sum on the way."""


def make_hc_inputs(m: int, n: int, k: int, seed: int, device: str = "cpu", a_row_stride: int = 0) -> tuple:
    """(a bf16 [m, k], b float32 [n, k]) drawn on ``device`` from ``seed``; a may be a view of wider rows."""
    gen = torch.Generator(device=device).manual_seed(seed)
    width = a_row_stride or k
    a = torch.randn(m, width, generator=gen, device=device).to(torch.bfloat16)[:, :k]
    b = torch.randn(n, k, generator=gen, device=device)
    return a, b


def hc_outputs(m: int, n: int, num_splits, device: str, d_row_stride: int = 0) -> tuple:
    """NaN-filled (d, sqr_sum) of the call's shapes; d may be a view of wider rows."""
    lead = () if num_splits is None else (num_splits,)
    width = d_row_stride or n
    d = torch.full((*lead, m, width), float("nan"), device=device)[..., :n]
    s = torch.full((*lead, m), float("nan"), device=device)
    return d, s


def check_hc(a, b, d, s, num_splits) -> dict:
    """The call's outputs against float64 (module doc), per split when ``num_splits`` is given."""
    from deep_tile.hyper_connection import hc_prenorm_reference

    ref_d, ref_s = hc_prenorm_reference(a, b, num_splits, torch.float64)
    bound_d, _ = hc_prenorm_reference(a.abs(), b.abs(), num_splits, torch.float64)
    d64, s64 = d.double(), s.double()
    nan = int(torch.isnan(d64).sum()) + int(torch.isnan(s64).sum())
    err_d = ((d64 - ref_d).abs() / bound_d.clamp(min=1e-30)).nan_to_num(float("inf"))
    err_s = ((s64 - ref_s).abs() / ref_s.clamp(min=1e-30)).nan_to_num(float("inf"))
    worst_d = float(err_d.max()) if err_d.numel() else 0.0
    worst_s = float(err_s.max()) if err_s.numel() else 0.0
    total_d = d64 if num_splits is None else d64.sum(0)
    total_ref = ref_d if num_splits is None else ref_d.sum(0)
    denom = float((total_d * total_d + total_ref * total_ref).sum())
    diff = 1 - 2 * float((total_d * total_ref).sum()) / denom if denom else 0.0
    ok = nan == 0 and worst_d < TF32_REL_BOUND and worst_s < SQR_REL_BOUND
    return {"ok": ok, "nan": nan, "worst_rel_d": worst_d, "worst_rel_sqr": worst_s, "calc_diff": diff}


def hc(m: int, n: int, k: int, num_splits=None, seed: int = 0, a_row_stride: int = 0, d_row_stride: int = 0,
       num_sms: int = 0, groups=None, sub=None, variant=None) -> dict:
    """One call of deep_tile.tf32_hc_prenorm_gemm on the GPU against float64 (``num_sms`` > 0: with
    the grid limited to that many SMs, so that each CTA takes several work items; ``groups`` /
    ``sub`` / ``variant``: the math warpgroups, pieces per split and kernel variant forced through
    their environment variables)."""
    import deep_tile
    from deep_tile.hyper_connection import GROUPS_ENV, SUB_SPLITS_ENV, VARIANT_ENV

    a, b = make_hc_inputs(m, n, k, seed, "cuda", a_row_stride)
    d, s = hc_outputs(m, n, num_splits, "cuda", d_row_stride)
    deep_tile.set_num_sms(num_sms or None)
    try:
        call = lambda: deep_tile.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits)  # noqa: E731
        _with_path(GROUPS_ENV, None if groups is None else str(groups),
                   lambda: _with_path(SUB_SPLITS_ENV, None if sub is None else str(sub),
                                      lambda: _with_path(VARIANT_ENV, variant, call)))
    finally:
        deep_tile.set_num_sms(None)
    torch.cuda.synchronize()
    result = check_hc(a, b, d, s, num_splits)
    if d_row_stride:  # the padding columns must still be NaN
        full = d.as_strided((*d.shape[:-1], d_row_stride), (*d.stride()[:-1], 1))
        result["padding_untouched"] = bool(torch.isnan(full[..., n:]).all())
        result["ok"] = result["ok"] and result["padding_untouched"]
    return {"case": f"hc m={m} n={n} k={k} splits={num_splits} a_stride={a_row_stride} d_stride={d_row_stride} "
                    f"sms={num_sms or 'all'} groups={groups} sub={sub} variant={variant or 'default'}",
            **result}


def hc_repeat_and_graph(m: int = 4096, n: int = 24, k: int = 7168, num_splits=16) -> dict:
    """The call twice on a stream and once under a CUDA graph: the same bits each time."""
    import deep_tile

    a, b = make_hc_inputs(m, n, k, 1, "cuda")
    outs = []
    for _ in range(2):
        d, s = hc_outputs(m, n, num_splits, "cuda")
        deep_tile.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits)
        outs.append((d, s))
    d, s = hc_outputs(m, n, num_splits, "cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_tile.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits)
    graph.replay()
    torch.cuda.synchronize()
    outs.append((d, s))
    ok = all(torch.equal(outs[0][0], o[0]) and torch.equal(outs[0][1], o[1]) for o in outs[1:])
    return {"case": f"hc repeat+graph m={m} n={n} k={k} splits={num_splits}", "ok": bool(ok)}


def make_einsum_inputs(expr: str, dims: dict, seed: int, device: str = "cpu") -> tuple:
    """(a, b) bf16 of ``expr`` with the sizes ``dims`` (letter -> size), drawn on ``device`` from
    ``seed``; b of the per-head expressions is a view of wider rows (unit stride along r, not contiguous)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    left, right = expr.split("->")[0].split(",")
    a = torch.randn(*[dims[ch] for ch in left], generator=gen, device=device).to(torch.bfloat16)
    if expr == "bmk,bnk->mn":
        b = torch.randn(*[dims[ch] for ch in right], generator=gen, device=device).to(torch.bfloat16)
    else:  # hdr with r padded by 128, as DeepGEMM's test draws it
        b = torch.randn(dims["h"], dims["d"], dims["r"] + 128, generator=gen,
                        device=device).to(torch.bfloat16)[:, :, :dims["r"]]
    return a, b


def check_close(got: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, rel: float, out_dtype) -> dict:
    """got against float64 ``ref``: per entry within ``rel * bound`` (bound: the sum of absolute
    terms) plus the rounding of ``out_dtype``; NaN (unwritten) fails."""
    g = got.double()
    rounding = BF16_OUT_BOUND if out_dtype == torch.bfloat16 else 0.0
    allowed = rel * bound + rounding * ref.abs() + 1e-30
    err = ((g - ref).abs() / allowed).nan_to_num(float("inf"))
    worst = float(err.max()) if err.numel() else 0.0
    denom = float((g * g + ref * ref).sum())
    diff = 1 - 2 * float((g * ref).sum()) / denom if denom else 0.0
    nan = int(torch.isnan(g).sum())
    return {"ok": nan == 0 and worst <= 1.0, "nan": nan, "worst_over_bound": worst, "calc_diff": diff}


def _with_path(name: str, path, fn) -> None:
    """fn() with the environment variable ``name`` set to ``path`` (unset when None), restored after."""
    import os

    old = os.environ.pop(name, None)
    if path is not None:
        os.environ[name] = path
    try:
        fn()
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


def einsum_case(expr: str, dims: dict, out_dtype: str = "float32", seed: int = 0, device: str = "cuda",
                path=None, d_pad: int = 0, batched=None) -> dict:
    """One deep_tile.einsum call against float64 (d NaN-filled first; a float32 'bmk,bnk->mn' d
    starts from random values and is accumulated into); ``path`` one of deep_tile.einsums.BH_PATHS
    for the per-head expressions (None: the default); ``d_pad`` > 0: d a view of rows that many
    elements wider, whose padding must stay NaN; ``batched`` True / False: the ``batched`` path's views
    must / must not apply (else it falls back to ``bmm``)."""
    import deep_tile
    from deep_tile.einsums import BH_PATH_ENV

    dtype = getattr(torch, out_dtype)
    a, b = make_einsum_inputs(expr, dims, seed, device)
    out_shape = [dims[ch] for ch in expr.split("->")[1]]
    a64, b64 = a.double(), b.double()
    ref = torch.einsum(expr, a64, b64)
    bound = torch.einsum(expr, a64.abs(), b64.abs())
    c = None
    if expr == "bmk,bnk->mn" and dtype == torch.float32:
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        d = torch.randn(*out_shape, generator=gen, device=device)
        ref, bound, c = ref + d.double(), bound + d.double().abs(), d
    else:
        full = torch.full(out_shape[:-1] + [out_shape[-1] + d_pad], float("nan"), dtype=dtype, device=device)
        d = full[..., :out_shape[-1]]
    _with_path(BH_PATH_ENV, path, lambda: deep_tile.einsum(expr, a, b, d, c=c))
    if device == "cuda":
        torch.cuda.synchronize()
    result = check_close(d, ref, bound, EINSUM_REL_BOUND, dtype)
    if d_pad:
        result["padding_untouched"] = bool(torch.isnan(full[..., out_shape[-1]:].float()).all())
        result["ok"] = result["ok"] and result["padding_untouched"]
    if batched is not None:
        from deep_tile.einsums import _bh_batched_views

        result["batched"] = _bh_batched_views(expr, a, b, d) is not None
        result["ok"] = result["ok"] and result["batched"] == batched
    return {"case": f"einsum {expr} {dims} d={out_dtype} path={path} d_pad={d_pad}"
                    f"{'' if batched is None else f' batched={batched}'}", **result}


def quantize_fp8(t: torch.Tensor, block_rows: int) -> tuple:
    """(fp8, float32 scales) of ``t [..., rows, cols]``: one scale per ``block_rows x 128`` block (amax / 448)."""
    *lead, rows, cols = t.shape
    pr, pc = -(-rows // block_rows) * block_rows, -(-cols // 128) * 128
    padded = torch.zeros(*lead, pr, pc, dtype=torch.float32, device=t.device)
    padded[..., :rows, :cols] = t.float()
    blocks = padded.view(*lead, pr // block_rows, block_rows, pc // 128, 128)
    amax = blocks.abs().amax(dim=(-3, -1), keepdim=True).clamp(min=1e-4)
    q = (blocks * (448.0 / amax)).to(torch.float8_e4m3fn).view(*lead, pr, pc)[..., :rows, :cols].contiguous()
    scale = (amax / 448.0).squeeze(-1).squeeze(-2)
    return q, scale


def fp8_einsum_case(b: int, h: int, r: int, d: int, with_c: bool = False, seed: int = 0, device: str = "cuda",
                    path=None, d_pad: int = 0, in_place=None) -> dict:
    """One deep_tile.fp8_einsum('bhr,hdr->bhd') call against the float64 product of the dequantized
    operands; ``path`` one of deep_tile.einsums.FP8_PATHS (None: the default); ``d_pad`` > 0: the
    output a view of rows that many elements wider, whose padding must stay NaN; ``in_place`` True /
    False: the ``strided`` path's views must / must not apply (else it falls back to ``masked``)."""
    import deep_tile
    from deep_tile.einsums import FP8_PATH_ENV

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(b, h, r, generator=gen, device=device)
    y = torch.randn(h, d, r, generator=gen, device=device)
    xq, sx = quantize_fp8(x.view(b * h, 1, r), 1)
    xq, sx = xq.view(b, h, r), sx.view(b, h, -1)
    yq, sy = quantize_fp8(y, 128)
    xd = xq.double() * sx.double().repeat_interleave(128, dim=2)[..., :r]
    yd = yq.double() * sy.double().repeat_interleave(128, dim=1)[:, :d].repeat_interleave(128, dim=2)[..., :r]
    ref = torch.einsum("bhr,hdr->bhd", xd, yd)
    bound = torch.einsum("bhr,hdr->bhd", xd.abs(), yd.abs())
    c = torch.randn(b, h, d, generator=gen, device=device).to(torch.bfloat16) if with_c else None
    if c is not None:
        ref, bound = ref + c.double(), bound + c.double().abs()
    full = torch.full((b, h, d + d_pad), float("nan"), dtype=torch.bfloat16, device=device)
    out = full[..., :d]
    _with_path(FP8_PATH_ENV, path, lambda: deep_tile.fp8_einsum("bhr,hdr->bhd", (xq, sx), (yq, sy), out, c=c))
    if device == "cuda":
        torch.cuda.synchronize()
    result = check_close(out, ref, bound, FP8_REL_BOUND, torch.bfloat16)
    if in_place is not None:
        from deep_tile.device import get_num_sms
        from deep_tile.einsums import _strided_views
        from deep_tile.gemm.planner import plan_head_strided
        from deep_tile.gemm.problem import Problem, ProblemKind

        problem = Problem(b, d, r, kind=ProblemKind.GROUPED_MASKED, num_groups=h)
        result["in_place"] = (_strided_views(xq, sx, out, c) is not None  # and the pick builds head-strided
                              and plan_head_strided(problem, get_num_sms()) is not None)
        result["ok"] = result["ok"] and result["in_place"] == in_place
    if d_pad:
        result["padding_untouched"] = bool(torch.isnan(full[..., d:].float()).all())
        result["ok"] = result["ok"] and result["padding_untouched"]
    return {"case": f"fp8_einsum bhr,hdr->bhd b={b} h={h} r={r} d={d} c={with_c} path={path} d_pad={d_pad}"
                    f"{'' if in_place is None else f' in_place={in_place}'}",
            **result}


if __name__ == "__main__":
    from gpu_cases import serve

    serve(globals())
