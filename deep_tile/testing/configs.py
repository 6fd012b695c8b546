"""A compact text form of forced kernel configurations, for sweeps, tools and tests.

``BMxBN`` followed by ``:``-separated options, e.g. ``256x128:mcA``, ``64x64:k4:b2``,
``128x256:w128:s3``:

- ``sN``: pipeline stages (default: as many as fit, up to 16);
- ``mcA`` / ``mcB``: 2-CTA multicast of A or B;
- ``kN``: split-K over N CTAs;
- ``b1`` / ``b2``: WGMMA accumulator buffers (default: the selector's choice for the tile);
- ``wN``: columns per WGMMA (default: the selector's choice for the tile);
- ``gN``: raster band width (default 8);
- ``gM``: raster bands along M (consecutive tiles share an n-block; implied by ``mcB``);
- ``ef``: B loaded evict-first and A evict-last in L2 (``KernelConfig.evict_first_b``);
- ``uN``: k-blocks per unrolled body of the one-buffer k-loop (``KernelConfig.k_unroll``, default 3);
- ``pN``: the FP8 maps' L2 promotion in bytes, 0, 64, 128 or 256 (``KernelConfig.l2_promotion``,
  default 256);
- ``swN``: swap-AB with N (8 or 16) token columns per WGMMA (``KernelConfig.swap_n``; M <= N);
- ``kbN``: N K blocks fixed at compile time (``KernelConfig.static_k_blocks``; the problem's
  ``ceil(K / 128)``);
- ``ring``: with ``kbN`` a multiple of the stages, the stage ring as immediates
  (``KernelConfig.static_ring``).
"""
from __future__ import annotations

from deep_tile import arch
from deep_tile.common import ceil_div
from deep_tile.kernels.fp8_gemm import DEFAULT_L2_PROMOTION, kind_of_code
from deep_tile.select.candidates import kernel_shape, max_stages
from deep_tile.select.config import RASTER_WIDTH, KernelConfig
from deep_tile.select.cost import grid_size

__all__ = ["parse_config", "format_config", "defines_label"]


def parse_config(text: str, m: int, n: int, num_sms: int, **fields_of_kind) -> KernelConfig:
    """The :class:`KernelConfig` that ``text`` describes for an ``m x n`` output on ``num_sms`` SMs;
    ``fields_of_kind``: more fields, set when the config is made (e.g. ``problem_kind``,
    ``staged_epilogue`` and ``num_stages`` for a tile only the K-grouped staged epilogue takes).

    Raises:
        ValueError: malformed text, or a configuration the kernel cannot build.
    """
    head, *options = text.split(":")
    try:
        block_m, block_n = (int(v) for v in head.split("x"))
    except ValueError:
        raise ValueError(f"parse_config: expected BMxBN[:options]; got {text!r}") from None
    fields = {"num_multicast": 1, "multicast_on_a": False, "split_k": 1, "raster_width": RASTER_WIDTH}
    shape = kernel_shape(block_m, block_n) or (block_n, 1)
    fields["wgmma_n"], fields["accum_buffers"] = shape
    stages = None
    for option in options:
        kind, value = option[:1], option[1:]
        if option in ("mcA", "mcB"):
            fields["num_multicast"], fields["multicast_on_a"] = 2, option == "mcA"
        elif option == "gM":
            fields["raster_along_m"] = True
        elif option == "ef":
            fields["evict_first_b"] = True
        elif option.startswith("sw") and option[2:].isdigit():
            fields["swap_n"] = int(option[2:])
        elif option == "ring":
            fields["static_ring"] = True
        elif option.startswith("kb") and option[2:].isdigit():
            fields["static_k_blocks"] = int(option[2:])
        elif kind in "skbwgup" and value.isdigit():
            key = {"s": None, "k": "split_k", "b": "accum_buffers", "w": "wgmma_n", "g": "raster_width",
                   "u": "k_unroll", "p": "l2_promotion"}[kind]
            if key is None:
                stages = int(value)
            else:
                fields[key] = int(value)
        else:
            raise ValueError(f"parse_config: unknown option {option!r} in {text!r}")
    if stages is None:
        stages = max_stages(block_m, block_n, arch.MAX_SMEM_PER_BLOCK, fields["split_k"])
    grid = grid_size(ceil_div(m, block_m) * ceil_div(n, block_n), num_sms, fields["num_multicast"])
    return KernelConfig(**{"block_m": block_m, "block_n": block_n, "num_stages": stages, "grid_size": grid, **fields,
                           **fields_of_kind})


def format_config(config: KernelConfig) -> str:
    """The text form of ``config`` (every option spelled out except the default band width, RASTER_WIDTH)."""
    text = f"{config.block_m}x{config.block_n}:s{config.num_stages}:b{config.accum_buffers}:w{config.wgmma_n}"
    if config.num_multicast == 2:
        text += ":mcA" if config.multicast_on_a else ":mcB"
    if config.split_k > 1:
        text += f":k{config.split_k}"
    if config.raster_width != RASTER_WIDTH:
        text += f":g{config.raster_width}"
    if config.raster_along_m and config.num_multicast == 1:
        text += ":gM"
    if config.evict_first_b:
        text += ":ef"
    if config.k_unroll != 3:
        text += f":u{config.k_unroll}"
    if config.l2_promotion != DEFAULT_L2_PROMOTION:
        text += f":p{config.l2_promotion}"
    if config.swap_n:
        text += f":sw{config.swap_n}"
    if config.static_k_blocks:
        text += f":kb{config.static_k_blocks}"
    if config.static_ring:
        text += ":ring"
    return text


def defines_label(defines: dict) -> str:
    """A compact, file-name-safe label of a GEMM kernel's defines, e.g. ``128x144s5b1w144mcAefu6``
    (tile, stages, buffers, WGMMA width, then ``mcA``/``mcB``, ``gM``, ``kN``, ``rm``, ``ef``,
    ``uN``, ``swN``, ``kbN``, ``ring`` where they differ from the default, then the grouped kind, then the output
    variant: ``1d`` (1D1D), ``o32`` (FP32 out), ``c16``/``c32``/``cD`` (C bf16, FP32, D itself)): test ids and
    tools/sass_diff.py's file names."""
    d = defines
    text = f"{d['DT_BLOCK_M']}x{d['DT_BLOCK_N']}s{d['DT_NUM_STAGES']}b{d['DT_ACCUM_BUFFERS']}w{d['DT_WGMMA_N']}"
    if d["DT_NUM_MULTICAST"] == 2:
        text += "mcA" if d["DT_MULTICAST_ON_A"] else "mcB"
    elif d.get("DT_RASTER_ALONG_M", 0):
        text += "gM"
    if d["DT_SPLIT_K"] > 1:
        text += f"k{d['DT_SPLIT_K']}"
    if d["DT_A_SCALE_ROW_MAJOR"]:
        text += "rm"
    if d["DT_EVICT_FIRST_B"]:
        text += "ef"
    if d.get("DT_K_UNROLL", 3) != 3:
        text += f"u{d['DT_K_UNROLL']}"
    if d.get("DT_SWAP_N", 0):
        text += f"sw{d['DT_SWAP_N']}"
    if d.get("DT_STATIC_K_BLOCKS", 0):
        text += f"kb{d['DT_STATIC_K_BLOCKS']}"
    if d.get("DT_STATIC_RING", 0):
        text += "ring"
    code = d.get("DT_PROBLEM_KIND", 0)
    if code:
        text += kind_of_code(code).short_name
    if d.get("DT_B_SCALE_1D", 0):
        text += "1d"
    if d.get("DT_OUT_KIND", 0):
        text += "o32"
    text += {0: "", 1: "c16", 2: "c32", 3: "cD"}[d.get("DT_C_KIND", 0)]
    return text
