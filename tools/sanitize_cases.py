"""The workload of tools/sanitize.sh: one small problem per kernel family, checked (GPU).

Each family the selector can emit is represented by a forced configuration (persistent with one
or two accumulator buffers, 256-row tiles, half-width WGMMAs, multicast on A and on B with a
tile count the cluster does not divide, split-K with one and two consumer warpgroups and with
ranks that get no k-block, the row-major a_scale variant, M below one tile, the k-loop unrolled by
6, K fixed at compile time (with the stage ring as immediates), swap-AB), plus the selector's
own choice for a few shapes and the casts. Every
output is NaN-poisoned before the run and compared with the float64 reference, so the run also
fails on a wrong answer. Exit status 1 if any check fails.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import deep_tile  # noqa: E402
from deep_tile.gemm.launch import run  # noqa: E402
from deep_tile.testing.configs import parse_config  # noqa: E402
from deep_tile.testing.data import make_fp8_problem  # noqa: E402
from deep_tile.testing.numeric import calc_diff  # noqa: E402

# (config text or "auto", m, n, k); tile counts: 520x1160 with 256x128 tiles = 3 x 10 = 30,
# with 128x256 = 5 x 5 = 25 (odd: the last CTA of a cluster has no peer).
CASES = [
    ("128x128:b1", 520, 1160, 400), ("128x128:b2", 520, 1160, 400), ("64x16:b2", 130, 136, 400),
    ("64x144:b1", 130, 1160, 400), ("256x128:b1", 520, 1160, 400), ("256x64:b2", 520, 1160, 400),
    ("256x128:mcA", 520, 1160, 400), ("256x112:mcB", 520, 1160, 400), ("128x256:w128:mcA", 520, 1160, 400),
    ("128x256:w128:mcB", 600, 1160, 400), ("64x64:b2:k4", 100, 1160, 1040), ("64x48:b1:k8", 64, 2112, 1024),
    ("128x128:b2:k2", 200, 1160, 400), ("64x16:b2:k3", 70, 136, 128), ("128x256:w128:g16:gM", 600, 1160, 400),
    ("128x192:g16:gM", 520, 1160, 400),
    ("auto", 64, 2112, 7168), ("auto", 4096, 2112, 1024), ("auto", 1, 7168, 2048),
    # M below one tile: an A box of M rows (multicast of A keeps whole halves)
    ("256x128:b1", 100, 1160, 400), ("128x256:w128:mcB", 37, 1160, 400), ("64x64:b2:k4", 20, 1160, 1040),
    ("128x128:mcA", 50, 1160, 400),
    # multicast with an odd tile count below the SM count: the grid rounds up and one CTA idles
    ("64x64:b2:mcA", 64, 2112, 1024),
    # L2 policies on the loads (B evict-first, A evict-last), plain and multicast of A and of B
    ("64x32:b2:ef", 64, 2112, 1024), ("128x128:b2:mcA:ef", 520, 1160, 400), ("128x192:mcB:ef", 520, 1160, 400),
    # ... and over long K with up to eight m-blocks (selector.streams_b), on tiles that straddle b_scale blocks
    ("128x160:gM:ef", 520, 1160, 4480), ("128x128:b2:ef", 520, 1160, 4480),
    # 128-row tiles over M = 65..128 (selector._one_m_block_first): rows past M, plain and split
    ("128x32:b2:ef", 96, 1160, 1536), ("128x32:b2:k2:ef", 128, 1160, 1536),
    # one-buffer k-loops unrolled by 6 (35 and 13 k-blocks: whole bodies and a remainder; 4: none)
    ("128x256:w128:g16:gM:u6", 600, 1160, 4480), ("256x128:mcA:u6", 520, 1160, 1664), ("128x160:u6", 520, 1160, 400),
    # K fixed at compile time (selector.static_k_blocks_for): 1, 4 (a partial K block), 8, 12
    # and 16 K blocks, M below one tile, multicast of A, a tile straddling b_scale blocks, two
    # column parts over a row-major a_scale; the selector's pick at 1024x7168x2048
    ("256x128:kb4", 520, 1160, 400), ("256x128:kb16", 520, 1160, 2048), ("256x128:kb1", 100, 1160, 16),
    ("256x128:mcA:kb8", 520, 1160, 1024), ("128x160:g16:gM:kb12", 520, 1160, 1536),
    ("128x256:w128:g16:gM:kb12", 600, 1160, 1536, "row"), ("auto", 1024, 7168, 2048),
    # ... and over long K on a loop unrolled by 3 (28 and 64 K blocks)
    ("256x128:kb28", 520, 1160, 3584), ("128x160:g16:gM:ef:kb64", 520, 1160, 8192),
    # ... with the stage ring as immediates (selector.static_ring_for): 56 K blocks over 8 stages
    # (the selector's pick at 512x2112x7168), 8 over 8 (a partial K block), 16 over 8 on a
    # row-major a_scale, 7 over 7 with M below one tile
    ("auto", 512, 2112, 7168), ("128x64:b1:ef:kb8:ring", 520, 1160, 1008),
    ("128x64:b1:ef:kb16:ring", 520, 1160, 2000, "row"), ("128x96:b1:kb7:ring", 100, 1160, 896),
    # ... and on 128x192 (selector.static_ring_for): the selector's pick at 768x4096x7168 (56 K
    # blocks over 4 stages), 8 over 4 with tiles straddling two b_scale blocks, 16 on a row-major
    # a_scale
    ("auto", 768, 4096, 7168), ("128x192:b1:g16:gM:kb8:ring", 520, 1160, 1008),
    ("128x192:b1:g16:gM:ef:kb16:ring", 300, 2112, 2048, "row"),
    # a row-major a_scale, read by the kernel variant through 4-group boxes (12 and 56 groups)
    ("256x128:b1", 520, 1160, 1536, "row"), ("64x64:b2:k4", 100, 1160, 1536, "row"), ("auto", 64, 2112, 7168, "row"),
    # swap-AB (M <= 16): persistent with one and two buffers and several tiles per CTA, a tile
    # straddling b_scale blocks, split-K, the row-major a_scale; the selector's pick at M = 1
    ("64x64:b2:ef:sw8", 1, 1160, 1536), ("64x128:b1:sw16", 13, 4096, 400), ("64x192:sw16", 16, 1160, 400),
    ("64x64:b2:k3:ef:sw8", 5, 2112, 1040), ("64x128:b2:k2:sw16", 16, 1160, 1536, "row"), ("auto", 1, 7168, 16384),
    # one buffer on the narrow tiles of two consumer warpgroups (selector.one_buffer_for_two_warpgroups)
    ("128x64:b1:ef", 520, 2112, 1024), ("128x96:b1", 520, 1160, 400), ("256x64:b1", 520, 1160, 400),
    ("256x96:b1:ef", 520, 1160, 400),
    # ... and below 129 rows: one 128-row m-block with rows past M; split too (measured, not picked)
    ("128x32:b1:ef", 96, 1160, 1536), ("128x32:b1:k2:ef", 128, 1160, 1536), ("128x48:b1:k4:ef", 80, 1160, 2048),
    # ... unrolled by 6 over long K (selector.swap_unroll_for; 35 and 13 k-blocks), rows past M too
    ("128x64:b1:ef:u6", 520, 2112, 4480), ("128x96:b1:u6", 96, 1160, 4480), ("256x64:b1:ef:u6", 520, 1160, 1664),
    ("256x96:b1:u6", 129, 1160, 4480),
]


def main(only: list) -> int:
    """Runs CASES (those whose config text is in ``only``, when given) and the casts."""
    failures = 0
    cases = [case for case in CASES if not only or case[0] in only]
    if not cases:
        print(f"no case matches {only}; the config texts are {sorted({case[0] for case in CASES})}")
        return 2
    for text, m, n, k, *layout in cases:
        layout = layout[0] if layout else "tma"
        a, sa, b, sb = make_fp8_problem(m, n, k, "cuda", seed=m + n + k, a_scale_layout=layout)
        config = None if text == "auto" else parse_config(text, m, n, torch.cuda.get_device_properties(0).multi_processor_count)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        run(a, sa, b, sb, out, config=config)
        torch.cuda.synchronize()
        diff = calc_diff(out.double(), deep_tile.ref_fp8_gemm(a, sa, b, sb))
        ok = not torch.isnan(out).any().item() and diff < 1e-3
        failures += not ok
        label = config.label if config else deep_tile.get_config(m, n, k).label
        print(f"{'ok  ' if ok else 'FAIL'} {text:>20} {label:>26} {m}x{n}x{k} a_scale {layout} diff {diff:.1e}",
              flush=True)
    x = torch.randn(129, 400, device="cuda", dtype=torch.bfloat16)
    q, s = deep_tile.per_token_cast_to_fp8(x)
    qb, sb = deep_tile.per_block_cast_to_fp8(x)
    torch.cuda.synchronize()
    print(f"casts: {tuple(q.shape)} {tuple(qb.shape)}", flush=True)
    print(f"{len(cases)} GEMM cases, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
