"""The BF16 GEMMs: DeepGEMM's ``bf16_gemm_{nt,nn,tn,tt}`` and M-grouped BF16 GEMMs on deep_tile.

Semantics and conventions are DeepGEMM's (its csrc/apis/gemm.hpp):

* :func:`bf16_gemm_nt` ``(a, b, d, c=None)``: ``d = a @ b.T (+ c)``, ``a`` bf16 ``[m, k]``, ``b`` bf16
  ``[n, k]``, ``d`` bf16 or float32 ``[m, n]`` with unit column stride; ``c`` (optional) of ``d``'s
  dtype and shape, may be ``d`` itself (in-place accumulation; otherwise it is copied into ``d``
  first, as DeepGEMM does). ``a`` and ``b`` may each be K-major (unit stride along k) or MN-major
  (unit stride along m / n): the one kernel reads either (the wgmma's transpose immediates).
* :func:`bf16_gemm_nn` ``(a [m, k], b [k, n])``, :func:`bf16_gemm_tn` ``(a [k, m], b [k, n])``,
  :func:`bf16_gemm_tt` ``(a [k, m], b [n, k])``: DeepGEMM's aliases, ``bf16_gemm_nt`` on the
  transposed views (no copies).
* :func:`m_grouped_bf16_gemm_nt_contiguous` ``(a [M, k], b [G, n, k], d [M, n], m_indices [M])``:
  row ``i`` of ``d`` is ``a[i] @ b[m_indices[i]].T``; each 128-row block takes the group of its
  first row and a block whose first row is ``-1`` is skipped (``d`` left as it was). ``b`` may be
  K- or MN-major (DeepGEMM's ``_nn`` alias). bf16 ``d``.
* :func:`m_grouped_bf16_gemm_nt_masked` ``(a [G, m, k], b [G, n, k], d [G, m, n], masked_m [G],
  expected_m)``: rows ``[0, masked_m[g])`` of group ``g``; the other rows of ``d`` are left as they
  were. ``expected_m`` is accepted and checked (the tile rule does not need it).

* :func:`k_grouped_bf16_gemm_tn_contiguous` ``(a [K, m], b [K, n], d [G, m, n], ks_cpu, grouped_layout,
  c)``: ``d[g] = c[g] + a[rows_g].T @ b[rows_g]`` in float32, group g owning the next ``ks_cpu[g]``
  rows of ``a`` and ``b`` (each a multiple of 128; ``grouped_layout`` the same sizes as an int32
  tensor on the device, which the kernel reads); ``c`` may be ``d``, None counts as zeros.
* :func:`batched_bf16_gemm_nt` ``(a [G, m, k], b [G, n, k], d [G, m, n])``: ``d[g] = a[g] @ b[g].T`` for
  every g in one launch on strided views (deep_tile's own; the per-head einsum's ``batched`` path):
  a K-major, b K- or MN-major, bf16 or float32 d (stored through a 3-D TMA map where its start, strides
  and rows are 16-byte multiples, else from registers), nothing copied.

Alignment (TMA's, as in DeepGEMM): every operand starts on a 16-byte boundary and its
non-contiguous stride is a multiple of 16 bytes (8 bf16); ``d``'s row stride is even. Empty
problems return early as DeepGEMM's do (``k == 0``: ``d = c`` or zeros). On CUDA one persistent
kernel of ``csrc/entry/bf16_gemm.cu`` (:mod:`deep_tile.kernels.bf16_gemm`); tensors on the CPU are
computed with float32 torch (for tests and tooling).

Selection (:func:`deep_tile.kernels.bf16_gemm.plan`): tile widths in steps of 16 so that few-column
problems fill the SMs, 64-row tiles (one consumer warpgroup) for the dense GEMM where 128-row ones
leave SMs idle or need K splits (weighed only with ``PLAN_ROWS64``, off until timed), K splits for the dense GEMM with a K-major b at small m (float32 partials in
a workspace, summed in split order by each tile's last split inside the kernel, tile counters that
the kernel leaves zeroed: deterministic and graph-replayable, but a row's summation order then
depends on m; an MN-major b, as SGLang's batch-invariant ``bf16_gemm_nn`` passes, is never split), a
short A box at tiny m, the deepest ring for narrow plans that store d from registers (split ones,
and non-accumulating ones up to 128 wide), and float32 d stored (or accumulated, TMA reduce-add)
through shared memory otherwise. ``DEEP_TILE_BF16_LEGACY=1`` (read at each call; :data:`LEGACY`
overrides it) selects the earlier plan instead: 64 / 128 / 256 wide tiles, no split, no
multicast, float32 d stored from registers. ``DEEP_TILE_BF16_PLAN=block_n/splits/box_m/cluster_m[/stages[/store_all[/block_m[/k_merge]]]]``
(:data:`FORCE_PLAN` overrides it) forces one plan on every call, with the default ring unless
``stages`` names one (d then from registers), for tuning; B multicast to CTA pairs (``cluster_m`` 2)
and d staged a buffer per box (``store_all`` 1) are reached only so (the kernel's limits apply:
:class:`deep_tile.kernels.bf16_gemm.Bf16Config`).
"""
from __future__ import annotations

import dataclasses

import torch

from deep_tile import env
from deep_tile.common import I32_MAX, ceil_div
from deep_tile.device import get_num_sms
from deep_tile.kernels import bf16_gemm as contract

LEGACY: bool | None = None
"""True / False: the earlier selection (module doc) or not, whatever ``DEEP_TILE_BF16_LEGACY`` says; None:
as it says."""


def parse_plan(text: str) -> contract.Bf16Plan:
    """``"block_n/splits/box_m/cluster_m/stages/store_all/block_m/k_merge"`` (trailing fields may be left out) as a plan."""
    fields = [int(v) for v in text.split("/")]
    return contract.Bf16Plan(*fields)


FORCE_PLAN: contract.Bf16Plan | None = None
"""A plan every call takes (module doc), or None: ``DEEP_TILE_BF16_PLAN``'s, if set."""


def _legacy() -> bool:
    return env.bf16_legacy() if LEGACY is None else LEGACY


def _forced_plan() -> contract.Bf16Plan | None:
    if FORCE_PLAN is not None:
        return FORCE_PLAN
    text = env.bf16_plan()
    return parse_plan(text) if text else None

__all__ = ["bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
           "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous",
           "bf16_config", "ref_bf16_gemm", "batched_bf16_gemm_nt", "batched_fits", "batched_store_fits",
           "BATCHED_STORES"]


def _fail(name: str, message: str, error=ValueError):
    raise error(f"{name}: {message}")


def _tensor(name: str, what: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(name, f"{what} must be a torch.Tensor, got {type(t).__name__}.", TypeError)
    return t


def _major(name: str, what: str, t: torch.Tensor) -> str:
    """"k" when the last dimension has unit stride, "mn" when the one before it has (DeepGEMM's
    get_major_type_ab); anything else is refused."""
    if t.stride(-1) == 1 or t.shape[-1] == 1 and t.stride(-2) != 1:
        return "k"
    if t.stride(-2) == 1 or t.shape[-2] == 1:
        return "mn"
    _fail(name, f"{what} must have a unit stride along one of its last two dimensions; strides {t.stride()}.")


def _check_tma(name: str, what: str, t: torch.Tensor, major: str) -> None:
    if not t.is_cuda or t.numel() == 0:
        return
    pitch = t.stride(-2) if major == "k" else t.stride(-1)
    outer = t.shape[-2] if major == "k" else t.shape[-1]
    if outer == 1 and t.dim() == 2:
        pitch = 8  # one row: its pitch is never used (the maps take a 16-byte one)
    if t.data_ptr() % 16:
        _fail(name, f"{what} must start on a 16-byte boundary (TMA).")
    if (pitch * 2) % 16:
        _fail(name, f"{what}'s non-contiguous stride ({pitch} elements) must be a multiple of 8 (16 bytes, TMA).")


def _check_d(name: str, d: torch.Tensor, dtypes: tuple) -> None:
    if d.dtype not in dtypes:
        _fail(name, f"d must be {' or '.join(map(str, dtypes))}, got {d.dtype}.")
    if d.stride(-1) != 1 and d.shape[-1] > 1:
        _fail(name, f"d must have unit column stride (DeepGEMM's N-major D); strides {d.stride()}.")
    if d.is_cuda and d.numel() and (d.data_ptr() % 8 or (d.dim() >= 2 and d.shape[-2] > 1 and d.stride(-2) % 2)):
        _fail(name, "d must start on an 8-byte boundary and have an even row stride.")


def bf16_plan(m: int, n: int, k: int, major_a: str = "k", major_b: str = "k", gemm_type: str = "normal",
              m_blocks: int | None = None, num_sms: int | None = None, out_f32: bool = False,
              accumulate: bool = False) -> contract.Bf16Plan:
    """The call's tile width, K splits and A box: :func:`deep_tile.kernels.bf16_gemm.plan`, or the
    legacy rule (:data:`LEGACY` / ``DEEP_TILE_BF16_LEGACY``), or the forced plan (:data:`FORCE_PLAN` /
    ``DEEP_TILE_BF16_PLAN``)."""
    blocks = ceil_div(m, contract.BLOCK_M) if m_blocks is None else m_blocks
    sms = get_num_sms() if num_sms is None else num_sms
    forced = _forced_plan()
    if forced is not None:
        return forced
    if _legacy():
        return contract.legacy_plan(blocks, n, sms)
    return contract.plan(m, n, k, blocks, sms, major_a, major_b, gemm_type == "normal", out_f32, accumulate,
                         contract.PLAN_ROWS64)


def bf16_config(m: int, n: int, k: int, major_a: str = "k", major_b: str = "k", out_f32: bool = False,
                accumulate: bool = False, gemm_type: str = "normal", m_blocks: int | None = None,
                num_sms: int | None = None, tma_store: bool = False) -> contract.Bf16Config:
    """The kernel instance an unsplit call runs (:func:`bf16_plan`'s tile); ``tma_store`` (d
    TMA-aligned, and bf16 without accumulation or float32) stores through shared memory when the
    tile holds a whole box."""
    pl = bf16_plan(m, n, k, major_a, major_b, gemm_type, m_blocks, num_sms)
    return _config(pl, major_a, major_b, out_f32, accumulate, gemm_type, tma_store)


def _config(pl: contract.Bf16Plan, major_a: str, major_b: str, out_f32: bool, accumulate: bool, gemm_type: str,
            tma_store: bool, deep: bool = False) -> contract.Bf16Config:
    """``deep``: the dense new plan's ring (:func:`deep_tile.kernels.bf16_gemm.plan_stages`), D from
    registers where it takes the deeper ring. A forced plan's ``stages`` / ``store_all`` apply as
    :class:`deep_tile.kernels.bf16_gemm.Bf16Plan` says."""
    box_cols = (contract.STORE_BOX_F32 if out_f32 else contract.STORE_BOX)[0]
    store = tma_store and pl.block_n >= box_cols and gemm_type not in ("masked", "k_grouped")
    if pl.store_all and store and contract.store_boxes(pl.block_n, out_f32) >= 3:
        return contract.Bf16Config(major_a, major_b, pl.block_n, pl.stages, out_f32, accumulate, gemm_type, True,
                                   pl.box_m, pl.cluster_m, True, block_m=pl.block_m, k_merge=pl.k_merge)
    stages = pl.stages or (contract.plan_stages(pl, accumulate) if deep else 0)
    return contract.Bf16Config(major_a, major_b, pl.block_n, stages, out_f32, accumulate, gemm_type,
                               store and not stages, pl.box_m, pl.cluster_m, False,
                               # a forced ring: A's unread rows need no room (a 64-row tile's slot is 64 rows)
                               bool(pl.stages) and pl.box_m <= 64 and pl.block_m == contract.BLOCK_M, pl.block_m,
                               pl.k_merge)


def _whole_chunks(d: torch.Tensor) -> bool:
    """Whether d's rows are whole 16-byte chunks (n * element bytes), as CUTLASS's TMA epilogues require
    of D's extent: the only TMA stores that gave wrong D on the device (the batched GEMM, bf16 n 300 and
    100) had rows ending inside a chunk."""
    return d.shape[-1] * d.element_size() % 16 == 0


def _tma_store_ok(d: torch.Tensor, accumulate: bool) -> bool:
    """Whether d can leave through TMA: 16-byte start and row pitch, rows of whole 16-byte chunks, and
    bf16 without accumulation or (not the legacy plan) float32 (accumulation by TMA reduce-add)."""
    rows = d.shape[0]
    if d.dtype == torch.bfloat16:
        kind_ok = not accumulate
    else:
        kind_ok = d.dtype == torch.float32 and not _legacy()
    return (kind_ok and d.data_ptr() % 16 == 0 and _whole_chunks(d)
            and (rows == 1 or (d.stride(0) * d.element_size()) % 16 == 0))


def _tmap_d(d: torch.Tensor, rows: int, n: int) -> bytes:
    from deep_tile.gemm.tma import encode_2d

    f32 = d.dtype == torch.float32
    box = contract.STORE_BOX_F32 if f32 else contract.STORE_BOX
    pitch = d.stride(0) * d.element_size() if rows > 1 else -(-n * d.element_size() // 16) * 16
    return encode_2d(d.data_ptr(), "float32" if f32 else "bfloat16", n, rows, pitch, *box, 128, 0)


def _pitch(t: torch.Tensor, dim: int, outer: int, inner: int) -> int:
    """Row pitch in bytes of a map whose rows step along ``dim``: one row's pitch is never used,
    so it is the inner extent rounded up to TMA's 16 bytes."""
    return t.stride(dim) * 2 if outer > 1 else -(-inner * 2 // 16) * 16


def _tmap_a(a2: torch.Tensor, major: str, rows: int, k: int, box_m: int = contract.BLOCK_M) -> bytes:
    """A's map; K-major boxes of ``box_m`` rows (the plan's A box), MN-major boxes of 64."""
    from deep_tile.gemm.tma import encode_2d

    if major == "k":
        return encode_2d(a2.data_ptr(), "bfloat16", k, rows, _pitch(a2, -2, rows, k), contract.BLOCK_K,
                         box_m, 128, 256)
    return encode_2d(a2.data_ptr(), "bfloat16", rows, k, _pitch(a2, -1, k, rows), 64, contract.BLOCK_K, 128, 256)


def _tmap_b(b: torch.Tensor, major: str, rows: int, k: int, block_n: int, cluster_m: int = 1) -> bytes:
    """B's map; ``rows`` the rows of its 2-D view (n, or groups * n), ``k`` (k, or groups * k MN-major);
    a pair sharing B by multicast loads ``block_n / cluster_m`` rows each."""
    from deep_tile.gemm.tma import encode_2d

    if major == "k":
        return encode_2d(b.data_ptr(), "bfloat16", k, rows, _pitch(b, -2, rows, k), contract.BLOCK_K,
                         block_n // cluster_m, 128, 256)
    return encode_2d(b.data_ptr(), "bfloat16", rows, k, _pitch(b, -1, k, rows), 64, contract.BLOCK_K, 128, 256)


_COUNTER_POOL = 1 << 18
"""uint32 split-K tile counters per device (1 MiB), handed out in order: STREAM_COUNTERS for each
stream that runs split calls, and each captured call's own tiles, reserved for good."""
STREAM_COUNTERS = 4096
_counters: dict = {}  # device index -> [pool, {stream handle: offset}, next free offset]


def _split_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """``tiles`` zeroed uint32 counters (as int32) for one split call on the current stream, which the
    kernel leaves zeroed. Calls on one stream share a region (they run in order); a captured call
    reserves its own (a graph may replay on any stream); a call that finds no room gets fresh zeros."""
    stream = torch.cuda.current_stream(device)
    capturing = torch.cuda.is_current_stream_capturing()
    entry = _counters.get(device.index)
    if entry is None and not capturing:  # one memset, outside any capture
        entry = _counters[device.index] = [torch.zeros(_COUNTER_POOL, dtype=torch.int32, device=device), {}, 0]
        torch.cuda.synchronize(device)  # zeroed before any other stream's call reads it
    if entry is not None and tiles <= STREAM_COUNTERS:
        pool, regions, free = entry
        key = None if capturing else stream.cuda_stream
        offset = regions.get(key) if key is not None else None
        if offset is None and free + STREAM_COUNTERS <= _COUNTER_POOL:
            offset, entry[2] = free, free + (STREAM_COUNTERS if key is not None else tiles)
            if key is not None:
                regions[key] = offset
        if offset is not None:
            return pool[offset:offset + tiles]
    return torch.zeros(tiles, dtype=torch.int32, device=device)


def _launch(cfg: contract.Bf16Config, tmap_a: bytes, tmap_b: bytes, d: torch.Tensor, layout, m: int, n: int, k: int,
            ldd: int, groups: int, tiles: int, d_rows: int = 0, workspace: torch.Tensor | None = None,
            counters: torch.Tensor | None = None, group_ldd: int = 0, tmap_d: bytes | None = None) -> None:
    """Launch ``cfg`` on d's device and current stream; ``d_rows``: the rows of d's 2-D view (its TMA map's);
    ``workspace`` / ``counters``: a split call's partials and tile counters; ``group_ldd``: the batched
    GEMM's D batch stride (elements); ``tmap_d``: D's map when it is not d's 2-D view (the batched GEMM's 3-D one)."""
    from deep_tile.jit.loader import get_kernel
    from deep_tile.jit.runtime import KernelArgs
    from deep_tile.pdl import get_pdl

    kernel = get_kernel(contract.ENTRY, cfg.defines(), contract.SYMBOL)
    if tmap_d is None:
        tmap_d = _tmap_d(d, d_rows or m, n) if cfg.tma_store else tmap_b  # an unused map must still be 128 bytes
    values = (tmap_a, tmap_b, tmap_d, d.data_ptr(), 0 if layout is None else layout.data_ptr(), m, n, k, ldd, groups,
              0 if workspace is None else workspace.data_ptr(), 0 if counters is None else counters.data_ptr(),
              group_ldd)
    device = d.device
    with torch.cuda.device(device):
        grid = contract.grid(tiles, get_num_sms())
        if cfg.cluster_m > 1:  # whole pairs, no more than can be resident at once (tiles counts both of a pair)
            pairs = kernel.max_active_clusters(device.index, cfg.threads, cfg.smem, cfg.cluster_m)
            grid = max(1, min(tiles // cfg.cluster_m, pairs)) * cfg.cluster_m
        kernel.launch(grid=(grid, 1, 1), block=cfg.threads, smem_bytes=cfg.smem,
                      stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(contract.ARGUMENT_KINDS, values))), device=device.index,
                      cluster=cfg.cluster_m, pdl=get_pdl())


def _launch_gemv(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, m: int, n: int, k: int, accumulate: bool) -> None:
    """The stream over B (m <= 4, K-major a and b): a warp per column of d, adding to d when ``accumulate``."""
    from deep_tile.jit.loader import get_kernel
    from deep_tile.jit.runtime import KernelArgs
    from deep_tile.pdl import get_pdl

    out_f32 = d.dtype == torch.float32
    kernel = get_kernel(contract.GEMV_ENTRY, contract.gemv_defines(m, out_f32, accumulate), contract.GEMV_SYMBOL)
    values = (a.data_ptr(), b.data_ptr(), d.data_ptr(), m, n, k, a.stride(0) if m > 1 else k,
              b.stride(0) if n > 1 else k, d.stride(0) if m > 1 else n)
    device = d.device
    with torch.cuda.device(device):
        kernel.launch(grid=(contract.gemv_grid(n), 1, 1), block=contract.GEMV_THREADS, smem_bytes=0,
                      stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(contract.GEMV_ARGUMENT_KINDS, values))), device=device.index,
                      pdl=get_pdl())


def ref_bf16_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``a @ b.T (+ c)`` in ``dtype`` (float64: the tests' reference)."""
    out = a.to(dtype) @ b.to(dtype).T
    return out if c is None else out + c.to(dtype)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                 compiled_dims: str = "nk") -> None:
    """``d = a @ b.T (+ c)`` (module doc); ``compiled_dims`` is accepted for DeepGEMM's signature
    (the kernel takes every dimension at run time)."""
    name = "bf16_gemm"
    a, b, d = _tensor(name, "a", a), _tensor(name, "b", b), _tensor(name, "d", d)
    if not isinstance(compiled_dims, str):
        _fail(name, f"compiled_dims must be a str, got {type(compiled_dims).__name__}.", TypeError)
    for what, t in (("a", a), ("b", b), ("d", d)):
        if t.dim() != 2:
            _fail(name, f"{what} must be 2-D, got shape {tuple(t.shape)}.")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        _fail(name, f"a and b must be bfloat16, got {a.dtype} and {b.dtype}.")
    m, k = a.shape
    n, k_ = b.shape
    if k != k_ or tuple(d.shape) != (m, n):
        _fail(name, f"shapes disagree: a {tuple(a.shape)}, b {tuple(b.shape)}, d {tuple(d.shape)} "
                    f"(a [m, k] @ b [n, k].T -> d [m, n]).")
    _check_d(name, d, (torch.bfloat16, torch.float32))
    if c is not None:
        c = _tensor(name, "c", c)
        if c.dtype != d.dtype or tuple(c.shape) != (m, n):
            _fail(name, f"c must match d ({d.dtype} {tuple(d.shape)}), got {c.dtype} {tuple(c.shape)}.")
        if c.shape[-1] > 1 and c.stride(-1) != 1:
            _fail(name, "c must have unit column stride.")
        if c.data_ptr() == d.data_ptr() and c.stride() != d.stride():
            _fail(name, "c aliases d with other strides.")
    if len({t.device for t in (a, b, d) + ((c,) if c is not None else ())}) != 1:
        _fail(name, "all tensors must be on one device.")
    major_a, major_b = _major(name, "a", a), _major(name, "b", b)
    _check_tma(name, "a", a, major_a)
    _check_tma(name, "b", b, major_b)
    # DeepGEMM's early_return: empty outputs, k == 0, and c copied into d before accumulating
    if m == 0 or n == 0:
        return
    same = c is not None and c.data_ptr() == d.data_ptr()
    if k == 0:
        if not same:
            d.copy_(c) if c is not None else d.zero_()
        return
    pl = bf16_plan(m, n, k, major_a, major_b, out_f32=d.dtype == torch.float32, accumulate=c is not None)
    gemv = pl.block_m == contract.GEMV_BLOCK_M
    if gemv and (m > contract.GEMV_BLOCK_M or major_a != "k" or major_b != "k" or k % 8):
        _fail(name, f"the stream over B (block_m {contract.GEMV_BLOCK_M}) takes m <= {contract.GEMV_BLOCK_M}, K-major "
                    f"a and b and k a multiple of 8; got m={m}, k={k}, a {major_a}-major, b {major_b}-major.")
    if not gemv and pl.box_m < pl.block_m and m > pl.box_m:
        _fail(name, f"the plan's A box of {pl.box_m} rows cannot hold m={m} (a forced plan?).")
    if major_a == "mn" and pl.box_m < 64:
        _fail(name, f"an MN-major a loads 64-row A boxes: the plan's box_m must be 64 or 128, got {pl.box_m}.")
    if c is not None and not same:
        d.copy_(c)
    if not d.is_cuda:
        d.copy_(ref_bf16_gemm(a, b, d if c is not None else None, torch.float32).to(d.dtype))
        return
    if gemv:
        _launch_gemv(a, b, d, m, n, k, c is not None)
        return
    if pl.cluster_m > 1 and (major_b != "k" or pl.splits > 1 or pl.box_m != contract.BLOCK_M):
        pl = dataclasses.replace(pl, cluster_m=1)  # multicast: K-major b only
    m_blocks = ceil_div(ceil_div(m, pl.block_m), pl.cluster_m) * pl.cluster_m  # pairs: an odd count's twin
    tiles = m_blocks * ceil_div(n, pl.block_n)
    tmap_a = _tmap_a(a, major_a, m, k, pl.box_m)
    tmap_b = _tmap_b(b, major_b, n, k, pl.block_n, pl.cluster_m)
    cfg = _config(pl, major_a, major_b, d.dtype == torch.float32, c is not None, "normal",
                  _tma_store_ok(d, c is not None), deep=not _legacy() and _forced_plan() is None)
    ldd = d.stride(0) if m > 1 else n
    k_blocks = ceil_div(k, contract.BLOCK_K * pl.k_merge)  # the kernel's stages (k_merge 64-k blocks each)
    splits = ceil_div(k_blocks, ceil_div(k_blocks, pl.splits))  # every split non-empty
    if splits == 1:
        _launch(cfg, tmap_a, tmap_b, d, None, m, n, k, ldd, 1, tiles)
        return
    # split K: float32 partials in a workspace, summed in split order by each tile's last split in the kernel
    workspace = torch.empty(contract.split_workspace_floats(tiles, splits, pl.block_n, pl.block_m), dtype=torch.float32,
                            device=d.device)
    _launch(cfg, tmap_a, tmap_b, d, None, m, n, k, ldd, splits, tiles * splits, workspace=workspace,
            counters=_split_counters(d.device, tiles))


def bf16_gemm_nn(a, b, d, c=None, compiled_dims: str = "nk") -> None:
    """DeepGEMM's alias: ``a [m, k]``, ``b [k, n]``: :func:`bf16_gemm_nt` of ``(a, b.T)``."""
    bf16_gemm_nt(a, _tensor("bf16_gemm", "b", b).transpose(0, 1), d, c, compiled_dims)


def bf16_gemm_tn(a, b, d, c=None, compiled_dims: str = "mn") -> None:
    """DeepGEMM's alias: ``a [k, m]``, ``b [k, n]``: :func:`bf16_gemm_nt` of ``(a.T, b.T)``."""
    bf16_gemm_nt(_tensor("bf16_gemm", "a", a).transpose(0, 1), _tensor("bf16_gemm", "b", b).transpose(0, 1), d, c,
                 compiled_dims)


def bf16_gemm_tt(a, b, d, c=None, compiled_dims: str = "mn") -> None:
    """DeepGEMM's alias: ``a [k, m]``, ``b [n, k]``: :func:`bf16_gemm_nt` of ``(a.T, b)``."""
    bf16_gemm_nt(_tensor("bf16_gemm", "a", a).transpose(0, 1), b, d, c, compiled_dims)


def _check_grouped_b(name: str, b: torch.Tensor, groups: int, n: int, k: int) -> str:
    if b.dtype != torch.bfloat16 or b.dim() != 3 or tuple(b.shape) != (groups, n, k):
        _fail(name, f"b must be bfloat16 [{groups}, {n}, {k}], got {b.dtype} {tuple(b.shape)}.")
    major = _major(name, "b", b)
    inner = b.stride(1) * n if major == "k" else b.stride(2) * k
    if groups > 1 and b.stride(0) != inner:
        _fail(name, f"b's groups must be packed (stride(0) == {inner}), got strides {b.stride()}.")
    _check_tma(name, "b", b, major)
    if major == "mn" and groups > 1 and k % 64:
        _fail(name, f"an MN-major b needs k a multiple of 64 (a k block must not reach the next group), got k={k}.")
    return major


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, m_indices: torch.Tensor,
                                      compiled_dims: str = "nk", use_psum_layout: bool = False,
                                      ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None) -> None:
    """``d[i] = a[i] @ b[m_indices[i]].T`` per 128-row block (module doc). DeepGEMM's psum layout
    (``use_psum_layout=True``) is not taken here: pass m_indices."""
    name = "m_grouped_bf16_gemm_nt_contiguous"
    a, b, d, m_indices = (_tensor(name, w, t) for w, t in (("a", a), ("b", b), ("d", d), ("m_indices", m_indices)))
    if use_psum_layout:
        _fail(name, "use_psum_layout=True is not supported by deep_tile's BF16 kernel; pass m_indices "
                    "(deep_tile.psum_to_m_indices converts).", NotImplementedError)
    if expected_m_for_psum_layout is not None:
        _fail(name, "expected_m_for_psum_layout needs use_psum_layout=True.")
    if a.dtype != torch.bfloat16 or a.dim() != 2:
        _fail(name, f"a must be bfloat16 [M, k], got {a.dtype} {tuple(a.shape)}.")
    if _major(name, "a", a) != "k":
        _fail(name, "a must be K-major (unit stride along k), as in DeepGEMM.")
    m, k = a.shape
    if b.dim() != 3:
        _fail(name, f"b must be [G, n, k], got {tuple(b.shape)}.")
    groups, n = b.shape[0], b.shape[1]
    major_b = _check_grouped_b(name, b, groups, n, k)
    if tuple(d.shape) != (m, n):
        _fail(name, f"d must be [{m}, {n}], got {tuple(d.shape)}.")
    _check_d(name, d, (torch.bfloat16,))
    if m_indices.dtype != torch.int32 or tuple(m_indices.shape) != (m,) or not m_indices.is_contiguous():
        _fail(name, f"m_indices must be a contiguous int32 [{m}] tensor, got {m_indices.dtype} {tuple(m_indices.shape)}.")
    if n <= 0 or k <= 0 or groups <= 0:
        _fail(name, f"n, k and the groups must be positive, got n={n}, k={k}, groups={groups}.")
    if len({t.device for t in (a, b, d, m_indices)}) != 1:
        _fail(name, "all tensors must be on one device.")
    _check_tma(name, "a", a, "k")
    if m == 0:
        return
    if not d.is_cuda:
        for start in range(0, m, contract.BLOCK_M):
            g = int(m_indices[start])
            if 0 <= g < groups:
                end = min(m, start + contract.BLOCK_M)
                d[start:end] = (a[start:end].float() @ b[g].float().T).to(d.dtype)
        return
    cfg = bf16_config(m, n, k, "k", major_b, gemm_type="contiguous", tma_store=_tma_store_ok(d, False))
    b_rows, b_k = (groups * n, k) if major_b == "k" else (n, groups * k)
    _launch(cfg, _tmap_a(a, "k", m, k), _tmap_b(b, major_b, b_rows, b_k, cfg.block_n), d, m_indices, m, n, k,
            d.stride(0) if m > 1 else n, groups, ceil_div(m, contract.BLOCK_M) * ceil_div(n, cfg.block_n))


def m_grouped_bf16_gemm_nn_contiguous(a, b, d, m_indices, compiled_dims: str = "nk", use_psum_layout: bool = False,
                                      ensure_zero_padding: bool = True) -> None:
    """DeepGEMM's alias: ``b [G, k, n]``: :func:`m_grouped_bf16_gemm_nt_contiguous` of ``b.transpose(1, 2)``."""
    m_grouped_bf16_gemm_nt_contiguous(a, _tensor("m_grouped_bf16_gemm_nn_contiguous", "b", b).transpose(1, 2), d,
                                      m_indices, compiled_dims, use_psum_layout, ensure_zero_padding)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str = "nk") -> None:
    """``d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T`` (module doc)."""
    name = "m_grouped_bf16_gemm_nt_masked"
    a, b, d, masked_m = (_tensor(name, w, t) for w, t in (("a", a), ("b", b), ("d", d), ("masked_m", masked_m)))
    if isinstance(expected_m, bool) or not isinstance(expected_m, int):
        _fail(name, f"expected_m must be an int, got {type(expected_m).__name__}.", TypeError)
    if a.dtype != torch.bfloat16 or a.dim() != 3:
        _fail(name, f"a must be bfloat16 [G, m, k], got {a.dtype} {tuple(a.shape)}.")
    groups, m, k = a.shape
    if b.dim() != 3:
        _fail(name, f"b must be [G, n, k], got {tuple(b.shape)}.")
    n = b.shape[1]
    if _major(name, "a", a) != "k" or _check_grouped_b(name, b, groups, n, k) != "k":
        _fail(name, "a and b must be K-major (unit stride along k), as in DeepGEMM.")
    if groups > 1 and a.stride(0) != a.stride(1) * m:
        _fail(name, f"a's groups must be packed (stride(0) == {a.stride(1) * m}), got strides {a.stride()}.")
    if tuple(d.shape) != (groups, m, n):
        _fail(name, f"d must be [{groups}, {m}, {n}], got {tuple(d.shape)}.")
    _check_d(name, d, (torch.bfloat16,))
    if groups > 1 and d.stride(0) != d.stride(1) * m:
        _fail(name, f"d's groups must be packed (stride(0) == {d.stride(1) * m}), got strides {d.stride()}.")
    if masked_m.dtype != torch.int32 or tuple(masked_m.shape) != (groups,) or not masked_m.is_contiguous():
        _fail(name, f"masked_m must be a contiguous int32 [{groups}] tensor, got {masked_m.dtype} {tuple(masked_m.shape)}.")
    if expected_m <= 0 or m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        _fail(name, f"expected_m, m, n, k and the groups must be positive, got {expected_m}, {m}, {n}, {k}, {groups}.")
    if len({t.device for t in (a, b, d, masked_m)}) != 1:
        _fail(name, "all tensors must be on one device.")
    _check_tma(name, "a", a, "k")
    if not d.is_cuda:
        for g in range(groups):
            rows = max(0, min(m, int(masked_m[g])))
            d[g, :rows] = (a[g, :rows].float() @ b[g].float().T).to(d.dtype)
        return
    # the tile rule sees expected_m rows per group (the real counts are on the device)
    cfg = bf16_config(expected_m, n, k, "k", "k", gemm_type="masked",
                      m_blocks=groups * ceil_div(min(expected_m, m), contract.BLOCK_M))
    a2 = a.reshape(groups * m, k) if a.is_contiguous() else a.as_strided((groups * m, k), (a.stride(1), 1))
    b2 = b.as_strided((groups * n, k), (b.stride(1), 1))
    tiles = groups * ceil_div(m, contract.BLOCK_M) * ceil_div(n, cfg.block_n)
    _launch(cfg, _tmap_a(a2, "k", groups * m, k), _tmap_b(b2, "k", groups * n, k, cfg.block_n), d, masked_m, m, n, k,
            d.stride(1) if m > 1 else n, groups, tiles)


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks_cpu, grouped_layout: torch.Tensor,
                                      c: torch.Tensor | None = None, compiled_dims: str = "mn",
                                      use_psum_layout: bool = False) -> None:
    """``d[g] = c[g] + a[rows_g].T @ b[rows_g]`` (module doc): the weight gradient of grouped experts."""
    name = "k_grouped_bf16_gemm_tn_contiguous"
    a, b, d, grouped_layout = (_tensor(name, w, t) for w, t in
                               (("a", a), ("b", b), ("d", d), ("grouped_layout", grouped_layout)))
    if use_psum_layout:
        _fail(name, "use_psum_layout=True is not supported (DeepGEMM's SM90 kernel has none either).",
              NotImplementedError)
    if not isinstance(ks_cpu, (list, tuple)) or not ks_cpu or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in ks_cpu):
        _fail(name, "ks_cpu must be a non-empty list of ints (each group's k).", TypeError)
    if d.dtype != torch.float32 or d.dim() != 3 or not d.is_contiguous():
        _fail(name, f"d must be a contiguous float32 [G, m, n] tensor, got {d.dtype} {tuple(d.shape)}.")
    groups, m, n = d.shape
    if len(ks_cpu) != groups:
        _fail(name, f"ks_cpu has {len(ks_cpu)} entries for {groups} groups.")
    if any(v < 0 or v % contract.K_GROUP_ALIGNMENT for v in ks_cpu):
        _fail(name, f"every group's k must be a non-negative multiple of {contract.K_GROUP_ALIGNMENT}, got {list(ks_cpu)}.")
    total = sum(ks_cpu)
    for what, t, cols in (("a", a, m), ("b", b, n)):
        if t.dtype != torch.bfloat16 or tuple(t.shape) != (total, cols) or not t.is_contiguous():
            _fail(name, f"{what} must be a contiguous bfloat16 [{total}, {cols}] tensor, got {t.dtype} {tuple(t.shape)}.")
    if grouped_layout.dtype != torch.int32 or tuple(grouped_layout.shape) != (groups,) \
            or not grouped_layout.is_contiguous():
        _fail(name, f"grouped_layout must be a contiguous int32 [{groups}] tensor (ks_cpu on the device).")
    if c is not None:
        c = _tensor(name, "c", c)
        if c.dtype != torch.float32 or tuple(c.shape) != (groups, m, n) or not c.is_contiguous():
            _fail(name, f"c must be a contiguous float32 [{groups}, {m}, {n}] tensor, got {c.dtype} {tuple(c.shape)}.")
    if len({t.device for t in (a, b, d, grouped_layout) + ((c,) if c is not None else ())}) != 1:
        _fail(name, "all tensors must be on one device.")
    _check_tma(name, "a", a.T, "mn")
    _check_tma(name, "b", b.T, "mn")
    if m == 0 or n == 0:
        return
    if c is None:
        d.zero_()
    elif c.data_ptr() != d.data_ptr():
        d.copy_(c)
    if total == 0:
        return
    if not d.is_cuda:
        start = 0
        for g, kg in enumerate(ks_cpu):
            d[g] += a[start:start + kg].float().T @ b[start:start + kg].float()
            start += kg
        return
    mb = ceil_div(m, contract.BLOCK_M)
    cfg = bf16_config(m, n, total, "mn", "mn", True, True, gemm_type="k_grouped", m_blocks=groups * mb)
    _launch(cfg, _tmap_a(a.T, "mn", m, total), _tmap_b(b.T, "mn", n, total, cfg.block_n), d, grouped_layout, m, n,
            total, n, groups, groups * mb * ceil_div(n, cfg.block_n), d_rows=groups * m)


def _stride_bytes(t: torch.Tensor, dim: int, inner: int) -> int:
    """A 3-D map's byte stride along ``dim``: an extent of one never steps, so any 16-byte multiple
    (the inner extent's bytes, rounded up) stands in for whatever stride the view has."""
    size = t.element_size()
    return t.stride(dim) * size if t.shape[dim] > 1 else max(16, -(-inner * size // 16) * 16)


def batched_fits(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> bool:
    """Whether :func:`batched_bf16_gemm_nt` takes these (checked) operands' layouts on CUDA: a K-major,
    b K- or MN-major, 16-byte starts and strides of a and b (TMA), d's start 8-byte aligned and its
    row and batch strides even (two-element stores) and within int32."""
    try:
        if _major("batched_bf16_gemm_nt", "a", a) != "k":
            return False
        major_b = _major("batched_bf16_gemm_nt", "b", b)
    except ValueError:  # no unit stride along either of the last two dimensions
        return False
    k, n = a.shape[2], b.shape[1]
    b_dims, b_inner = ((0, 1), k) if major_b == "k" else ((0, 2), n)
    for t, dims, inner in ((a, (0, 1), k), (b, b_dims, b_inner)):
        if t.data_ptr() % 16 or any(_stride_bytes(t, dim, inner) % 16 for dim in dims):
            return False
    if d.data_ptr() % 8 or any(d.shape[i] > 1 and (d.stride(i) % 2 or d.stride(i) > I32_MAX) for i in (0, 1)):
        return False
    return True


BATCHED_STORES = ("auto", "tma", "registers")
"""How :func:`batched_bf16_gemm_nt` writes d: ``auto`` through a 3-D TMA map where :func:`batched_store_fits`
says so (else from registers), ``tma`` the same or ValueError, ``registers``
always from registers (the earlier epilogue, kept to time beside it)."""


def batched_store_fits(d: torch.Tensor, block_n: int, box_m: int = contract.BLOCK_M,
                       block_m: int = contract.BLOCK_M) -> bool:
    """Whether the batched GEMM can store ``d [G, m, n]`` by TMA: a 16-byte start, 16-byte row and batch
    strides, rows of whole 16-byte chunks (:func:`_whole_chunks`), at least one whole 128-byte box per tile
    row, and 128-row tiles with whole A boxes (tiles of one working warpgroup stay on registers until the
    device shows them right with whole-chunk rows)."""
    n = d.shape[2]
    box = (contract.STORE_BOX_F32 if d.dtype == torch.float32 else contract.STORE_BOX)[0]
    return (d.data_ptr() % 16 == 0 and block_n >= box and box_m == block_m == contract.BLOCK_M and _whole_chunks(d) and
            all(_stride_bytes(d, dim, n) % 16 == 0 and _stride_bytes(d, dim, n) < 2**40 for dim in (0, 1)))


def batched_bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, store: str = "auto") -> None:
    """``d[g] = a[g] @ b[g].T`` for every g, in one launch: ``a`` bf16 ``[G, m, k]`` K-major, ``b`` bf16
    ``[G, n, k]`` K- or MN-major, ``d`` bf16 or float32 ``[G, m, n]`` with unit column stride; every
    batch stride as the views have it (nothing copied: the kernel reads a and b through 3-D maps whose
    third coordinate is g, so a k or row block never reaches the next batch, and writes d at g times its
    batch stride). The layouts :func:`batched_fits` names, else ValueError; ``store``: :data:`BATCHED_STORES`.
    On the CPU, float32 torch."""
    name = "batched_bf16_gemm_nt"
    if store not in BATCHED_STORES:
        _fail(name, f"store must be in {BATCHED_STORES}, got {store!r}.")
    a, b, d = _tensor(name, "a", a), _tensor(name, "b", b), _tensor(name, "d", d)
    for what, t in (("a", a), ("b", b), ("d", d)):
        if t.dim() != 3:
            _fail(name, f"{what} must be 3-D, got shape {tuple(t.shape)}.")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        _fail(name, f"a and b must be bfloat16, got {a.dtype} and {b.dtype}.")
    groups, m, k = a.shape
    if b.shape[0] != groups or b.shape[2] != k or tuple(d.shape) != (groups, m, b.shape[1]):
        _fail(name, f"shapes disagree: a {tuple(a.shape)}, b {tuple(b.shape)}, d {tuple(d.shape)} "
                    f"(a [G, m, k] @ b [G, n, k].T -> d [G, m, n]).")
    n = b.shape[1]
    if d.dtype not in (torch.bfloat16, torch.float32) or (n > 1 and d.stride(2) != 1):
        _fail(name, f"d must be bf16 or float32 with unit column stride, got {d.dtype} strides {d.stride()}.")
    if len({t.device for t in (a, b, d)}) != 1:
        _fail(name, "all tensors must be on one device.")
    if 0 in (groups, m, n):
        return
    if k == 0:
        d.zero_()
        return
    if not d.is_cuda:
        d.copy_((a.float() @ b.float().transpose(1, 2)).to(d.dtype))
        return
    if not batched_fits(a, b, d):
        _fail(name, f"the operands' layouts do not fit the kernel (strides a {a.stride()}, b {b.stride()}, "
                    f"d {d.stride()}): a K-major, 16-byte starts and strides of a and b, even strides of d.")
    from deep_tile.gemm.tma import encode_3d

    major_b = _major(name, "b", b)
    forced = _forced_plan()
    if forced is not None and forced.block_m in contract.BLOCK_MS:
        # a forced plan's tile, box and ring (the batched kernel takes no splits, pairs or staged stores)
        pl = contract.Bf16Plan(forced.block_n, 1, forced.box_m, 1, forced.stages, 0, forced.block_m)
    else:
        pl = contract.batched_plan(groups, m, n, k, get_num_sms(), major_b)
    if pl.box_m < pl.block_m and m > pl.box_m:
        _fail(name, f"the plan's A box of {pl.box_m} rows cannot hold m={m} (a forced plan?).")
    if major_b == "mn" and pl.block_n % 64:
        _fail(name, f"an MN-major b loads 64-row boxes: block_n {pl.block_n} must be a multiple of 64 (a forced plan?).")
    out_f32 = d.dtype == torch.float32
    tma_store = store != "registers" and batched_store_fits(d, pl.block_n, pl.box_m, pl.block_m)
    if tma_store and pl.stages and contract.smem_bytes(pl.block_n, pl.stages, True, False, out_f32, False,
                                                      pl.block_m) > contract.SMEM_LIMIT:
        tma_store = store == "tma"  # a forced ring with no room for the staging stores from registers (or fails below)
    if store == "tma" and not tma_store:
        _fail(name, f"store='tma' needs d's start, strides and rows in 16-byte multiples and block_n {pl.block_n} at least "
                    f"one 128-byte box (d strides {d.stride()}).")
    stages = pl.stages or contract.batched_stages(pl.block_n, pl.block_m, tma_store, out_f32)
    cfg = contract.Bf16Config("k", major_b, pl.block_n, stages, out_f32, False, "batched", tma_store,
                              pl.box_m, 1, False, False, pl.block_m)
    # (k, row, g) maps: TMA fills a box's rows past m and its k past k with zeros, batch by batch
    tmap_a = encode_3d(a.data_ptr(), "bfloat16", (k, m, groups), (_stride_bytes(a, 1, k), _stride_bytes(a, 0, k)),
                       (contract.BLOCK_K, pl.box_m, 1), 128, 256)
    if major_b == "k":
        tmap_b = encode_3d(b.data_ptr(), "bfloat16", (k, n, groups), (_stride_bytes(b, 1, k), _stride_bytes(b, 0, k)),
                           (contract.BLOCK_K, pl.block_n, 1), 128, 256)
    else:
        tmap_b = encode_3d(b.data_ptr(), "bfloat16", (n, k, groups), (_stride_bytes(b, 2, n), _stride_bytes(b, 0, n)),
                           (64, contract.BLOCK_K, 1), 128, 256)
    tmap_d = None
    if tma_store:  # (column, row, g): a box's rows past m and columns past n are not written, batch by batch
        box = contract.STORE_BOX_F32 if out_f32 else contract.STORE_BOX
        tmap_d = encode_3d(d.data_ptr(), "float32" if out_f32 else "bfloat16", (n, m, groups),
                           (_stride_bytes(d, 1, n), _stride_bytes(d, 0, n)), (box[0], box[1], 1), 128, 0)
    tiles = groups * ceil_div(m, pl.block_m) * ceil_div(n, pl.block_n)
    _launch(cfg, tmap_a, tmap_b, d, None, m, n, k, d.stride(1) if m > 1 else n, groups, tiles,
            group_ldd=d.stride(0) if groups > 1 else 0, tmap_d=tmap_d)
