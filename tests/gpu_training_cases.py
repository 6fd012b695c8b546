"""GPU checks of the output variants (FP32 out, ``out = C + A.B^T``), run in a child process by
tests/test_training.py (conftest.run_child_cases; the protocol of tests/gpu_cases.py).

Every case draws fresh random data and compares against the float64 reference ``C + A.B^T`` of
the quantised operands. A separate ``out`` is NaN-poisoned before each run, so an element the
kernel leaves unwritten shows; an in-place accumulation (``c`` is ``out``) starts from random C and
additionally counts the elements still bitwise equal to C where the product is not negligible
(unwritten), and its error bar catches an element accumulated twice.
"""
from __future__ import annotations

import torch

import deep_tile
from deep_tile.gemm import fp8_gemm_1d1d
from deep_tile.gemm.k_grouped import k_grouped_fp8_gemm_1d1d, run_k_grouped
from deep_tile.gemm.launch import run_acc
from deep_tile.gemm.problem import ProblemKind
from deep_tile.reference import ref_fp8_gemm_1d1d, ref_k_grouped_fp8_gemm_1d1d
from deep_tile.select.config import KernelConfig
from deep_tile.testing.data import make_fp8_problem
from deep_tile.testing.numeric import calc_diff, max_rel_error
from gpu_cases import serve

DEVICE = "cuda"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def _storage(m: int, n: int, dtype, row_stride: int | None, fill) -> torch.Tensor:
    """An [m, n] view of ``dtype`` with row pitch ``row_stride`` (padding columns after n)."""
    stride = row_stride or n
    if fill == "nan":
        full = torch.full((m, stride), float("nan"), dtype=dtype, device=DEVICE)
    else:
        full = fill.to(dtype)
        if stride != n:
            padded = torch.full((m, stride), float("nan"), dtype=dtype, device=DEVICE)
            padded[:, :n] = full
            full = padded
    return full[:, :n]


def operands_1d1d(m: int, n: int, k: int, seed: int = 0) -> tuple:
    """Random ``(a, a_scale, b, b_scale)`` of the 1D1D GEMM: both quantised 1x128 from fresh randn
    bf16 data (per_token_cast_to_fp8); b_scale [n, K blocks] row-major."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn((m, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
    w = torch.randn((n, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
    a, a_scale = deep_tile.per_token_cast_to_fp8(x)
    b, b_scale = deep_tile.per_token_cast_to_fp8(w)
    return a, a_scale, b, b_scale


def gemm_acc(m: int, n: int, k: int, out_dtype: str, c_mode: str, config: dict | None = None, seed: int = 0,
             row_stride: int | None = None, public: bool = False, one_d: bool = False) -> dict:
    """One output-variant GEMM. ``c_mode``: ``"none"``, ``"bfloat16"`` / ``"float32"`` (a separate
    C of that type) or ``"inplace"`` (C is ``out``). ``public``: through ``deep_tile.fp8_gemm``
    (the selector's config), else ``run_acc`` with the forced ``config``. ``one_d``: the 1D1D GEMM
    (``fp8_gemm_1d1d``, b_scale per row of b)."""
    if one_d:
        a, a_scale, b, b_scale = operands_1d1d(m, n, k, seed)
        product = ref_fp8_gemm_1d1d(a, a_scale, b, b_scale)
    else:
        a, a_scale, b, b_scale = make_fp8_problem(m, n, k, DEVICE, seed=seed, a_scale_layout="tma")
        product = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 7)
    scale = float(product.abs().max()) if product.numel() else 1.0
    c_values = torch.randn((m, n), generator=gen, device=DEVICE, dtype=torch.float64) * scale / 3
    forced = None
    if config:  # the tile's fields, then its output variant (with the stages its staging leaves)
        tile = {key: value for key, value in config.items() if key not in ("out_dtype", "c_dtype")}
        forced = KernelConfig(**tile)
        forced = (forced.with_b_scale_1d() if one_d else forced).with_output(config.get("out_dtype", "bfloat16"),
                                                                            config.get("c_dtype"))
    dtype = DTYPES[out_dtype]

    def once():
        c = None
        if c_mode == "inplace":
            out = _storage(m, n, dtype, row_stride, c_values)
            c_ref = out.double().clone()
        else:
            out = _storage(m, n, dtype, row_stride, "nan")
            if c_mode != "none":
                c = _storage(m, n, DTYPES[c_mode], row_stride, c_values)
            c_ref = c.double() if c is not None else None
        if public:
            fn = fp8_gemm_1d1d if one_d else deep_tile.fp8_gemm
            fn(a, a_scale, b, b_scale, out, c=out if c_mode == "inplace" else c)
        else:
            run_acc(a, a_scale, b, b_scale, c, c_mode == "inplace", out, config=forced, b_scale_1d=one_d)
        torch.cuda.synchronize()
        return out, c_ref

    out, c_ref = once()
    ref = product if c_ref is None else product + c_ref
    valid = out[:, :n].double()
    result = {"m": m, "n": n, "k": k, "out_dtype": out_dtype, "c_mode": c_mode, "config": config, "one_d": one_d,
              "nan": int(torch.isnan(valid).sum().item()),
              "diff": calc_diff(valid, ref) if ref.numel() else 0.0,
              "rel": max_rel_error(valid, ref) if ref.numel() else 0.0}
    if c_mode == "inplace":
        # products large enough to move C by more than a few units in the last place of out's type
        # (a bf16 C + a small product rounds back to C)
        ulps = 2.0 ** -5 if dtype == torch.bfloat16 else 2.0 ** -20
        significant = (product.abs() > 1e-3 * scale) & (product.abs() > ulps * c_ref.abs())
        result["unwritten"] = int(((valid == c_ref) & significant).sum().item())
    again, _ = once()
    result["bitwise_repeat"] = bool(torch.equal(out.contiguous().view(torch.uint8), again.contiguous().view(torch.uint8)))
    if row_stride:
        base = out.as_strided((m, row_stride), (row_stride, 1))
        result["padding_untouched"] = bool(torch.isnan(base[:, n:].float()).all().item())
    return result


def nan_a_scale_1d1d(m: int, n: int, k: int, config: dict, row: int, k_block: int, seed: int = 0) -> dict:
    """The 1D1D GEMM accumulated in place into FP32 on the forced tile ``config`` with one a_scale
    value NaN (``row``'s, of ``k_block``): that row of the output must be all NaN, every other row
    C + A.B^T (the kernel completes: a NaN a_scale takes the scale products' branch,
    TileMainloop::prescale)."""
    a, a_scale, b, b_scale = operands_1d1d(m, n, k, seed)
    a_scale[row, k_block] = float("nan")
    product = ref_fp8_gemm_1d1d(a, a_scale, b, b_scale)
    forced = KernelConfig(**config).with_b_scale_1d().with_output("float32", "out")
    out = torch.randn((m, n), device=DEVICE, dtype=torch.float32)
    ref = out.double() + product
    run_acc(a, a_scale, b, b_scale, None, True, out, config=forced, b_scale_1d=True)
    torch.cuda.synchronize()
    others = torch.ones(m, dtype=torch.bool, device=DEVICE)
    others[row] = False
    valid = out.double()
    return {"m": m, "n": n, "k": k, "config": config, "row_nan": int(torch.isnan(valid[row]).sum().item()),
            "nan_elsewhere": int(torch.isnan(valid[others]).sum().item()),
            "diff": calc_diff(valid[others], ref[others])}


def graph_acc(m: int, n: int, k: int, seed: int = 0) -> dict:
    """In-place FP32 accumulation captured in a CUDA graph: replayed twice with new operands it must
    hold C + A1.B1^T + A2.B2^T."""
    a, a_scale, b, b_scale = make_fp8_problem(m, n, k, DEVICE, seed=seed, a_scale_layout="tma")
    out = torch.randn((m, n), device=DEVICE, dtype=torch.float32)
    start = out.double().clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # warm-up outside capture (compiles, loads)
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out, c=out)
    torch.cuda.synchronize()
    out.copy_(start)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        deep_tile.fp8_gemm(a, a_scale, b, b_scale, out, c=out)
    graph.replay()
    first = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    a2, a_scale2, b2, b_scale2 = make_fp8_problem(m, n, k, DEVICE, seed=seed + 1, a_scale_layout="tma")
    torch.cuda.synchronize()
    a.copy_(a2), a_scale.copy_(a_scale2), b.copy_(b2), b_scale.copy_(b_scale2)
    graph.replay()
    torch.cuda.synchronize()
    ref = start + first + deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
    valid = out.double()
    return {"m": m, "n": n, "k": k, "nan": int(torch.isnan(valid).sum().item()), "diff": calc_diff(valid, ref),
            "rel": max_rel_error(valid, ref)}



def k_grouped_operands(m: int, n: int, sizes: list, seed: int = 0, pad: int = 0) -> tuple:
    """Random ``(a, a_scale, b, b_scale)`` of the K-grouped GEMM over ``sum(sizes) + pad`` tokens
    (rounded up to 16): ``a = dY^T`` [m, T], ``b = X^T`` [n, T], quantised 1x128 along the tokens
    (the whole T axis at once). The tokens past the groups (``pad`` and the rounding) hold FP8 NaN
    (0x7f) in a and b: a kernel that reads them into a group's sums makes that group NaN."""
    used = sum(sizes)
    k = max(16, -(-(used + pad) // 16) * 16)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn((m, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
    w = torch.randn((n, k), generator=gen, device=DEVICE, dtype=torch.float32).to(torch.bfloat16)
    x[:, used:] = 0
    w[:, used:] = 0
    a, a_scale = deep_tile.per_token_cast_to_fp8(x)
    b, b_scale = deep_tile.per_token_cast_to_fp8(w)
    a.view(torch.uint8)[:, used:] = 0x7F
    b.view(torch.uint8)[:, used:] = 0x7F
    return a, a_scale, b, b_scale


def k_grouped_problem(m: int, n: int, sizes: list, seed: int = 0, pad: int = 0) -> tuple:
    """A K-grouped problem: ``(operands, product, c_values)``, the operands of
    :func:`k_grouped_operands`, their float64 product [G, m, n] and float64 values for an addend C
    (randn scaled to a third of the product's largest magnitude, seeded by ``seed + 7``)."""
    operands = k_grouped_operands(m, n, sizes, seed, pad)
    product = ref_k_grouped_fp8_gemm_1d1d(*operands, sizes)
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 7)
    c_values = torch.randn((len(sizes), m, n), generator=gen, device=DEVICE, dtype=torch.float64) * peak(product) / 3
    return operands, product, c_values


def peak(product: torch.Tensor) -> float:
    """The largest magnitude of ``product`` (1.0 when it is empty or all zero): the scale of C's
    values and of what counts as a significant product."""
    top = float(product.abs().max()) if product.numel() else 0.0
    return top if top > 0 else 1.0


def to_blocks(x: torch.Tensor, sizes: list) -> torch.Tensor:
    """``x`` [rows, T] (the groups' tokens side by side) in DeepGEMM's NT layout: a flat buffer of
    ``rows * T`` elements, group g's [rows, sizes[g]] block row-major from ``rows * sum(sizes[:g])``
    on; the tokens past the groups as FP8 NaN (0x7f)."""
    rows, total = x.shape
    flat = torch.full((rows * total,), 0x7F, dtype=torch.uint8, device=x.device)
    start = 0
    for size in sizes:
        flat[rows * start:rows * (start + size)] = x.view(torch.uint8)[:, start:start + size].reshape(-1)
        start += size
    return flat.view(x.dtype)


def k_grouped(m: int, n: int, sizes: list, out_dtype: str = "float32", c_mode: str = "inplace",
              config: dict | None = None, seed: int = 0, pad: int = 0, host_sizes: bool = False,
              layout: str = "rows") -> dict:
    """One K-grouped GEMM (``out[g] (+)= a[:, K_g] b[:, K_g]^T``) against the float64 reference.
    ``c_mode`` as :func:`gemm_acc`; ``config``: forced tile fields (else the selector's rule);
    ``host_sizes``: the sizes passed as a list instead of a device tensor; ``layout="blocks"``: the
    operands in DeepGEMM's NT layout (:func:`to_blocks`). A separate out is NaN-poisoned; each
    empty group must hold exactly C (zeros without C; C rounded to out's type)."""
    (a, a_scale, b, b_scale), product, c_values = k_grouped_problem(m, n, sizes, seed, pad)
    if layout == "blocks":
        a, b = to_blocks(a, sizes), to_blocks(b, sizes)
    g = len(sizes)
    dtype = DTYPES[out_dtype]
    c_dtype = {"none": None, "inplace": "out"}.get(c_mode, c_mode)
    forced = KernelConfig(**config, problem_kind=ProblemKind.K_GROUPED, b_scale_1d=True, out_dtype=out_dtype,
                          c_dtype=c_dtype) if config else None  # as tests/test_k_grouped.py configs() builds it
    group_sizes = list(sizes) if host_sizes else torch.tensor(sizes, dtype=torch.int32, device=DEVICE)

    def once():
        c = None
        if c_mode == "inplace":
            out = c_values.to(dtype)
            c_ref = out.double().clone()
            c = out
        else:
            out = torch.full((g, m, n), float("nan"), dtype=dtype, device=DEVICE)
            if c_mode != "none":
                c = c_values.to(DTYPES[c_mode])
            c_ref = c.double() if c is not None else None
        if forced is None:
            k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, out, c=c, layout=layout)
        else:
            accumulate = c is out
            run_k_grouped(a, a_scale, b, b_scale, group_sizes, out, None if accumulate else c, config=forced,
                          accumulate=accumulate, layout=layout)
        torch.cuda.synchronize()
        return out, c_ref

    out, c_ref = once()
    ref = product if c_ref is None else product + c_ref
    valid = out.double()
    result = {"m": m, "n": n, "k": a.numel() // m, "sizes": list(sizes), "out_dtype": out_dtype, "c_mode": c_mode,
              "layout": layout,
              "config": config, "nan": int(torch.isnan(valid).sum().item()),
              "diff": calc_diff(valid, ref) if ref.numel() else 0.0,
              "rel": max_rel_error(valid, ref) if ref.numel() else 0.0}
    empty = [i for i, size in enumerate(sizes) if size == 0]
    expect = torch.zeros_like(valid) if c_ref is None else c_ref.to(dtype).double()
    result["empty_wrong"] = int(sum((valid[i] != expect[i]).sum().item() for i in empty))
    if c_mode == "inplace":
        ulps = 2.0 ** -5 if dtype == torch.bfloat16 else 2.0 ** -20
        significant = (product.abs() > 1e-3 * peak(product)) & (product.abs() > ulps * c_ref.abs())
        result["unwritten"] = int(((valid == c_ref) & significant).sum().item())
    again, _ = once()
    result["bitwise_repeat"] = bool(torch.equal(out.view(torch.uint8), again.view(torch.uint8)))
    return result


def k_grouped_compat(m: int, n: int, ks: list, c_mode: str = "inplace", seed: int = 0) -> dict:
    """DeepGEMM's ``k_grouped_fp8_gemm_nt_contiguous`` through deep_tile.compat.deepgemm, as DeepGEMM's
    test calls it: each group's [m, k_g] / [n, k_g] blocks one after another in flat buffers (no copy
    on the way: layout="blocks"), sizes multiples of 128 (some 0), FP32 d NaN-poisoned, ``c`` None,
    a tensor of its own or d itself (``c_mode`` "none", "float32", "inplace"); against float64."""
    from deep_tile.compat import deepgemm

    (a, a_scale, b, b_scale), product, c_values = k_grouped_problem(m, n, ks, seed)
    g = len(ks)
    layout = torch.tensor(ks, dtype=torch.int32, device=DEVICE)
    a_pair, b_pair = (to_blocks(a, ks), a_scale), (to_blocks(b, ks), b_scale)
    c_ref = None
    if c_mode == "inplace":
        d = c_values.to(torch.float32)
        c_ref = d.double().clone()
        c = d
    else:
        d = torch.full((g, m, n), float("nan"), dtype=torch.float32, device=DEVICE)
        c = c_values.to(torch.float32) if c_mode == "float32" else None
        c_ref = c.double() if c is not None else None
    deepgemm.k_grouped_fp8_gemm_nt_contiguous(a_pair, b_pair, d, ks, layout, c, recipe=(1, 1, 128))
    torch.cuda.synchronize()
    ref = product if c_ref is None else product + c_ref
    valid = d.double()
    result = {"m": m, "n": n, "k": sum(ks), "sizes": list(ks), "c_mode": c_mode, "via": "compat",
              "nan": int(torch.isnan(valid).sum().item()), "diff": calc_diff(valid, ref) if ref.numel() else 0.0,
              "rel": max_rel_error(valid, ref) if ref.numel() else 0.0}
    expect = torch.zeros_like(valid) if c_ref is None else c_ref
    result["empty_wrong"] = int(sum((valid[i] != expect[i]).sum().item() for i, k in enumerate(ks) if k == 0))
    return result


def k_grouped_blocks_bad_sizes(m: int, n: int, sizes: list, seed: int = 0) -> dict:
    """layout="blocks" with device sizes whose ranges start or end off a multiple of 16 tokens (the
    caller's error): those groups run as empty groups (out[g] keeps C, here out itself), the others
    are right, nothing faults, and the launch after it is right too (the stream is healthy)."""
    clamped, begin, ranges = [], 0, []
    k_tokens = -(-max(sum(max(s, 0) for s in sizes), 16) // 16) * 16
    for size in sizes:
        size = min(max(size, 0), k_tokens - begin)
        ranges.append((begin, begin + size))
        clamped.append(size)
        begin += size
    (a, a_scale, b, b_scale), product, c_values = k_grouped_problem(m, n, clamped, seed)
    a_in, b_in = to_blocks(a, clamped), to_blocks(b, clamped)
    group_sizes = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    out = c_values.to(torch.float32)
    start = out.double().clone()
    k_grouped_fp8_gemm_1d1d(a_in, a_scale, b_in, b_scale, group_sizes, out, c=out, layout="blocks")
    torch.cuda.synchronize()
    fits = [lo == hi or (lo % 16 == 0 and hi % 16 == 0) for lo, hi in ranges]
    ref = torch.stack([start[g] + product[g] if fit else start[g] for g, fit in enumerate(fits)])
    valid = out.double()
    misfit_changed = int(sum((valid[g] != start[g]).sum().item() for g, fit in enumerate(fits) if not fit))
    after = k_grouped(m, n, [k_tokens], c_mode="none", seed=seed + 1, layout="blocks")
    return {"m": m, "n": n, "k": k_tokens, "sizes": list(sizes), "fits": fits, "nan": int(torch.isnan(valid).sum().item()),
            "diff": calc_diff(valid, ref), "rel": max_rel_error(valid, ref), "misfit_changed": misfit_changed,
            "after": after}


def k_grouped_graph(m: int, n: int, sizes: list, new_sizes: list, seed: int = 0, layout: str = "rows") -> dict:
    """The K-grouped GEMM accumulating in place into FP32, captured once in a CUDA graph with a
    device ``group_sizes``; replayed, then replayed again after new sizes and operands were copied
    into the same tensors: out must hold C + the first products + the second."""
    assert len(sizes) == len(new_sizes)
    k_tokens = max(sum(sizes), sum(new_sizes))
    pad = k_tokens - sum(sizes)
    a, a_scale, b, b_scale = k_grouped_operands(m, n, sizes, seed, pad)
    a2, a_scale2, b2, b_scale2 = k_grouped_operands(m, n, new_sizes, seed + 1, k_tokens - sum(new_sizes))
    group_sizes = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    out = torch.randn((len(sizes), m, n), device=DEVICE, dtype=torch.float32)
    start = out.double().clone()
    stream = torch.cuda.Stream()
    blocks = layout == "blocks"  # the kernel's inputs: DeepGEMM's NT layout of a and b, rebuilt per sizes
    a_in, b_in = (to_blocks(a, sizes), to_blocks(b, sizes)) if blocks else (a, b)
    with torch.cuda.stream(stream):  # warm-up outside capture (compiles, loads)
        k_grouped_fp8_gemm_1d1d(a_in, a_scale, b_in, b_scale, group_sizes, out, c=out, layout=layout)
    torch.cuda.synchronize()
    out.copy_(start)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        k_grouped_fp8_gemm_1d1d(a_in, a_scale, b_in, b_scale, group_sizes, out, c=out, layout=layout)
    graph.replay()
    first = ref_k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, sizes)
    torch.cuda.synchronize()
    a.copy_(a2), a_scale.copy_(a_scale2), b.copy_(b2), b_scale.copy_(b_scale2)
    if blocks:
        a_in.copy_(to_blocks(a, new_sizes)), b_in.copy_(to_blocks(b, new_sizes))
    group_sizes.copy_(torch.tensor(new_sizes, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    ref = start + first + ref_k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, new_sizes)
    valid = out.double()
    return {"m": m, "n": n, "k": a.shape[1], "nan": int(torch.isnan(valid).sum().item()), "diff": calc_diff(valid, ref),
            "rel": max_rel_error(valid, ref)}


GROUPED_KINDS = {"contiguous": ProblemKind.GROUPED_CONTIGUOUS, "offsets": ProblemKind.GROUPED_OFFSETS,
                 "masked": ProblemKind.GROUPED_MASKED, "psum": ProblemKind.GROUPED_PSUM}


def grouped_acc(kind: str, counts: list, n: int, k: int, out_dtype: str, c_mode: str, config: dict | None = None,
                max_m: int = 0, seed: int = 0, graph_counts: list | None = None) -> dict:
    """One M-grouped GEMM's output variant (``kind``: contiguous / offsets / masked / psum;
    ``c_mode`` as :func:`gemm_acc`'s) against the float64 reference ``C + A.B^T`` on the real
    rows: through the public function (the selector's config, on the native host path: built
    first, ``native_calls`` counts the call there) and through :func:`deep_tile.gemm.launch.run_grouped`
    (the Python path, ``config`` forced
    when given), the two compared bitwise. Rows of no expert must keep what they held: NaN for a
    separate ``out``, C bitwise when accumulating in place. ``graph_counts``: a separate C into an
    FP32 ``out`` captured in a CUDA graph, replayed with new counts (same layout size)."""
    from gpu_cases import _grouped_activations, _grouped_info, _grouped_weights, grouped_reference

    from deep_tile.gemm.launch import run_grouped

    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    num_groups = len(counts)
    b, b_scale = _grouped_weights(num_groups, n, k, gen)
    info = _grouped_info(kind, counts, 0, False, kind == "offsets", gen)
    if kind == "masked":
        shape = (num_groups, max_m)
    elif kind in ("offsets", "psum"):
        shape = (int(info[-1].item()) + 3,)  # 3 rows of no expert after the last
    else:
        shape = (info.numel(),)
    a, a_scale = _grouped_activations(shape, k, gen, "tma")
    expected_m = max(1, sum(counts) // num_groups) if kind == "masked" else None
    hints = (expected_m,) if kind == "masked" else ()
    public = getattr(deep_tile, "m_grouped_fp8_gemm_" + kind)
    forced = None
    if config:
        forced = KernelConfig(**config)

    def reference(info_now):
        return grouped_reference(kind, a, a_scale, b, b_scale, info_now)

    product = reference(info)
    real = ~torch.isnan(product[..., 0])
    scale = float(product[real].abs().max()) if real.any() else 1.0
    c_values = torch.randn(shape + (n,), generator=gen, device=DEVICE, dtype=torch.float64) * scale / 3
    dtype = DTYPES[out_dtype]

    def once(path: str, info_now=info):
        c = None
        if c_mode == "inplace":
            out = c_values.to(dtype)
        else:
            out = torch.full(shape + (n,), float("nan"), dtype=dtype, device=DEVICE)
            if c_mode != "none":
                c = c_values.to(DTYPES[c_mode])
        start = out.double().clone() if c_mode == "inplace" else (None if c is None else c.double())
        if path == "public":
            public(a, a_scale, b, b_scale, info_now, *hints, out=out, c=out if c_mode == "inplace" else c)
        else:
            run_grouped(GROUPED_KINDS[kind], a, a_scale, b, b_scale, info_now, out, expected_m, config=forced, c=c,
                        accumulate=c_mode == "inplace")
        torch.cuda.synchronize()
        return out, start

    def check(out, start, product_now, in_place: bool = c_mode == "inplace") -> dict:
        real_now = ~torch.isnan(product_now[..., 0])
        want = product_now[real_now] + (0 if start is None else start[real_now])
        got = out[real_now].double()
        result = {"rows": int(real_now.sum().item()), "nan": int(torch.isnan(got).sum().item()),
                  "diff": calc_diff(got, want) if want.numel() else 0.0,
                  "rel": max_rel_error(got, want) if want.numel() else 0.0}
        rest = out[~real_now]
        if in_place:
            result["others_kept"] = bool(torch.equal(rest.double(), start[~real_now]))
            ulps = 2.0 ** -5 if dtype == torch.bfloat16 else 2.0 ** -20
            p = product_now[real_now]
            significant = (p.abs() > 1e-3 * scale) & (p.abs() > ulps * start[real_now].abs())
            result["unwritten"] = int(((got == start[real_now]) & significant).sum().item())
        else:
            result["others_kept"] = bool(torch.isnan(rest.float()).all().item())
        return result

    from deep_tile import native

    extension = native.module() if native.build(wait=True) else None
    before = extension.stats()["native_calls"] if extension else 0
    out, start = once("public")
    native_calls = (extension.stats()["native_calls"] - before) if extension else None
    result = {"kind": kind, "native_calls": native_calls, "counts": counts if num_groups <= 8 else f"{num_groups} groups", "n": n, "k": k,
              "m": shape[0], "out_dtype": out_dtype, "c_mode": c_mode, "config": config, **check(out, start, product)}
    again, _ = once("public")
    result["bitwise_repeat"] = bool(torch.equal(out.view(torch.uint8), again.view(torch.uint8)))
    python, _ = once("python")
    if forced is None:  # the same plan on both host paths
        result["paths_equal"] = bool(torch.equal(out.view(torch.uint8), python.view(torch.uint8)))
    else:
        result["python"] = check(python, start, product)
    if graph_counts is not None:
        c = c_values.to(torch.bfloat16)
        graph_out = torch.full(shape + (n,), float("nan"), dtype=torch.float32, device=DEVICE)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):  # warm: compile and plan outside the capture
            public(a, a_scale, b, b_scale, info, *hints, out=graph_out, c=c)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            public(a, a_scale, b, b_scale, info, *hints, out=graph_out, c=c)
        info.copy_(_grouped_info(kind, graph_counts, 0, False, kind == "offsets", gen))
        graph_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        result["graph"] = check(graph_out, c.double(), reference(info), in_place=False)
    return result


if __name__ == "__main__":
    serve(globals())
