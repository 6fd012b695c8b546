"""Run one fp8_gemm shape a few times (for ncu / compute-sanitizer).

    python tools/profile_one.py 4096 7168 16384 [CONFIG] [--define=NAME=VALUE ...]
    python tools/profile_one.py --grouped masked,6,1024 4096 4096 [CONFIG]

CONFIG is the text form of deep_tile.testing.configs (e.g. ``256x128:mcA``); default: the selector's.
CONFIG ``auto`` is the selector's pick; ``deepgemm`` runs DeepGEMM (a baseline, when importable) on the same inputs instead
(``deepgemm_psum``: its psum layout path, contiguous and psum kinds only).
``--grouped KIND,G,E N K``: a grouped GEMM of benchmarks/bench_grouped.py's problem (KIND contiguous,
masked, offsets or psum, the last over the contiguous kind's padded rows with each expert's end; G
experts of about E rows; the same random data as that benchmark, seed 0).
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "probes"))  # sweep_configs

import torch  # noqa: E402

from deep_tile.gemm.launch import run, run_grouped  # noqa: E402
from deep_tile.gemm.checks import check_problem_kind  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402

argv = sys.argv[1:]
grouped = None
if argv and argv[0] == "--grouped":
    grouped, argv = argv[1].split(","), argv[2:]
defines = {kv.split("=")[0]: int(kv.split("=")[1]) for a in argv if a.startswith("--define=")
           for kv in [a.split("=", 1)[1]]}
argv = [a for a in argv if not a.startswith("--define") and a != "auto"]
sms = torch.cuda.get_device_properties(0).multi_processor_count


def dense_fns():
    m, n, k = (int(x) for x in argv[:3])
    rest = argv[3:]
    a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    if rest and rest[0] == "deepgemm":
        from sweep_configs import baseline_fns

        return baseline_fns(a, sa, b, sb, out).get("deepgemm"), "deepgemm"
    cfg = parse_config(rest[0], m, n, sms) if rest else None
    return (lambda: run(a, sa, b, sb, out, config=cfg, extra_defines=defines)), (cfg.label if cfg else "auto")


def grouped_fns():
    import bench_grouped as bg

    kind, g, e = grouped[0], int(grouped[1]), int(grouped[2])
    n, k = (int(x) for x in argv[:2])
    rest = argv[2:]
    shape = bg.Shape("contiguous" if kind == "psum" else kind, g, e, n, k)  # psum: the contiguous kind's rows
    problem = bg.make_problem(shape, 0, 128)
    if rest and rest[0] == "deepgemm":  # the benchmark's own DeepGEMM call on the same data
        # The benchmark's own options (its parser's defaults, so new ones are covered), DeepGEMM on,
        # no per-expert loop.
        fns, _, _ = bg.library_fns(shape, problem, bg.parse_args(["--loop", "off"]))
        return (fns["deepgemm"] if callable(fns["deepgemm"]) else None), "deepgemm"
    pad = problem["padded"]
    ends = torch.tensor([st + c for st, c in zip(pad["starts"], problem["counts"])], dtype=torch.int32,
                        device="cuda")
    if rest and rest[0] == "deepgemm_psum" and kind in ("contiguous", "psum"):  # DeepGEMM latest's psum path
        import deep_gemm as dg

        out = torch.empty((pad["a"].shape[0], n), dtype=torch.bfloat16, device="cuda")
        return (lambda: dg.m_grouped_fp8_gemm_nt_contiguous(
            (pad["a"], pad["a_scale"]), (problem["b"], problem["b_scale"]), out, ends, use_psum_layout=True,
            recipe=(1, 128, 128), disable_ue8m0_cast=True)), "deepgemm_psum"
    lay = problem["masked" if kind == "masked" else "offsets" if kind == "offsets" else "padded"]
    a, sa = lay["a"], lay["a_scale"]
    info = ends if kind == "psum" else lay[{"masked": "masked_m", "offsets": "offsets"}.get(kind, "m_indices")]
    out = torch.empty(tuple(a.shape[:-1]) + (n,), dtype=torch.bfloat16, device="cuda")
    rows = out.numel() // n
    cfg = parse_config(rest[0], rows, n, sms) if rest else None
    expected = e if kind == "masked" else None
    return (lambda: run_grouped(check_problem_kind("profile_one", kind), a, sa, b=problem["b"], b_scale=problem["b_scale"],
                                info=info, out=out, expected_m=expected, config=cfg, extra_defines=defines)), \
        (cfg.label if cfg else "auto")


fn, label = grouped_fns() if grouped else dense_fns()
if fn is None:
    sys.exit("deep_gemm is not importable")
for _ in range(3):
    fn()
torch.cuda.synchronize()
print("ok", " ".join(sys.argv[1:]), label)
