"""The MoE layout kernels (psum -> m_indices) and the signalling masked GEMM (its in-kernel
completion signals, and a consumer kernel reading blocks as they are signalled), in one
process, for compute-sanitizer (tools/sanitize.sh runs it under each tool):
    SANITIZE_SCRIPTS=tools/sanitize_moe_layout.py bash tools/sanitize.sh
(run from the repository root; uses tests/gpu_compat_cases.py). Exits 1 when a case fails its check."""
import json
import sys

sys.path.insert(0, "tests")
import gpu_compat_cases as cases  # noqa: E402

runs = [
    ("psum", dict(sizes=[100, 0, 300, 128, 1], n=256, k=512, seed=0)),
    ("psum", dict(sizes=[0, 0, 77], n=256, k=256, tail=200, seed=1)),
    ("psum", dict(sizes=[129, 5, 0, 256], n=256, k=512, alignment=256, tail=3, seed=2)),
    ("psum_layout", dict(sizes=[3, 3, 130, 260], alignment=128, m=400)),
    ("psum_layout", dict(sizes=[0, 5000, 7], alignment=256, m=1000)),
    ("masked_signal", dict(max_m=200, masked_rows=[1, 64, 65, 200, 0], expected_m=64, n=256, k=512, seed=1)),
    ("masked_signal", dict(max_m=300, masked_rows=[300, 129, 0], expected_m=256, n=384, k=512, seed=2)),
    # the sanitizer may serialise the two kernels: the consumer then times out (copying nothing)
    ("signal_consumer", dict(max_m=128, masked_rows=[128, 65, 0, 3], expected_m=64, n=256, k=512, watch=3, seed=3,
                             budget_kcycles=100_000, allow_timeout=True)),
]
bad = 0
for name, kwargs in runs:
    r = getattr(cases, name)(**kwargs)
    ok = r["diff"] < 1e-3 and r["nan_computed"] == 0 and r["untouched_written"] == 0 and r["returned_none"]
    bad += not ok
    print(r["case"], "ok" if ok else "BAD " + json.dumps(r))
print(f"moe layout sanitize cases: {len(runs)}, bad: {bad}")
sys.exit(1 if bad else 0)
