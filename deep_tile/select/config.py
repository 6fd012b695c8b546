"""``KernelConfig``: one instance of the FP8 GEMM kernel plus its launch grid.

The fields map one-to-one onto the kernel's compile-time defines (docs/design.md section 3.1)
and its runtime launch parameters (grid size, swizzle group width). Everything else (shared
memory, threads, registers) is derived, so a config cannot disagree with itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from deep_tile import arch

__all__ = ["KernelConfig", "smem_breakdown", "smem_bytes", "accum_registers", "math_warpgroups"]


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def math_warpgroups(block_m: int) -> int:
    """Consumer warpgroups of a tile ``block_m`` rows high: 1 for 64 rows, else 2."""
    return 1 if block_m == 64 else 2


def accum_registers(block_m: int, block_n: int) -> int:
    """Accumulator registers per consumer thread: ``wg_m * block_n / 64`` (WGMMA + FP32 result)."""
    wg_m = block_m // math_warpgroups(block_m)
    return wg_m * block_n // 64


def smem_breakdown(block_m: int, block_n: int, num_stages: int) -> dict:
    """Shared-memory bytes per region, in kernel layout order (docs/design.md section 3.1).

    Returns a dict with keys ``d_staging``, ``a_stages``, ``b_stages``, ``a_scale_stages``,
    ``barriers`` and ``total``.
    """
    parts = {
        "d_staging": _align(block_m * block_n * 2, 1024),
        "a_stages": num_stages * block_m * arch.BLOCK_K,
        "b_stages": num_stages * block_n * arch.BLOCK_K,
        "a_scale_stages": num_stages * block_m * 4,
        "barriers": num_stages * 2 * 8,
    }
    parts["total"] = sum(parts.values())
    return parts


def smem_bytes(block_m: int, block_n: int, num_stages: int) -> int:
    """Total dynamic shared memory in bytes of a ``block_m x block_n`` tile with ``num_stages``."""
    return smem_breakdown(block_m, block_n, num_stages)["total"]


def _check_int(name: str, value, allowed: str, ok: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not ok:
        raise ValueError(f"KernelConfig: {name} must be {allowed}; got {value!r}")


@dataclass(frozen=True, kw_only=True)
class KernelConfig:
    """A fully specified FP8 GEMM kernel configuration (keyword-only construction).

    Attributes:
        block_m: tile rows, 64, 128 or 256.
        block_n: tile columns, a multiple of 16 in 16..256 that passes the b_scale straddle rule
            (``block_n <= 128`` or ``block_n - gcd(block_n, 128) <= 128``) and the register rule.
        block_k: reduction depth per stage; always 128.
        num_stages: depth of the TMA pipeline (at least 1; the selector uses 3..8).
        num_multicast: CTAs per cluster, 1 or 2.
        multicast_on_a: with ``num_multicast == 2``, the cluster shares the A tile (same m-block,
            adjacent n-blocks) if True, else the B tile. Forced to False when ``num_multicast == 1``.
        num_math_warpgroups: consumer warpgroups; derived from block_m when left as None.
        group_size: width in tiles of a swizzle group of the persistent schedule (even, >= 2).
        num_sms: persistent grid size (CTAs launched); even when ``num_multicast == 2``.

    Raises:
        ValueError: any field is out of range or inconsistent (the message names it).
    """

    block_m: int
    block_n: int
    block_k: int = arch.BLOCK_K
    num_stages: int
    num_multicast: int = 1
    multicast_on_a: bool = False
    num_math_warpgroups: Optional[int] = None
    group_size: int = 16
    num_sms: int

    def __post_init__(self):
        _check_int("block_m", self.block_m, f"one of {arch.LEGAL_BLOCK_M}", self.block_m in arch.LEGAL_BLOCK_M)
        _check_int("block_n", self.block_n, f"one of {arch.LEGAL_BLOCK_N} (multiple of 16, b_scale straddle rule)",
                   self.block_n in arch.LEGAL_BLOCK_N)
        _check_int("block_k", self.block_k, str(arch.BLOCK_K), self.block_k == arch.BLOCK_K)
        _check_int("num_stages", self.num_stages, "an int >= 1",
                   isinstance(self.num_stages, int) and self.num_stages >= 1)
        _check_int("num_multicast", self.num_multicast, f"one of {arch.LEGAL_MULTICAST}",
                   self.num_multicast in arch.LEGAL_MULTICAST)
        if not isinstance(self.multicast_on_a, bool):
            raise ValueError(f"KernelConfig: multicast_on_a must be a bool; got {self.multicast_on_a!r}")
        if self.num_multicast == 1:
            object.__setattr__(self, "multicast_on_a", False)
        expected_wg = math_warpgroups(self.block_m)
        if self.num_math_warpgroups is None:
            object.__setattr__(self, "num_math_warpgroups", expected_wg)
        _check_int("num_math_warpgroups", self.num_math_warpgroups,
                   f"{expected_wg} for block_m={self.block_m}", self.num_math_warpgroups == expected_wg)
        _check_int("group_size", self.group_size, "an even int >= 2",
                   isinstance(self.group_size, int) and self.group_size >= 2 and self.group_size % 2 == 0)
        _check_int("num_sms", self.num_sms, "an int >= 1", isinstance(self.num_sms, int) and self.num_sms >= 1)
        if self.num_multicast == 2 and self.num_sms % 2:
            raise ValueError(f"KernelConfig: num_sms must be even when num_multicast == 2 "
                             f"(clusters of 2 CTAs); got {self.num_sms}")
        if self.accum_registers > arch.MAX_ACCUM_REGISTERS:
            raise ValueError(f"KernelConfig: block_m x block_n = {self.block_m}x{self.block_n} needs "
                             f"{self.accum_registers} accumulator registers per consumer thread; "
                             f"the budget is {arch.MAX_ACCUM_REGISTERS}")
        if self.block_n > arch.MAX_BLOCK_N[self.block_m]:
            raise ValueError(f"KernelConfig: block_n must be <= {arch.MAX_BLOCK_N[self.block_m]} for "
                             f"block_m={self.block_m} (wider tiles spill registers); got {self.block_n}")
        if (self.block_m, self.block_n) in arch.SPILLS_WITHOUT_MULTICAST and self.num_multicast == 1:
            raise ValueError(f"KernelConfig: a {self.block_m}x{self.block_n} tile needs num_multicast=2 "
                             "(without multicast it spills registers); got num_multicast=1")
        if self.smem_bytes > arch.MAX_SMEM_PER_BLOCK:
            raise ValueError(f"KernelConfig: num_stages={self.num_stages} with a {self.block_m}x{self.block_n} "
                             f"tile needs {self.smem_bytes} bytes of shared memory; the sm_90 limit is "
                             f"{arch.MAX_SMEM_PER_BLOCK}")

    @property
    def wg_m(self) -> int:
        """Rows of the tile owned by one consumer warpgroup (64 or 128)."""
        return self.block_m // self.num_math_warpgroups

    @property
    def num_threads(self) -> int:
        """Threads per CTA: one producer warpgroup plus the consumer warpgroups."""
        return arch.THREADS_PER_WARPGROUP * (1 + self.num_math_warpgroups)

    @property
    def accum_registers(self) -> int:
        """Accumulator registers per consumer thread (must stay <= 168)."""
        return accum_registers(self.block_m, self.block_n)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory in bytes, by the layout of docs/design.md section 3.1."""
        return smem_bytes(self.block_m, self.block_n, self.num_stages)

    def smem_breakdown(self) -> dict:
        """Bytes per shared-memory region (see :func:`smem_breakdown`)."""
        return smem_breakdown(self.block_m, self.block_n, self.num_stages)

    @property
    def label(self) -> str:
        """Short name for tables and logs, e.g. ``"128x160 s5 mcA"`` (``mcB`` / nothing)."""
        multicast = "" if self.num_multicast == 1 else (" mcA" if self.multicast_on_a else " mcB")
        return f"{self.block_m}x{self.block_n} s{self.num_stages}{multicast}"

    def defines(self) -> dict:
        """The kernel's compile-time defines: ``{"DT_BLOCK_M": 128, ...}`` (all ints)."""
        return {
            "DT_BLOCK_M": self.block_m,
            "DT_BLOCK_N": self.block_n,
            "DT_NUM_STAGES": self.num_stages,
            "DT_NUM_MULTICAST": self.num_multicast,
            "DT_MULTICAST_ON_A": int(self.multicast_on_a),
        }

    def tile_counts(self, m: int, n: int) -> tuple:
        """``(m_blocks, n_blocks)``: tiles along M and N for an ``m x n`` output."""
        return math.ceil(m / self.block_m), math.ceil(n / self.block_n)
