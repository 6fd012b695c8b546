"""The BF16 GEMMs' kernel contract: entry file, symbol, defines, shared memory, tile rule, arguments.

``csrc/entry/bf16_gemm.cu`` (include/deep_tile/kernels/bf16_gemm.cuh) computes
``D[m, n] (+)= sum_k A[m, k] B[n, k]`` with float32 accumulation, one kernel for every layout:
``Bf16Config.major_a`` / ``major_b`` say whether A / B is K-major (``"k"``: unit stride along k)
or MN-major (``"mn"``: unit stride along m / n), read through the BF16 wgmma's transpose
immediates (no transposing copies). Tiles are 128 x ``block_n`` (two consumer warpgroups of 64
rows), ``BLOCK_K`` = 64, one producer warpgroup, persistent CTAs. Pure Python.
"""
from __future__ import annotations

from dataclasses import dataclass

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "SYMBOL", "THREADS", "BLOCK_M", "BLOCK_K", "BLOCK_NS", "MAJORS", "GEMM_TYPES",
           "SMEM_LIMIT", "ARGUMENT_KINDS", "Bf16Config", "stages_for", "smem_bytes", "select_block_n", "grid"]

ENTRY = "bf16_gemm"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
SYMBOL = "deep_tile_bf16_gemm"
THREADS = 384
"""A producer warpgroup and two consumer warpgroups (``Bf16GemmConfig::kThreads``)."""
BLOCK_M = 128
BLOCK_K = 64
BLOCK_NS = (64, 128, 256)
MAJORS = ("k", "mn")
GEMM_TYPES = {"normal": 0, "contiguous": 1, "masked": 2, "k_grouped": 3}
"""``Bf16GemmType``: the dense GEMM, the M-grouped contiguous (m_indices) and masked (masked_m) GEMMs,
the K-grouped GEMM (each group's k rows, float32 D accumulated)."""
K_GROUP_ALIGNMENT = 128
"""The K-grouped GEMM's group sizes are multiples of this (DeepGEMM's SM90 alignment; the kernel needs BLOCK_K)."""
SMEM_LIMIT = 227 * 1024
MAX_STAGES = 8
SMEM_BUDGET = 200 * 1024
"""Bytes of operand stages a configuration aims for (4 stages of 128 x 256, 6 of 128 x 128, 8 of 128 x 64)."""
ARGUMENT_KINDS = ("tensormap", "tensormap", "tensormap", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32")
"""(tmap_a, tmap_b, tmap_d, d, layout, m, n, k, ldd, num_groups); tmap_d is read only with ``tma_store``."""
STORE_BYTES = 2 * 2 * 64 * 128
"""``tma_store``'s staging: two 64 x 64 bf16 boxes per consumer warpgroup."""
STORE_BOX = (64, 64)
"""D's TMA box (columns, rows): 128 bytes of bf16 by one warpgroup's rows."""


def stage_bytes(block_n: int) -> int:
    return (BLOCK_M + block_n) * BLOCK_K * 2


def stages_for(block_n: int) -> int:
    """The ring's depth for ``block_n``: as many stages as SMEM_BUDGET holds, at most MAX_STAGES."""
    return min(MAX_STAGES, SMEM_BUDGET // stage_bytes(block_n))


def smem_bytes(block_n: int, stages: int, tma_store: bool = False) -> int:
    """Dynamic shared memory: the stages, ``tma_store``'s staging, 2 mbarriers per stage
    (``Bf16GemmConfig::kSmemBytes``)."""
    return stages * stage_bytes(block_n) + (STORE_BYTES if tma_store else 0) + 16 * stages


@dataclass(frozen=True)
class Bf16Config:
    """One kernel instance (``Bf16GemmConfig``'s eight template parameters)."""

    major_a: str = "k"
    major_b: str = "k"
    block_n: int = 256
    stages: int = 0  # 0: stages_for(block_n)
    out_f32: bool = False
    accumulate: bool = False
    gemm_type: str = "normal"
    tma_store: bool = False

    def __post_init__(self):
        if self.major_a not in MAJORS or self.major_b not in MAJORS:
            raise ValueError(f"bf16_gemm: majors must be in {MAJORS}, got {self.major_a!r}, {self.major_b!r}.")
        if self.block_n not in BLOCK_NS:
            raise ValueError(f"bf16_gemm: block_n must be in {BLOCK_NS}, got {self.block_n}.")
        if self.gemm_type not in GEMM_TYPES:
            raise ValueError(f"bf16_gemm: gemm_type must be in {tuple(GEMM_TYPES)}, got {self.gemm_type!r}.")
        if self.gemm_type in ("contiguous", "masked") and (self.major_a != "k" or self.out_f32 or self.accumulate):
            raise ValueError("bf16_gemm: the M-grouped kernels take a K-major A and write bf16 without accumulation.")
        if self.gemm_type == "k_grouped" and not (self.out_f32 and self.accumulate and not self.tma_store):
            raise ValueError("bf16_gemm: the K-grouped kernel accumulates into float32 d (no TMA stores).")
        if self.tma_store and (self.out_f32 or self.accumulate or self.gemm_type == "masked"):
            raise ValueError("bf16_gemm: tma_store takes a bf16 d without accumulation, not the masked GEMM.")
        if not self.stages:
            object.__setattr__(self, "stages", stages_for(self.block_n))
        if self.stages < 2 or smem_bytes(self.block_n, self.stages, self.tma_store) > SMEM_LIMIT:
            raise ValueError(f"bf16_gemm: {self.stages} stages of block_n {self.block_n} do not fit shared memory.")

    @property
    def smem(self) -> int:
        return smem_bytes(self.block_n, self.stages, self.tma_store)

    def defines(self) -> dict:
        return {"DT_BF16_MAJOR_A": int(self.major_a == "mn"), "DT_BF16_MAJOR_B": int(self.major_b == "mn"),
                "DT_BF16_BLOCK_N": self.block_n, "DT_BF16_STAGES": self.stages,
                "DT_BF16_OUT_F32": int(self.out_f32), "DT_BF16_ACCUMULATE": int(self.accumulate),
                "DT_BF16_GEMM_TYPE": GEMM_TYPES[self.gemm_type], "DT_BF16_TMA_STORE": int(self.tma_store),
                "DT_BF16_SMEM_BYTES": self.smem,
                "DT_BF16_THREADS": THREADS}

    @property
    def label(self) -> str:
        return (f"bf16 {self.gemm_type} a:{self.major_a} b:{self.major_b} 128x{self.block_n} s{self.stages}"
                f"{' f32' if self.out_f32 else ''}{' acc' if self.accumulate else ''}{' tma-store' if self.tma_store else ''}")


def select_block_n(m_blocks: int, n: int, num_sms: int) -> int:
    """The tile width: the fewest predicted time units, ``waves * (block_n + 64)`` (a wave of
    128 x block_n tiles costs about its width plus a fixed part for A and the epilogue), so small-M
    problems take narrow tiles (more CTAs streaming B) and large ones 128 x 256."""
    best, best_cost = BLOCK_NS[-1], None
    for block_n in reversed(BLOCK_NS):
        tiles = max(1, m_blocks) * ceil_div(max(1, n), block_n)
        cost = ceil_div(tiles, max(1, num_sms)) * (block_n + 64)
        if best_cost is None or cost < best_cost:
            best, best_cost = block_n, cost
    return best


def grid(tiles: int, num_sms: int) -> int:
    """Persistent CTAs: one per SM, no more than the tiles (at least one)."""
    return max(1, min(tiles, num_sms))
