"""Problem-shape lists (M, N, K) used by tests and benchmarks.

``N`` is the output width and ``K`` the reduction length of ``out[M, N] = a[M, K] @ b[N, K]^T``.
"""
import itertools

MODEL_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
"""(N, K) of the DeepSeek-V3 dense layers benchmarked by DeepGEMM."""

WGRAD_NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
"""(N, K) of the weight gradients ``dW[N, K] += dY^T X`` (DeepGEMM's DeepSeek-V3 pairs): the GEMM
is M = N, N = K over K = the tokens."""

WGRAD_TOKENS = (4096, 16384)
"""The token counts of the weight-gradient sets of the training benchmark (``bench_training.py --set wgrad
--tokens T``); the kernel sweep builds the selector's pick for each."""

MODEL_M = (64, 128, 4096)
"""Token counts paired with every entry of MODEL_NK."""

MODEL_SHAPES = [(m, n, k) for m in MODEL_M for (n, k) in MODEL_NK]
"""The 18 (M, N, K) shapes of ANCHORS.md: MODEL_M x MODEL_NK, M-major."""

BENCH_SHAPES = MODEL_SHAPES + [(8192, 8192, 8192)]
"""Default benchmark list: MODEL_SHAPES plus a large square problem."""

EDGE_M = [1, 7, 63, 65, 127, 129, 1000, 4097]
"""Ragged M values around the 64/128 block edges (and 4 alignment) for correctness tests."""

EDGE_N = [8, 24, 136, 2112]
"""Ragged N values: below one tile, not a multiple of 16, a 128-block tail, a model width."""

EDGE_K = [16, 144, 7168]
"""K values: below one 128 group, one group plus a tail, a long model K."""

EDGE_SHAPES = list(itertools.product(EDGE_M, EDGE_N, EDGE_K))
"""Every combination of EDGE_M x EDGE_N x EDGE_K (96 shapes), M-major."""
