"""The grouped kinds (default and forced multicast configs) in one process, for compute-sanitizer
(tools/sanitize.sh runs it under each tool):
    compute-sanitizer --tool memcheck --report-api-errors no python tools/sanitize_grouped.py
(run from the repository root; uses tests/gpu_cases.py). Exits 1 when a case fails its check."""
import sys, json
sys.path.insert(0, "tests")
import gpu_cases
cfgs = [None, dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8),
        dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, grid_size=8)]
bad = 0
for cfg in cfgs:
    for kind, counts in (("contiguous", [130, 0, 129, 5]), ("offsets", [1, 0, 77, 130, 64]), ("masked", [0, 128, 13, 64])):
        r = gpu_cases.grouped(kind, counts, 256, 256, max_m=128, tail=3, config=cfg)
        ok = r["nan"] == 0 and r["diff"] < 1e-3 and r["untouched"] and r["bitwise_repeat"]
        bad += not ok
        print(kind, cfg and cfg.get("multicast_on_a"), "ok" if ok else "BAD " + json.dumps(r))
print(f"grouped sanitize cases: {len(cfgs) * 3}, bad: {bad}")
sys.exit(1 if bad else 0)
