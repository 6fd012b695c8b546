"""Fit the selector model's constants (deep_tile.select.cost.ModelParams) to measured sweeps.

    python benchmarks/probes/fit_model.py benchmarks/data/sweep_*_h100_*.json
    python benchmarks/probes/fit_model.py benchmarks/data/*.json --report      # the current constants only

Each row of a benchmarks/probes/sweep_configs.py JSON file is one forced configuration timed on one
shape. The fit minimises, per shape, the spread of the log errors of the predicted times (ranking
depends only on them) plus a tenth of the absolute log error, then reports how
well the model ranks: per shape, the measured time of the configuration the model would pick
among those measured, against the best measured one ("regret"). Needs no GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for deep_tile

from deep_tile import arch  # noqa: E402
from deep_tile.gemm.problem import Problem  # noqa: E402
from deep_tile.select.candidates import Candidate  # noqa: E402
from deep_tile.select.cost import DEFAULT_PARAMS, ModelParams, estimate  # noqa: E402
from deep_tile.common import ceil_div  # noqa: E402
from deep_tile.select.selector import streams_b  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402

BOUNDS = {  # parameter -> (low, high), searched in log space
    "clock_hz": (1.2e9, 2.0e9), "tensor_efficiency": (0.6, 1.0), "irregular_width_efficiency": (0.5, 1.0), "l2_bytes_per_cycle": (20.0, 120.0),
    "chain_cycles": (50.0, 1500.0), "overlap_factor": (0.2, 1.0), "stream_bytes_per_cycle": (8.0, 400.0),
    "multicast_penalty": (0.001, 0.5), "multicast_chain_cycles": (1.0, 2000.0), "tile_cycles": (200.0, 20000.0),
    "split_k_cycles": (200.0, 30000.0), "split_k_cycles_per_cta": (10.0, 10000.0),
    "dsmem_bytes_per_cycle": (1.0, 400.0),
    "hbm_efficiency": (0.3, 1.0), "launch_seconds": (0.5e-6, 12e-6), "softness": (1.5, 12.0),
}


def load(paths) -> list:
    """(shape, Candidate, measured seconds) of every deep_tile row that ran and passed its check.

    The model ranks candidates, and the selector then sets the L2 policies
    (``selector.streams_b``): rows whose policies differ from what the selector would give that
    candidate are left out (a sweep may time both), and of repeated (shape, candidate) rows the
    fastest counts (e.g. the two raster axes of one tile)."""
    fastest = {}
    for path in paths:
        for row in json.loads(Path(path).read_text()):
            if not row.get("ok") or "us" not in row or row["config"] in ("deepgemm", "cublas_bw", "cublas_pt"):
                continue
            m, n, k = row["shape"]
            cfg = parse_config(row["config"], m, n, 132)
            if cfg.evict_first_b != streams_b(ceil_div(m, cfg.block_m), ceil_div(k, 128)):
                continue
            cand = Candidate(cfg.block_m, cfg.block_n, cfg.wgmma_n, cfg.accum_buffers, cfg.num_stages,
                             cfg.num_multicast, cfg.multicast_on_a, cfg.split_k)
            key = ((m, n, k), cand)
            fastest[key] = min(fastest.get(key, math.inf), row["us"] * 1e-6)
    return [(shape, cand, t) for (shape, cand), t in fastest.items()]


def predict(points, params: ModelParams, chip) -> list:
    return [estimate(c, Problem(*shape), 132, chip, params=params).time_s for shape, c, _ in points]


def loss(points, params, chip) -> float:
    """Mean over shapes of the spread of the log errors within the shape (what ranking depends on),
    plus a small weight on the absolute log error (so the times stay meaningful)."""
    errors = {}
    for (shape, _, t), p in zip(points, predict(points, params, chip)):
        errors.setdefault(shape, []).append(math.log(p / t))
    spread = absolute = 0.0
    for values in errors.values():
        centre = sorted(values)[len(values) // 2]
        spread += sum(abs(v - centre) for v in values) / len(values)
        absolute += sum(abs(v) for v in values) / len(values)
    return (spread + 0.1 * absolute) / len(errors)


def regret(points, params, chip) -> tuple:
    """(geomean of best/picked measured time over shapes, worst shape, its ratio)."""
    by_shape = {}
    for (shape, c, t), p in zip(points, predict(points, params, chip)):
        by_shape.setdefault(shape, []).append((p, t, c))
    ratios = {}
    for shape, rows in by_shape.items():
        picked = min(rows, key=lambda r: r[0])[1]
        ratios[shape] = min(r[1] for r in rows) / picked
    worst = min(ratios, key=ratios.get)
    return math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios)), worst, ratios[worst]


def pick_regret(points, params, chip) -> tuple:
    """(geomean, worst) over shapes of best measured time / measured time of the configuration the
    full selector picks with ``params`` (shapes whose pick was not measured are left out)."""
    from deep_tile.select import candidates as candidates_module
    from deep_tile.select.cost import estimate
    from deep_tile.common import ceil_div

    measured = {}
    for shape, c, t in points:
        measured.setdefault(shape, {})[c] = t
    ratios = []
    for (m, n, k), times in measured.items():
        cands = candidates_module.enumerate_candidates(arch.MAX_SMEM_PER_BLOCK, 132,
                                                       lambda bm, bn: ceil_div(m, bm) * ceil_div(n, bn),
                                                       ceil_div(k, 128))
        best = min(cands, key=lambda c: estimate(c, Problem(m, n, k), 132, chip, params=params).time_s)
        if best in times:
            ratios.append(min(times.values()) / times[best])
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), min(ratios), len(ratios)


def fit_picks(points, chip, start: ModelParams, iters: int, seed: int) -> ModelParams:
    """Random search from ``start`` on how well the selector's picks do (geomean and worst case of
    best/picked measured time), with the log-error loss as a tie-breaker."""
    rng = random.Random(seed)

    def objective(params):
        geo, worst, _ = pick_regret(points, params, chip)
        return geo + 0.25 * worst - 0.1 * loss(points, params, chip)

    best, best_value = start, objective(start)
    for step in range(iters):
        scale = 0.3 * (1 - step / iters) + 0.02
        trial = {name: min(high, max(low, getattr(best, name) * math.exp(rng.gauss(0, scale))))
                 for name, (low, high) in BOUNDS.items() if rng.random() < 0.4}
        candidate = dataclasses.replace(best, **trial)
        value = objective(candidate)
        if value > best_value:
            best, best_value = candidate, value
    return best


def fit(points, chip, iters: int, seed: int) -> ModelParams:
    rng = random.Random(seed)
    best, best_loss = DEFAULT_PARAMS, loss(points, DEFAULT_PARAMS, chip)
    for step in range(iters):
        scale = 0.5 * (1 - step / iters) + 0.02
        trial = {}
        for name, (low, high) in BOUNDS.items():
            value = getattr(best, name) * math.exp(rng.gauss(0, scale))
            trial[name] = min(high, max(low, value))
        candidate = dataclasses.replace(best, **trial)
        value = loss(points, candidate, chip)
        if value < best_loss:
            best, best_loss = candidate, value
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--chip", default="H100 SXM", choices=sorted(arch.CHIPS))
    p.add_argument("--iters", type=int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", action="store_true", help="evaluate the current constants only")
    p.add_argument("--picks", type=int, default=0, help="then N steps of search on the selector's picks")
    args = p.parse_args(argv)
    chip = arch.CHIPS[args.chip]
    points = load(args.files)
    params = DEFAULT_PARAMS
    print(f"{len(points)} measured points from {len(args.files)} files")
    print(f"current: mean |log error| {loss(points, params, chip):.3f}, ranking {regret(points, params, chip)}, "
          f"selector picks (geomean, worst, shapes) {pick_regret(points, params, chip)}")
    if args.report:
        return 0
    fitted = fit(points, chip, args.iters, args.seed)
    print(f"fitted:  mean |log error| {loss(points, fitted, chip):.3f}, ranking {regret(points, fitted, chip)}")
    if args.picks:
        fitted = fit_picks(points, chip, fitted, args.picks, args.seed)
        print(f"picks:   mean |log error| {loss(points, fitted, chip):.3f}, selector picks "
              f"(geomean, worst, shapes) {pick_regret(points, fitted, chip)}")
    print(fitted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
