"""One small case of every kernel family and kind, in one process, for a quick compute-sanitizer
run (tests/test_sanitizer.py runs it under racecheck on a GPU; tools/sanitize.sh runs the full
workloads):
    compute-sanitizer --tool racecheck python tools/sanitize_smoke.py
Dense (persistent, multicast with 256-row tiles, split-K, swap-AB at M = 1, K fixed with the stage
ring), the M-grouped kinds (contiguous, offsets, psum, masked, masked pairs sharing B), the masked
kind with completion signals, FP32 output with C aliased and separate, 1D1D, K-grouped (a
multicast pair too), the M-grouped output variant, the casts and cast-transposes (grouped too).
Every case checks its output against a reference; prints one ``family ok`` line per family and
exits 1 when a case fails."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]

import gpu_cast_cases  # noqa: E402
import gpu_compat_cases  # noqa: E402
import sanitize_cases  # noqa: E402
import sanitize_grouped  # noqa: E402
import sanitize_training  # noqa: E402

#: The families every run covers, in order (tests/test_sanitizer.py checks each line).
FAMILIES = ("dense", "grouped", "masked_signal", "output_variants", "k_grouped", "casts")


def family(name: str, ok: bool) -> int:
    print(f"family {name} {'ok' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


def main() -> int:
    bad = family("dense", sanitize_cases.main(["128x128:b2", "256x128:mcA", "64x16:b2:k3", "64x64:b2:ef:sw8",
                                                "128x64:b1:ef:kb8:ring"]) == 0)
    bad += family("grouped", sanitize_grouped.run(sanitize_grouped.SMOKE) == 0)
    r = gpu_compat_cases.masked_signal(max_m=200, masked_rows=[1, 64, 65, 200, 0], expected_m=64, n=256, k=512,
                                       seed=1)
    bad += family("masked_signal", r["diff"] < 1e-3 and r["nan_computed"] == 0 and r["untouched_written"] == 0
                  and r["returned_none"])
    dense = sanitize_training.CASES
    ok = all(sanitize_training.dense_case(*case) for case in (dense[0], dense[1], dense[11]))  # FP32 in place, C, 1D1D
    ok = sanitize_training.m_grouped_case(*sanitize_training.M_GROUPED_CASES[0]) and ok
    bad += family("output_variants", ok)
    k_grouped = sanitize_training.K_GROUPED_CASES
    bad += family("k_grouped", all(sanitize_training.k_grouped_case(*case) for case in (k_grouped[0], k_grouped[-1])))
    casts = [gpu_cast_cases.cast_case(kind="token", rows=129, cols=272, transpose=True, power_of_two=True,
                                      special=True, seed=1),
             gpu_cast_cases.cast_case(kind="block", rows=144, cols=272, transpose=True, power_of_two=False,
                                      special=True, seed=4),
             gpu_cast_cases.grouped_case(rows=300, cols=272, offsets=[5, 5, 133, 260, 261], power_of_two=False,
                                         seed=30)]
    bad += family("casts", all(r["ok"] for r in casts))
    print(f"sanitize smoke: {len(FAMILIES)} families, {bad} failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
