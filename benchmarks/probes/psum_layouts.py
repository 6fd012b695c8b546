"""Where the psum kind's time goes: the same padded rows under three layouts of the experts' ends
(needs a GPU; DeepGEMM latest importable).

    python benchmarks/probes/psum_layouts.py [ITERS [PAD ...]]

For 8 x ~512 rows at 4096x7168 and 32 x ~256 rows at 4096x7168 and 7168x2048
(benchmarks/bench_grouped.py's random problem, rows padded to 128 per expert) it times, round-robin
with the L2 flushed, deep_tile's psum kind at 128x192 gM u6 (with its tile slots and, ``noslot``, for
``real`` and ``one``, built with ``DT_TILE_SLOTS=0``) and DeepGEMM latest's psum path with the ends laid out as
  ``real``: each expert's real rows (the benchmark's layout, padding rows between the runs);
  ``one``:  every row in expert 0 (the same tiles, one expert's weights, no padding);
  ``full``: the padded rows' 128-row blocks dealt out to the experts whole (no padding rows);
  ``full-PAD``: as ``full`` less PAD (1-127) real rows at the end of each expert's run (its last
  m-block's second 64-row half all padding from PAD = 64 on, partial below);
and deep_tile's dense kernel (same tile) and DeepGEMM's dense GEMM on expert 0's weights over all
rows. The psum ``one`` output is checked bitwise against the dense kernel's.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "probes")]

import torch  # noqa: E402

import bench_grouped as bg  # noqa: E402
from deep_tile.gemm.launch import run, run_grouped  # noqa: E402
from deep_tile.gemm.problem import ProblemKind  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.timing import bench_round_robin  # noqa: E402
from grouped_configs import table_config  # noqa: E402

TILE = "128x192:gM:u6"
RECIPE = {"recipe": (1, 128, 128), "disable_ue8m0_cast": True}


def one_shape(g: int, e: int, n: int, k: int, iters: int, pads=()) -> None:
    import deep_gemm as dg

    problem = bg.make_problem(bg.Shape("contiguous", g, e, n, k), 0, 128)
    pad = problem["padded"]
    a, sa, b, bs = pad["a"], pad["a_scale"], problem["b"], problem["b_scale"]
    rows, sms = a.shape[0], torch.cuda.get_device_properties(0).multi_processor_count
    counts = problem["counts"]
    blocks = rows // 128  # the padded rows' 128-row blocks dealt out to the experts, whole
    per = [blocks // g + (1 if i < blocks % g else 0) for i in range(g)]
    layouts = {
        "real": torch.tensor([st + c for st, c in zip(pad["starts"], counts)], dtype=torch.int32, device="cuda"),
        "one": torch.full((g,), rows, dtype=torch.int32, device="cuda"),
        "full": torch.tensor([128 * sum(per[:i + 1]) for i in range(g)], dtype=torch.int32, device="cuda"),
    }
    for pad_rows in pads:  # the full layout less `pad_rows` real rows at the end of each expert's run
        layouts[f"full-{pad_rows}"] = torch.tensor([128 * sum(per[:i + 1]) - pad_rows for i in range(g)],
                                                   dtype=torch.int32, device="cuda")
    config = table_config(TILE, rows, n, k, ProblemKind.GROUPED_PSUM, g, sms)
    fns, outs = {}, {}
    for name, ends in layouts.items():
        out = outs[name] = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        fns[f"dt192 {name}"] = (lambda o=out, x=ends: run_grouped(ProblemKind.GROUPED_PSUM, a, sa, b, bs, x, o,
                                                                  config=config))
        if name in ("real", "one"):
            fns[f"dt192 noslot {name}"] = (lambda o=out, x=ends: run_grouped(
                ProblemKind.GROUPED_PSUM, a, sa, b, bs, x, o, config=config, extra_defines={"DT_TILE_SLOTS": 0}))
        dg_out = torch.empty((rows, n), dtype=torch.bfloat16, device="cuda")
        fns[f"DG {name}"] = (lambda o=dg_out, x=ends: dg.m_grouped_fp8_gemm_nt_contiguous(
            (a, sa), (b, bs), o, x, use_psum_layout=True, **RECIPE))
    dense = torch.empty((rows, n), dtype=torch.bfloat16, device="cuda")
    dense_config = parse_config(TILE, rows, n, sms)
    fns["dense dt192"] = lambda: run(a, sa, b[0], bs[0], dense, config=dense_config)
    dg_dense = torch.empty((rows, n), dtype=torch.bfloat16, device="cuda")
    fns["dense DG"] = lambda: dg.fp8_gemm_nt((a, sa), (b[0], bs[0]), dg_dense, **RECIPE)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    same = torch.equal(outs["one"], dense)
    times = bench_round_robin(fns, warmup=3, iters=iters, shuffle_seed=0)
    print(f"{g}x{e} {n}x{k} rows {rows} real {sum(counts)}; psum one-expert == dense bitwise: {same}")
    for name, us in times.items():
        print(f"  {name:>18} {us:8.1f} us")


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    pads = tuple(int(v) for v in sys.argv[2:])
    for shape in ((8, 512, 4096, 7168), (32, 256, 4096, 7168), (32, 256, 7168, 2048)):
        one_shape(*shape, iters, pads)
