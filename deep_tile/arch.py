"""Hopper (sm_90) hardware constants and per-chip facts, as plain data.

Leaf module: imports nothing from deep_tile and never touches a device. ``deep_tile.select`` reads
the kernel limits from here; ``deep_tile.device`` maps a device name to a :class:`ChipFacts`.

Sources: CUDA Programming Guide (compute capability 9.0 limits), NVIDIA H100/H200/H20 product
briefs (dense, i.e. non-sparse, tensor-core rates at boost clock), and docs/design.md section 3.1
(the kernel's own limits).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MAX_SMEM_PER_BLOCK", "SMEM_PER_SM", "REGISTERS_PER_SM", "MAX_REGISTERS_PER_THREAD",
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
        max_clusters: clusters of 1, 2, ..., 8 CTAs that can be resident at once when each CTA
            fills an SM (clusters stay inside a GPC, so sizes that do not divide a GPC's SM
            count leave SMs idle); None where not measured (then ``num_sms // size``).
        stream_l2_promotion: bytes an L2 miss fetches (tensor-map L2 promotion) that measured
            fastest for a GEMM streaming its weights (``KernelConfig.l2_promotion``, chosen by
            :func:`deep_tile.select.selector.l2_promotion_for`); 256 where not measured.
    """

    name: str
    num_sms: int
    hbm_bytes_per_s: float
    fp8_flops: float
    bf16_flops: float
    l2_bytes: int
    max_clusters: tuple | None = None
    stream_l2_promotion: int = 256

    @property
    def ridge_point(self) -> float:
        """FP8 FLOPs per HBM byte at which compute and memory time are equal."""
        return self.fp8_flops / self.hbm_bytes_per_s

    def resident_clusters(self, size: int, num_sms: int | None = None) -> int:
        """Clusters of ``size`` CTAs (one per SM) that fit at once, with at most ``num_sms`` SMs used."""
        limit = self.num_sms if num_sms is None else min(num_sms, self.num_sms)
        measured = self.max_clusters[size - 1] if self.max_clusters and size <= len(self.max_clusters) else None
        fit = self.num_sms // size if measured is None else measured
        return max(0, min(fit, limit // size))

    def fp8_flops_on(self, num_sms: int) -> float:
        """FP8 peak when only ``num_sms`` SMs work (scaled linearly, capped at the full chip)."""
        return self.fp8_flops * min(num_sms, self.num_sms) / self.num_sms


_MB = 1024 * 1024
_GH100_132_CLUSTERS = (132, 66, 39, 30, 22, 17, 15, 15)
"""Resident clusters of 1..8 one-SM CTAs on a 132-SM GH100 (cuOccupancyMaxActiveClusters on an H100 SXM,
tools/explore_overheads.py), assumed for the H200 and H800 (same die; the enabled SMs per GPC can differ
between parts). Clusters stay inside a GPC: 33 clusters of 4 do not fit at once, so 64x64 tiles split 4 ways
(33 clusters) ran slower than split 3 ways."""
CHIPS = {
    "H100 SXM": ChipFacts("H100 SXM", 132, 3.35e12, 1979e12, 989e12, 50 * _MB, _GH100_132_CLUSTERS),
    "H100 PCIe": ChipFacts("H100 PCIe", 114, 2.0e12, 1513e12, 756e12, 50 * _MB),
    "H100 NVL": ChipFacts("H100 NVL", 132, 3.9e12, 1671e12, 835e12, 50 * _MB),
    "H800 SXM": ChipFacts("H800 SXM", 132, 3.35e12, 1979e12, 989e12, 50 * _MB, _GH100_132_CLUSTERS),
    "H200": ChipFacts("H200", 132, 4.8e12, 1979e12, 989e12, 60 * _MB, _GH100_132_CLUSTERS, stream_l2_promotion=128),
    "H20": ChipFacts("H20", 78, 4.0e12, 296e12, 148e12, 60 * _MB),
}
"""Known parts by key. H800 keeps H100's compute and memory (only NVLink is cut). The H200's
stream_l2_promotion: 128-byte promotion shortens its decode chains, where the H100 gained nothing
(deep_tile.select.selector.l2_promotion_for)."""

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
