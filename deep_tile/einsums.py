"""DeepGEMM's einsum expressions on deep_tile: ``einsum`` (bf16) and ``fp8_einsum``.

The expressions are the ones DeepGEMM runs on SM90, spelled exactly as it spells them, with its
checks; every other expression is refused (ValueError):

* ``einsum('bmk,bnk->mn', a, b, d, c=None)``: bf16 ``a [s, m, k]``, ``b [s, n, k]`` (contiguous)
  -> ``d [m, n] = sum_s a[s] @ b[s]^T``. A float32 ``d`` must be accumulated into (``c`` is ``d``:
  ``d += ...``); a bf16 ``d`` takes no ``c`` (the float32 sum is rounded once). k and m, n must be
  multiples of 64, ``s * max(m, n)`` within int32, and ``use_cublaslt`` False (DeepGEMM's
  limits). On CUDA deep_tile's kernel (:mod:`deep_tile.kernels.einsum`): float32 sums added into d
  in no fixed order, so the last bits may differ from run to run.
* ``einsum('bhr,hdr->bhd', ...)`` and ``einsum('bhd,hdr->bhr', ...)``: bf16 ``[b, h, r] x [h, d, r]
  -> [b, h, d]`` and ``[b, h, d] x [h, d, r] -> [b, h, r]``, unit stride along the last dimension of
  all three, no ``c``. DeepGEMM runs its own BF16 GEMM (or cuBLASLt with ``use_cublaslt``);
  deep_tile runs, for both settings, its batched BF16 GEMM (one launch over every head) from
  :data:`BATCHED_MIN_HEADS` heads and :data:`BATCHED_MIN_ROWS` rows a head on, else one ``torch.bmm``
  (cuBLAS), each on head-major views of the three tensors, reading and writing them in place
  (:data:`BH_PATHS` names the alternatives).
* ``fp8_einsum('bhr,hdr->bhd', (x, sx), (y, sy), d, c=None, recipe=(1, 128, 128))``: FP8
  ``x [b, h, r]`` with float32 1x128 scales ``sx [b, h, ceil(r / 128)]``, FP8 ``y [h, d, r]`` with
  float32 128x128 scales ``sy [h, ceil(d / 128), ceil(r / 128)]``, bf16 ``d [b, h, d]`` (``+ c``).
  On CUDA, when r is a multiple of 16 and d of 8: when one head's 128 x 128 tiles fill the SMs,
  deep_tile's dense FP8 GEMM once per head, reading x and writing d in place; else the masked
  grouped FP8 GEMM (one group per head, b rows each) on a head-major copy of x, d taking its result
  back (:data:`FP8_PATHS`; the opt-in ``strided`` path reads x and writes d in place through the
  grouped GEMM's head-strided kernel). Other sizes (and the CPU) take the dequantized product in float32
  torch. DeepGEMM's other FP8 expressions (``'bhd,hdr->bhr'``, ``'bhd,bhr->hdr'``) run on SM100
  only and are refused.

Arguments are checked before anything is launched or written; on the CPU every expression runs
in torch.
"""
from __future__ import annotations


import torch

from deep_tile import env
from deep_tile.common import I32_MAX, ceil_div
from deep_tile.device import get_num_sms
from deep_tile.gemm.dense import fp8_gemm
from deep_tile.gemm.layouts import get_tma_aligned_a_scale
from deep_tile.gemm.grouped import m_grouped_fp8_gemm_masked
from deep_tile.gemm.tma import encode_2d
from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernels import einsum as contract
from deep_tile.pdl import get_pdl

__all__ = ["einsum", "fp8_einsum", "EXPRESSIONS", "FP8_EXPRESSIONS", "FP8_RECIPE", "BH_PATHS", "FP8_PATHS",
           "BH_PATH_ENV", "FP8_PATH_ENV", "DIAG_MAX_ROWS"]

EXPRESSIONS = ("bmk,bnk->mn", "bhr,hdr->bhd", "bhd,hdr->bhr")
"""The expressions :func:`einsum` takes (DeepGEMM's on SM90)."""
FP8_EXPRESSIONS = ("bhr,hdr->bhd",)
"""The expressions :func:`fp8_einsum` takes (DeepGEMM's on SM90)."""
FP8_RECIPE = (1, 128, 128)
"""The one scaling recipe of :func:`fp8_einsum` on SM90: 1x128 scales for x, 128x128 for y."""
_MAX_HEADS = 512  # the masked grouped GEMM's most groups
BH_PATH_ENV = "DEEP_TILE_BH_EINSUM"
"""Environment variable choosing how the per-head bf16 expressions run on CUDA (:data:`BH_PATHS`)."""
BH_PATHS = ("auto", "bmm", "heads", "torch", "batched", "batched_regs")
"""``auto`` (default): ``batched`` from :data:`BATCHED_MIN_HEADS` heads and :data:`BATCHED_MIN_ROWS` rows a head
on, else ``bmm``; ``bmm``: one ``torch.bmm`` (cuBLAS strided-batched) on head-major views of a, b and d,
nothing copied; ``heads``: deep_tile's BF16 GEMM once per head on the strided per-head views;
``torch``: ``torch.einsum`` into a new tensor, copied into d (the first implementation);
``batched``: deep_tile's batched BF16 GEMM (``deep_tile.bf16.batched_bf16_gemm_nt``), one persistent
launch over (head, row block, column block) reading a and b through 3-D tensor maps whose third
coordinate is the head and writing d in place (nothing copied; w read K-major for ``bhr,hdr->bhd``,
MN-major for ``bhd,hdr->bhr``; d through a 3-D TMA map where its strides allow), or ``bmm`` where the views
break its 16-byte rules (:func:`_bh_batched_views`); ``batched_regs``: the same with d stored from registers."""
BATCHED_MIN_HEADS = 64
BATCHED_MIN_ROWS = 128
"""Where ``auto`` takes the batched BF16 GEMM: many heads of at least this many rows (b), where cuBLAS's
strided batches of small per-head GEMMs measured slower than it; few heads of large GEMMs, or few rows, stay
on ``torch.bmm`` (docs/performance.md has the timings)."""
FP8_PATH_ENV = "DEEP_TILE_FP8_EINSUM"
"""Environment variable choosing how :func:`fp8_einsum` runs on CUDA (:data:`FP8_PATHS`)."""
FP8_PATHS = ("auto", "heads", "masked", "diag", "copy", "strided")
"""``heads``: deep_tile's dense FP8 GEMM once per head, reading x and writing d in place (strided
per-head views; only the scales of x are copied, once for all heads); ``masked``: the masked
grouped FP8 GEMM on head-major copies of x, its scales (read row-major) and c, made by one kernel
(``deep_tile_einsum_head_major``; torch copies in 8-byte words when a row is not whole 16-byte
chunks), its output moved into d in 8-byte words; ``copy``: the first implementation (the same
with torch's element-wise copies and a fresh masked_m per call); ``auto`` (default): ``strided``
where its views apply, else ``heads`` when one head's 128 x 128 tiles fill the SMs, ``diag`` for at
most :data:`DIAG_MAX_ROWS` rows b * h without c, else ``masked``. ``diag``: one dense FP8 GEMM of x as ``[b * h, r]`` against y as
``[h * d, r]`` (both read in place; h times the products needed, which costs nothing while reading
y dominates), whose diagonal blocks (row (b, h), columns of head h) are moved into d. ``strided``: the masked grouped GEMM's head-strided
kernel (``DT_HEAD_STRIDED``) reading x and its scales and writing d in place, nothing copied, when
there is no c, r is a multiple of 512, d of 64 and x, sx and d hold their heads side by side in
each row (16-byte rows); else the ``masked`` path."""
DIAG_MAX_ROWS = 256
"""Most rows b * h of the ``diag`` path under ``auto`` (beyond, its h-fold products cost more than
the grouped path's copies)."""


def _fail(fn: str, message: str, error=ValueError):
    raise error(f"{fn}: {message}")


def _tensors(fn: str, **named) -> None:
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            _fail(fn, f"{name} must be a torch.Tensor, got {type(t).__name__}.", TypeError)


def _one_device(fn: str, *tensors) -> None:
    devices = {t.device for t in tensors if t is not None}
    if len(devices) != 1:
        _fail(fn, f"all tensors must be on one device; got {sorted(map(str, devices))}.")


def _check_bmk(a, b, d, c) -> tuple:
    """'bmk,bnk->mn' checked (DeepGEMM's rules, and d's shape); returns (s, m, n, k)."""
    fn = "einsum('bmk,bnk->mn')"
    if d.dtype == torch.float32:
        if c is None or c.data_ptr() != d.data_ptr() or c.shape != d.shape or c.stride() != d.stride():
            _fail(fn, "a float32 d must be accumulated into: pass c=d (d += sum_s a[s] @ b[s].T).")
    elif c is not None:
        _fail(fn, "a bf16 d takes no c (only a float32 d accumulates).")
    for name, t in (("a", a), ("b", b), ("d", d)):
        if not t.is_contiguous():
            _fail(fn, f"{name} must be contiguous.")
    if a.dim() != 3 or b.dim() != 3:
        _fail(fn, f"a and b must be 3-D ([s, m, k], [s, n, k]); got {tuple(a.shape)} and {tuple(b.shape)}.")
    (s, m, k), (s_b, n, k_b) = a.shape, b.shape
    if s != s_b or k != k_b:
        _fail(fn, f"a {tuple(a.shape)} and b {tuple(b.shape)} must agree in s and k.")
    if tuple(d.shape) != (m, n):
        _fail(fn, f"d must be [m, n] = {(m, n)}, got {tuple(d.shape)}.")
    if k % contract.BLOCK_K or m % 64 or n % 64:
        _fail(fn, f"k must be a multiple of {contract.BLOCK_K} and m, n of 64; got m={m}, n={n}, k={k}.")
    if s * max(m, n) > I32_MAX:
        _fail(fn, f"s * max(m, n) must stay within int32; got s={s}, m={m}, n={n}.")
    _one_device(fn, a, b, d)
    return s, m, n, k


def _bmk_bnk_mn(a, b, d) -> None:
    """d (float32) += sum_s a[s] @ b[s]^T, by the kernel on CUDA, in float32 torch on the CPU."""
    s, m, n, k = a.shape[0], a.shape[1], b.shape[1], a.shape[2]
    if s == 0 or m == 0 or n == 0 or k == 0:
        return
    if not a.is_cuda:
        d += torch.einsum("bmk,bnk->mn", a.float(), b.float())
        return
    for name, t, align in (("a", a, 16), ("b", b, 16), ("d", d, 8)):  # TMA; two-float reductions
        if t.data_ptr() % align:
            _fail("einsum('bmk,bnk->mn')", f"{name} must start on a {align}-byte boundary.")
    map_a = encode_2d(a.data_ptr(), "bfloat16", k, s * m, k * 2, contract.BLOCK_K, contract.BLOCK_M, contract.SWIZZLE,
                      256)
    map_b = encode_2d(b.data_ptr(), "bfloat16", k, s * n, k * 2, contract.BLOCK_K, contract.BLOCK_N, contract.SWIZZLE,
                      256)
    split = contract.split_factor(s, m, n, k, get_num_sms())
    values = (map_a, map_b, d.data_ptr(), s, m, n, k, split)
    kernel = get_kernel(contract.ENTRY, contract.defines(), contract.SYMBOL)
    device = a.device
    with torch.cuda.device(device):
        kernel.launch(grid=contract.grid(s, m, n, k, split), block=contract.THREADS, smem_bytes=contract.smem_bytes(),
                      stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(contract.ARGUMENT_KINDS, values))), device=device.index, pdl=get_pdl())


def _check_bh(expr: str, a, b, d, c) -> None:
    """'bhr,hdr->bhd' / 'bhd,hdr->bhr' checked (DeepGEMM's rules)."""
    fn = f"einsum({expr!r})"
    if c is not None:
        _fail(fn, "takes no c.")
    if a.dim() != 3 or b.dim() != 3 or d.dim() != 3:
        _fail(fn, f"a, b and d must be 3-D; got {tuple(a.shape)}, {tuple(b.shape)}, {tuple(d.shape)}.")
    (bs, h, x), (h_b, y, z), (bs_d, h_d, w) = a.shape, b.shape, d.shape
    if expr == "bhr,hdr->bhd":  # a [b, h, r], b [h, d, r], d [b, h, d]
        ok = h == h_b and x == z and bs == bs_d and h == h_d and y == w
    else:  # a [b, h, d], b [h, d, r], d [b, h, r]
        ok = h == h_b and x == y and bs == bs_d and h == h_d and z == w
    if not ok:
        _fail(fn, f"shapes disagree: a {tuple(a.shape)}, b {tuple(b.shape)}, d {tuple(d.shape)}.")
    for name, t in (("a", a), ("b", b), ("d", d)):
        if t.dtype != torch.bfloat16 or (t.shape[2] > 1 and t.stride(2) != 1):
            _fail(fn, f"{name} must be bf16 with unit stride along its last dimension; got {t.dtype} strides "
                      f"{t.stride()}.")
    _one_device(fn, a, b, d)


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
           use_cublaslt: bool = False) -> None:
    """DeepGEMM's bf16 einsum expressions (module doc), written into ``d``; returns None.

    Raises:
        TypeError: a non-tensor argument or a non-str expression.
        ValueError: an expression other than :data:`EXPRESSIONS`, or a dtype, shape, layout or
            device the expression does not take.
    """
    if not isinstance(expr, str):
        _fail("einsum", f"expr must be a str, got {type(expr).__name__}.", TypeError)
    _tensors("einsum", a=a, b=b, d=d)
    if c is not None:
        _tensors("einsum", c=c)
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        _fail("einsum", f"a and b must be bf16; got {a.dtype} and {b.dtype}.")
    if d.dtype not in (torch.bfloat16, torch.float32):
        _fail("einsum", f"d must be bf16 or float32, got {d.dtype}.")
    if c is not None and c.dtype != d.dtype:
        _fail("einsum", f"c must have d's dtype {d.dtype}, got {c.dtype}.")
    if expr not in EXPRESSIONS:
        _fail("einsum", f"unsupported expression {expr!r}; the expressions are {EXPRESSIONS}.")
    if expr == "bmk,bnk->mn":
        if use_cublaslt:
            _fail("einsum('bmk,bnk->mn')", "use_cublaslt=True is not taken (DeepGEMM runs its own kernel only).")
        _check_bmk(a, b, d, c)
        if d.dtype == torch.float32:
            _bmk_bnk_mn(a, b, d)
        else:
            workspace = torch.zeros(d.shape, dtype=torch.float32, device=d.device)
            _bmk_bnk_mn(a, b, workspace)
            d.copy_(workspace)
        return
    _check_bh(expr, a, b, d, c)
    path = env.bh_einsum()
    tracked = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)  # out= refuses autograd
    if not a.is_cuda or path == "torch" or tracked or 0 in a.shape or 0 in d.shape or 0 in b.shape:
        d.copy_(torch.einsum(expr, a, b))
        return
    if path == "heads" and _bh_heads(expr, a, b, d):
        return
    if path == "auto":
        path = bh_auto_path(a.shape[0], a.shape[1])
    if path in ("batched", "batched_regs"):
        views = _bh_batched_views(expr, a, b, d)
        if views is not None:
            from deep_tile.bf16 import batched_bf16_gemm_nt

            batched_bf16_gemm_nt(*views, store="registers" if path == "batched_regs" else "auto")
            return
    _bh_bmm(expr, a, b, d)


def bh_auto_path(rows: int, heads: int) -> str:
    """The path ``auto`` takes for ``rows`` (b) rows of ``heads`` heads: ``batched`` from
    :data:`BATCHED_MIN_HEADS` heads and :data:`BATCHED_MIN_ROWS` rows on, else ``bmm``."""
    return "batched" if heads >= BATCHED_MIN_HEADS and rows >= BATCHED_MIN_ROWS else "bmm"


def _bh_bmm(expr: str, a, b, d) -> None:
    """The per-head expression as one ``torch.bmm`` on head-major views written into d's own
    head-major view: cuBLAS takes the strides as they are (batch stride x, row pitch h * x)."""
    rhs = b.transpose(1, 2) if expr == "bhr,hdr->bhd" else b
    torch.bmm(a.transpose(0, 1), rhs, out=d.transpose(0, 1))


def _bh_batched_views(expr: str, a, b, d) -> tuple | None:
    """(A [h, b, k], B [h, n, k], D [h, b, n]) head-major views for the batched BF16 GEMM (the head its
    batch index): ``bhr,hdr->bhd`` reads w [h, d, r] as a K-major B, ``bhd,hdr->bhr`` reads it transposed,
    [h, r, d] with r contiguous, as an MN-major B; None where the views break the kernel's rules
    (``deep_tile.bf16.batched_fits``)."""
    from deep_tile.bf16 import batched_fits

    views = (a.transpose(0, 1), b if expr == "bhr,hdr->bhd" else b.transpose(1, 2), d.transpose(0, 1))
    return views if batched_fits(*views) else None


def _bh_heads(expr: str, a, b, d) -> bool:
    """The per-head expression as one deep_tile BF16 GEMM per head on strided views (nothing
    copied); False, having done nothing, when a view breaks the GEMM's 16-byte TMA rules."""
    from deep_tile.bf16 import bf16_gemm_nn, bf16_gemm_nt

    views = (a, b, d)
    if any(t.data_ptr() % 16 or any(s % 8 for s in t.stride()[:-1]) for t in views):
        return False
    gemm = bf16_gemm_nt if expr == "bhr,hdr->bhd" else bf16_gemm_nn
    for head in range(a.shape[1]):  # a[:, h] [b, x]; b[h] [d, r]; d[:, h] [b, y]
        gemm(a[:, head], b[head], d[:, head])
    return True


def _check_fp8(expr, a, b, d, c, recipe) -> tuple:
    """fp8_einsum checked; returns (x, sx, y, sy)."""
    fn = "fp8_einsum"
    if not isinstance(expr, str):
        _fail(fn, f"expr must be a str, got {type(expr).__name__}.", TypeError)
    for name, pair in (("a", a), ("b", b)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            _fail(fn, f"{name} must be a pair (fp8 tensor, float32 scales); got {type(pair).__name__}.", TypeError)
    x, sx, y, sy = a[0], a[1], b[0], b[1]
    _tensors(fn, **{"a[0]": x, "a[1]": sx, "b[0]": y, "b[1]": sy, "d": d})
    if c is not None:
        _tensors(fn, c=c)
    if expr not in FP8_EXPRESSIONS:
        _fail(fn, f"unsupported expression {expr!r} on SM90; the expressions are {FP8_EXPRESSIONS} "
                  "(DeepGEMM runs 'bhd,hdr->bhr' and 'bhd,bhr->hdr' on SM100 only).")
    if tuple(recipe) != FP8_RECIPE:
        _fail(fn, f"recipe must be {FP8_RECIPE} on SM90 (1x128 scales for a, 128x128 for b); got {tuple(recipe)}.")
    if x.dim() != 3 or y.dim() != 3 or d.dim() != 3:
        _fail(fn, f"a[0], b[0] and d must be 3-D; got {tuple(x.shape)}, {tuple(y.shape)}, {tuple(d.shape)}.")
    (bs, h, r), (h_y, dd, r_y) = x.shape, y.shape
    if h != h_y or r != r_y or tuple(d.shape) != (bs, h, dd):
        _fail(fn, f"shapes disagree: a[0] {tuple(x.shape)}, b[0] {tuple(y.shape)}, d {tuple(d.shape)} "
                  "(want [b, h, r], [h, d, r], [b, h, d]).")
    if x.dtype != torch.float8_e4m3fn or y.dtype != torch.float8_e4m3fn:
        _fail(fn, f"a[0] and b[0] must be float8_e4m3fn; got {x.dtype} and {y.dtype}.")
    if x.stride(-1) != 1 or y.stride(-1) != 1:
        _fail(fn, "a[0] and b[0] must be K-major (unit stride along r) on SM90.")
    if d.dtype != torch.bfloat16 or d.stride(-1) != 1:
        _fail(fn, f"d must be bf16 with unit stride along its last dimension on SM90; got {d.dtype} {d.stride()}.")
    if c is not None and (c.dtype != d.dtype or tuple(c.shape) != tuple(d.shape) or c.stride(-1) != 1):
        _fail(fn, f"c must be like d (bf16 {tuple(d.shape)}, unit last stride); got {c.dtype} {tuple(c.shape)}.")
    kb = ceil_div(r, 128)
    if sx.dtype != torch.float32 or tuple(sx.shape) != (bs, h, kb):
        _fail(fn, f"a[1] must be float32 [{bs}, {h}, {kb}]; got {sx.dtype} {tuple(sx.shape)}.")
    if sy.dtype != torch.float32 or tuple(sy.shape) != (h, ceil_div(dd, 128), kb):
        _fail(fn, f"b[1] must be float32 [{h}, {ceil_div(dd, 128)}, {kb}]; got {sy.dtype} {tuple(sy.shape)}.")
    _one_device(fn, x, sx, y, sy, d, c)
    return x, sx, y, sy


def _head_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` [b, h, x] copied to [h, b, x] with canonical strides (``.contiguous()`` keeps a permuted
    view's strides when b is 1, which the grouped GEMM's check refuses)."""
    out = torch.empty((t.shape[1], t.shape[0], t.shape[2]), dtype=t.dtype, device=t.device)
    out.copy_(t.permute(1, 0, 2))
    return out


def _words(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed in the widest of 8-, 4- or 2-byte words its last dimension, strides and offset
    allow (unit last stride), else itself: a permuted copy then moves words, not single bytes."""
    size = t.element_size()
    for word in (torch.int64, torch.int32, torch.int16):
        ratio = word.itemsize // size
        if ratio <= 1:
            break
        if (t.shape[-1] % ratio == 0 and t.storage_offset() % ratio == 0
                and all(st % ratio == 0 for st in t.stride()[:-1]) and (t.shape[-1] == 1 or t.stride(-1) == 1)):
            return t.view(word)
    return t


def _moved(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` (same shape and dtype, last dimension of unit stride) in the widest
    word both allow."""
    wd, ws = _words(dst), _words(src)
    if wd.dtype == ws.dtype and wd.shape == ws.shape:
        wd.copy_(ws)
    else:
        dst.copy_(src)


def _head_major_words(t: torch.Tensor) -> torch.Tensor:
    """:func:`_head_major` moved in words (:func:`_moved`)."""
    out = torch.empty((t.shape[1], t.shape[0], t.shape[2]), dtype=t.dtype, device=t.device)
    _moved(out, t.permute(1, 0, 2))
    return out


def _chunk_rows(t: torch.Tensor) -> tuple | None:
    """(chunks per row, b stride, h stride) of a [b, h, row] tensor in 16-byte chunks, or None
    when its rows, strides or start are not whole chunks."""
    size = t.element_size()
    per = 16 // size
    if (t.shape[2] % per or (t.shape[2] > 1 and t.stride(2) != 1) or t.stride(0) % per or t.stride(1) % per
            or t.data_ptr() % 16):
        return None
    return t.shape[2] // per, t.stride(0) // per, t.stride(1) // per


def _head_major_fused(x, sx, c) -> tuple | None:
    """(x, sx, c) copied to contiguous head-major [h, b, row] by one kernel (the einsum entry's
    ``deep_tile_einsum_head_major``), c None when None; None when a tensor is not in 16-byte chunks
    or the chunks pass 2^31 (the kernel's 32-bit indices)."""
    bs, h, _ = x.shape
    tensors = [t for t in (x, sx, c) if t is not None]
    layouts = [_chunk_rows(t) for t in tensors]
    if any(layout is None for layout in layouts):
        return None
    total = sum(bs * h * layout[0] for layout in layouts)
    if total >= 2**31 or any(max(layout[1:]) >= 2**31 for layout in layouts):
        return None
    outs = [torch.empty((h, bs, t.shape[2]), dtype=t.dtype, device=t.device) for t in tensors]
    values = []
    for t, out, layout in zip(tensors, outs, layouts):
        values += [t.data_ptr(), out.data_ptr(), *layout]
    values += [0, 0, 0, 0, 0] * (3 - len(tensors)) + [bs, h]
    kernel = get_kernel(contract.ENTRY, contract.defines(), contract.HEAD_MAJOR_SYMBOL)
    device = x.device
    with torch.cuda.device(device):
        kernel.launch(grid=contract.head_major_grid(total, get_num_sms()), block=contract.HEAD_MAJOR_THREADS,
                      smem_bytes=0, stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(contract.HEAD_MAJOR_ARGUMENT_KINDS, values))), device=device.index,
                      pdl=get_pdl())
    return outs[0], outs[1], (outs[2] if c is not None else None)


_MASKED_M: dict = {}  # (device, heads, rows) -> int32 [heads] filled with rows: read-only, made once


def _masked_m(h: int, bs: int, device) -> torch.Tensor:
    """int32 [h] of bs on ``device``, cached (not while a CUDA graph is being captured: its
    memory would belong to the graph's pool)."""
    key = (str(device), h, bs)
    cached = _MASKED_M.get(key)
    if cached is not None:
        return cached
    made = torch.full((h,), bs, dtype=torch.int32, device=device)
    if not torch.cuda.is_current_stream_capturing():
        _MASKED_M[key] = made
    return made


def _heads_fit(x, d, c) -> bool:
    """Whether every per-head view passes the dense GEMM's TMA rules: 16-byte starts and row pitches."""
    if x.data_ptr() % 16 or x.stride(0) % 16 or x.stride(1) % 16:
        return False
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * 2) % 16 == 0 and (t.stride(1) * 2) % 16 == 0
               for t in (d, c) if t is not None)


def _fp8_heads(x, sx, y, sy, d, c) -> None:
    """fp8_einsum as one dense FP8 GEMM per head: x[:, h] and d[:, h] read and written in place;
    x's scales copied once into the per-head TMA-aligned layout (every head's then zero-copy)."""
    scales = get_tma_aligned_a_scale(sx.permute(1, 0, 2))  # [h, b, K blocks], per head column-major
    for head in range(x.shape[1]):
        fp8_gemm(x[:, head], scales[head], y[head], sy[head], out=d[:, head],
                 c=None if c is None else c[:, head])


def _fp8_path(bs: int, h: int, dd: int, c) -> str:
    """The path of :data:`FP8_PATHS` the call takes first (``auto``: ``strided``)."""
    path = env.fp8_einsum()
    return "strided" if path == "auto" else path


def _fp8_fallback(bs: int, h: int, dd: int, c) -> str:
    """The path ``auto`` takes where the ``strided`` views do not apply (a c, other widths)."""
    if ceil_div(bs, 128) * ceil_div(dd, 128) >= get_num_sms():
        return "heads"
    if c is None and bs * h <= DIAG_MAX_ROWS and h <= 16:
        return "diag"
    return "masked"


def _diag_views(x, sx, y, sy, d, c):
    """(x as [b * h, r], sx as [b * h, K blocks], y as [h * d, r], sy as [h * d / 128, K blocks]),
    all views, or None when the diag path does not apply: a c, d not a multiple of 128 (a head's
    rows of y would share scale blocks), or a tensor whose rows are not evenly strided."""
    bs, h, r = x.shape
    dd = y.shape[1]
    if c is not None or dd % 128 or x.stride(0) != h * x.stride(1) or sx.stride(0) != h * sx.stride(1):
        return None
    if y.stride(0) != dd * y.stride(1) or sy.stride(0) != (dd // 128) * sy.stride(1):
        return None
    kb = sx.shape[2]
    return (x.as_strided((bs * h, r), (x.stride(1), x.stride(2))),
            sx.as_strided((bs * h, kb), (sx.stride(1), sx.stride(2))),
            y.as_strided((h * dd, r), (y.stride(1), y.stride(2))),
            sy.as_strided((h * dd // 128, kb), (sy.stride(1), sy.stride(2))))


def _strided_views(x, sx, d, c) -> tuple | None:
    """(x as [b, h * r], sx as [b, h * K blocks], d as [b, h * d]) for the head-strided kernel, or
    None when the ``strided`` path does not apply (:data:`FP8_PATHS`): a c, r not a multiple of 512
    (whole 128-blocks, each head's scales starting 16-byte aligned), d not a multiple of 64, heads not side by side in a row, or rows and starts not 16-byte aligned."""
    bs, h, r = x.shape
    dd, kb = d.shape[2], sx.shape[2]
    if c is not None or r % 512 or dd % 64:
        return None
    for t, width, size in ((x, r, 1), (sx, kb, 4), (d, dd, 2)):
        if (t.stride(2) != 1 or (h > 1 and t.stride(1) != width) or (bs > 1 and t.stride(0) * size % 16)
                or t.data_ptr() % 16):
            return None
    return tuple(t.as_strided((bs, h * t.shape[2]), (t.stride(0), 1)) for t in (x, sx, d))


def _fp8_strided(x, sx, y, sy, d, c) -> bool:
    """fp8_einsum as one masked grouped GEMM (one group per head, b rows each) whose kernel reads x
    and sx and writes d through their [b, h * cols] views (:func:`_strided_views`); False, having
    done nothing, when the views or the selector's config do not fit it."""
    from deep_tile.gemm.launch import launch
    from deep_tile.gemm.planner import plan_head_strided
    from deep_tile.gemm.problem import Problem, ProblemKind

    views = _strided_views(x, sx, d, c)
    if views is None:
        return False
    bs, h, r = x.shape
    dd = y.shape[1]
    device = x.device
    with torch.cuda.device(device):
        y2 = y.contiguous().view(h * dd, r)
        plan = plan_head_strided(Problem(bs, dd, r, kind=ProblemKind.GROUPED_MASKED, num_groups=h), get_num_sms())
        if plan is None or y2.data_ptr() % 16:
            return False
        x2, sx2, d2 = views
        operands = (x2, sx2, y2, sy.contiguous(), d2, _masked_m(h, bs, device))
        launch(plan, operands, device)
    return True


def _fp8_diag(views, d) -> None:
    """fp8_einsum as one dense FP8 GEMM of every row against every head's y (:func:`_diag_views`),
    then row (b, h)'s columns of head h moved into d[b, h] (a strided view, 8-byte words)."""
    x2, sx2, y2, sy2 = views
    bs, h, dd = d.shape
    full = torch.empty((bs * h, h * dd), dtype=torch.bfloat16, device=d.device)
    fp8_gemm(x2, sx2, y2, sy2, out=full)
    _moved(d, _diagonal_blocks(full, bs, h, dd))


def _diagonal_blocks(full: torch.Tensor, bs: int, h: int, dd: int) -> torch.Tensor:
    """The [b, h, d] view of ``full`` [b * h, h * d] (contiguous) whose element (i, g, j) is
    ``full[i * h + g, g * d + j]``: row (i, g) against head g's own columns."""
    return full.as_strided((bs, h, dd), (h * h * dd, (h + 1) * dd, 1))


def fp8_einsum(expr: str, a, b, d: torch.Tensor, c: torch.Tensor | None = None,
               recipe: tuple = FP8_RECIPE) -> None:
    """DeepGEMM's FP8 einsum on SM90 (module doc): ``d = x @ y`` per head from the scaled FP8
    pairs ``a = (x, sx)``, ``b = (y, sy)`` (``+ c``), written into ``d``; returns None.

    Raises:
        TypeError: a non-pair operand, a non-tensor argument or a non-str expression.
        ValueError: an expression other than :data:`FP8_EXPRESSIONS`, a recipe other than
            :data:`FP8_RECIPE`, or a dtype, shape, layout or device it does not take.
    """
    x, sx, y, sy = _check_fp8(expr, a, b, d, c, recipe)
    bs, h, r = x.shape
    dd = y.shape[1]
    if bs == 0 or h == 0 or dd == 0:
        return
    if x.is_cuda and r % 16 == 0 and dd % 8 == 0 and h <= _MAX_HEADS:  # the GEMMs' 16-byte rows
        path = _fp8_path(bs, h, dd, c)
        if path == "strided":
            if _fp8_strided(x, sx, y, sy, d, c):
                return
            path = _fp8_fallback(bs, h, dd, c) if env.fp8_einsum() == "auto" else "masked"
        if path == "heads" and _heads_fit(x, d, c) and (c is None or not _overlaps(c, d)):
            _fp8_heads(x, sx, y, sy, d, c)
            return
        views = _diag_views(x, sx, y, sy, d, c) if path == "diag" else None
        if views is not None:
            _fp8_diag(views, d)
            return
        out = torch.empty((h, bs, dd), dtype=torch.bfloat16, device=x.device)
        if path == "copy":
            masked_m = torch.full((h,), bs, dtype=torch.int32, device=x.device)
            addend = None if c is None else _head_major(c)
            m_grouped_fp8_gemm_masked(_head_major(x), sx.permute(1, 0, 2), y.contiguous(),
                                      sy.contiguous(), masked_m, bs, out=out, c=addend)
            d.copy_(out.permute(1, 0, 2))
            return
        fused = _head_major_fused(x, sx, c)  # x, its scales and c in one launch
        if fused is not None:
            x_hm, scales, addend = fused
        else:
            x_hm, scales = _head_major_words(x), sx.permute(1, 0, 2)
            addend = None if c is None else _head_major_words(c)
        m_grouped_fp8_gemm_masked(x_hm, scales, y.contiguous(), sy.contiguous(), _masked_m(h, bs, x.device), bs,
                                  out=out, c=addend)
        _moved(d, out.permute(1, 0, 2))
        return
    xf = x.float() * sx.repeat_interleave(128, dim=2)[..., :r]
    yf = y.float() * sy.repeat_interleave(128, dim=1)[:, :dd].repeat_interleave(128, dim=2)[..., :r]
    out = torch.einsum("bhr,hdr->bhd", xf, yf)
    if c is not None:
        out = out + c.float()
    d.copy_(out)


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the memory hulls of x and y meet (a c that shares d's memory takes the copying path)."""
    def span(t):
        extent = 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()) if n > 0)
        return t.data_ptr(), t.data_ptr() + extent * t.element_size()
    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1
