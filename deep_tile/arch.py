"""Hopper (sm_90) hardware constants and per-chip facts, as plain data.

Leaf module: imports nothing from deep_tile and never touches a device. ``deep_tile.select`` reads
the kernel limits from here; ``deep_tile.device`` maps a device name to a :class:`ChipFacts`.

Sources: CUDA Programming Guide (compute capability 9.0 limits), NVIDIA H100/H200/H20 product
briefs (dense, i.e. non-sparse, tensor-core rates at boost clock), and docs/design.md section 3.1
(the kernel's own limits).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "MAX_SMEM_PER_BLOCK", "SMEM_PER_SM", "REGISTERS_PER_SM", "MAX_REGISTERS_PER_THREAD",
    "THREADS_PER_WARPGROUP", "BLOCK_K", "LEGAL_BLOCK_M", "LEGAL_BLOCK_N", "MAX_ACCUM_REGISTERS",
    "MAX_BLOCK_N", "SPILLS_WITHOUT_MULTICAST", "TILE_EFFICIENCY", "MULTICAST_EFFICIENCY",
    "COMPUTE_BOUND_INTENSITY",
    "CONSUMER_REGISTERS", "PRODUCER_REGISTERS", "MIN_STAGES", "MAX_STAGES", "LEGAL_MULTICAST",
    "ChipFacts", "CHIPS", "DEFAULT_CHIP", "chip_facts",
]

# Hardware limits of compute capability 9.0.
MAX_SMEM_PER_BLOCK = 232448
"""Maximum dynamic shared memory per block in bytes (227 KiB, ``sharedMemPerBlockOptin``)."""
SMEM_PER_SM = 233472
"""Shared memory per SM in bytes (228 KiB; 1 KiB of it is reserved per resident block)."""
REGISTERS_PER_SM = 65536
"""32-bit registers per SM (and per block)."""
MAX_REGISTERS_PER_THREAD = 255
"""Most registers one thread may use."""
THREADS_PER_WARPGROUP = 128
"""Four warps: the unit that issues one WGMMA."""

# The FP8 GEMM kernel's limits (docs/design.md section 3.1).
BLOCK_K = 128
"""Reduction depth of one pipeline stage: one 1x128 / 128x128 scale group."""
LEGAL_BLOCK_M = (64, 128, 256)
"""Tile heights the kernel supports (64 rows per WGMMA, one or two consumer warpgroups)."""
LEGAL_BLOCK_N = tuple(n for n in range(16, 257, 16) if n <= 128 or n - math.gcd(n, 128) <= 128)
"""Tile widths: multiples of 16 up to 256 whose b_scale span is at most two 128-wide blocks
(16..128, 144, 160, 192, 256). The register budget narrows this per block_m."""
MAX_ACCUM_REGISTERS = 168
"""Most accumulator registers per consumer thread (``wg_m * block_n / 64``)."""
MAX_BLOCK_N = {64: 144, 128: 160, 256: 64}
"""Widest tile per block_m that compiles without register spills (measured with ptxas 13.0 by
tools/check_kernels.sh; wider tiles fit the accumulator count but spill other live values)."""
SPILLS_WITHOUT_MULTICAST = frozenset()
"""(block_m, block_n) that compile spill-free only with 2-CTA multicast (measured, ptxas 13.0).
Empty since the b_scale straddle point became a compile-time constant (128x160 used to spill)."""
TILE_EFFICIENCY = {
    64: {16: 0.15, 32: 0.30, 48: 0.42, 64: 0.54, 80: 0.56, 96: 0.60, 112: 0.62, 128: 0.66, 144: 0.66},
    128: {16: 0.20, 32: 0.40, 48: 0.55, 64: 0.70, 80: 0.71, 96: 0.73, 112: 0.83, 128: 1.00, 144: 0.92,
          160: 0.965},
    256: {16: 0.25, 32: 0.45, 48: 0.58, 64: 0.91},
}
"""Per-tile throughput of each tile shape on a compute-bound problem, relative to 128x128, by
block_m and block_n: measured TFLOPS divided by the wave efficiency of the shape (busy tile
slots / all tile slots). Measured on an H200 (nvrtc 13.0; 4096x7168x16384 and 4096x7168x2048;
benchmarks/sweep_configs.py; 2026-11-22; 128x128 ran at 1221 TFLOPS); entries for 16, 48 and 80
wide and for 64x80/64x112 are interpolated, not measured. Power-of-two widths run faster than
their neighbours (64 and 128 in particular); the cause is not established."""
MULTICAST_EFFICIENCY = 0.95
"""Throughput of a 2-CTA multicast config relative to the same tile without multicast (measured
0.94-0.97 on the same H200 sweeps)."""
COMPUTE_BOUND_INTENSITY = 500
"""Problem intensity ``2MN / (M + N)`` (FLOP per byte of A and B) above which the selector ranks
by estimated compute time: between the H200 (412) and H100 (591) FP8 ridge points."""
"""(block_m, block_n) that compile spill-free only with 2-CTA multicast (measured, ptxas 13.0)."""
CONSUMER_REGISTERS = 232
"""Registers per consumer thread after ``setmaxnreg.inc`` (384 threads x 168 = 128x40 + 256x232)."""
PRODUCER_REGISTERS = 40
"""Registers per producer thread after ``setmaxnreg.dec``."""
MIN_STAGES = 3
"""Fewest pipeline stages the selector accepts (below this TMA latency is exposed)."""
MAX_STAGES = 8
"""Most pipeline stages the selector uses."""
LEGAL_MULTICAST = (1, 2)
"""Cluster sizes along the grid's x dimension."""


@dataclass(frozen=True)
class ChipFacts:
    """Headline numbers of one Hopper part, used by the roofline estimate of ``explain``.

    Attributes:
        name: marketing name, e.g. ``"H100 SXM"``.
        num_sms: streaming multiprocessors of the full part.
        hbm_bytes_per_s: peak HBM bandwidth in bytes per second.
        fp8_flops: dense FP8 tensor-core peak in FLOP/s.
        bf16_flops: dense BF16 tensor-core peak in FLOP/s.
        l2_bytes: L2 cache size in bytes.
    """

    name: str
    num_sms: int
    hbm_bytes_per_s: float
    fp8_flops: float
    bf16_flops: float
    l2_bytes: int

    @property
    def ridge_point(self) -> float:
        """FP8 FLOPs per HBM byte at which compute and memory time are equal."""
        return self.fp8_flops / self.hbm_bytes_per_s

    def fp8_flops_on(self, num_sms: int) -> float:
        """FP8 peak when only ``num_sms`` SMs work (scaled linearly, capped at the full chip)."""
        return self.fp8_flops * min(num_sms, self.num_sms) / self.num_sms


_MB = 1024 * 1024
CHIPS = {
    "H100 SXM": ChipFacts("H100 SXM", 132, 3.35e12, 1979e12, 989e12, 50 * _MB),
    "H100 PCIe": ChipFacts("H100 PCIe", 114, 2.0e12, 1513e12, 756e12, 50 * _MB),
    "H100 NVL": ChipFacts("H100 NVL", 132, 3.9e12, 1671e12, 835e12, 50 * _MB),
    "H800 SXM": ChipFacts("H800 SXM", 132, 3.35e12, 1979e12, 989e12, 50 * _MB),
    "H200": ChipFacts("H200", 132, 4.8e12, 1979e12, 989e12, 60 * _MB),
    "H20": ChipFacts("H20", 78, 4.0e12, 296e12, 148e12, 60 * _MB),
}
"""Known parts by key. H800 keeps H100's compute and memory (only NVLink is cut)."""

DEFAULT_CHIP = CHIPS["H100 SXM"]
"""The chip assumed when the device is unknown or absent."""

# (pattern on the upper-cased device name, CHIPS key); the first match wins, so the more
# specific names come first ("H100 PCIE" before "H100", "H200" before "H20").
_NAME_PATTERNS = (
    (r"H100.*PCIE", "H100 PCIe"),
    (r"H100.*NVL", "H100 NVL"),
    (r"H200", "H200"),
    (r"H800", "H800 SXM"),
    (r"\bH20\b", "H20"),
    (r"H100", "H100 SXM"),
)


def chip_facts(device_name: str) -> ChipFacts:
    """The :class:`ChipFacts` for a CUDA device name such as ``"NVIDIA H100 80GB HBM3"``.

    Matching is case-insensitive on the model number; GH200 maps to H200. Unknown names (and
    an empty name) fall back to :data:`DEFAULT_CHIP` (H100 SXM).

    Raises:
        TypeError: ``device_name`` is not a str.
    """
    if not isinstance(device_name, str):
        raise TypeError(f"chip_facts: device_name must be a str; got {type(device_name).__name__}")
    upper = device_name.upper()
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, upper):
            return CHIPS[key]
    return DEFAULT_CHIP
