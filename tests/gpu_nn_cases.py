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


def linear(tokens: int, k: int, n: int, main_grad: bool = True, seed: int = 0, compiled: bool = False) -> dict:
    """``compiled``: the layer under ``torch.compile(fullgraph=True, backend="aot_eager")`` (a graph
    break raises), forward and backward traced through the custom ops."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, k, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_(True)
    weight = torch.nn.Parameter(torch.randn(n, k, generator=gen, device="cuda").to(torch.bfloat16))
    start = torch.randn(n, k, generator=gen, device="cuda")
    if main_grad:
        weight.main_grad = start.clone()
    dy = torch.randn(tokens, n, generator=gen, device="cuda").to(torch.bfloat16)
    layer = torch.compile(dnn.fp8_linear, fullgraph=True, backend="aot_eager") if compiled else dnn.fp8_linear
    y = layer(x, weight)
    y.backward(dy)
    torch.cuda.synchronize()
    want = expected_linear(x.detach(), weight.detach(), dy)
    got = {"y": compare(y, want["y"]), "dx": compare(x.grad, want["dx"]),
           "dw": compare(weight.main_grad - start if main_grad else weight.grad, want["dw"])}
    # The project's accuracy bar for every GEMM output (deep_tile.testing.numeric: calc_diff and the
    # largest error relative to the largest value), and no NaN.
    ok = (all(v["diff"] < DIFF_TOL and v["max_rel"] < REL_TOL and not v["nan"] for v in got.values())
          and main_grad == (weight.grad is None))
    return {"case": f"linear T={tokens} K={k} N={n} main_grad={main_grad} compiled={compiled}", "ok": ok, **got}


def swiglu(rows: int, inter: int, seed: int = 0) -> dict:
    """deep_tile.casts.swiglu's kernels against the torch float32 code they replace, on the same GPU:
    every element within one bf16 rounding step (the kernels mirror its float32 operations, so
    most are bit-equal), on inputs spanning exp's range (|g| up to ~40, where silu saturates)."""
    from deep_tile.casts import swiglu as sw

    gen = torch.Generator(device="cuda").manual_seed(seed)
    h13 = (torch.randn(rows, 2 * inter, generator=gen, device="cuda") * 8).to(torch.bfloat16)
    h13[:, :8] = torch.tensor([0.0, -0.0, 40.0, -40.0, 1e-3, -1e-3, 88.0, -88.0], device="cuda")
    dh = torch.randn(rows, inter, generator=gen, device="cuda").to(torch.bfloat16)
    results = {}
    for name, got, want in (("forward", sw.swiglu(h13), sw.swiglu_reference(h13)),
                            ("backward", sw.swiglu_backward(h13, dh), sw.swiglu_backward_reference(h13, dh))):
        got_f, want_f = got.float(), want.float()
        step = (want_f.abs() * 2.0 ** -7).clamp_min(2.0 ** -133)  # one bf16 step at want's magnitude
        results[name] = {"bit_equal": float((got.view(torch.int16) == want.view(torch.int16)).float().mean()),
                         "max_steps": float(((got_f - want_f).abs() / step).max()),
                         "nan": int(torch.isnan(got_f).sum() - torch.isnan(want_f).sum())}
    ok = all(r["max_steps"] <= 1.0 and r["nan"] == 0 for r in results.values())
    return {"case": f"swiglu rows={rows} inter={inter}", "ok": ok, **results}


def experts(sizes: list, hidden: int, inter: int, main_grad: bool = True, seed: int = 0) -> dict:
    """deep_tile.nn.fp8_experts forward and backward against expected_experts (float64)."""
    from deep_tile.testing.linear_check import expected_experts

    gen = torch.Generator(device="cuda").manual_seed(seed)
    e, tokens = len(sizes), sum(sizes)
    x = torch.randn(tokens, hidden, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_(True)
    w13 = torch.nn.Parameter((torch.randn(e, 2 * inter, hidden, generator=gen, device="cuda") * hidden ** -0.5)
                             .to(torch.bfloat16))
    w2 = torch.nn.Parameter((torch.randn(e, hidden, inter, generator=gen, device="cuda") * inter ** -0.5)
                            .to(torch.bfloat16))
    starts = {}
    if main_grad:
        for name, w in (("w13", w13), ("w2", w2)):
            starts[name] = torch.randn(w.shape, generator=gen, device="cuda")
            w.main_grad = starts[name].clone()
    dy = torch.randn(tokens, hidden, generator=gen, device="cuda").to(torch.bfloat16)
    y = dnn.fp8_experts(x, torch.tensor(sizes, dtype=torch.int32, device="cuda"), w13, w2)
    y.backward(dy)
    torch.cuda.synchronize()
    want = expected_experts(x.detach(), sizes, w13.detach(), w2.detach(), dy)
    got = {"y": compare(y, want["y"]), "dx": compare(x.grad, want["dx"])}
    for name, w in (("w13", w13), ("w2", w2)):
        got["d" + name] = compare(w.main_grad - starts[name] if main_grad else w.grad, want["d" + name])
    # bf16 intermediates (h13, h, dh, d13) are rounded at the same places in the layer and in the
    # expectation; a rounding that differs flips an FP8 code here and there: the bar is calc_diff.
    ok = all(v["diff"] < DIFF_TOL and not v["nan"] for v in got.values())
    return {"case": f"experts sizes={sizes} H={hidden} I={inter} main_grad={main_grad}", "ok": ok, **got}


if __name__ == "__main__":
    serve(globals())
