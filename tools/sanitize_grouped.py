"""The grouped kinds (default and forced multicast configs) in one process, for compute-sanitizer
(tools/sanitize.sh runs it under each tool):
    compute-sanitizer --tool memcheck --report-api-errors no python tools/sanitize_grouped.py
(run from the repository root; uses tests/gpu_cases.py). Exits 1 when a case fails its check."""
import sys, json
sys.path.insert(0, "tests")
import gpu_cases
# (config, N): the selector's pick, 128x128 pairs sharing B and A; 128x192 tiles (one-buffer k-loop
# with b_scale staged in shared memory) in bands along M, alone and in pairs sharing B, at N = 192:
# one n-block, so each expert's tile count is its m-block count and pairs straddle experts; 128x256
# one-buffer tiles in bands along M (the pick for groups of more than 64 rows, many in all); two of
# them with K fixed at compile time; and the masked kind with K fixed over long K (20 K blocks, 256x128
# and 128x256).
cases = [(None, 256), (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8), 256),
         (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, grid_size=8), 256),
         (dict(block_m=128, block_n=192, num_stages=4, raster_along_m=True, raster_width=16, grid_size=8), 192),
         (dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8), 192),
         (dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16, grid_size=8), 256),
         # and with K fixed at compile time (K = 256: 2 K blocks), alone and in pairs sharing B
         (dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16, grid_size=8,
               static_k_blocks=2), 256),
         (dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8,
               static_k_blocks=2), 192)]
KINDS = ("contiguous", "offsets", "masked", "psum")
runs = [(cfg, n, 256, KINDS) for cfg, n in cases]
# the masked kind with K fixed over long K (selector.static_k_blocks_for's long tier): 20 K blocks on 256x128
# and on its transpose 128x256 (the pick at 129-256 rows per expert from 56 k-blocks on)
runs.append((dict(block_m=256, block_n=128, num_stages=3, raster_along_m=True, raster_width=16, grid_size=8,
                  static_k_blocks=20), 256, 2560, ("masked",)))
runs.append((dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16,
                  grid_size=8, static_k_blocks=20), 256, 2560, ("masked",)))
COUNTS = {"contiguous": [130, 0, 129, 5], "offsets": [1, 0, 77, 130, 64], "masked": [0, 128, 13, 64], "psum": [130, 0, 129, 5]}
bad = done = 0
for cfg, n, k, kinds in runs:
    for kind in kinds:
        counts = COUNTS[kind]
        if kind in ("offsets", "psum") and cfg and cfg["block_n"] == 192:
            continue  # covered by masked (the same table scheduler); keeps the sanitizer runs short
        r = gpu_cases.grouped(kind, counts, n, k, max_m=128, tail=3, config=cfg)
        ok = r["nan"] == 0 and r["diff"] < 1e-3 and r["untouched"] and r["bitwise_repeat"]
        bad += not ok
        print(kind, n, cfg and f"{cfg['block_m']}x{cfg['block_n']} mc{cfg.get('num_multicast', 1)}"
              f"{'A' if cfg.get('multicast_on_a') else 'B'}", "ok" if ok else "BAD " + json.dumps(r))
        done += 1
print(f"grouped sanitize cases: {done}, bad: {bad}")
sys.exit(1 if bad else 0)
