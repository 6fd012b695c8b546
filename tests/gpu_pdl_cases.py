"""GPU checks of programmatic dependent launch (deep_tile.pdl), run in a child process by
tests/test_pdl.py through conftest.run_child_cases.

Each case runs a chain in which every kernel reads what the kernel just before it wrote, so a
kernel that touched global memory before its grid-dependency wait would read stale data: the
FP8 casts write the weights and the activations, a GEMM reads them, a cast reads the GEMM's
output, the next GEMM reads that cast's output and the weights cast just before it, a masked
grouped GEMM reads activations cast just before it; a GEMM on a second stream reads the chain's
output after an event. The casts let their dependents start at once, so with PDL on each GEMM is
launched while its predecessor still runs. The chain runs eagerly on a side stream with new data
each round, then captured in a CUDA graph and replayed with new data: a replay's intermediate
buffers hold the previous replay's values, so a stale read shows as a wrong result. Checked
against the float64 reference (GEMMs) and the CPU casts (bitwise).

Reads {"function": name, "cases": [kwargs, ...]} as JSON on stdin and prints one ``RESULT {json}``
line per case (gpu_cases.serve).
"""
from __future__ import annotations

import torch

import deep_tile
from gpu_cases import serve
from deep_tile.casts.quant_impl import per_block_cast_torch, per_token_cast_torch
from deep_tile.gemm.launch import run
from deep_tile.testing.configs import parse_config
from deep_tile.testing.numeric import calc_diff, max_rel_error

DEVICE = "cuda"
GROUPS, MAX_M = 4, 64
"""The masked GEMM of the chain: experts and rows per expert slab."""


def _gemm_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict:
    real = ~torch.isnan(ref)
    got, want = out[real].double(), ref[real]
    return {"nan": int(torch.isnan(got).sum()), "untouched": bool(torch.isnan(out[~real]).all()),
            "diff": calc_diff(got, want), "rel": max_rel_error(got, want)}


def _same_cast(got: tuple, want: tuple) -> bool:
    return (torch.equal(got[0].cpu().view(torch.uint8), want[0].view(torch.uint8))
            and torch.equal(got[1].cpu(), want[1]))


class Chain:
    """The inputs of one chain (updated in place between rounds) and the chain itself."""

    def __init__(self, m: int, n: int, k: int, config2: str | None, seed: int):
        self.m, self.n, self.k = m, n, k
        self.gen = torch.Generator(device=DEVICE)
        self.gen.manual_seed(seed)
        self.x = torch.empty((m, k), dtype=torch.bfloat16, device=DEVICE)
        self.w1 = torch.empty((n, k), dtype=torch.bfloat16, device=DEVICE)
        self.w2 = torch.empty((k, n), dtype=torch.bfloat16, device=DEVICE)
        self.xe = torch.empty((GROUPS * MAX_M, k), dtype=torch.bfloat16, device=DEVICE)
        self.masked_m = torch.zeros((GROUPS,), dtype=torch.int32, device=DEVICE)
        from deep_tile.testing.moe import make_expert_weights
        self.be, self.se = make_expert_weights(GROUPS, n, k, DEVICE, self.gen)
        # The second GEMM ([m, n] x [k, n]^T) with a forced config when given (multicast, split-K).
        self.config2 = parse_config(config2, m, k, deep_tile.get_num_sms()) if config2 else None
        self.refill()

    def refill(self) -> None:
        """New data in the same buffers (and new expert row counts)."""
        g = self.gen
        self.x.copy_(torch.randn(self.x.shape, generator=g, device=DEVICE))
        self.w1.copy_(torch.randn(self.w1.shape, generator=g, device=DEVICE) * self.k ** -0.5)
        self.w2.copy_(torch.randn(self.w2.shape, generator=g, device=DEVICE) * self.n ** -0.5)
        self.xe.copy_(torch.randn(self.xe.shape, generator=g, device=DEVICE))
        self.masked_m.copy_(torch.randint(0, MAX_M + 1, (GROUPS,), generator=g, device=DEVICE, dtype=torch.int32))

    def run(self) -> dict:
        """The chain on the current stream; returns every tensor it made."""
        t = {}  # the outputs first, so that each kernel below directly follows the one it reads from
        t["z"] = torch.full((self.m, self.k), float("nan"), dtype=torch.bfloat16, device=DEVICE)
        t["ze"] = torch.full((GROUPS, MAX_M, self.n), float("nan"), dtype=torch.bfloat16, device=DEVICE)
        t["b1"], t["s1"] = deep_tile.per_block_cast_to_fp8(self.w1)   # the weights, written just before
        t["a1"], t["t1"] = deep_tile.per_token_cast_to_fp8(self.x)    # the activations, likewise
        t["y"] = deep_tile.fp8_gemm(t["a1"], t["t1"], t["b1"], t["s1"])
        t["a2"], t["t2"] = deep_tile.per_token_cast_to_fp8(t["y"])    # reads the GEMM's output
        t["b2"], t["s2"] = deep_tile.per_block_cast_to_fp8(self.w2)
        run(t["a2"], t["t2"], t["b2"], t["s2"], t["z"], config=self.config2)
        t["ae"], t["te"] = deep_tile.per_token_cast_to_fp8(self.xe)
        deep_tile.m_grouped_fp8_gemm_masked(t["ae"].view(GROUPS, MAX_M, self.k),
                                            t["te"].view(GROUPS, MAX_M, -1), self.be, self.se, self.masked_m,
                                            MAX_M // 2, out=t["ze"])
        return t

    def check(self, t: dict) -> dict:
        """Every step of one round against the CPU casts and the float64 references."""
        r = {"casts_bitwise": _same_cast((t["b1"], t["s1"]), per_block_cast_torch(self.w1.cpu()))
             and _same_cast((t["a1"], t["t1"]), per_token_cast_torch(self.x.cpu()))
             and _same_cast((t["a2"], t["t2"]), per_token_cast_torch(t["y"].cpu()))
             and _same_cast((t["b2"], t["s2"]), per_block_cast_torch(self.w2.cpu()))
             and _same_cast((t["ae"], t["te"]), per_token_cast_torch(self.xe.cpu()))}
        r["y"] = _gemm_metrics(t["y"], deep_tile.ref_fp8_gemm(t["a1"], t["t1"], t["b1"], t["s1"]))
        r["z"] = _gemm_metrics(t["z"], deep_tile.ref_fp8_gemm(t["a2"], t["t2"], t["b2"], t["s2"]))
        ref_e = deep_tile.ref_m_grouped_fp8_gemm_masked(t["ae"].view(GROUPS, MAX_M, self.k),
                                                        t["te"].view(GROUPS, MAX_M, -1), self.be, self.se,
                                                        self.masked_m)
        r["ze"] = _gemm_metrics(t["ze"], ref_e)
        return r


def pdl_chain(pdl: bool, m: int, n: int, k: int, config2: str | None = None, rounds: int = 2, seed: int = 0) -> dict:
    """The chain with PDL on or off: eagerly on a side stream (``rounds`` rounds of new data, and a
    GEMM on a second stream after an event), then as a replayed CUDA graph (``rounds`` replays
    of new data)."""
    deep_tile.set_pdl(pdl)
    chain = Chain(m, n, k, config2, seed)
    result = {"pdl": deep_tile.get_pdl(), "eager": [], "graph": []}
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    for _ in range(rounds):
        chain.refill()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            t = chain.run()
            done = torch.cuda.Event()
            done.record(side)
        other.wait_event(done)
        with torch.cuda.stream(other):  # across streams: an event, not a programmatic edge
            again = torch.empty_like(t["z"])
            run(t["a2"], t["t2"], t["b2"], t["s2"], again, config=chain.config2)
        torch.cuda.synchronize()
        r = chain.check(t)
        r["other_stream_bitwise"] = bool(torch.equal(again.view(torch.int16), t["z"].view(torch.int16)))
        result["eager"].append(r)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = chain.run()
    for _ in range(rounds):
        chain.refill()
        for name in ("y", "z", "ze"):
            t[name].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        result["graph"].append(chain.check(t))
    return result


def graph_edge_types(pdl: bool, path: str) -> dict:
    """Two GEMMs and a cast captured in a CUDA graph through ``path`` ("native": the C++ host path,
    built first; "python": the Python launcher): the types of the graph's edges (stream capture
    turns a launch with programmatic stream serialization into a programmatic edge) and which
    path launched."""
    from cuda.bindings import driver as cu
    from deep_tile import native
    from deep_tile.testing.data import make_fp8_problem

    deep_tile.set_pdl(pdl)
    a, sa, b, sb = make_fp8_problem(64, 2048, 7168, DEVICE, seed=0, a_scale_layout="tma")
    x = torch.randn((64, 7168), device=DEVICE).to(torch.bfloat16)
    outs = [torch.empty((64, 2048), dtype=torch.bfloat16, device=DEVICE) for _ in range(2)]
    extension = None
    if path == "native":
        if not native.build(wait=True):
            raise RuntimeError(f"the native extension is not available: {native.status()}")
        extension = native.module()

    def calls():
        if extension is not None:
            extension.fp8_gemm(a, sa, b, sb, outs[0])
            deep_tile.per_token_cast_to_fp8(x)
            extension.fp8_gemm(a, sa, b, sb, outs[1])
        else:
            run(a, sa, b, sb, outs[0])
            deep_tile.per_token_cast_to_fp8(x)
            run(a, sa, b, sb, outs[1])

    calls()  # compile, load, encode outside the capture
    torch.cuda.synchronize()
    before = extension.stats()["native_calls"] if extension is not None else 0
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        calls()
    native_calls = (extension.stats()["native_calls"] - before) if extension is not None else 0
    # cuda-bindings 12 name the edge-data form cuGraphGetEdges_v2; 13 name it cuGraphGetEdges.
    get_edges = getattr(cu, "cuGraphGetEdges_v2", cu.cuGraphGetEdges)
    err, _, _, edge_data, count = get_edges(cu.CUgraph(graph.raw_cuda_graph()), 16)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuGraphGetEdges: {err}")
    types = [int(d.type) for d in edge_data[:count]]
    graph.instantiate()
    graph.replay()
    torch.cuda.synchronize()
    same = bool(torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)))
    return {"pdl": pdl, "path": path, "edge_types": types, "native_calls": native_calls, "same": same,
            "programmatic": int(cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)}


if __name__ == "__main__":
    serve(globals())
