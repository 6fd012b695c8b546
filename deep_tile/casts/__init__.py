"""The FP8 casts and the other elementwise kernels of training, each as public face, implementation,
CUDA path (and reference where the kernels have one):

- :mod:`~deep_tile.casts.quant`: ``per_token_cast_to_fp8`` / ``per_block_cast_to_fp8``, with
  :mod:`~deep_tile.casts.quant_impl` and :mod:`~deep_tile.casts.quant_kernels`;
- :mod:`~deep_tile.casts.cast_transpose`: the fused casts that also write the transposed copy, with
  :mod:`~deep_tile.casts.cast_transpose_impl`, :mod:`~deep_tile.casts.cast_transpose_kernels` and
  :mod:`~deep_tile.casts.cast_transpose_ref`;
- :mod:`~deep_tile.casts.swiglu`: the SwiGLU of the FP8 experts layer, forward and backward.

The public names are also at the top of the package (``deep_tile.per_token_cast_to_fp8``, ...).
"""
