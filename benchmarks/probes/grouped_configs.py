"""Forced kernel configurations of the contiguous grouped GEMM beside DeepGEMM's (needs a GPU).

    python benchmarks/probes/grouped_configs.py --shapes 8,512,4096,7168 --configs auto,128x192,128x256:mcB
    python benchmarks/probes/grouped_configs.py --masked --shapes 6,1024,7168,3072 --configs auto,auto+DT_SKIP_IDLE_SLABS=0

For each shape (G experts of about M rows, N, K; benchmarks/bench_grouped.py's random problem,
rows padded to 128 per expert with ``m_indices``) it checks and times deep_tile's contiguous kernel
with each configuration (text form of deep_tile.testing.configs; ``auto`` the selector's pick,
``gM`` rasters along M as the grouped picks do; ``+NAME=VALUE`` adds a define to the build, a
measurement override of include/deep_tile/probes/overrides.cuh; ``offsets:CONFIG`` runs the
offsets kind over the same padded rows, each expert owning its aligned run, for the table kinds'
per-expert tile order on the same tiles; ``psum:CONFIG`` the psum kind over the experts' ends; the
table kinds' configs get the grid the selector gives them, cost.table_grid_size) and, when importable, DeepGEMM latest's
contiguous GEMM on the same data, with ``m_indices`` and with the psum layout (expert ends),
round-robin with the L2 flushed (testing.timing.bench_round_robin). Each deep_tile run is checked
bitwise against the selector's pick (the per-element k order does not depend on the tile).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import bench_grouped as bg  # noqa: E402
import deep_tile  # noqa: E402
from deep_tile.gemm.launch import run_grouped  # noqa: E402
from deep_tile.gemm.problem import Problem, ProblemKind  # noqa: E402
from deep_tile.select.cost import table_grid_size  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402


def split_defines(text: str) -> tuple:
    """``CONFIG+NAME=VALUE+...`` -> ``(CONFIG, {NAME: VALUE})``."""
    head, *extra = text.split("+")
    return head, dict((key, int(value)) for key, value in (item.split("=") for item in extra))


def table_config(head: str, m: int, n: int, k: int, kind, num_groups: int, sms: int):
    """The forced config ``head`` (None for ``auto``) with the grid the selector gives a table
    kind (cost.table_grid_size), for a problem of ``m`` rows (the masked kind: rows per expert).
    Raises ValueError for a config the kernel cannot build."""
    if head == "auto":
        return None
    config = parse_config(head, m, n, sms)
    if not kind.has_table:
        return config
    table = Problem(m, n, k, kind=kind, num_groups=num_groups)
    return dataclasses.replace(config, grid_size=table_grid_size(table, config.block_m, config.block_n, sms,
                                                                 config.num_multicast))


def first_call(fn, text: str, bad: list) -> bool:
    """Run ``fn`` once; a refusal is reported in ``bad`` (False) rather than raised."""
    try:
        fn()
        torch.cuda.synchronize()
        return True
    except Exception as error:  # noqa: BLE001 - a config the kernel refuses, reported
        bad.append(f"{text}: {type(error).__name__}: {str(error).splitlines()[0][:100]}")
        return False


def one_shape(shape, configs, args) -> None:
    problem = bg.make_problem(shape, args.seed, 128)
    pad = problem["padded"]
    a, sa, m_indices, starts = pad["a"], pad["a_scale"], pad["m_indices"], pad["starts"]
    b, b_scale, counts = problem["b"], problem["b_scale"], problem["counts"]
    rows, n = a.shape[0], shape.n
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    real = m_indices >= 0
    want = deep_tile.m_grouped_fp8_gemm_contiguous(a, sa, b, b_scale, m_indices)
    # The offsets kind over the same rows, each expert owning its aligned run (its padding rows
    # too: they are computed and stored, so only the real rows are compared): the per-expert tile
    # order of the table kinds on the same tiles. Its a_scale row-major (the kind reads no other).
    offsets = torch.tensor(list(starts) + [rows], dtype=torch.int32, device="cuda")
    sa_rows = sa.contiguous()  # row-major [rows, K blocks]
    # The psum kind over the same rows: each expert's end (its start is the previous end rounded up
    # to 128, as the padded layout has it), a_scale as the contiguous kind reads it.
    ends = torch.tensor([st + c for st, c in zip(starts, counts)], dtype=torch.int32, device="cuda")
    fns, bad = {}, []
    for text in configs:
        out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        head, defines = split_defines(text)
        kind, info, scale = ProblemKind.GROUPED_CONTIGUOUS, m_indices, sa
        if head.startswith("offsets:"):
            head, kind, info, scale = head[len("offsets:"):], ProblemKind.GROUPED_OFFSETS, offsets, sa_rows
        elif head.startswith("psum:"):
            head, kind, info = head[len("psum:"):], ProblemKind.GROUPED_PSUM, ends
        if head == "auto" and not defines and kind is ProblemKind.GROUPED_CONTIGUOUS:
            fn = (lambda o=out: deep_tile.m_grouped_fp8_gemm_contiguous(a, sa, b, b_scale, m_indices, out=o))
        else:
            try:
                config = table_config(head, rows, n, shape.k, kind, shape.num_groups, sms)
            except ValueError as error:  # a config the kernel cannot build, reported
                bad.append(f"{text}: {str(error).splitlines()[0][:100]}")
                continue
            fn = (lambda o=out, c=config, x=defines, k=kind, i=info, sc=scale: run_grouped(
                k, a, sc, b, b_scale, i, o, config=c, extra_defines=x or None))
        if not first_call(fn, text, bad):
            continue
        if not torch.equal(out[real], want[real]):
            bad.append(f"{text}: output differs from the selector's pick")
        fns[text] = fn
    dg, version = bg.deepgemm_version()
    if dg is not None and version == "latest":
        recipe = {"recipe": (1, 128, 128), "disable_ue8m0_cast": True}
        dg_out = torch.empty((rows, n), dtype=torch.bfloat16, device="cuda")
        fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), dg_out, m_indices,
                                                                      **recipe)
        fns["deepgemm_psum"] = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, b_scale), dg_out, ends,
                                                                           use_psum_layout=True, **recipe)
    times = bench_round_robin(fns, warmup=3, iters=args.iters, shuffle_seed=args.seed)
    base = times.get("deepgemm_psum", times.get("deepgemm"))
    print(f"{shape.num_groups}x{shape.expected_m} {n}x{shape.k} rows {rows} (real {sum(counts)})", flush=True)
    for name, us in times.items():
        print(f"  {name:>24} {us:8.1f} us" + (f"  DG psum / this {base / us:.3f}" if base else ""), flush=True)
    for line in bad:
        print("  !", line, flush=True)


def one_masked_shape(shape, configs, args) -> None:
    """``--masked``: the masked kind's configurations on bench_grouped's masked problem ([G, max_m, K]
    slabs, ``masked_m`` random around M) beside DeepGEMM latest's masked GEMM; each deep_tile run is
    checked bitwise against the selector's pick on the real rows, and its rows past ``masked_m``
    must still hold the NaN they were poisoned with."""
    problem = bg.make_problem(shape, args.seed, 128)
    lay = problem["masked"]
    a, sa, masked_m, max_m = lay["a"], lay["a_scale"], lay["masked_m"], lay["max_m"]
    b, b_scale = problem["b"], problem["b_scale"]
    g, n, sms = shape.num_groups, shape.n, torch.cuda.get_device_properties(0).multi_processor_count
    real = torch.arange(max_m, device="cuda").unsqueeze(0) < masked_m.unsqueeze(1)
    want = deep_tile.m_grouped_fp8_gemm_masked(a, sa, b, b_scale, masked_m, shape.expected_m)
    fns, bad = {}, []
    for text in configs:
        out = torch.full((g, max_m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        head, defines = split_defines(text)
        try:
            config = table_config(head, max_m, n, shape.k, ProblemKind.GROUPED_MASKED, g, sms)
        except ValueError as error:  # a config the kernel cannot build, reported
            bad.append(f"{text}: {str(error).splitlines()[0][:100]}")
            continue
        fn = (lambda o=out, c=config, x=defines: run_grouped(
            ProblemKind.GROUPED_MASKED, a, sa, b, b_scale, masked_m, o, shape.expected_m, config=c,
            extra_defines=x or None))
        if not first_call(fn, text, bad):
            continue
        if not torch.equal(out[real], want[real]):
            bad.append(f"{text}: output differs from the selector's pick")
        if not bool(torch.isnan(out[~real].float()).all()):
            bad.append(f"{text}: wrote rows past masked_m")
        fns[text] = fn
    dg, version = bg.deepgemm_version()
    if dg is not None and version == "latest":
        dg_out = torch.empty((g, max_m, n), dtype=torch.bfloat16, device="cuda")
        fns["deepgemm"] = lambda: dg.m_grouped_fp8_gemm_nt_masked((a, sa), (b, b_scale), dg_out, masked_m,
                                                                  shape.expected_m, recipe=(1, 128, 128),
                                                                  disable_ue8m0_cast=True)
    times = bench_round_robin(fns, warmup=3, iters=args.iters, shuffle_seed=args.seed)
    base = times.get("deepgemm")
    print(f"masked {g}x{shape.expected_m} {n}x{shape.k} max_m {max_m} (real {sum(problem['counts'])})", flush=True)
    for name, us in times.items():
        print(f"  {name:>24} {us:8.1f} us" + (f"  DG / this {base / us:.3f}" if base else ""), flush=True)
    for line in bad:
        print("  !", line, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["8,512,4096,7168"], metavar="G,M,N,K")
    p.add_argument("--configs", default="auto,128x192:gM,128x256:gM,128x256:mcB:gM,128x128:b2:gM")
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--masked", action="store_true",
                   help="the masked kind on bench_grouped's masked problem (configs without a kind prefix)")
    args = p.parse_args()
    for text in args.shapes:
        g, m, n, k = (int(v) for v in text.split(","))
        if args.masked:
            one_masked_shape(bg.Shape("masked", g, m, n, k), args.configs.split(","), args)
        else:
            one_shape(bg.Shape("contiguous", g, m, n, k), args.configs.split(","), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
