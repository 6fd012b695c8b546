"""Helpers shared by deep_tile's tests and benchmarks (the library itself never imports them).

- :mod:`.numeric`: ``calc_diff``, ``max_rel_error``, ``assert_gemm_close``, the bar ``DIFF_TOL`` / ``REL_TOL``.
- :mod:`.data`: ``make_fp8_problem`` (random FP8 operands and scales in either a_scale layout).
- :mod:`.shapes`: ``MODEL_NK``, ``MODEL_SHAPES``, ``BENCH_SHAPES``, ``EDGE_M/N/K``, ``EDGE_SHAPES``.
- :mod:`.timing`: ``bench_gpu`` (CUDA events, L2 flush, sleep pad, median), ``capture_graph``.
- :mod:`.table`: ``format_table``, ``print_table``, ``geomean``.
- :mod:`.moe`: a routed-experts MoE layer on the grouped GEMMs, by purpose: ``.weights``, ``.routing``,
  ``.layouts``, ``.layer``, ``.reference``.

Submodules are imported explicitly (``from deep_tile.testing.numeric import calc_diff``); this
package imports nothing on its own so that importing it is free.
"""
