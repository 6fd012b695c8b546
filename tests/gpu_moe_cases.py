"""GPU checks of the MoE layer (deep_tile.testing.moe), run in a child process by
tests/test_moe_layer.py through conftest.run_child_cases.

Reads {"function": name, "cases": [kwargs, ...]} as JSON on stdin and prints one ``RESULT {json}``
line per case (gpu_cases.serve).
"""
from __future__ import annotations

import traceback

import torch

from gpu_cases import serve
from deep_tile.casts.quant import per_token_cast_to_fp8
from deep_tile.testing import moe
from deep_tile.testing.numeric import calc_diff, max_rel_error

DEVICE = "cuda"


def _worst_row(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest per-token relative Frobenius error ``|out_t - ref_t| / |ref_t|``."""
    diff = (out.double() - ref).norm(dim=1)
    return (diff / ref.norm(dim=1).clamp_min(1e-300)).max().item()


def _inputs(num_tokens, hidden, num_experts, top_k, seed, scoring="sigmoid", skew=False, num_groups=1,
            topk_groups=1):
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    x = torch.randn((num_tokens, hidden), generator=gen, device=DEVICE).to(torch.bfloat16)
    logits = torch.randn((num_tokens, num_experts), generator=gen, device=DEVICE)
    if skew:
        logits[:, :3] += 6.0
    ids, weights = moe.route(logits, top_k, scoring, num_groups=num_groups, topk_groups=topk_groups)
    return x, logits, ids, weights


def moe_layer(num_tokens: int, hidden: int, intermediate: int, num_experts: int, top_k: int,
              scoring: str = "sigmoid", skew: bool = False, num_groups: int = 1, topk_groups: int = 1,
              seed: int = 0) -> dict:
    """The three layouts on the deep_tile kernels against both float64 references (mirror and
    float64-intermediate); each layout run twice (bitwise repeat)."""
    weights = moe.make_moe_weights(num_experts, hidden, intermediate, DEVICE, seed=seed + 1)
    x, _, ids, topk_weights = _inputs(num_tokens, hidden, num_experts, top_k, seed, scoring, skew, num_groups,
                                      topk_groups)
    mirror = moe.ref_moe_forward(x, ids, topk_weights, weights)
    ideal = moe.ref_moe_forward(x, ids, topk_weights, weights, mirror_roundings=False)
    result = {"counts_max": int(moe.expert_counts(ids, num_experts).max())}
    for layout in moe.LAYOUTS:
        try:
            out = moe.moe_forward(x, ids, topk_weights, weights, layout)
            again = moe.moe_forward(x, ids, topk_weights, weights, layout)
            torch.cuda.synchronize()
            r = {"nan": int((~torch.isfinite(out)).sum()),
                 "bitwise_repeat": bool(torch.equal(out.view(torch.int16), again.view(torch.int16)))}
            for name, ref in (("mirror", mirror), ("ideal", ideal)):
                r[f"{name}_diff"] = calc_diff(out, ref)
                r[f"{name}_rel"] = max_rel_error(out, ref)
                r[f"{name}_row"] = _worst_row(out, ref)
        except Exception as exc:  # noqa: BLE001 -- one layout's failure must not hide the others
            r = {"error": f"{type(exc).__name__}: {exc}"[:400], "trace": traceback.format_exc()[-1500:]}
        result[layout] = r
    return result


def helpers_sync_free(layout: str, num_tokens: int, num_experts: int, top_k: int, seed: int = 0) -> dict:
    """route + plan + permute_fp8 + unpermute under ``torch.cuda.set_sync_debug_mode("error")`` (any
    synchronising call raises), and the plan equal to the one computed on the CPU from the same ids."""
    x, logits, _, _ = _inputs(num_tokens, 256, num_experts, top_k, seed)
    xq, xs = per_token_cast_to_fp8(x)  # the cast kernel is not under test here
    torch.cuda.synchronize()
    error = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        ids, weights = moe.route(logits, top_k)
        perm = moe.plan(ids, num_experts, layout)
        a, a_scale = moe.permute_fp8(xq, xs, perm)
        y = moe.unpermute(moe.permute(x, perm), perm, weights)
    except RuntimeError as exc:
        error = str(exc)[:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    if error is not None:
        return {"layout": layout, "sync_free": False, "same_as_cpu": False, "error": error}
    cpu = moe.plan(ids.cpu(), num_experts, layout)
    same = torch.equal(perm.row_of_pair.cpu(), cpu.row_of_pair) and torch.equal(perm.counts.cpu(), cpu.counts)
    for name in ("m_indices", "offsets", "masked_m"):
        if getattr(cpu, name) is not None:
            same = same and torch.equal(getattr(perm, name).cpu(), getattr(cpu, name))
    expected = (x.float() * weights.sum(-1, keepdim=True)).to(torch.bfloat16)
    combine_ok = bool(torch.allclose(y.float(), expected.float(), rtol=2 ** -7, atol=1e-6))
    return {"layout": layout, "sync_free": True, "same_as_cpu": bool(same and combine_ok)}


def graph_replay(layout: str, num_tokens: int = 64, hidden: int = 1024, intermediate: int = 512,
                 num_experts: int = 16, top_k: int = 4, seed: int = 0) -> dict:
    """Capture route + moe_forward in a CUDA graph, replay it on new tokens and logits copied into
    the captured inputs, and compare with the eager forward on those inputs."""
    try:
        weights = moe.make_moe_weights(num_experts, hidden, intermediate, DEVICE, seed=seed + 1)
        x, logits, _, _ = _inputs(num_tokens, hidden, num_experts, top_k, seed)

        def forward():
            ids, topk_weights = moe.route(logits, top_k)
            return moe.moe_forward(x, ids, topk_weights, weights, layout)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside capture (compile, load)
            forward()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = forward()
        x2, logits2, _, _ = _inputs(num_tokens, hidden, num_experts, top_k, seed + 7)
        x.copy_(x2)
        logits.copy_(logits2)
        graph.replay()
        torch.cuda.synchronize()
        eager = forward()
        torch.cuda.synchronize()
        return {"layout": layout, "bitwise_equal": bool(torch.equal(captured.view(torch.int16),
                                                                     eager.view(torch.int16))),
                "diff": calc_diff(captured, eager)}
    except Exception as exc:  # noqa: BLE001 -- reported to the parent test
        return {"layout": layout, "bitwise_equal": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


if __name__ == "__main__":
    serve(globals())
