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


def make_hc_inputs(m: int, n: int, k: int, seed: int, device: str = "cpu", a_row_stride: int = 0) -> tuple:
    """(a bf16 [m, k], b float32 [n, k]) drawn on the CPU from ``seed``; a may be a view of wider rows."""
    gen = torch.Generator().manual_seed(seed)
    width = a_row_stride or k
    a = torch.randn(m, width, generator=gen).to(torch.bfloat16)[:, :k]
    b = torch.randn(n, k, generator=gen)
    return a.to(device), b.to(device)


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


def hc(m: int, n: int, k: int, num_splits=None, seed: int = 0, a_row_stride: int = 0, d_row_stride: int = 0) -> dict:
    """One call of deep_tile.tf32_hc_prenorm_gemm on the GPU against float64."""
    import deep_tile

    a, b = make_hc_inputs(m, n, k, seed, "cuda", a_row_stride)
    d, s = hc_outputs(m, n, num_splits, "cuda", d_row_stride)
    deep_tile.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=num_splits)
    torch.cuda.synchronize()
    result = check_hc(a, b, d, s, num_splits)
    if d_row_stride:  # the padding columns must still be NaN
        full = d.as_strided((*d.shape[:-1], d_row_stride), (*d.stride()[:-1], 1))
        result["padding_untouched"] = bool(torch.isnan(full[..., n:]).all())
        result["ok"] = result["ok"] and result["padding_untouched"]
    return {"case": f"hc m={m} n={n} k={k} splits={num_splits} a_stride={a_row_stride} d_stride={d_row_stride}",
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


if __name__ == "__main__":
    from gpu_cases import serve

    serve(globals())
