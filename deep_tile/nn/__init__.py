"""FP8 training layers on deep_tile's GEMMs (DeepSeek-V3's recipe; docs/training.md).

- :class:`Fp8Linear`, :func:`fp8_linear` (:mod:`deep_tile.nn.linear`): a bf16 ``Linear`` whose
  fprop, dgrad and wgrad run the FP8 GEMMs, the weight gradient added in FP32 into ``main_grad``.
- :class:`Fp8Experts`, :func:`fp8_experts` (:mod:`deep_tile.nn.experts`): the routed experts of an
  MoE block (gate-up, SwiGLU, down) over tokens sorted by expert, on the M-grouped GEMMs forward
  and for dgrad and the K-grouped 1D1D GEMM for the weight gradients.
"""
from deep_tile.nn.experts import Fp8Experts, fp8_experts
from deep_tile.nn.linear import Fp8Linear, fp8_linear

__all__ = ["Fp8Linear", "fp8_linear", "Fp8Experts", "fp8_experts"]
