"""One contract module per kernel family: the host-side owner of each fact about a kernel.

- :mod:`deep_tile.kernels.fp8_gemm`: the FP8 GEMM (``csrc/entry/fp8_gemm_sm90.cu``).
- :mod:`deep_tile.kernels.cast_fp8`: the FP8 casts (``csrc/entry/cast_fp8.cu``).

Each mirrors a kernel under ``include/deep_tile/kernels/``; pure Python (no torch, no CUDA), so
the selector and warm-up can read them on any machine. Loaded kernels live in
:mod:`deep_tile.jit.loader`.
"""
