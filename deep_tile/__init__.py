"""deep_tile: FP8 GEMM kernels for NVIDIA Hopper with DeepSeek-V3-style fine-grained scaling.

Public API (importing the package starts no CUDA context; submodules load on first use). When
torch is already imported, ``import deep_tile`` also registers the custom ops
``torch.ops.deep_tile.*`` (:mod:`deep_tile.ops`); otherwise the first use of an op-backed function
does:

- :func:`fp8_gemm` -- ``out = (a * a_scale) @ (b * b_scale).T`` in bf16 or FP32, optionally ``+ c``
  (``c`` may be ``out``: in-place accumulation). The 1D1D form (b scaled per row, the weight
  gradient's GEMM): :func:`fp8_gemm_1d1d` (docs/training.md).
- :func:`m_grouped_fp8_gemm_contiguous`, :func:`m_grouped_fp8_gemm_offsets`,
  :func:`m_grouped_fp8_gemm_psum`, :func:`m_grouped_fp8_gemm_masked` -- Mixture-of-Experts GEMMs
  (one weight matrix per expert); :func:`m_grouped_fp8_gemm_masked_signal` -- the masked one with
  per-block completion signals; :func:`psum_to_m_indices` -- DeepGEMM's psum layout as m_indices;
  :func:`get_m_alignment_for_contiguous_layout` -- the row alignment of the contiguous layout.
- :func:`get_tma_aligned_a_scale` -- the zero-copy (column-major, TMA-aligned) a_scale layout.
- :func:`per_token_cast_to_fp8`, :func:`per_block_cast_to_fp8` -- DeepSeek-V3 FP8 quantisation;
  :func:`per_token_cast_transpose_to_fp8`, :func:`per_block_cast_transpose_to_fp8` -- the same
  with the transposed copy training needs, in one pass; :func:`padded_group_sizes` -- the
  K-grouped weight gradient's group sizes over a grouped transposed copy.
- :func:`fp8_mqa_logits` -- DeepSeek-V3.2's lightning-indexer logits (DeepGEMM's ``fp8_mqa_logits``);
  :func:`fp8_paged_mqa_logits`, :func:`get_paged_mqa_logits_metadata` -- the paged (decode) ones and
  their work schedule.
- :func:`tf32_hc_prenorm_gemm` -- the hyper-connection pre-norm GEMM (``a @ b^T`` in TF32 and the
  rows' sums of squares; DeepGEMM's ``tf32_hc_prenorm_gemm``).
- :func:`einsum`, :func:`fp8_einsum` -- DeepGEMM's einsum expressions on SM90 (``'bmk,bnk->mn'`` and
  the per-head ``'bhr,hdr->bhd'`` / ``'bhd,hdr->bhr'``; FP8 ``'bhr,hdr->bhd'``).
- :func:`bf16_gemm_nt` (and ``_nn``, ``_tn``, ``_tt``), :func:`m_grouped_bf16_gemm_nt_contiguous`
  (``_nn_contiguous``), :func:`m_grouped_bf16_gemm_nt_masked`, :func:`k_grouped_bf16_gemm_tn_contiguous`
  -- DeepGEMM's BF16 GEMMs, one kernel
  for every operand layout; :func:`batched_bf16_gemm_nt` -- one GEMM per batch index of strided 3-D views
  in one launch (the per-head einsum's); :func:`ref_bf16_gemm` -- their float64 reference.
- :func:`ref_fp8_gemm`, :func:`ref_fp8_gemm_1d1d`, :func:`ref_m_grouped_fp8_gemm_contiguous`, :func:`ref_m_grouped_fp8_gemm_offsets`,
  :func:`ref_m_grouped_fp8_gemm_masked` -- float64 references of the products.
- :func:`get_config`, :func:`explain` -- the kernel configuration the selector picks, and why.
- :func:`set_num_sms`, :func:`get_num_sms` -- limit the persistent grid to fewer SMs.
- :func:`set_pdl`, :func:`get_pdl` -- launch with programmatic dependent launch (on by default).
- :data:`__version__` -- the package version string.
"""
import importlib
import sys
import time

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "fp8_gemm": "deep_tile.gemm.dense",
    "m_grouped_fp8_gemm_contiguous": "deep_tile.gemm.grouped",
    "m_grouped_fp8_gemm_offsets": "deep_tile.gemm.grouped",
    "m_grouped_fp8_gemm_psum": "deep_tile.gemm.grouped",
    "psum_to_m_indices": "deep_tile.gemm.grouped",
    "m_grouped_fp8_gemm_masked": "deep_tile.gemm.grouped",
    "m_grouped_fp8_gemm_masked_signal": "deep_tile.gemm.grouped",
    "get_m_alignment_for_contiguous_layout": "deep_tile.gemm.grouped",
    "get_tma_aligned_a_scale": "deep_tile.gemm.layouts",
    "per_token_cast_to_fp8": "deep_tile.casts.quant",
    "per_block_cast_to_fp8": "deep_tile.casts.quant",
    "per_token_cast_transpose_to_fp8": "deep_tile.casts.cast_transpose",
    "per_block_cast_transpose_to_fp8": "deep_tile.casts.cast_transpose",
    "padded_group_sizes": "deep_tile.casts.cast_transpose",
    "fp8_mqa_logits": "deep_tile.attention",
    "fp8_paged_mqa_logits": "deep_tile.paged_attention",
    "get_paged_mqa_logits_metadata": "deep_tile.paged_attention",
    "tf32_hc_prenorm_gemm": "deep_tile.hyper_connection",
    "einsum": "deep_tile.einsums",
    "fp8_einsum": "deep_tile.einsums",
    "bf16_gemm_nt": "deep_tile.bf16",
    "bf16_gemm_nn": "deep_tile.bf16",
    "bf16_gemm_tn": "deep_tile.bf16",
    "bf16_gemm_tt": "deep_tile.bf16",
    "m_grouped_bf16_gemm_nt_contiguous": "deep_tile.bf16",
    "m_grouped_bf16_gemm_nn_contiguous": "deep_tile.bf16",
    "m_grouped_bf16_gemm_nt_masked": "deep_tile.bf16",
    "k_grouped_bf16_gemm_tn_contiguous": "deep_tile.bf16",
    "batched_bf16_gemm_nt": "deep_tile.bf16",
    "ref_bf16_gemm": "deep_tile.bf16",
    "ref_fp8_gemm": "deep_tile.reference",
    "ref_fp8_gemm_1d1d": "deep_tile.reference",
    "fp8_gemm_1d1d": "deep_tile.gemm.dense",
    "k_grouped_fp8_gemm_1d1d": "deep_tile.gemm.k_grouped",
    "ref_k_grouped_fp8_gemm_1d1d": "deep_tile.reference",
    "ref_m_grouped_fp8_gemm_contiguous": "deep_tile.reference",
    "ref_m_grouped_fp8_gemm_offsets": "deep_tile.reference",
    "ref_m_grouped_fp8_gemm_masked": "deep_tile.reference",
    "get_config": "deep_tile.select.api",
    "explain": "deep_tile.select.api",
    "set_num_sms": "deep_tile.device",
    "get_num_sms": "deep_tile.device",
    "set_pdl": "deep_tile.pdl",
    "get_pdl": "deep_tile.pdl",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deep_tile' has no attribute {name!r}")
    start = time.perf_counter()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    from deep_tile import phases

    phases.add("import", time.perf_counter() - start)
    return value


def __dir__():
    return __all__


if "torch" in sys.modules:  # registering the ops costs about a millisecond once torch is loaded
    importlib.import_module("deep_tile.ops")
