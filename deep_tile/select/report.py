"""``explain_text``: a human-readable account of why the selector chose a configuration.

Pure Python: the caller passes the SM count, shared-memory limit and chip facts
(:func:`deep_tile.select.api.explain` fills them in from the current device).
"""
from __future__ import annotations

from deep_tile import arch
from deep_tile.arch import ChipFacts
from deep_tile.common import ceil_div
from deep_tile.kernels import fp8_gemm as family
from deep_tile.gemm.problem import ProblemKind
from deep_tile.select.config import RASTER_WIDTH, KernelConfig
from deep_tile.select.cost import COUNT_SPREAD, DEFAULT_PARAMS, Estimate, averages_over_counts, min_bytes
from deep_tile.select.selector import (IN_PLACE_ODD_WIDTH_EFFICIENCY, ONE_SUBTILE_TOLERANCE, RING_TILE, RING_TILE_OVER, RING_TILE_TOLERANCE,
                                      SPLIT_TOLERANCE, TIE_TOLERANCE, UNSPLIT_TOLERANCE, plain_bf16,
                                      ONE_M_BLOCK_TOLERANCE, STATIC_K_MAX_K_BLOCKS, WIDE_TILE_MIN_K_BLOCKS, k_unroll_for, unroll_width, one_buffer_for_two_warpgroups,
                                      one_m_block_rows,
                                      straddle_copies, accumulates_weight_gradient, config_from_estimate,
                                      in_place_rows_along_m, one_slab_over_tall, one_subtile_per_warpgroup,
                                      rank_candidates)

__all__ = ["explain_text", "NUM_RUNNERS_UP"]

NUM_RUNNERS_UP = 4
"""How many losing candidates the report lists."""


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _config_lines(cfg: KernelConfig, held_at_3: bool = False, one_buffer_swap: bool = False) -> list:
    """``held_at_3``: the one-buffer k-loop would be unrolled by 6 but for its copies
    (selector.k_unroll_for, straddle_copies); ``one_buffer_swap``: the model ranked the tile with two
    buffers, and it runs with one (selector.one_buffer_for_two_warpgroups)."""
    if cfg.split_k > 1:
        launch = (f"split-K: clusters of {cfg.split_k} CTAs share each output tile, each a 1/{cfg.split_k} of K, "
                  f"partials summed in rank order through distributed shared memory (deterministic)")
    elif cfg.num_multicast == 2:
        launch = (f"persistent grid of {cfg.grid_size} CTAs in clusters of 2 sharing the "
                  f"{'A' if cfg.multicast_on_a else 'B'} tile (TMA multicast), raster band {cfg.raster_width}")
    else:
        axis = ("m-blocks (consecutive tiles share the B tile)" if cfg.raster_along_m
                else "n-blocks (consecutive tiles share the A tile)")
        launch = f"persistent grid of {cfg.grid_size} CTAs, raster bands of {cfg.raster_width} {axis}"
    defines = " ".join(f"{key}={value}" for key, value in cfg.defines().items())
    parts = f" as {cfg.block_n // cfg.wgmma_n} column parts of {cfg.wgmma_n}" if cfg.wgmma_n != cfg.block_n else ""
    l2 = ("B loads evict-first, A loads evict-last (B is a stream: each B tile is read by at most two tiles, "
          "or eight over K >= 4096 for the dense bf16 kind: selector.streams_b)" if cfg.evict_first_b else "plain loads")
    if cfg.l2_promotion != family.DEFAULT_L2_PROMOTION:
        l2 += f"; A and B maps promote L2 misses to {cfg.l2_promotion} bytes (selector.l2_promotion_for)"
    k_range = "a short K range" if cfg.static_k_blocks <= STATIC_K_MAX_K_BLOCKS else "a long K range"
    if held_at_3:
        k_range += (f" whose run-time loop would be unrolled by 3, not 6 as the kernel holds "
                    f"{straddle_copies(cfg.block_n)} copies of the k-loop")
    loop = (f"one WGMMA buffer; K fixed at compile time ({cfg.static_k_blocks} K blocks, "
            f"{cfg.static_k_blocks // cfg.num_stages} passes over the {cfg.num_stages} stages): every tile starts at "
            "stage 0, each pass straight code with the stage offsets as constants (a narrow one-buffer twin over "
            "long K, or the 128x192 tile: selector.static_ring_for)"
            if cfg.static_ring else
            f"one WGMMA buffer; K fixed at compile time ({cfg.static_k_blocks} K blocks): constant trip counts, "
            f"unrolled by {family.STATIC_K_UNROLL} K blocks ({k_range}: selector.static_k_blocks_for)"
            if cfg.static_k_blocks else
            f"one WGMMA buffer, unrolled by {cfg.k_unroll} K blocks"
            + (" (a long K range per CTA: selector.k_unroll_for)" if cfg.k_unroll != 3 else "")
            + (f" (not 6: the kernel holds {straddle_copies(cfg.block_n)} copies of the k-loop, one per b_scale"
               " straddle point: selector.k_unroll_for)"
               if held_at_3 else "")
            + (" (the model's pick has two buffers; its two consumer warpgroups take turns on the tensor cores, "
               "so it runs with one" + (", unrolled as that loop was" if cfg.k_unroll == 3 else
                                        f", unrolled by 6 as its {cfg.block_n} columns are narrower than 128 "
                                        "and its m-blocks many (selector.swap_unroll_for)")
               + ": selector.one_buffer_for_two_warpgroups)"
               if one_buffer_swap else "")
            if cfg.accum_buffers == 1 else "two WGMMA buffers, the next sub-tile's WGMMAs beside this one's promotion")
    if cfg.swap_n:
        loop += (f"; swap-AB: each 64 weight rows are a WGMMA's 64-row operand and A's first {cfg.swap_n} rows its "
                 f"N side, the output stored transposed (M <= {cfg.swap_n}: selector.swap_n_for)")
    return [
        f"config: {cfg.label}",
        f"  tile {cfg.block_m}x{cfg.block_n}x{cfg.block_k}, {cfg.num_stages} stages; {launch}",
        f"  {cfg.num_math_warpgroups} consumer warpgroup(s) of {cfg.wg_m} rows ({cfg.num_subtiles} sub-tile(s) each{parts})"
        f" + 1 producer = {cfg.num_threads} threads; {cfg.accum_buffers} WGMMA accumulator buffer(s)",
        f"  L2 policies: {l2}",
        f"  k-loop: {loop}",
        f"  defines: {defines}",
    ]


def _smem_lines(cfg: KernelConfig, max_smem: int) -> list:
    parts = cfg.smem_breakdown()
    s = cfg.num_stages
    limit = min(max_smem, arch.MAX_SMEM_PER_BLOCK)
    rows = [
        (("D staging (FP32 64-row sub-tiles)" if family.tma_f32_store(cfg) or cfg.staged_epilogue
          else "D staging (bf16, 1024-aligned)"), "", parts["d_staging"]),
        ("A stages", f"{s} x {cfg.block_m * cfg.block_k:,}", parts["a_stages"]),
        ("B stages", f"{s} x {cfg.block_n * cfg.block_k:,}", parts["b_stages"]),
        ("A-scale stages", f"{s} x {cfg.block_m * 4:,}", parts["a_scale_stages"]),
        (("B-scale slots (2 per stage)" if cfg.b_scale_1d else "B-scale stages"),
         f"{family.b_scale_slots(s, cfg.b_scale_1d, cfg.block_n)} x {family.b_scale_pitch(cfg.block_n, cfg.b_scale_1d) * 4:,}",
         parts["b_scale_stages"]),
        (("barriers (full + empty, staging)" if cfg.staged_epilogue else "barriers (full + empty)"),
         f"{s} x 16" + (f" + {family.epilogue_barriers(cfg)} x 8" if cfg.staged_epilogue else ""), parts["barriers"]),
    ]
    if parts.get("group_table"):
        rows.append(("per-expert table", "", parts["group_table"]))
    lines = [f"shared memory: {parts['total']:,} of {limit:,} bytes "
             f"({100 * parts['total'] / limit:.1f}%, {limit - parts['total']:,} free)"]
    lines += [f"  {name:<32}{detail:>14} = {value:>9,}" for name, detail, value in rows]
    if cfg.split_k > 1:
        lines.append(f"  split-K fp32 partial tile {family.partial_bytes(cfg.block_m, cfg.block_n):,} bytes "
                     "reuses the A/B stages after the k-loop")
    return lines


def _register_lines(cfg: KernelConfig) -> list:
    return [f"registers per consumer thread: {cfg.accum_registers} for accumulators ({cfg.num_subtiles} result "
            f"sub-tile(s) + {cfg.accum_buffers} WGMMA buffer(s) of {cfg.wgmma_n // 2}; budget "
            f"{family.ACCUM_REGISTER_BUDGET} of the {family.CONSUMER_REGISTERS} after setmaxnreg)"]


def _model_lines(problem, e: Estimate, chip: ChipFacts) -> list:
    rows = problem.num_groups * problem.expected_m if problem.kind.grouped else problem.m  # the real rows, expected
    flops = 2 * rows * problem.n * problem.k  # every row of A meets one group's B
    nbytes = min_bytes(problem)
    return [
        f"work: {flops / 1e9:,.2f} GFLOP, {nbytes / 1e6:,.2f} MB compulsory HBM traffic "
        f"({flops / nbytes:,.0f} FLOP/B; {chip.name} ridge point {chip.ridge_point:,.0f} FLOP/B)",
        f"floors on {chip.name}: HBM {_us(e.memory_s)} at {chip.hbm_bytes_per_s / 1e12:.2f} TB/s, "
        f"FP8 peak {_us(flops / chip.fp8_flops)} at {chip.fp8_flops / 1e12:,.0f} TFLOPS",
        f"schedule: {e.tiles} tiles on {e.ctas} CTAs, " + (
            f"{e.tiles_per_cta:.2f} tile(s) per CTA on average over group sizes of "
            f"{COUNT_SPREAD[0]:g}-{COUNT_SPREAD[-1]:g} x expected_m, of "
            if averages_over_counts(problem) else f"{e.tiles_per_cta} tile(s) per CTA of ")
        + f"{e.k_blocks_per_cta} k-blocks",
        f"model per k-block and CTA: tensor {e.tensor_cycles:,.0f} cycles, L2 loads {e.l2_cycles:,.0f}, "
        f"dependent chain {e.latency_cycles:,.0f} -> {e.bound}-bound",
        f"predicted: {_us(e.time_s)} ({flops / e.time_s / 1e12:,.0f} TFLOPS, "
        f"{nbytes / e.time_s / 1e9:,.0f} GB/s of compulsory traffic)",
    ]


def _runner_up_lines(ranked: tuple, problem) -> list:
    best = ranked[0]
    lines = [f"runners-up (of {len(ranked)} candidates):"]
    seen = {best.candidate.label}
    for other in ranked[1:]:
        if len(seen) > NUM_RUNNERS_UP:
            break
        if other.candidate.label in seen:
            continue
        seen.add(other.candidate.label)
        lines.append(f"  {other.candidate.label}: predicted {_us(other.time_s)} "
                     f"({other.time_s / best.time_s:.2f}x), {other.tiles} tiles on {other.ctas} CTAs, {other.bound}-bound")
    if len(ranked) == 1:
        lines.append("  (none)")
    tall = next((e for e in ranked[1:] if one_slab_over_tall(problem, best, e)), None)
    if tall is not None:
        lines.append(f"  ({tall.candidate.label} ties with it; for the weight gradient accumulated in place the "
                     f"128-row tile goes first: only a warpgroup of one 64-row slab forms part of its 1D1D scale "
                     f"products while its WGMMAs run (selector._one_slab_first))")
    faster = [e for e in ranked[1:] if e.time_s < best.time_s]
    if not faster:
        return lines
    lead = f"  ({faster[0].candidate.label} is predicted faster by {(1 - faster[0].time_s / best.time_s) * 100:.1f}%"
    if (accumulates_weight_gradient(problem) and one_subtile_per_warpgroup(best.candidate)
            and best.time_s > faster[0].time_s * (1 + TIE_TOLERANCE)):
        odd = (f"; its width, not a multiple of 32, is rated at {IN_PLACE_ODD_WIDTH_EFFICIENCY:.2f} of the "
               f"tensor pipe's speed here (measured for 128-row tiles), not the model's "
               f"{DEFAULT_PARAMS.odd_width_efficiency:.2f}, which makes it the fastest of those"
               if best.candidate.wgmma_n % 32 else "")
        lines.append(f"{lead}, but the weight gradient accumulated in place makes a warpgroup with several "
                     f"sub-tiles wait for the TMA unit to read each out of its staging, and a 128-row one-buffer "
                     f"tile with one sub-tile per warpgroup within {ONE_SUBTILE_TOLERANCE:.0%} goes first{odd})")
    elif (one_m_block_rows(problem) and best.candidate.block_m >= problem.m > faster[0].candidate.block_m
          and best.time_s > faster[0].time_s * (1 + TIE_TOLERANCE)):
        lines.append(f"{lead}, but it splits M into several m-blocks, so two CTAs read each weight tile, and a "
                     f"candidate of one m-block and half its width within {ONE_M_BLOCK_TOLERANCE:.0%} goes first: each weight tile is "
                     f"then read once (selector._one_m_block_first))")
    elif ((best.candidate.block_m, best.candidate.block_n) == RING_TILE and plain_bf16(problem)
          and (faster[0].candidate.block_m, faster[0].candidate.block_n) in RING_TILE_OVER
          and best.time_s > faster[0].time_s * (1 + TIE_TOLERANCE)):
        lines.append(f"{lead}, but {RING_TILE[0]}x{RING_TILE[1]} tiles fit N exactly and run the stage ring as "
                     f"immediates, which the model does not see; within {RING_TILE_TOLERANCE:.0%} they go first: "
                     f"their WGMMAs, {RING_TILE[1]} wide, also read less shared memory per FLOP than the wider "
                     f"tiles' 128-wide parts (selector._ring_tile_first))")
    elif best.candidate.split_k > 1 and faster[0].bound == "latency" and faster[0].candidate.split_k == 1:
        lines.append(f"{lead}, but its k-loop is latency-bound, and a split-K candidate within "
                     f"{SPLIT_TOLERANCE:.0%} goes first: the model overprices halving that chain)")
    elif (best.candidate.split_k == 1 and faster[0].bound == "hbm" and faster[0].candidate.split_k > 1
          and best.time_s > faster[0].time_s * (1 + TIE_TOLERANCE)):
        lines.append(f"{lead}, but both stream HBM, and an unsplit candidate as wide as its B boxes need, on as "
                     f"many CTAs, within {UNSPLIT_TOLERANCE:.0%} goes first: the model credits the split for its "
                     f"shorter k-loop, which the stream hides)")
    else:
        lines.append(f"{lead}: predictions within {TIE_TOLERANCE:.1%} rank as ties, which go to simpler kernels "
                     f"(to split-K if latency-bound), then to smaller tiles, then to taller ones, or wider ones of "
                     f"at least 128x128 from {WIDE_TILE_MIN_K_BLOCKS} k-blocks per tile on)")
    return lines


def _output_words(problem) -> tuple:
    """The output variant as the problem line says it: the output's type (``"bf16"``, ``"fp32"``)
    and what else there is (``", plus C (bf16)"``, ``", accumulated in place (out += A.B^T)"``,
    ``", B scaled per row (1D1D)"`` for the dense 1D1D GEMM; ``""`` for none)."""
    extra = ""
    if problem.c_dtype == "out":
        extra += ", accumulated in place (out += A.B^T)"
    elif problem.c_dtype is not None:
        extra += f", plus C ({'fp32' if problem.c_dtype == 'float32' else 'bf16'})"
    if problem.b_scale_1d and problem.kind is not ProblemKind.K_GROUPED:
        extra += ", B scaled per row (1D1D)"
    return ("fp32" if problem.out_dtype == "float32" else "bf16"), extra


def _problem_line(problem) -> str:
    m, n, k = problem.shape
    out, extra = _output_words(problem)
    if not problem.kind.grouped:
        return f"problem: out[M, N] ({out}) = A[M, K] @ B[N, K]^T (fp8 e4m3){extra}, M={m} N={n} K={k}"
    g, e = problem.num_groups, problem.expected_m
    kind = problem.kind.short_name
    rows = {"contiguous": f"A[M={m}, K] with m_indices[M] (runs of 128-aligned rows per expert, -1 padding)",
            "masked": f"A[G, max_m={m}, K] with masked_m[G] real rows per expert, expected {e}",
            "offsets": f"A[M={m}, K] with offsets[G + 1] (unpadded runs of rows per expert)",
            "psum": f"A[M={m}, K] with expert_ends[G] (runs starting at the previous end rounded up to 128)"}[kind]
    variant = "" if out == "bf16" and not extra else f"; out ({out}){extra}"
    return (f"problem: {kind} grouped GEMM, G={g} experts of B[G, N={n}, K={k}] (fp8 e4m3), {rows}; "
            f"about {e} rows per expert (the selector's count){variant}")


def explain_text(problem, num_sms: int, max_smem: int = arch.MAX_SMEM_PER_BLOCK,
                 chip: ChipFacts = arch.DEFAULT_CHIP) -> str:
    """Multi-line report of the configuration chosen for ``problem`` (a
    :class:`deep_tile.gemm.problem.Problem`) on ``num_sms`` SMs.

    Covers the problem's work and floors on ``chip``, the config and its defines, the
    shared-memory breakdown against the limit, registers, the schedule, the model's prediction
    and what bounds it, and the closest runners-up with their predictions.

    Raises:
        TypeError: ``problem`` is not a Problem.
        ValueError: a size or ``num_sms`` is not a positive int, or ``chip`` is not a ChipFacts.
    """
    if not isinstance(chip, ChipFacts):
        raise ValueError(f"explain_text: chip must be a deep_tile.arch.ChipFacts; got {chip!r}")
    ranked = rank_candidates(problem, num_sms, max_smem, chip)
    best = ranked[0]
    cfg = config_from_estimate(problem, best, num_sms, chip).for_problem(problem)  # the output variant too
    lines = [_problem_line(problem) + f", {num_sms} SMs, chip {chip.name}"]
    # held at 3 by the kernel's copies of the k-loop, where the candidate's buffers and K range allow 6
    # (k_unroll_for without and with the tile width; with K fixed the config's own k_unroll says 3)
    buffers, k_blocks = best.candidate.accum_buffers, best.k_blocks_per_cta
    held_at_3 = k_unroll_for(buffers, k_blocks) > k_unroll_for(buffers, k_blocks, unroll_width(problem, best.candidate))
    lines += _config_lines(cfg, held_at_3, one_buffer_for_two_warpgroups(problem, best.candidate))
    if in_place_rows_along_m(problem, cfg, cfg.grid_size):
        lines.append(f"  raster along M (selector.in_place_rows_along_m): {cfg.grid_size} CTAs in bands of "
                     f"{RASTER_WIDTH} m-blocks work on {cfg.grid_size // RASTER_WIDTH} n-blocks at once, and N has "
                     f"{ceil_div(problem.n, cfg.block_n)}: the tiles in flight cover whole rows of the FP32 D they "
                     f"read and write back")
    lines += _smem_lines(cfg, max_smem)
    lines += _register_lines(cfg)
    lines += _model_lines(problem, best, chip)
    lines += _runner_up_lines(ranked, problem)
    return "\n".join(lines)
