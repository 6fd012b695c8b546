"""deep_tile.fp8_mqa_logits (DeepSeek-V3.2's lightning-indexer logits, DeepGEMM's fp8_mqa_logits):
argument checks before anything runs, the CPU path against the float64 formula written out
(tests/gpu_mqa_cases.py), DeepGEMM's output layout, the kernels' contract, the kernels' builds for
sm_90a (no spills, no stack), the DeepGEMM compat names, and (marker ``gpu``) the kernel on a Hopper
GPU against the float64 formula, in a child process with a timeout.
"""
from __future__ import annotations

import re

import pytest
import torch

import deep_tile
import deep_tile.compat.deepgemm as deep_gemm
from conftest import assert_spill_free, compiler_params, run_child_cases
from deep_tile.attention import fp8_mqa_logits, logits_layout
from deep_tile.kernels import mqa_logits as contract
from gpu_mqa_cases import REL_BOUND, check, expected_logits, make_inputs


# --------------------------------------------------------------------------------------------------
# The CPU path
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seq_len,seq_len_kv,heads,ranges", [
    (1, 1, 32, "full"), (5, 130, 32, "random"), (17, 300, 64, "causal"), (9, 64, 64, "empty"),
    (12, 200, 32, "wide"), (3, 0, 32, "empty"),
])
@pytest.mark.parametrize("clean", [True, False])
def test_cpu_path_matches_the_float64_formula(seq_len, seq_len_kv, heads, ranges, clean):
    q, kv, w, ks, ke = make_inputs(seq_len, seq_len_kv, heads, ranges, seed=seq_len)
    got = fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=clean)
    result = check(got, q, kv, w, ks, ke, clean=True)  # the CPU path writes -inf outside either way
    assert result["ok"], result
    assert result["worst_rel"] < REL_BOUND


@pytest.mark.parametrize("max_seqlen_k", [1, 40, 300])
def test_cpu_compressed_form(max_seqlen_k):
    q, kv, w, ks, ke = make_inputs(11, 257, 32, "wide", seed=3)
    got = fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=False, max_seqlen_k=max_seqlen_k)
    assert tuple(got.shape) == (11, max_seqlen_k)
    assert check(got, q, kv, w, ks, ke, clean=False, max_seqlen_k=max_seqlen_k)["ok"]


def test_float64_formula_by_hand():
    # one row, two heads' worth spelled out: relu drops the negative head, the scale multiplies the sum
    q = torch.zeros(1, 32, 128)
    q[0, 0, 0], q[0, 1, 0] = 2.0, -1.0
    kv = torch.zeros(3, 128)
    kv[:, 0] = torch.tensor([1.0, 0.5, -1.0])
    w = torch.zeros(1, 32)
    w[0, 0], w[0, 1] = 3.0, 7.0
    scale = torch.tensor([0.5, 2.0, 1.0])
    ks, ke = torch.tensor([0], dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    q8, kv8 = q.to(torch.float8_e4m3fn), kv.to(torch.float8_e4m3fn)
    values, _, inside = expected_logits(q8, (kv8, scale), w, ks, ke)
    # j=0: 3*relu(2) + 7*relu(-1) = 6, *0.5; j=1: 3*1 + 0 = 3, *2; j=2: 3*relu(-2) + 7*relu(1) = 7
    assert values[0].tolist() == [3.0, 6.0, 7.0]
    assert inside[0].tolist() == [True, True, False]
    got = fp8_mqa_logits(q8, (kv8, scale), w, ks, ke)
    assert got[0].tolist() == [3.0, 6.0, float("-inf")]


@pytest.mark.parametrize("seq_len,seq_len_kv,heads", [(1, 1, 64), (5, 1000, 32), (7, 4097, 64), (0, 10, 32)])
def test_output_layout_is_deepgemms(seq_len, seq_len_kv, heads):
    rows, stride, columns = logits_layout(seq_len, seq_len_kv, heads)
    assert stride % 256 == 0 and stride >= seq_len_kv + 256 and columns == seq_len_kv
    assert rows % (128 // heads) == 0 and rows >= seq_len
    q, kv, w, ks, ke = make_inputs(seq_len, seq_len_kv, heads, "random", seed=1)
    got = fp8_mqa_logits(q, kv, w, ks, ke)
    assert tuple(got.shape) == (seq_len, seq_len_kv) and got.dtype == torch.float32
    if seq_len > 1:
        assert got.stride() == (stride, 1)
    assert logits_layout(3, 100, 64, max_seqlen_k=300)[1:] == (512, 300)


# --------------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------------

def bad_cases():
    q, (kv, s), w, ks, ke = make_inputs(4, 50, 32, "random", seed=0)
    yield "q dtype", (q.float(), (kv, s), w, ks, ke), {}, ValueError
    yield "16 heads", (q[:, :16].contiguous(), (kv, s), w[:, :16].contiguous(), ks, ke), {}, ValueError
    yield "head dim 64", (q[:, :, :64].contiguous(), (kv[:, :64].contiguous(), s), w, ks, ke), {}, ValueError
    yield "q not contiguous", (q.transpose(0, 1).contiguous().transpose(0, 1), (kv, s), w, ks, ke), {}, ValueError
    yield "kv not a pair", (q, kv, w, ks, ke), {}, TypeError
    yield "kv a triple", (q, (kv, s, s), w, ks, ke), {}, TypeError
    yield "kv dtype", (q, (kv.float(), s), w, ks, ke), {}, ValueError
    yield "kv scale shape", (q, (kv, s[:-1]), w, ks, ke), {}, ValueError
    yield "kv scale dtype", (q, (kv, s.double()), w, ks, ke), {}, ValueError
    yield "weights shape", (q, (kv, s), w[:-1], ks, ke), {}, ValueError
    yield "weights dtype", (q, (kv, s), w.bfloat16(), ks, ke), {}, ValueError
    yield "weights column stride", (q, (kv, s), w.t().contiguous().t(), ks, ke), {}, ValueError
    yield "ks int64", (q, (kv, s), w, ks.long(), ke), {}, ValueError
    yield "ke length", (q, (kv, s), w, ks, ke[:-1]), {}, ValueError
    yield "ks not a tensor", (q, (kv, s), w, ks.tolist(), ke), {}, TypeError
    yield "compressed and clean", (q, (kv, s), w, ks, ke), {"max_seqlen_k": 8}, ValueError
    yield "negative max_seqlen_k", (q, (kv, s), w, ks, ke), {"clean_logits": False, "max_seqlen_k": -1}, ValueError
    yield "float max_seqlen_k", (q, (kv, s), w, ks, ke), {"clean_logits": False, "max_seqlen_k": 8.0}, TypeError
    yield "clean not a bool", (q, (kv, s), w, ks, ke), {"clean_logits": 1}, TypeError


@pytest.mark.parametrize("label,args,kwargs,error", list(bad_cases()), ids=[c[0] for c in bad_cases()])
def test_bad_arguments_are_refused(label, args, kwargs, error):
    with pytest.raises(error, match="fp8_mqa_logits"):
        fp8_mqa_logits(*args, **kwargs)


def test_weights_may_have_a_row_stride():
    q, kv, w, ks, ke = make_inputs(6, 90, 64, "random", seed=2)
    wide = torch.zeros(6, 80)
    wide[:, :64] = w
    got = fp8_mqa_logits(q, kv, wide[:, :64], ks, ke)
    assert torch.equal(got, fp8_mqa_logits(q, kv, w, ks, ke))


# --------------------------------------------------------------------------------------------------
# The contract and the builds
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("design", contract.DESIGNS)
def test_contract_geometry(design):
    assert contract.DESIGN in contract.DESIGNS
    assert contract.symbol(32, "cuda_core") == "deep_tile_mqa_logits_h32"
    assert contract.symbol(64, "wgmma") == "deep_tile_mqa_logits_wgmma_h64"
    with pytest.raises(ValueError):
        contract.symbol(16, design)
    with pytest.raises(ValueError):
        contract.symbol(64, "tma")
    assert len(contract.ARGUMENT_KINDS) == 14
    for heads in contract.HEADS:
        step = contract.rows_step(heads, design)
        assert step == (256 // heads if design in contract.PERSISTENT_DESIGNS else 1 if design == "cuda_core"
                        else 128 // heads)
        for seq_len, seq_len_kv in ((1, 1), (64, 65536), (4096, 8192), (257, 1000), (300000, 128), (0, 0)):
            rows = contract.rows_per_cta(seq_len, seq_len_kv, 132, heads, design)
            if design in contract.PERSISTENT_DESIGNS:  # one CTA per SM (at most one per item) over the items
                splits = contract.persistent_splits(seq_len, seq_len_kv, 132, heads)
                gx, gy, gz = contract.grid(seq_len, seq_len_kv, rows, design, splits, 132)
                items = max(1, -(-seq_len // rows)) * splits
                assert rows == 256 // heads and (gx, gy, gz) == (min(items, 132), 1, 1)
                assert 1 <= splits <= max(1, -(-seq_len_kv // 128))
                continue
            if design == "ring":  # one block of query rows per CTA; its kv blocks split over grid[1]
                splits = contract.ring_splits(seq_len, seq_len_kv, 132, heads)
                gx, gy, gz = contract.grid(seq_len, seq_len_kv, rows, design, splits)
                assert rows == step and gy == splits and 1 <= splits <= contract.MAX_GRID_Y and gz == 1
                assert gx * rows >= seq_len and (splits == 1 or -(-seq_len_kv // 128) // splits >= contract.RING_MIN_BLOCKS_PER_CTA)
                continue
            gx, gy, gz = contract.grid(seq_len, seq_len_kv, rows, design)
            assert rows >= 1 and rows % step == 0 and gy <= contract.MAX_GRID_Y and gz == 1
            assert gx * contract.BLOCK_KV[design] >= seq_len_kv and gy * rows >= seq_len
        assert contract.rows_per_cta(4096, 8192, 132, heads, design) <= contract.MAX_ROWS_PER_CTA


@pytest.mark.parametrize("seq_len,seq_len_kv,heads,want", [
    (2048, 4096, 64, 1),    # prefill: 512 query blocks already fill the SMs several times
    (64, 32768, 64, 8),     # decode: 16 query blocks x 8 splits = 128 CTAs of 32 kv blocks
    (128, 65536, 64, 4),    # 32 query blocks x 4 splits
    (1, 128, 32, 1),        # one kv block cannot split
])
def test_persistent_splits_fill_the_sms(seq_len, seq_len_kv, heads, want):
    splits = contract.persistent_splits(seq_len, seq_len_kv, 132, heads)
    assert splits == want
    items = -(-seq_len // (256 // heads)) * splits
    assert items <= 132 or items >= 4 * 132 or splits == 1


SYMBOLS = [contract.symbol(h, d) for d in contract.DESIGNS for h in contract.HEADS]
CUDA_CORE_SYMBOLS = {contract.symbol(h, "cuda_core") for h in contract.HEADS}


def test_ring_shared_memory_matches_the_entry():
    """The ring design's dynamic shared memory (RING_SMEM_BYTES) is the size the entry file asserts
    for MqaRingSmem."""
    from deep_tile.jit import paths

    source = paths.entry_path(contract.ENTRY).read_text()
    assert re.search(r"sizeof\(deep_tile::MqaRingSmem\) == (\d+)", source).group(1) == str(contract.RING_SMEM_BYTES)
    assert re.search(r"sizeof\(deep_tile::MqaPersistSmem\) == (\d+)", source).group(1) == \
        str(contract.PERSISTENT_SMEM_BYTES)
    assert contract.PERSISTENT_SMEM_BYTES <= 227 * 1024  # one CTA per SM


@pytest.mark.parametrize("name", compiler_params())
def test_kernels_build_spill_free(name):
    from deep_tile.jit import compiler, paths

    result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), {}, SYMBOLS[0], name)
    assert compiler.ptxas_problems(result.log) == [], result.log
    assert set(SYMBOLS) <= compiler.elf_functions(result.cubin)
    assert_spill_free(result.log, len(SYMBOLS))
    for line in result.log.splitlines():  # 2 CTAs of 256 threads per SM (the ring: of 288, so <= 96)
        if "Used" in line and "registers" in line:
            assert int(line.split("Used ")[1].split(" registers")[0]) <= 128, result.log
    sass = compiler.disassemble(result.cubin)
    if sass is None:
        pytest.skip("no SASS tools here")
    bodies = {chunk.split()[0]: chunk for chunk in sass.split("Function : ")[1:]}
    for symbol in SYMBOLS:  # the wgmma designs' four k32 steps are tensor-core MMAs, the CUDA-core one has none
        assert bodies[symbol].count("QGMMA") == (0 if symbol in CUDA_CORE_SYMBOLS else 4), symbol
    assert "C7514" not in result.log and "C7518" not in result.log, result.log  # ptxas serialized no wgmma


def _sass_tool():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "mqa_sass.py"
    spec = importlib.util.spec_from_file_location("mqa_sass", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", compiler_params())
def test_lean_epilogue_has_fewer_instructions_per_kv_block(name):
    """persistent_lean's kv-block loop (tools/mqa_sass.py) is at least a third shorter than the
    persistent design's, in the plain and the watchdog build."""
    from deep_tile.jit import compiler, paths

    tool = _sass_tool()
    for watchdog in (0, 1):
        result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), {"DT_WATCHDOG": watchdog}, SYMBOLS[0], name)
        sass = compiler.disassemble(result.cubin)
        if sass is None:
            pytest.skip("no SASS tools here")
        bodies = tool.functions(sass)
        for heads in contract.HEADS:
            old = tool.loop_body(bodies[contract.symbol(heads, "persistent")])
            new = tool.loop_body(bodies[contract.symbol(heads, "persistent_lean")])
            assert old and new and 3 * len(new) <= 2 * len(old), (watchdog, heads, len(old), len(new))
        info = tool.ptxas_info(result.log)
        for heads in contract.HEADS:
            regs, stack, stores, loads = info[contract.symbol(heads, "persistent_lean")]
            assert regs <= 96 and stack == stores == loads == 0, (watchdog, info)


@pytest.mark.parametrize("name", compiler_params())
def test_register_weights_fit_the_launch(name):
    """persistent_regs: ptxas gives the kernel the 96 registers per thread that setmaxnreg hands on
    (640 x 96 = 512 x 112 + 128 x 32: with fewer, the math warpgroups' setmaxnreg.inc would wait
    forever), spill-free; its kv-block loop reads no weights from shared memory and is no longer
    than persistent_lean's."""
    from deep_tile.jit import compiler, paths

    tool = _sass_tool()
    assert contract.BLOCK_THREADS["persistent_regs"] * 96 == 512 * 112 + 128 * 32
    for watchdog in (0, 1):
        result = compiler.compile_cubin(paths.entry_path(contract.ENTRY), {"DT_WATCHDOG": watchdog}, SYMBOLS[0], name)
        info = tool.ptxas_info(result.log)
        sass = compiler.disassemble(result.cubin)
        bodies = tool.functions(sass) if sass is not None else None
        for heads in contract.HEADS:
            regs, stack, stores, loads = info[contract.symbol(heads, "persistent_regs")]
            assert regs == 96 and stack == stores == loads == 0, (watchdog, info)
            if bodies is None:
                continue
            body = bodies[contract.symbol(heads, "persistent_regs")]
            assert sum("SETMAXREG" in text for _, text in body) == 2, (watchdog, heads)
            new = tool.loop_body(body)
            lean = tool.loop_body(bodies[contract.symbol(heads, "persistent_lean")])
            assert new and len(new) <= len(lean), (watchdog, heads, len(new), len(lean))
            lds = lambda loop: sum(tool.opcode(text) == "LDS" for _, text in loop)  # noqa: E731
            assert lds(new) + 16 <= lds(lean), (watchdog, heads, lds(new), lds(lean))


# --------------------------------------------------------------------------------------------------
# The lean epilogue's index and range logic, modelled on the CPU (mqa_logits_persistent.cuh kLean)
# --------------------------------------------------------------------------------------------------

def _f32_add(a, b):
    return float(torch.tensor(a, dtype=torch.float32) + torch.tensor(b, dtype=torch.float32))


def _quad_halve(x, upper, bit):
    """mqa_quad_halve's choice of kept and given values for one lane: (keep, give) lists."""
    keep, give = [], []
    for t in range(len(x) // 2):
        lo = ((t >> bit) << (bit + 1)) | (t & ((1 << bit) - 1))
        hi = lo | (1 << bit)
        keep.append(x[hi] if upper else x[lo])
        give.append(x[lo] if upper else x[hi])
    return keep, give


@pytest.mark.parametrize("heads", contract.HEADS)
def test_lean_reduce_scatter_gives_the_quad_sums_bit_for_bit(heads):
    """Each (row, kv row) sum of a quad lands on exactly one lane, the lane the kernel's store takes
    it from, equal bit for bit to mqa_head_sums' xor-1-then-xor-2 shuffle sum."""
    half_rows = 128 // heads
    gen = torch.Generator().manual_seed(heads)
    for _ in range(20):
        part = (torch.randn(4, 2 * half_rows, generator=gen) * 10 ** torch.randint(-3, 4, (4, 2 * half_rows),
                                                                                    generator=gen)).tolist()
        # the old sum: v += shfl_xor(v, 1); v += shfl_xor(v, 2) on every lane
        step1 = [[_f32_add(part[q][k], part[q ^ 1][k]) for k in range(2 * half_rows)] for q in range(4)]
        old = [[_f32_add(step1[q][k], step1[q ^ 2][k]) for k in range(2 * half_rows)] for q in range(4)]
        # the lean one: x[2 r + s]; halve on bit 1 with lane bit 0, then on bit 0 (H 64) or 1 (H 32) with lane bit 1
        halves = [_quad_halve(part[q], q & 1, 1) for q in range(4)]
        y = [[_f32_add(halves[q][0][t], halves[q ^ 1][1][t]) for t in range(half_rows)] for q in range(4)]
        bit = 0 if half_rows == 2 else 1
        halves = [_quad_halve(y[q], q & 2, bit) for q in range(4)]
        z = [[_f32_add(halves[q][0][t], halves[q ^ 2][1][t]) for t in range(half_rows // 2)] for q in range(4)]
        seen = set()
        for q in range(4):
            row = (q & 1) if half_rows == 2 else (q & 3)
            for t in range(half_rows // 2):
                s = ((q >> 1) & 1) if half_rows == 2 else t
                assert z[q][t] == old[0][2 * row + s], (q, t)
                seen.add((row, s))
        assert seen == {(r, s) for r in range(half_rows) for s in range(2)}


def _old_store(j, raw, end, clean, compressed_cols, seq_len_kv, row_valid):
    """mqa_store_logit behind the persistent design's gates: None or (column, inside)."""
    if not row_valid or j >= seq_len_kv:
        return None
    inside = max(raw, 0) <= j < end
    if compressed_cols > 0:
        return (j - raw, True) if inside and j - raw < compressed_cols else None
    if inside:
        return (j, True)
    return (j, False) if clean else None


def _lean_store(j_block, raw, end, clean, compressed_cols, seq_len_kv, row_valid):
    """The lean epilogue's per-item bounds and per-logit test, in 32-bit arithmetic; j_block is the
    kv row, the kernel's j the column (j_block - col_shift)."""
    row_lo = max(raw, 0)
    row_hi = end
    if compressed_cols > 0 and raw + compressed_cols < row_hi:
        row_hi = raw + compressed_cols
    width = row_hi - row_lo if row_hi > row_lo else 0
    neg_fill = bool(clean) and compressed_cols == 0 and row_valid
    col_shift = raw if compressed_cols > 0 else 0
    col_lo = row_lo - col_shift
    j = j_block - col_shift
    inside = ((j - col_lo) & 0xFFFFFFFF) < width
    if inside or (neg_fill and j < seq_len_kv):
        return (j, inside)
    return None


@pytest.mark.parametrize("compressed_cols", [0, 1, 37, 300])
@pytest.mark.parametrize("clean", [0, 1])
def test_lean_store_test_matches_mqa_store_logit(compressed_cols, clean):
    """Every logit the persistent design stores (column and whether inside) the lean test stores
    too, and no other: ranges inside, across and past both ends of a block, before 0, past
    seq_len_kv, empty, and rows past seq_len (the producer's empty range)."""
    gen = torch.Generator().manual_seed(7 + compressed_cols + clean)
    seq_len_kv = 700
    for _ in range(300):
        row_valid = bool(torch.randint(0, 5, (1,), generator=gen)) or False
        raw = int(torch.randint(-300, seq_len_kv + 50, (1,), generator=gen))
        end = min(int(torch.randint(-20, seq_len_kv + 300, (1,), generator=gen)), seq_len_kv)
        if not row_valid:
            raw, end = 0, 0  # the producer's row past seq_len
        for j in range(0, seq_len_kv + 130, 3):
            want = _old_store(j, raw, end, clean, compressed_cols, seq_len_kv, row_valid)
            got = _lean_store(j, raw, end, clean, compressed_cols, seq_len_kv, row_valid)
            assert got == want, (j, raw, end, row_valid)


# --------------------------------------------------------------------------------------------------
# DeepGEMM's names
# --------------------------------------------------------------------------------------------------

def test_compat_names_forward_to_deep_tile():
    q, kv, w, ks, ke = make_inputs(4, 70, 32, "causal", seed=5)
    want = deep_tile.fp8_mqa_logits(q, kv, w, ks, ke)
    assert torch.equal(deep_gemm.fp8_mqa_logits(q, kv, w, ks, ke), want)
    assert torch.equal(deep_gemm.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke), want)
    with pytest.raises(NotImplementedError, match="FP4"):
        deep_gemm.fp8_fp4_mqa_logits((q, torch.zeros(4, 32, dtype=torch.int32)), kv, w, ks, ke)
    with pytest.raises(NotImplementedError, match="logits_dtype"):
        deep_gemm.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, logits_dtype=torch.bfloat16)
    with pytest.raises(TypeError):
        deep_gemm.fp8_fp4_mqa_logits(q, kv, w, ks, ke)
    # DeepGEMM's newer binding (vendored by vLLM): max_seqlen_k sixth, compressed and not cleaned
    max_k = int((ke - ks).max())
    newer = deep_gemm.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, max_k)
    assert newer.shape == (4, max_k)
    assert torch.equal(newer, deep_tile.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=False, max_seqlen_k=max_k))
    with pytest.raises(NotImplementedError, match="schedule_meta"):
        deep_gemm.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, max_k, torch.zeros(2, dtype=torch.int32))


# --------------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------------

GPU_CASES = [
    dict(seq_len=1, seq_len_kv=1000, heads=32, ranges="full"),
    dict(seq_len=1, seq_len_kv=4097, heads=64, ranges="random"),
    dict(seq_len=2, seq_len_kv=128, heads=64, ranges="full"),
    dict(seq_len=7, seq_len_kv=1000, heads=32, ranges="random", clean=False),
    dict(seq_len=64, seq_len_kv=4097, heads=64, ranges="causal"),
    dict(seq_len=100, seq_len_kv=1000, heads=64, ranges="empty"),
    dict(seq_len=129, seq_len_kv=4097, heads=32, ranges="wide"),
    dict(seq_len=129, seq_len_kv=1000, heads=32, ranges="causal", clean=False),
    dict(seq_len=257, seq_len_kv=4097, heads=64, ranges="random"),
    dict(seq_len=257, seq_len_kv=1000, heads=64, ranges="causal", clean=False),
    dict(seq_len=257, seq_len_kv=257, heads=32, ranges="causal"),
    dict(seq_len=33, seq_len_kv=4097, heads=64, ranges="wide", clean=False, max_seqlen_k=600),
    dict(seq_len=40, seq_len_kv=1000, heads=32, ranges="random", clean=False, max_seqlen_k=1000),
    dict(seq_len=5, seq_len_kv=0, heads=32, ranges="empty"),
    dict(seq_len=0, seq_len_kv=1000, heads=64, ranges="random"),
    dict(seq_len=1024, seq_len_kv=8192, heads=64, ranges="causal"),
    # the persistent design: several items per CTA (ranges off multiples of 4, rows past seq_len in
    # the last item), many kv splits, splits with the compressed form, items with no kv block
    dict(seq_len=1101, seq_len_kv=3000, heads=32, ranges="random"),
    dict(seq_len=2051, seq_len_kv=2500, heads=64, ranges="causal"),
    dict(seq_len=1030, seq_len_kv=1500, heads=32, ranges="causal", clean=False),
    dict(seq_len=3, seq_len_kv=20000, heads=64, ranges="wide"),
    dict(seq_len=9, seq_len_kv=9001, heads=32, ranges="random", clean=False, max_seqlen_k=5000),
    dict(seq_len=601, seq_len_kv=1000, heads=64, ranges="empty"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("design", contract.DESIGNS)
def test_gpu_kernel_matches_the_float64_formula(design):
    cases = [dict(case, design=design) for case in GPU_CASES]
    results = run_child_cases("gpu_mqa_cases.py", "mqa", cases, timeout=600)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
@pytest.mark.parametrize("design", contract.DESIGNS)
def test_gpu_kernel_is_deterministic_and_graph_capturable(design):
    results = run_child_cases("gpu_mqa_cases.py", "timed_graph", [{"design": design}], timeout=300)
    assert all(r["ok"] for r in results), results


# the lean epilogue against the persistent one: blocks wholly inside every row's range (wide, full),
# partly inside (random, ranges off multiples of four), the causal diagonal, rows past seq_len,
# the compressed form and no cleaning, both head counts
SAME_CASES = [
    dict(seq_len=64, seq_len_kv=4097, heads=64, ranges="wide"),
    dict(seq_len=9, seq_len_kv=1000, heads=32, ranges="full"),
    dict(seq_len=257, seq_len_kv=3001, heads=64, ranges="random"),
    dict(seq_len=129, seq_len_kv=1000, heads=32, ranges="random", clean=False),
    dict(seq_len=1027, seq_len_kv=1027, heads=64, ranges="causal"),
    dict(seq_len=1030, seq_len_kv=2500, heads=32, ranges="causal", clean=False),
    dict(seq_len=33, seq_len_kv=4097, heads=64, ranges="wide", clean=False, max_seqlen_k=600),
    dict(seq_len=40, seq_len_kv=1000, heads=32, ranges="random", clean=False, max_seqlen_k=1000),
    dict(seq_len=601, seq_len_kv=1000, heads=64, ranges="empty"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("design,base", [("persistent_lean", "persistent"), ("persistent_regs", "persistent_lean")])
def test_gpu_lean_epilogue_writes_the_same_bits(design, base):
    cases = [dict(case, design=design, base=base) for case in SAME_CASES]
    results = run_child_cases("gpu_mqa_cases.py", "same_logits", cases, timeout=300)
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(map(str, bad))
