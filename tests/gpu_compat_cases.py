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


if __name__ == "__main__":
    serve(globals())
