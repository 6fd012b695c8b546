"""The M-grouped kinds (contiguous, offsets, masked, psum) in one process, for compute-sanitizer
(tools/sanitize.sh runs it under each tool):
    compute-sanitizer --tool racecheck python tools/sanitize_grouped.py
(run from the repository root; uses tests/gpu_cases.py). Every output is NaN-poisoned, compared
with the float64 reference on the real rows, checked untouched elsewhere and repeated bitwise.
Exits 1 when a case fails its check.

Two sets: forced tiles (the selector's pick, 128x128 pairs sharing B and A, 128x192 and 128x256
bands along M, K fixed at compile time, the masked kind with K fixed over long K) over a few
experts of 0-130 rows; and the selector's own picks on the edge cases of serving: empty experts,
experts of one row, partial 128-row blocks, ``expected_m`` far below and above the counts, 64 to
256 experts, a single row in all (M = 1).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import gpu_cases  # noqa: E402

KINDS = ("contiguous", "offsets", "masked", "psum")
COUNTS = {"contiguous": [130, 0, 129, 5], "offsets": [1, 0, 77, 130, 64], "masked": [0, 128, 13, 64],
          "psum": [130, 0, 129, 5]}


def forced_cases() -> list:
    """(kind, counts, n, k, config, max_m, expected_m): forced tiles over COUNTS."""
    # (config, N): 128x192 at N = 192 is one n-block, so each expert's tile count is its m-block
    # count and pairs straddle experts.
    configs = [
        (None, 256),
        (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8), 256),
        (dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=True, grid_size=8), 256),
        (dict(block_m=128, block_n=192, num_stages=4, raster_along_m=True, raster_width=16, grid_size=8), 192),
        (dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8), 192),
        (dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16, grid_size=8),
         256),
        # K fixed at compile time (K = 256: 2 K blocks), alone and in pairs sharing B
        (dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16, grid_size=8,
              static_k_blocks=2), 256),
        (dict(block_m=128, block_n=192, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8,
              static_k_blocks=2), 192),
        # the selector's 64-row pick of the masked and offsets kinds (two accumulator buffers, one
        # releasing lane per warp) on a persistent grid smaller than the tile count
        (dict(block_m=64, block_n=128, num_stages=8, accum_buffers=2, raster_along_m=True, raster_width=16,
              grid_size=8, evict_first_b=True), 256),
    ]
    cases = []
    for config, n in configs:
        for kind in KINDS:
            if kind in ("offsets", "psum") and config and config["block_n"] == 192:
                continue  # covered by masked (the same table scheduler); keeps the sanitizer runs short
            cases.append((kind, COUNTS[kind], n, 256, config, 128, None))
    # the masked kind with K fixed over long K (20 K blocks) on 256x128 and on its transpose 128x256
    cases.append(("masked", COUNTS["masked"], 256, 2560,
                  dict(block_m=256, block_n=128, num_stages=3, raster_along_m=True, raster_width=16, grid_size=8,
                       static_k_blocks=20), 128, None))
    cases.append(("masked", COUNTS["masked"], 256, 2560,
                  dict(block_m=128, block_n=256, num_stages=3, wgmma_n=128, raster_along_m=True, raster_width=16,
                       grid_size=8, static_k_blocks=20), 128, None))
    return cases


def _ragged(num_groups: int, most: int, seed: int) -> list:
    """Counts 0..most, deterministic, with at least one empty expert and one of a single row."""
    counts = [(7 * g * g + 3 * g + seed) % (most + 1) for g in range(num_groups)]
    counts[0], counts[-1] = 0, 1
    return counts


def edge_cases() -> list:
    """(kind, counts, n, k, config, max_m, expected_m): the selector's picks on serving's edges."""
    return [
        # masked: empty experts, one of a single row, expected_m far below the largest count
        ("masked", [128, 0, 1, 77], 4096, 7168, None, 128, 4),
        # masked: full, empty and few-row experts of up to 256 rows, expected_m = 4
        ("masked", [256, 0, 3, 1, 129, 256], 7168, 2048, None, 256, 4),
        # masked: expected_m far above the counts
        ("masked", [3, 0, 1, 2], 2048, 1024, None, 256, 256),
        # offsets and psum: 64 experts of 0 to 39 rows (partial blocks everywhere)
        ("offsets", _ragged(64, 39, 1), 512, 1024, None, 0, None),
        ("psum", _ragged(64, 39, 2), 512, 1024, None, 0, None),
        # contiguous: 64 experts of 0 to 130 rows (runs padded to 128)
        ("contiguous", _ragged(64, 130, 3), 256, 512, None, 0, None),
        # 256 experts of at most 3 rows (offsets) and masked slabs of 8 rows
        ("offsets", _ragged(256, 3, 4), 256, 512, None, 0, None),
        ("masked", _ragged(256, 8, 5), 256, 512, None, 8, None),
        # M = 1: one expert with one row among empty ones
        ("offsets", [0, 1, 0], 2112, 1024, None, 0, None),
        ("masked", [0, 1], 2112, 1024, None, 1, 1),
    ]


# One case per kind for the GPU racecheck test (tests/test_sanitizer.py): the selector's 64-row
# pick over the kinds with tile slots, and multicast pairs.
SMOKE = [
    ("contiguous", COUNTS["contiguous"], 256, 256, None, 128, None),
    ("offsets", [0, 1, 39, 0, 17, 64], 256, 512, None, 0, None),
    ("psum", [1, 0, 129, 5], 256, 512, None, 0, None),
    ("masked", [128, 0, 1, 77], 512, 1024, None, 128, 4),
    ("masked", COUNTS["masked"], 256, 256,
     dict(block_m=128, block_n=128, num_stages=4, num_multicast=2, multicast_on_a=False, grid_size=8), 128, None),
]


def run(cases: list) -> int:
    """Runs ``cases``; prints one line each and a summary; returns the number that failed."""
    bad = 0
    for kind, counts, n, k, config, max_m, expected_m in cases:
        r = gpu_cases.grouped(kind, counts, n, k, max_m=max_m, tail=3, config=config, expected_m=expected_m)
        ok = r["nan"] == 0 and r["diff"] < 1e-3 and r["untouched"] and r["bitwise_repeat"]
        bad += not ok
        tile = (f"{config['block_m']}x{config['block_n']} mc{config.get('num_multicast', 1)}"
                f"{'A' if config.get('multicast_on_a') else 'B'}" if config else "pick")
        what = f"{len(counts)} experts {sum(counts)} rows" if len(counts) > 8 else str(counts)
        print(f"{'ok  ' if ok else 'BAD '} grouped {kind:>10} {what} n={n} k={k} {tile}"
              + ("" if ok else " " + json.dumps(r)), flush=True)
    print(f"grouped sanitize cases: {len(cases)}, bad: {bad}", flush=True)
    return bad


def select(argv: list) -> list:
    """The cases of the sets named in ``argv`` (``forced``, ``edge``, ``smoke``; default forced and
    edge), a set's name followed by numbers taking those of its cases alone (``edge 0 1 3``)."""
    sets = {"smoke": SMOKE, "edge": edge_cases(), "forced": forced_cases()}
    chosen, current, picked = [], None, []
    for word in argv + [None]:
        if word is not None and word.isdigit() and current is not None:
            picked.append(sets[current][int(word)])
            continue
        if current is not None:
            chosen += picked or sets[current]
        if word is None:
            break
        if word not in sets:
            raise SystemExit(f"unknown case set {word!r}; the sets are {sorted(sets)}")
        current, picked = word, []
    return chosen or forced_cases() + edge_cases()


if __name__ == "__main__":
    sys.exit(1 if run(select(sys.argv[1:])) else 0)
