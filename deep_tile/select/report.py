"""``explain_text``: a human-readable account of why the selector chose a configuration.

Pure Python: the caller passes the SM count, shared-memory limit and chip facts
(``deep_tile.device.explain`` fills them in from the current device).
"""
from __future__ import annotations

from deep_tile import arch
from deep_tile.arch import ChipFacts
from deep_tile.select.config import KernelConfig
from deep_tile.select.cost import Score, roofline, why_lost
from deep_tile.select.selector import config_from_score, rank_candidates

__all__ = ["explain_text", "OTHER_REGISTERS_ESTIMATE", "NUM_RUNNERS_UP"]

OTHER_REGISTERS_ESTIMATE = 64
"""Rough registers per consumer thread besides the accumulators (addresses, scales, loop state)."""
NUM_RUNNERS_UP = 3
"""How many losing candidates the report lists."""


def _fmt(value: float) -> str:
    """Three significant digits, without exponent notation for values of 100 and more."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _config_lines(cfg: KernelConfig) -> list:
    if cfg.num_multicast == 2:
        multicast = f"2 (cluster shares the {'A' if cfg.multicast_on_a else 'B'} tile)"
    else:
        multicast = "1 (no cluster)"
    defines = " ".join(f"{key}={value}" for key, value in cfg.defines().items())
    return [
        f"config: {cfg.label}",
        f"  block_m={cfg.block_m} block_n={cfg.block_n} block_k={cfg.block_k} "
        f"num_stages={cfg.num_stages} multicast={multicast}",
        f"  {cfg.num_math_warpgroups} math warpgroup(s) of {cfg.wg_m} rows + 1 producer "
        f"= {cfg.num_threads} threads; grid {cfg.num_sms} CTAs; swizzle group {cfg.group_size} tiles",
        f"  defines: {defines}",
    ]


def _smem_lines(cfg: KernelConfig, max_smem: int) -> list:
    parts = cfg.smem_breakdown()
    s = cfg.num_stages
    limit = min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    rows = [
        ("D staging (bf16, 1024-aligned)", "", parts["d_staging"]),
        ("A stages", f"{s} x {cfg.block_m * cfg.block_k:,}", parts["a_stages"]),
        ("B stages", f"{s} x {cfg.block_n * cfg.block_k:,}", parts["b_stages"]),
        ("A-scale stages", f"{s} x {cfg.block_m * 4:,}", parts["a_scale_stages"]),
        ("barriers (full + empty)", f"{s} x 16", parts["barriers"]),
    ]
    lines = [f"shared memory: {parts['total']:,} of {limit:,} bytes "
             f"({100 * parts['total'] / limit:.1f}%, {limit - parts['total']:,} free)"]
    lines += [f"  {name:<32}{detail:>14} = {value:>9,}" for name, detail, value in rows]
    return lines


def _register_lines(cfg: KernelConfig) -> list:
    total = cfg.accum_registers + OTHER_REGISTERS_ESTIMATE
    return [f"registers per consumer thread: {cfg.accum_registers} accumulators "
            f"(limit {arch.MAX_ACCUM_REGISTERS}) + ~{OTHER_REGISTERS_ESTIMATE} other "
            f"= ~{total} of the {arch.CONSUMER_REGISTERS} setmaxnreg budget"]


def _schedule_lines(best: Score) -> list:
    return [f"tiles: {best.m_blocks} x {best.n_blocks} = {best.tiles}; waves: {best.waves} over "
            f"{best.num_sms} SMs; last wave {best.last_wave_tiles}/{best.num_sms} SMs busy "
            f"({100 * best.last_wave_util:.1f}%)"]


def _roofline_lines(m: int, n: int, k: int, best: Score, chip: ChipFacts) -> list:
    roof = roofline(m, n, k, best, chip)
    problem_intensity = roof.flops / roof.bytes
    side = "above" if problem_intensity >= chip.ridge_point else "below"
    return [
        f"arithmetic intensity: tile {best.tile_intensity:.1f} FLOP/B of A/B loads "
        f"(whole problem with padding {float(best.intensity):.1f}; at the FP8 peak the SMs would "
        f"pull {_fmt(chip.fp8_flops_on(best.num_sms) / float(best.intensity) / 1e12)} TB/s from L2/HBM)",
        f"  problem {problem_intensity:.0f} FLOP/B of minimal HBM traffic, {side} the {chip.name} ridge "
        f"point {chip.ridge_point:.0f} FLOP/B ({chip.fp8_flops / 1e12:.0f} TFLOPS FP8 / "
        f"{chip.hbm_bytes_per_s / 1e12:.2f} TB/s)",
        f"roofline: compute-bound {_fmt(roof.compute_s * 1e6)} us "
        f"({_fmt(roof.flops / 1e9)} GFLOP, wave efficiency {100 * roof.wave_efficiency:.1f}%), "
        f"memory-bound {_fmt(roof.memory_s * 1e6)} us ({_fmt(roof.bytes / 1e6)} MB minimum) "
        f"-> {roof.bound}-bound, >= {_fmt(roof.time_s * 1e6)} us "
        f"({_fmt(roof.flops / roof.time_s / 1e12)} TFLOPS at best)",
    ]


def _runner_up_lines(ranked: tuple) -> list:
    best = ranked[0]
    lines = [f"runners-up (of {len(ranked)} legal tile shapes):"]
    for place, other in enumerate(ranked[1:1 + NUM_RUNNERS_UP], start=2):
        c = other.candidate
        lines.append(f"  {place}. {c.shape} s{c.num_stages}: tiles={other.tiles} waves={other.waves} "
                     f"-- lost on {why_lost(best, other)}")
    if len(ranked) == 1:
        lines.append("  (none)")
    return lines


def explain_text(m: int, n: int, k: int, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK,
                 chip: ChipFacts = arch.DEFAULT_CHIP) -> str:
    """Multi-line report of the configuration chosen for ``m x n x k`` on ``num_sms`` SMs.

    Covers the problem, the config and its defines, the shared-memory breakdown against the
    limit, registers, tiles and waves, arithmetic intensity against ``chip``'s ridge point, the
    roofline times, and the top runners-up with the rule each lost on.

    Raises:
        ValueError: an argument is not a positive int, or ``chip`` is not a ChipFacts.
    """
    if not isinstance(chip, ChipFacts):
        raise ValueError(f"explain_text: chip must be a deep_tile.arch.ChipFacts; got {chip!r}")
    ranked = rank_candidates(m, n, k, num_sms, max_smem)
    best = ranked[0]
    cfg = config_from_score(m, n, best)
    lines = [f"problem: out[M, N] (bf16) = A[M, K] @ B[N, K]^T (fp8 e4m3), M={m} N={n} K={k}, "
             f"{num_sms} SMs, chip {chip.name}"]
    lines += _config_lines(cfg)
    lines += _smem_lines(cfg, max_smem)
    lines += _register_lines(cfg)
    lines += _schedule_lines(best)
    lines += _roofline_lines(m, n, k, best, chip)
    lines += _runner_up_lines(ranked)
    return "\n".join(lines)
