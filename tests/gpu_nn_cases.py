"""GPU checks of deep_tile.nn, run in a child process by tests/test_nn.py (protocol: gpu_cases.serve).

The layer runs forward and backward on the GPU with fresh random data; y, dx and the weight
gradient (added into a random FP32 main_grad, or returned) are compared with
deep_tile.testing.linear_check.expected_linear (float64). Outputs of the GEMMs are new tensors
(allocated by the layer), so there is nothing to poison but the main gradient's start, which is
random and subtracted.
"""
from __future__ import annotations

import torch

from deep_tile import nn as dnn
from deep_tile.testing.linear_check import compare, expected_linear
from deep_tile.testing.numeric import DIFF_TOL, REL_TOL
from gpu_cases import serve


def linear(tokens: int, k: int, n: int, main_grad: bool = True, seed: int = 0) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, k, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_(True)
    weight = torch.nn.Parameter(torch.randn(n, k, generator=gen, device="cuda").to(torch.bfloat16))
    start = torch.randn(n, k, generator=gen, device="cuda")
    if main_grad:
        weight.main_grad = start.clone()
    dy = torch.randn(tokens, n, generator=gen, device="cuda").to(torch.bfloat16)
    y = dnn.fp8_linear(x, weight)
    y.backward(dy)
    torch.cuda.synchronize()
    want = expected_linear(x.detach(), weight.detach(), dy)
    got = {"y": compare(y, want["y"]), "dx": compare(x.grad, want["dx"]),
           "dw": compare(weight.main_grad - start if main_grad else weight.grad, want["dw"])}
    # The project's accuracy bar for every GEMM output (deep_tile.testing.numeric: calc_diff and the
    # largest error relative to the largest value), and no NaN.
    ok = (all(v["diff"] < DIFF_TOL and v["max_rel"] < REL_TOL and not v["nan"] for v in got.values())
          and main_grad == (weight.grad is None))
    return {"case": f"linear T={tokens} K={k} N={n} main_grad={main_grad}", "ok": ok, **got}


if __name__ == "__main__":
    serve(globals())
