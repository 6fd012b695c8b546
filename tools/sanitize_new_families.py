"""The families beside the FP8 GEMM, in one process, for compute-sanitizer (tools/sanitize.sh runs it
under each tool): the indexer logits (ring and wgmma designs), the paged indexer logits, the
pre-norm GEMM, the einsums (fp8_einsum's strided path too) and the BF16 GEMMs, each on the small
cases its device script (tools/mqa_device.sh, mqa_paged_device.sh, hc_einsum_device.sh, bf16_device.sh) sanitizes:
    SANITIZE_SCRIPTS=tools/sanitize_new_families.py bash tools/sanitize.sh
(run from the repository root; uses the tests' GPU case modules). Exits 1 when a case fails its check."""
import sys

sys.path.insert(0, "tests")
import gpu_bf16_cases as bf16  # noqa: E402
import gpu_hc_einsum_cases as hc  # noqa: E402
import gpu_mqa_cases as mqa  # noqa: E402
import gpu_mqa_paged_cases as paged  # noqa: E402

def mqa_cases(design: str) -> list:
    return [mqa.mqa(9, 300, 64, "wide", design=design),
            mqa.mqa(5, 200, 32, "random", clean=False, max_seqlen_k=150, design=design),
            mqa.mqa(40, 700, 64, "causal", design=design), mqa.mqa(3, 129, 32, "causal", clean=False, design=design)]


results = [
    *mqa_cases("ring"), *mqa_cases("wgmma"),
    paged.paged(5, 2, 64, 150, clean=True), paged.paged(6, 1, 32, 100, lengths="zero", clean=True),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True),
    paged.paged(12, 2, 64, 90, lengths="tiny", clean=True, num_sms=2, bad_entries=True),
    paged.paged(5, 2, 64, 150, clean=True, design="tma_one_chain"),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design="tma_one_chain"),
    paged.paged(5, 2, 64, 150, clean=True, design="tma"),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design="tma"),
    # tma_lean: its one store per lane and fast walk, slots ending inside sequences, one q slot and two
    paged.paged(5, 2, 64, 150, clean=True, design="tma_lean"),
    paged.paged(12, 2, 64, 90, lengths="tiny", clean=True, num_sms=2, bad_entries=True, design="tma_lean"),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design="tma_lean"),
    paged.paged(6, 1, 32, 100, lengths="zero", clean=True, design="tma_lean"),
    # tma_loader: the loader warp's handover (records, empty and q-slot mbarriers), one q slot with short sequences
    paged.paged(5, 2, 64, 150, clean=True, design="tma_loader"),
    paged.paged(40, 2, 64, 150, clean=True, num_sms=3, design="tma_loader"),
    paged.paged(12, 2, 64, 90, lengths="tiny", clean=True, num_sms=2, bad_entries=True, design="tma_loader"),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design="tma_loader"),
    # tma_loader_wg: four groups' rings and loader threads in one CTA, q slots freed after the wgmmas
    paged.paged(5, 2, 64, 150, clean=True, design="tma_loader_wg"),
    paged.paged(40, 2, 64, 150, clean=True, num_sms=3, design="tma_loader_wg"),
    paged.paged(12, 2, 64, 90, lengths="tiny", clean=True, num_sms=2, bad_entries=True, design="tma_loader_wg"),
    paged.paged(3, 2, 32, 200, num_sms=40, block_stride=64 * 132 + 256, bad_entries=True, design="tma_loader_wg"),
    hc.hc(137, 24, 1024), hc.hc(70, 32, 256, num_splits=6),
    hc.hc(65, 16, 640, num_splits=3, a_row_stride=704, d_row_stride=20), hc.hc(600, 24, 640, num_splits=3, num_sms=4),
    # the pre-norm GEMM's earlier kernel variant (fragment sets merged, a evict-first) beside the default above
    hc.hc(200, 24, 1344, num_splits=2, groups=2, variant="prev"),
    hc.hc(70, 32, 960, num_sms=2, groups=1, variant="hint"),
    hc.einsum_case("bmk,bnk->mn", dict(b=5, m=192, n=128, k=128), "float32"),
    hc.einsum_case("bmk,bnk->mn", dict(b=3, m=64, n=320, k=64), "bfloat16"),
    # fp8_einsum's head-strided masked kernel: a partial slab by TMA, and b 1 (16-byte stores only)
    hc.fp8_einsum_case(100, 3, 512, 256, path="strided", in_place=True),
    hc.fp8_einsum_case(1, 4, 512, 192, path="strided", in_place=True),
    bf16.dense(130, 264, 200, "nt"), bf16.dense(77, 200, 136, "tn", out="f32", accumulate="inplace"),
    bf16.dense(70, 136, 72, "tt", block_n=64), bf16.dense(65, 128, 64, "nn", accumulate="c"),
    # the short-K pair plan: B multicast to a CTA pair, a buffer per store box (d rows 16-byte aligned), a partial last tile
    bf16.dense(520, 1296, 512, "nt", block_n=256, cluster_m=2, store_all=1),
    # 64-row tiles (one consumer warpgroup): a short A box and deep ring, split K, float32 reduce-add, a buffer per box
    bf16.dense(1, 1000, 512, "nt", block_n=32, box_m=16, stages=16, block_m=64),
    bf16.dense(130, 600, 448, "nt", block_n=64, splits=3, box_m=64, block_m=64),
    bf16.dense(150, 300, 200, "tn", out="f32", accumulate="inplace", block_n=128, box_m=64, block_m=64),
    bf16.dense(130, 1296, 200, "nt", block_n=256, box_m=64, store_all=1, block_m=64),
    # stages of several 64-k blocks (k_merge): whole boxes past k (zero-filled), split K, a 128-row tile's staged store
    bf16.dense(128, 520, 1000, "nt", block_n=32, box_m=64, stages=6, block_m=64, k_merge=3),
    bf16.dense(30, 400, 1096, "nt", accumulate="c", block_n=64, splits=3, box_m=32, block_m=64, k_merge=2),
    bf16.dense(200, 300, 520, "nt", out="f32", block_n=128, k_merge=2),
    # the m <= 4 stream over B (a warp per column of d)
    bf16.dense(1, 1000, 512, "nt", block_n=32, block_m=4),
    bf16.dense(3, 300, 200, "nt", out="f32", accumulate="inplace", block_n=32, block_m=4),
    bf16.contiguous(2, 100, 256, 128), bf16.masked(3, 192, 70, 256, 128), bf16.k_grouped([128, 0, 256], 72, 136),
    # the batched GEMM (3-D maps, batch-strided d): 64-row tiles with short A boxes, 128-row tiles, MN-major b
    bf16.batched(3, 37, 136, 200), bf16.batched(4, 5, 520, 72, major_b="mn"), bf16.batched(3, 130, 200, 136, out="f32"),
    # d through the 3-D TMA map, clipped per batch (m and n off whole tiles and boxes)
    bf16.batched(3, 300, 200, 136, d_pad=8), bf16.batched(4, 5, 520, 72, major_b="mn", d_pad=8),
]
bad = [r for r in results if not r["ok"]]
for r in results:
    print(r["case"], "ok" if r["ok"] else f"BAD {r}")
print(f"new families sanitize cases: {len(results)}, bad: {len(bad)}")
sys.exit(1 if bad else 0)
