"""The workload of tools/sanitize.sh for the output variants (FP32 out, ``out = C + A.B^T``; GPU).

One small problem per direct-store family: persistent with one and two buffers, a 256-row tile
with multicast of A, two column parts, a tile straddling b_scale blocks, split-K (2 and 8), swap-AB
(persistent and split), each with an FP32 or bf16 output and a C that is separate or ``out``
itself (in place). Outputs are NaN-poisoned (in place: start from C) and compared with the float64
reference, so the run also fails on a wrong answer. Then the K-grouped GEMM (MoE weight gradients):
two buffers, one buffer with two sub-tiles (256 rows), one consumer warpgroup, no C, over groups of 0, 1,
127, 128, 129 tokens (a group's partial first and last k-blocks zeroed in shared memory), FP8 NaN
in the tokens past the groups, and the staged epilogue (FP32 in place and without C; a last m-block
whose second warpgroup has no rows, a last atom 8 columns wide, one consumer warpgroup). Then the
M-grouped kinds' output variants (contiguous, offsets, masked, psum; FP32 in place, a separate C,
no C; experts of 0, 1, 127, 128, 129 and 300 rows). Then the compatible module's K-grouped TN form
(tokens-as-rows operands through the byte-transposition kernel, partial 128x128 tiles, in place and
without C). Exit status 1 if any check fails.
Run as ``SANITIZE_SCRIPTS=tools/sanitize_training.py tools/sanitize.sh``; with
``SANITIZE_TRAINING=k_grouped`` (or ``dense``, ``m_grouped``) in the environment only the
K-grouped (dense, M-grouped) cases run; the TN cases count as K-grouped.
"""
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "tests")]

import torch  # noqa: E402

import deep_tile  # noqa: E402
from deep_tile.gemm.launch import run_acc  # noqa: E402
from deep_tile.gemm.k_grouped import run_k_grouped  # noqa: E402
from deep_tile.gemm.problem import Problem, ProblemKind  # noqa: E402
from deep_tile.reference import ref_fp8_gemm_1d1d, ref_k_grouped_fp8_gemm_1d1d  # noqa: E402
from deep_tile.select.config import KernelConfig  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402
from gpu_training_cases import grouped_acc, k_grouped_operands, operands_1d1d  # noqa: E402

P = dict(raster_width=8, grid_size=132)
# (config fields, out dtype, c mode: "none", "bfloat16", "float32" or "inplace", m, n, k)
CASES = [
    (dict(block_m=128, block_n=128, num_stages=5), "float32", "inplace", 520, 1160, 400),
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), "bfloat16", "bfloat16", 520, 1160, 400),
    (dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True), "float32", "float32",
     520, 1160, 400),
    (dict(block_m=128, block_n=256, wgmma_n=128, num_stages=3, raster_along_m=True, raster_width=16), "float32",
     "bfloat16", 600, 1160, 400),
    (dict(block_m=64, block_n=144, num_stages=6), "float32", "none", 130, 1160, 400),
    (dict(block_m=64, block_n=48, num_stages=8, num_multicast=2, multicast_on_a=True, accum_buffers=2), "float32",
     "inplace", 130, 1160, 400),
    (dict(block_m=128, block_n=144, num_stages=5), "bfloat16", "inplace", 130, 1160, 400),
    (dict(block_m=128, block_n=128, num_stages=5, split_k=2, accum_buffers=2), "float32", "inplace", 200, 1160, 400),
    (dict(block_m=64, block_n=48, num_stages=8, split_k=8), "bfloat16", "inplace", 64, 2112, 1024),
    (dict(block_m=64, block_n=128, num_stages=8, swap_n=16), "float32", "inplace", 13, 4096, 400),
    (dict(block_m=64, block_n=64, num_stages=8, swap_n=8, split_k=2, accum_buffers=2), "float32", "float32",
     5, 2112, 1040),
    # 1D1D (b_scale per row of b): persistent with one and two buffers, multicast of A, split-K
    (dict(block_m=128, block_n=128, num_stages=5, b_scale_1d=True), "float32", "inplace", 520, 1160, 400),
    (dict(block_m=128, block_n=160, num_stages=4, accum_buffers=1, b_scale_1d=True), "bfloat16", "none",
     520, 1160, 400),
    (dict(block_m=64, block_n=64, num_stages=8, accum_buffers=2, b_scale_1d=True), "float32", "float32",
     130, 1160, 400),
    (dict(block_m=256, block_n=128, num_stages=3, num_multicast=2, multicast_on_a=True, b_scale_1d=True), "float32",
     "inplace", 520, 1160, 400),
    (dict(block_m=64, block_n=64, num_stages=8, split_k=4, accum_buffers=2, b_scale_1d=True), "float32", "inplace",
     100, 1160, 1040),
    # in place, D's first sub-tiles asked of L2 ahead: one k-block, rows and columns past D's; and
    # the weight gradient's one-sub-tile tile (selector._one_subtile_first)
    (dict(block_m=256, block_n=128, num_stages=3, k_unroll=6, b_scale_1d=True), "float32", "inplace", 600, 1000, 128),
    (dict(block_m=128, block_n=192, num_stages=3, b_scale_1d=True), "float32", "inplace", 520, 1160, 400),
]

# The K-grouped GEMM: (config fields, out dtype, c mode, m, n, group sizes)
K_GROUPED_CASES = [
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), "float32", "inplace", 260, 384,
     [128, 0, 1, 127, 129, 5]),
    (dict(block_m=256, block_n=128, num_stages=3), "bfloat16", "float32", 260, 272, [300, 0, 77]),
    (dict(block_m=128, block_n=128, num_stages=5, accum_buffers=2), "float32", "none", 100, 256, [0, 0, 200]),
    (dict(block_m=64, block_n=128, num_stages=8, accum_buffers=2), "bfloat16", "bfloat16", 100, 256, [3, 0, 200]),
    (dict(block_m=128, block_n=160, num_stages=5), "float32", "inplace", 260, 392, [128, 0, 1, 127, 129, 5]),
    (dict(block_m=128, block_n=192, wgmma_n=96, num_stages=4), "float32", "inplace", 260, 392, [300, 0, 77]),
    (dict(block_m=128, block_n=192, num_stages=4), "float32", "inplace", 260, 392, [300, 0, 77]),
    # the staged epilogue (m % 64 == 0)
    (dict(block_m=128, block_n=128, num_stages=4, staged_epilogue=True), "float32", "inplace", 192, 392,
     [128, 0, 1, 127, 129, 5]),
    (dict(block_m=128, block_n=160, num_stages=3, staged_epilogue=True), "float32", "none", 256, 392, [300, 0, 77]),
    (dict(block_m=64, block_n=128, num_stages=7, accum_buffers=2, staged_epilogue=True), "float32", "inplace", 64, 256,
     [3, 0, 200]),
    # in place, tiles added by the TMA unit's reduce-add (12 k-blocks or more) beside loaded ones
    (dict(block_m=128, block_n=128, num_stages=4, staged_epilogue=True), "float32", "inplace", 192, 392,
     [1600, 0, 300, 1537]),
    # the unswizzled staging of a width not a multiple of 16 (392 = 2 x 152 + 88): loaded and reduce-added tiles
    (dict(block_m=128, block_n=152, num_stages=4, staged_epilogue=True), "float32", "inplace", 192, 392,
     [1600, 0, 300, 1537]),
    (dict(block_m=128, block_n=152, num_stages=4, staged_epilogue=True), "float32", "none", 256, 392, [300, 0, 77]),
    # ... and in pairs sharing B (6 tiles per group; each CTA's half of B is 76 rows, not a whole swizzle atom)
    (dict(block_m=128, block_n=152, num_stages=4, num_multicast=2, staged_epilogue=True), "float32", "inplace", 192,
     392, [1600, 0, 300, 1537]),
    # 2-CTA multicast pairs of one group (8 and 6 tiles per group): B shared, staged; A shared, direct
    (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, staged_epilogue=True), "float32", "inplace",
     192, 392, [1600, 0, 300, 1537]),
    (dict(block_m=128, block_n=160, num_stages=4, num_multicast=2, multicast_on_a=True), "float32", "inplace",
     256, 392, [128, 0, 1, 127, 129, 5]),
]


def problem_of(m, n, sizes, out_dtype, c_dtype) -> Problem:
    """The K-grouped problem a case runs (as the host path checks it)."""
    return Problem(m, n, sum(sizes) + 8, kind=ProblemKind.K_GROUPED, num_groups=len(sizes), b_scale_1d=True,
                   out_dtype=out_dtype, c_dtype=c_dtype)


def k_grouped_case(fields, out_dtype, mode, m, n, sizes) -> bool:
    a, sa, b, sb = k_grouped_operands(m, n, sizes, seed=m + n, pad=8)
    ref = ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes)
    dtype = getattr(torch, out_dtype)
    c_dtype = None if mode == "none" else ("out" if mode == "inplace" else mode)
    config = KernelConfig(**{**P, **fields}, problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True,
                          out_dtype=out_dtype, c_dtype=c_dtype)
    start = torch.randn((len(sizes), m, n), device="cuda", dtype=torch.float32)
    c = None
    if mode == "inplace":
        out = c = start.to(dtype)
    else:
        out = torch.full((len(sizes), m, n), float("nan"), dtype=dtype, device="cuda")
        c = None if mode == "none" else start.to(getattr(torch, mode))
    base = out.double() if mode == "inplace" else (c.double() if c is not None else 0.0)
    run_k_grouped(a, sa, b, sb, torch.tensor(sizes, dtype=torch.int32, device="cuda"), out, c, config=config)
    torch.cuda.synchronize()
    diff = calc_diff(out.double(), base + ref)
    ok = not torch.isnan(out).any().item() and diff < 1e-3
    staged = config.for_problem(problem_of(m, n, sizes, out_dtype, c_dtype)).staged_epilogue
    assert staged == fields.get("staged_epilogue", False), "a staged case whose problem does not take it"
    print(f"{'ok  ' if ok else 'FAIL'} {config.label:>32} c={mode:<8} {m}x{n} sizes {sizes} diff {diff:.1e}",
          flush=True)
    return ok


# The M-grouped kinds' output variants (gpu_training_cases.grouped_acc: the public function with
# the selector's tile, then the Python path with the forced one): (kind, tile fields, out dtype, C
# mode); experts of 129, 0, 1, 127, 128 and 300 rows, N = 520, K = 400.
M_GROUPED_CASES = [
    ("contiguous", dict(block_m=128, block_n=192, num_stages=4), "float32", "inplace"),
    ("contiguous", dict(block_m=64, block_n=128, num_stages=6), "bfloat16", "float32"),
    ("offsets", dict(block_m=256, block_n=128, num_stages=3), "float32", "inplace"),
    ("offsets", dict(block_m=128, block_n=192, num_stages=4), "float32", "bfloat16"),
    ("masked", dict(block_m=128, block_n=192, num_stages=4), "float32", "inplace"),
    ("masked", dict(block_m=64, block_n=128, num_stages=6), "float32", "none"),
    ("psum", dict(block_m=128, block_n=192, num_stages=4), "bfloat16", "inplace"),
]


def m_grouped_case(kind: str, fields: dict, out_dtype: str, mode: str) -> bool:
    """One M-grouped output-variant case: both calls right on the real rows, the other rows kept."""
    r = grouped_acc(kind, [129, 0, 1, 127, 128, 300], 520, 400, out_dtype, mode, config={**P, **fields},
                    max_m=320 if kind == "masked" else 0, seed=len(kind))
    ok = all(part["nan"] == 0 and part["diff"] < 1e-3 and part["others_kept"] and not part.get("unwritten")
             for part in (r, r["python"]))
    print(f"{'ok  ' if ok else 'FAIL'} {kind:>10} {fields} out={out_dtype} c={mode} diff {r['diff']:.1e} / "
          f"{r['python']['diff']:.1e}", flush=True)
    return ok


def dense_case(fields, out_dtype, mode, m, n, k) -> bool:
    """One dense output-variant case (CASES): FP32 or bf16 out, C separate, in place or none, 1D2D or 1D1D."""
    one_d = fields.get("b_scale_1d", False)
    if one_d:
        a, sa, b, sb = operands_1d1d(m, n, k, seed=m + n + k)
        ref = ref_fp8_gemm_1d1d(a, sa, b, sb)
    else:
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout="tma")
        ref = deep_tile.ref_fp8_gemm(a, sa, b, sb)
    dtype = getattr(torch, out_dtype)
    c_dtype = None if mode == "none" else ("out" if mode == "inplace" else mode)
    config = KernelConfig(**{**P, **fields}).with_output(out_dtype, c_dtype)
    start = torch.randn((m, n), device="cuda", dtype=torch.float32)
    c = None
    if mode == "inplace":
        out = start.to(dtype)
    else:
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        c = None if mode == "none" else start.to(getattr(torch, mode))
    base = out.double() if mode == "inplace" else (c.double() if c is not None else 0.0)
    run_acc(a, sa, b, sb, c, mode == "inplace", out, config=config, b_scale_1d=one_d)
    torch.cuda.synchronize()
    diff = calc_diff(out.double(), base + ref)
    ok = not torch.isnan(out).any().item() and diff < 1e-3
    print(f"{'ok  ' if ok else 'FAIL'} {config.label:>32} c={mode:<8} {m}x{n}x{k} diff {diff:.1e}", flush=True)
    return ok


# The compatible K-grouped TN form: (m, n, group sizes (multiples of 128), in place); m and n multiples
# of 16 but not of 128, so the transposition has partial tiles on both matrices
TN_CASES = [(272, 400, [256, 0, 128, 384], True), (144, 528, [128, 128], False)]


def tn_case(m, n, sizes, in_place) -> bool:
    """One ``k_grouped_fp8_gemm_tn_contiguous`` call on [sum_k, m] / [sum_k, n] against float64
    (NaN-poisoned without C); the transposition kernel must be the path taken."""
    import deep_tile.compat.deepgemm as compat
    from deep_tile.gemm.moe_layout import transposable

    os.environ["DEEP_TILE_KGROUPED_TN_TRANSPOSE"] = "kernel"
    a, sa, b, sb = k_grouped_operands(m, n, sizes, seed=m + n)
    ref = ref_k_grouped_fp8_gemm_1d1d(a, sa, b, sb, sizes)
    a_tn = a.view(torch.uint8).t().contiguous().view(torch.float8_e4m3fn)
    b_tn = b.view(torch.uint8).t().contiguous().view(torch.float8_e4m3fn)
    assert transposable(a_tn) and transposable(b_tn), "a TN case the transposition kernel would not take"
    layout = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    if in_place:
        d = torch.randn((len(sizes), m, n), device="cuda", dtype=torch.float32)
        ref = ref + d.double()
        compat.k_grouped_fp8_gemm_tn_contiguous((a_tn, sa.t().contiguous()), (b_tn, sb.t().contiguous()), d, sizes,
                                                layout, d, recipe=(1, 1, 128))
    else:
        d = torch.full((len(sizes), m, n), float("nan"), device="cuda", dtype=torch.float32)
        compat.k_grouped_fp8_gemm_tn_contiguous((a_tn, sa.t().contiguous()), (b_tn, sb.t().contiguous()), d, sizes,
                                                layout)
    torch.cuda.synchronize()
    diff = calc_diff(d.double(), ref)
    ok = not torch.isnan(d).any().item() and diff < 1e-3
    print(f"{'ok  ' if ok else 'FAIL'} {'compat TN (transposition kernel)':>32} in_place={in_place} {m}x{n} sizes "
          f"{sizes} diff {diff:.1e}", flush=True)
    return ok


def main() -> int:
    failures = 0
    only = os.environ.get("SANITIZE_TRAINING")  # "k_grouped", "dense" or "m_grouped": that kind's cases alone
    cases = CASES if only in (None, "", "dense") else []
    for case in cases:
        failures += not dense_case(*case)
    k_grouped_cases = K_GROUPED_CASES if only in (None, "", "k_grouped") else []
    for case in k_grouped_cases:
        failures += not k_grouped_case(*case)
    m_grouped_cases = M_GROUPED_CASES if only in (None, "", "m_grouped") else []
    for case in m_grouped_cases:
        failures += not m_grouped_case(*case)
    tn_cases = TN_CASES if only in (None, "", "k_grouped") else []
    for case in tn_cases:
        failures += not tn_case(*case)
    print(f"{len(cases) + len(k_grouped_cases) + len(m_grouped_cases) + len(tn_cases)} GEMM cases, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
