"""GPU checks of the fused casts (deep_tile/casts/cast_transpose.py), run in a child process by
tests/test_cast_transpose.py (conftest.run_child_cases; the protocol of tests/gpu_cases.py) and by
tools/sanitize_casts.py.

``cast_case``: the kernel on outputs poisoned twice (0xFF / 0x55 bytes, NaN scales), each time
compared bitwise with the torch reference of the same math on the CPU (NaN matching NaN, for inf
inputs); the scales' pitch padding must stay poisoned; then the public function's result must equal
the kernel's. ``gemm_case``: a linear layer's fprop, dgrad and weight gradient run on the fused
casts' outputs as returned (zero-copy layouts), against the float64 references.
"""
from __future__ import annotations

import math

import torch

from deep_tile.gemm import layouts
from deep_tile.casts.cast_transpose import per_block_cast_transpose_to_fp8, per_token_cast_transpose_to_fp8
from deep_tile.casts.cast_transpose_kernels import launch
from deep_tile.casts.cast_transpose_ref import block_cast_transpose_ref, token_cast_transpose_ref
from deep_tile.common import align4, align_up, ceil_div
from deep_tile.gemm import fp8_gemm, fp8_gemm_1d1d
from deep_tile.reference import ref_fp8_gemm, ref_fp8_gemm_1d1d
from deep_tile.testing.numeric import DIFF_TOL, calc_diff
from gpu_cases import serve

DEVICE = "cuda"


def _sample(rows: int, cols: int, seed: int, special: bool) -> torch.Tensor:
    """bf16 CUDA data whose rows span many magnitudes; ``special`` adds zero rows and columns, a
    huge row and +-inf values."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=gen).float())
    if special:
        x[0] = 0
        x[:, min(5, cols - 1)] = 0
        if rows > 2:
            x[1] = 3e38
            x[2, 3] = math.inf
            x[rows - 1, cols - 1] = -math.inf
    return x.bfloat16().to(DEVICE)


def _fp8(shape, pitch: int, byte: int) -> torch.Tensor:
    full = torch.full((shape[0], pitch), byte, dtype=torch.uint8, device=DEVICE)
    return full.view(torch.float8_e4m3fn)[:, : shape[1]]


def _col_major(rows: int, cols: int) -> torch.Tensor:
    return torch.full((cols, align4(rows)), math.nan, device=DEVICE).t()[:rows]


def _outputs(kind: str, rows: int, cols: int, transpose: bool, byte: int):
    """Poisoned outputs in the public functions' layouts."""
    q = _fp8((rows, cols), cols, byte)
    if kind == "token":
        s = _col_major(rows, ceil_div(cols, 128))
        qt = _fp8((cols, align_up(rows, 16)), align_up(rows, 16), byte) if transpose else None
        st = _col_major(cols, ceil_div(rows, 128)) if transpose else None
    else:
        s = torch.full((ceil_div(rows, 128), ceil_div(cols, 128)), math.nan, device=DEVICE)
        qt = _fp8((cols, rows), rows, byte) if transpose else None
        st = torch.full((ceil_div(cols, 128), ceil_div(rows, 128)), math.nan, device=DEVICE) if transpose else None
    return q, s, qt, st


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bitwise equal, or both NaN (e4m3 NaN is 0x7F / 0xFF; float32 any NaN)."""
    got, want = got.cpu(), want.cpu()
    if got.shape != want.shape:
        return False
    if got.dtype == torch.float8_e4m3fn:
        bits_equal = got.view(torch.uint8) == want.view(torch.uint8)
    else:
        bits_equal = got.view(torch.int32) == want.view(torch.int32)
    return bool((bits_equal | (got.float().isnan() & want.float().isnan())).all())


def _pitch_untouched(s: torch.Tensor) -> bool:
    """The padding rows of a column-major scale tensor (rows .. pitch-1) are still NaN."""
    rows, cols = s.shape
    pitch = s.stride(1)
    if pitch == rows or cols == 0:
        return True
    storage = torch.as_strided(s, (cols, pitch), (pitch, 1))
    return bool(storage[:, rows:].isnan().all())


def cast_case(kind: str, rows: int, cols: int, transpose: bool, power_of_two: bool, special: bool,
              seed: int = 0, design: str = None) -> dict:
    """The kernels of ``design`` (default: the contract's) on poisoned outputs against the
    reference; then the public function (default design) against them."""
    x = _sample(rows, cols, seed, special)
    ref_fn = token_cast_transpose_ref if kind == "token" else block_cast_transpose_ref
    want = ref_fn(x.cpu(), transpose, power_of_two)
    result = dict(case=f"{kind} {rows}x{cols} t{int(transpose)} p2{int(power_of_two)} sp{int(special)}"
                       + (f" {design}" if design else ""))
    ok = True
    outs = None
    for byte in (0xFF, 0x55):
        outs = _outputs(kind, rows, cols, transpose, byte)
        launch(kind == "block", x, *outs, power_of_two, design=design)
        torch.cuda.synchronize()
        for name, got, ref in zip("q s qt st".split(), outs, want):
            if got is None:
                continue
            good = _same(got, ref)
            result[f"{name}_{byte:02x}"] = good
            ok &= good
        if kind == "token":
            padded = _pitch_untouched(outs[1]) and (not transpose or _pitch_untouched(outs[3]))
            result[f"pad_{byte:02x}"] = padded
            ok &= padded
    public_fn = per_token_cast_transpose_to_fp8 if kind == "token" else per_block_cast_transpose_to_fp8
    public = public_fn(x, transpose=transpose, power_of_two_scales=power_of_two)
    result["public"] = all(p is None and o is None or _same(p, o) for p, o in zip(public, outs))
    if kind == "token":
        result["public"] &= layouts.is_tma_aligned(public.s) and (not transpose or layouts.is_tma_aligned(public.st))
    result["ok"] = bool(ok and result["public"])
    return result


def stack_case(experts: int, rows: int, cols: int, power_of_two: bool, seed: int = 0, design: str = None) -> dict:
    """The weight cast of a stack ``[experts, rows, cols]`` in one launch of ``design`` into
    poisoned stacked outputs, each matrix against the reference of that matrix alone; then the
    public function (3-D) against them."""
    x = torch.stack([_sample(rows, cols, seed + e, e % 2 == 1) for e in range(experts)])
    result = dict(case=f"stack {experts}x{rows}x{cols} p2{int(power_of_two)}" + (f" {design}" if design else ""))
    ok = True
    rb, cb = ceil_div(rows, 128), ceil_div(cols, 128)
    outs = None
    for byte in (0xFF, 0x55):
        outs = (torch.full((experts, rows, cols), byte, dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn),
                torch.full((experts, rb, cb), math.nan, device=DEVICE),
                torch.full((experts, cols, rows), byte, dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn),
                torch.full((experts, cb, rb), math.nan, device=DEVICE))
        launch(True, x, *outs, power_of_two, design=design)
        torch.cuda.synchronize()
        for e in range(experts):
            want = block_cast_transpose_ref(x[e].cpu(), True, power_of_two)
            good = all(_same(got[e], ref) for got, ref in zip(outs, want))
            result[f"e{e}_{byte:02x}"] = good
            ok &= good
    public = per_block_cast_transpose_to_fp8(x, transpose=True, power_of_two_scales=power_of_two)
    result["public"] = all(_same(p, o) for p, o in zip(public, outs))
    result["ok"] = bool(ok and result["public"])
    return result


def grouped_case(rows: int, cols: int, offsets: list, power_of_two: bool, seed: int = 0, design: str = None) -> dict:
    """The grouped activation cast (row groups at ``offsets``) of ``design`` into poisoned outputs
    against the reference (rows in their groups' 128-row bands): q and s on the groups' rows (the
    rows outside every group keep their poison), qt and st whole (zeros past each group's rows);
    then the public function against them."""
    from deep_tile.casts.cast_transpose_ref import grouped_token_cast_transpose_ref, padded_group_starts
    from deep_tile.kernels.cast_transpose import row_bands

    x = _sample(rows, cols, seed, seed % 2 == 1)
    offs = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    want = grouped_token_cast_transpose_ref(x.cpu(), offsets, power_of_two)
    inside = torch.zeros(rows, dtype=torch.bool)
    for first, end, _ in padded_group_starts(offsets, rows):
        inside[first:end] = True
    bands = row_bands(rows, len(offsets) - 1)
    result = dict(case=f"grouped {rows}x{cols} {offsets} p2{int(power_of_two)}" + (f" {design}" if design else ""))
    ok = True
    outs = None
    for byte in (0xFF, 0x55):
        outs = (_fp8((rows, cols), cols, byte), _col_major(rows, ceil_div(cols, 128)),
                _fp8((cols, bands * 128), bands * 128, byte), _col_major(cols, bands))
        launch(False, x, *outs, power_of_two, design=design, group_offsets=offs)
        torch.cuda.synchronize()
        q, s, qt, st = (t.cpu() for t in outs)
        good = {"q": _same(q[inside], want[0][inside]) and bool((q[~inside].view(torch.uint8) == byte).all()),
                "s": _same(s[inside], want[1][inside]) and bool(s[~inside].isnan().all()),
                "qt": _same(qt, want[2]), "st": _same(st, want[3])}
        for name, value in good.items():
            result[f"{name}_{byte:02x}"] = value
            ok &= value
    public = per_token_cast_transpose_to_fp8(x, transpose=True, power_of_two_scales=power_of_two, group_offsets=offs)
    # rows outside every group are never written: select on the device, so no copy reads them
    rows_in = inside.to(DEVICE)
    result["public"] = all(_same(p[rows_in] if i < 2 else p, o[rows_in] if i < 2 else o)
                           for i, (p, o) in enumerate(zip(public, outs)))
    result["ok"] = bool(ok and result["public"])
    return result


def gemm_case(tokens: int, n: int, k: int, seed: int = 0) -> dict:
    """Y = X W^T (X [T, k], W [n, k]); dX = dY W; dW = dY^T X: each GEMM on the casts' outputs."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, k, generator=gen).bfloat16().to(DEVICE)
    w = (torch.randn(n, k, generator=gen) * 0.05).bfloat16().to(DEVICE)
    dy = torch.randn(tokens, n, generator=gen).bfloat16().to(DEVICE)
    cx, cdy = per_token_cast_transpose_to_fp8(x), per_token_cast_transpose_to_fp8(dy)
    cw = per_block_cast_transpose_to_fp8(w)
    zero_copy = all(layouts.is_tma_aligned(s) for s in (cx.s, cx.st, cdy.s, cdy.st))
    y = fp8_gemm(cx.q, cx.s, cw.q, cw.s)
    dx = fp8_gemm(cdy.q, cdy.s, cw.qt, cw.st)
    dw = fp8_gemm_1d1d(cdy.qt, cdy.st, cx.qt, cx.st, out_dtype=torch.float32)
    diffs = {
        "y": calc_diff(y.double(), ref_fp8_gemm(cx.q, cx.s, cw.q, cw.s)),
        "dx": calc_diff(dx.double(), ref_fp8_gemm(cdy.q, cdy.s, cw.qt, cw.st)),
        "dw": calc_diff(dw.double(), ref_fp8_gemm_1d1d(cdy.qt, cdy.st, cx.qt, cx.st)),
        # against the unquantised products: the FP8 recipe's error
        "dw_vs_bf16": calc_diff(dw.double(), dy.double().t() @ x.double()),
        "y_vs_bf16": calc_diff(y.double(), x.double() @ w.double().t()),
    }
    exact = ("y", "dx", "dw")  # the same quantised math: DIFF_TOL; the FP8 recipe's own error: 1e-2
    ok = zero_copy and all(diffs[key] < (DIFF_TOL if key in exact else 1e-2) for key in diffs) and not any(
        bool(t.isnan().any()) for t in (y, dx, dw))
    return dict(case=f"gemm T={tokens} n={n} k={k}", zero_copy=zero_copy, **diffs, ok=bool(ok))


if __name__ == "__main__":
    serve(globals())
