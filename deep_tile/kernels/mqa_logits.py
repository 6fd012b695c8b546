"""The lightning indexer's logits kernels' contract: entry file, symbols, launch geometry, arguments.

``csrc/entry/mqa_logits.cu`` holds one kernel per head count (no defines):
``deep_tile_mqa_logits_h<H>`` computes DeepGEMM's ``fp8_mqa_logits`` on CUDA cores,
``logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(q[i, h] . kv[j])`` for ``j`` in
``[ks[i], ke[i])``, writing ``-inf`` elsewhere when asked (include/deep_tile/kernels/mqa_logits.cuh
says how the work is split). Pure Python.
"""
from __future__ import annotations

from deep_tile.common import ceil_div

__all__ = ["ENTRY", "HEAD_DIM", "HEADS", "BLOCK_KV", "BLOCK_THREADS", "MAX_ROWS_PER_CTA", "CTAS_PER_SM_TARGET",
           "MAX_GRID_Y",
           "ARGUMENT_KINDS", "symbol", "rows_per_cta", "grid"]

ENTRY = "mqa_logits"
"""Kernel entry file: ``csrc/entry/<ENTRY>.cu``."""
HEAD_DIM = 128
"""The one head dimension the kernels take (``kMqaHeadDim``)."""
HEADS = (32, 64)
"""Head counts with a kernel symbol (DeepGEMM's SM90 kernel takes the same two)."""
BLOCK_KV = 128
"""kv rows per CTA (``kMqaBlockKV``): the grid's x dimension covers ``seq_len_kv`` in these."""
BLOCK_THREADS = 256
"""Threads per CTA (``kMqaThreads``, two per kv row; the kernels' ``__launch_bounds__``)."""
MAX_ROWS_PER_CTA = 16
"""The most query rows one CTA takes: more reuse of its kv rows, less balance under causal ranges."""
CTAS_PER_SM_TARGET = 8
"""CTAs per SM the query split aims for before it stops splitting (a full wave several times over)."""
MAX_GRID_Y = 65535
"""The CUDA limit on a grid's y dimension (query-row blocks)."""
ARGUMENT_KINDS = ("ptr", "ptr", "ptr", "ptr", "i32", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", "i32", "i32")
"""The :class:`deep_tile.jit.runtime.KernelArgs` kinds of the parameters: (q, kv, kv_scales,
weights, weights_stride, ks, ke, logits, seq_len, seq_len_kv, stride_logits, rows_per_cta, clean,
compressed_cols)."""


def symbol(num_heads: int) -> str:
    """The kernel of ``num_heads`` heads (one of :data:`HEADS`)."""
    if num_heads not in HEADS:
        raise ValueError(f"mqa_logits: no kernel for {num_heads} heads; the kernels take {HEADS}.")
    return f"deep_tile_mqa_logits_h{num_heads}"


def rows_per_cta(seq_len: int, seq_len_kv: int, num_sms: int) -> int:
    """Query rows per CTA: split the rows until the grid has about CTAS_PER_SM_TARGET CTAs per SM,
    at most MAX_ROWS_PER_CTA rows each."""
    kv_blocks = max(1, ceil_div(seq_len_kv, BLOCK_KV))
    row_blocks = ceil_div(CTAS_PER_SM_TARGET * max(1, num_sms), kv_blocks)
    rows = max(1, min(MAX_ROWS_PER_CTA, ceil_div(max(1, seq_len), row_blocks)))
    return max(rows, ceil_div(seq_len, MAX_GRID_Y))  # the grid's y dimension stops at 65535


def grid(seq_len: int, seq_len_kv: int, rows: int) -> tuple:
    """(x, y, z): kv blocks by query-row blocks of ``rows`` (at least one each)."""
    return (max(1, ceil_div(seq_len_kv, BLOCK_KV)), max(1, ceil_div(seq_len, rows)), 1)
