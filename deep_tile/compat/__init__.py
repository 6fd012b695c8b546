"""Drop-in entry modules that give deep_tile the API of other GEMM libraries.

- :mod:`deep_tile.compat.deepgemm` -- DeepGEMM's FP8 GEMM names and argument conventions; switch
  a serving engine with ``import deep_tile.compat.deepgemm as deep_gemm``.

Importing this package imports nothing else.
"""
