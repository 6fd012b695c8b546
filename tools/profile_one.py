"""Run one fp8_gemm shape a few times (for ncu / compute-sanitizer).

    python tools/profile_one.py 4096 7168 16384 [CONFIG] [--define NAME=VALUE ...]

CONFIG is the text form of deep_tile.testing.configs (e.g. ``256x128:mcA``); default: the selector's.
CONFIG ``deepgemm`` runs DeepGEMM (a baseline, when importable) on the same inputs instead.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from deep_tile.launch import run  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402

m, n, k = (int(x) for x in sys.argv[1:4])
rest = [a for a in sys.argv[4:] if not a.startswith("--define")]
defines = {kv.split("=")[0]: int(kv.split("=")[1]) for a in sys.argv[4:] if a.startswith("--define=")
           for kv in [a.split("=", 1)[1]]}
a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=0, a_scale_layout="tma")
sms = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
if rest and rest[0] == "deepgemm":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from sweep_configs import baseline_fns  # noqa: E402

    fn, label = baseline_fns(a, sa, b, sb, out).get("deepgemm"), "deepgemm"
    if fn is None:
        sys.exit("deep_gemm is not importable")
else:
    cfg = parse_config(rest[0], m, n, sms) if rest else None
    fn, label = (lambda: run(a, sa, b, sb, out, config=cfg, extra_defines=defines)), (cfg.label if cfg else "auto")
for _ in range(3):
    fn()
torch.cuda.synchronize()
print("ok", m, n, k, label)
