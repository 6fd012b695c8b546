"""The lightning indexer's logits kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/mqa_logits.cu`` computes DeepGEMM's ``fp8_mqa_logits`` (no defines),
``logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(q[i, h] . kv[j])`` for ``j`` in
``[ks[i], ke[i])``, writing ``-inf`` elsewhere when asked, in two designs with one symbol per head
count each:

- ``"cuda_core"`` (include/deep_tile/kernels/mqa_logits.cuh): float32 dot products on CUDA cores,
  128 kv rows and 256 threads per CTA;
- ``"wgmma"`` (include/deep_tile/kernels/mqa_logits_wgmma.cuh): FP8 m64n128k32 wgmmas, 128 kv rows
  and two warpgroups (64 rows each) per CTA, ``128 / H`` query rows per step.

:data:`DESIGN` is the one :func:`deep_tile.fp8_mqa_logits` launches (read at each call; the tests
and the benchmark set it to run the other). Pure Python.
"""
from __future__ import annotations

from deep_tile.common import align_up, ceil_div

__all__ = ["ENTRY", "HEAD_DIM", "HEADS", "DESIGNS", "DESIGN", "BLOCK_KV", "BLOCK_THREADS", "WGMMA_N",
           "MAX_ROWS_PER_CTA", "CTAS_PER_SM_TARGET", "MAX_GRID_Y", "ARGUMENT_KINDS", "symbol", "rows_step",
           "rows_per_cta", "grid"]

ENTRY = "mqa_logits"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
HEAD_DIM = 128
"""The one head dimension the kernels take."""
HEADS = (32, 64)
"""Head counts with a kernel symbol (DeepGEMM's SM90 kernel takes the same two)."""
DESIGNS = ("cuda_core", "wgmma")
"""The kernel designs (module doc)."""
DESIGN = "wgmma"
"""The design :func:`deep_tile.fp8_mqa_logits` launches: FP8 wgmma, the faster (docs/design.md §3.3)."""
BLOCK_KV = {"cuda_core": 128, "wgmma": 128}
"""kv rows per CTA (``kMqaBlockKV``, ``kMqaWgmmaBlockKV``): the grid's x dimension covers ``seq_len_kv``."""
BLOCK_THREADS = {"cuda_core": 256, "wgmma": 256}
"""Threads per CTA (``kMqaThreads``: two per kv row; ``kMqaWgmmaThreads``: two warpgroups)."""
WGMMA_N = 128
"""Query rows x heads per wgmma step (``kMqaWgmmaN``): a step takes ``WGMMA_N / H`` query rows."""
MAX_ROWS_PER_CTA = 16
"""The most query rows one CTA takes (before the grid-limit rule): more reuse of its kv rows, less
balance under causal ranges."""
CTAS_PER_SM_TARGET = 8
"""CTAs per SM the query split aims for before it stops splitting (a full wave several times over)."""
MAX_GRID_Y = 65535
"""The CUDA limit on a grid's y dimension (query-row blocks)."""
ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "ptr", "i32", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the parameters (both designs): (q, kv,
kv_scales, weights, weights_stride, ks, ke, logits, seq_len, seq_len_kv, stride_logits,
rows_per_cta, clean, compressed_cols)."""


def _design(design) -> str:
    design = DESIGN if design is None else design
    if design not in DESIGNS:
        raise ValueError(f"mqa_logits: unknown design {design!r}; the designs are {DESIGNS}.")
    return design


def symbol(num_heads: int, design: str | None = None) -> str:
    """The kernel of ``num_heads`` heads (one of :data:`HEADS`) in ``design`` (default :data:`DESIGN`)."""
    design = _design(design)
    if num_heads not in HEADS:
        raise ValueError(f"mqa_logits: no kernel for {num_heads} heads; the kernels take {HEADS}.")
    return f"deep_tile_mqa_logits_{'wgmma_' if design == 'wgmma' else ''}h{num_heads}"


def rows_step(num_heads: int, design: str | None = None) -> int:
    """Query rows a CTA takes at a time: ``rows_per_cta`` is a multiple of it."""
    return WGMMA_N // num_heads if _design(design) == "wgmma" else 1


def rows_per_cta(seq_len: int, seq_len_kv: int, num_sms: int, num_heads: int = 64, design: str | None = None) -> int:
    """Query rows per CTA: split the rows until the grid has about CTAS_PER_SM_TARGET CTAs per SM,
    at most MAX_ROWS_PER_CTA rows each, a multiple of :func:`rows_step`, and few enough blocks for
    the grid's y limit."""
    design = _design(design)
    step = rows_step(num_heads, design)
    kv_blocks = max(1, ceil_div(seq_len_kv, BLOCK_KV[design]))
    row_blocks = ceil_div(CTAS_PER_SM_TARGET * max(1, num_sms), kv_blocks)
    rows = max(1, min(MAX_ROWS_PER_CTA, ceil_div(max(1, seq_len), row_blocks)))
    rows = max(rows, ceil_div(seq_len, MAX_GRID_Y))  # the grid's y dimension stops at 65535
    return align_up(rows, step)


def grid(seq_len: int, seq_len_kv: int, rows: int, design: str | None = None) -> tuple:
    """(x, y, z): kv blocks by query-row blocks of ``rows`` (at least one each)."""
    return (max(1, ceil_div(seq_len_kv, BLOCK_KV[_design(design)])), max(1, ceil_div(seq_len, rows)), 1)
