"""The hyper-connection pre-norm GEMM: DeepGEMM's ``tf32_hc_prenorm_gemm`` on deep_tile.

``tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None)`` writes ``d = a @ b^T`` (TF32 products,
float32 sums) and ``sqr_sum = (a * a).sum(-1)`` (float32) for a bf16 ``[m, k]`` and b float32
``[n, k]``, with DeepGEMM's conventions:

* ``num_splits=None``: ``d`` float32 ``[m, n]``, ``sqr_sum`` float32 ``[m]``.
* ``num_splits=S``: ``d [S, m, n]`` and ``sqr_sum [S, m]`` hold S partial results over
  consecutive ranges of K in 64-wide blocks (the first ``(k / 64) % S`` ranges one block longer;
  a range past the blocks holds zeros): their sums over the first dimension are the results.
* a and b are K-major (unit stride along k), d has unit column stride, sqr_sum is contiguous;
  n is 8, 16, 24 or 32 and k a multiple of 64 (DeepGEMM's SM90 kernel refuses the rest too);
  m = 0 writes nothing.

On CUDA one JIT kernel of ``csrc/entry/hc_prenorm.cu`` (contract:
:mod:`deep_tile.kernels.hc_prenorm`) on the current stream. The op is bound by reading a, so every
SM should stream part of it: with ``num_splits=None`` and fewer row blocks than SMs the kernel
splits K itself (``own_splits``), and with few caller's splits it cuts each into pieces
(``sub_splits``), into a workspace whose partials a second kernel sums in order (deterministic;
float32 sums in another order than one split's). Up to ``SMALL_M`` rows one math warpgroup of 64
rows runs instead of two (``math_groups``). Two environment variables override those choices
(for measurements): ``DEEP_TILE_HC_GROUPS`` (1 or 2) and ``DEEP_TILE_HC_SUB_SPLITS`` (an int >= 1);
``DEEP_TILE_HC_GROUPS=2 DEEP_TILE_HC_SUB_SPLITS=1`` is the first implementation; ``DEEP_TILE_HC_VARIANT``
picks the kernel's code variant (``contract.VARIANTS``; ``prev`` the earlier kernel). On the CPU the
same partial sums in float32 torch. Arguments are checked before anything is launched or written.
"""
from __future__ import annotations

import torch

from deep_tile import env
from deep_tile.common import I32_MAX
from deep_tile.device import get_num_sms
from deep_tile.gemm.tma import encode_2d
from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernels import hc_prenorm as contract
from deep_tile.pdl import get_pdl

__all__ = ["tf32_hc_prenorm_gemm", "hc_prenorm_reference", "GROUPS_ENV", "SUB_SPLITS_ENV", "VARIANT_ENV"]

GROUPS_ENV = "DEEP_TILE_HC_GROUPS"
"""Environment variable forcing the math warpgroups per CTA (1 or 2; unset: ``math_groups``)."""
SUB_SPLITS_ENV = "DEEP_TILE_HC_SUB_SPLITS"
"""Environment variable forcing the pieces per caller's split (an int >= 1; unset: ``sub_splits``)."""

VARIANT_ENV = "DEEP_TILE_HC_VARIANT"
"""Environment variable picking the kernel variant (``contract.VARIANTS``; unset: ``default``)."""


def _fail(message: str, error=ValueError):
    raise error(f"tf32_hc_prenorm_gemm: {message}")


def _check(a, b, d, sqr_sum, num_splits) -> tuple:
    """Every argument checked; returns (m, n, k, splits) with splits 1 for ``num_splits=None``."""
    for name, t in (("a", a), ("b", b), ("d", d), ("sqr_sum", sqr_sum)):
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}.", TypeError)
    if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)):
        _fail(f"num_splits must be None or an int, got {type(num_splits).__name__}.", TypeError)
    if a.dim() != 2 or b.dim() != 2:
        _fail(f"a and b must be 2-D ([m, k] and [n, k]); got {tuple(a.shape)} and {tuple(b.shape)}.")
    if a.stride(-1) != 1 or b.stride(-1) != 1:
        _fail(f"a and b must be K-major (unit stride along k); got strides {a.stride()} and {b.stride()}.")
    if d.dim() < 1 or d.stride(-1) != 1:
        _fail(f"d must have unit column stride; got strides {d.stride()}.")
    if not sqr_sum.is_contiguous():
        _fail("sqr_sum must be contiguous.")
    (m, k), (n, k_b) = a.shape, b.shape
    if num_splits is None:
        splits, want_d, want_s = 1, (m, n), (m,)
    else:
        if num_splits < 1:
            _fail(f"num_splits must be at least 1, got {num_splits}.")
        splits, want_d, want_s = num_splits, (num_splits, m, n), (num_splits, m)
    if tuple(d.shape) != want_d or tuple(sqr_sum.shape) != want_s or k_b != k:
        _fail(f"for a {tuple(a.shape)}, b {tuple(b.shape)} and num_splits={num_splits}, d must be {want_d} and "
              f"sqr_sum {want_s} (and b's k that of a); got d {tuple(d.shape)}, sqr_sum {tuple(sqr_sum.shape)}.")
    if n <= 0 or k <= 0:
        _fail(f"n and k must be positive; got n = {n}, k = {k}.")
    for name, t, dtype in (("a", a, torch.bfloat16), ("b", b, torch.float32), ("d", d, torch.float32),
                           ("sqr_sum", sqr_sum, torch.float32)):
        if t.dtype != dtype:
            _fail(f"{name} must be {dtype}, got {t.dtype}.")
    devices = {t.device for t in (a, b, d, sqr_sum)}
    if len(devices) != 1:
        _fail(f"all tensors must be on one device; got {sorted(map(str, devices))}.")
    return m, n, k, splits


def _check_kernel(a, b, d, m, n, k, splits) -> None:
    """What the SM90 kernel needs beyond the op's own rules (DeepGEMM's kernel refuses the same n and k)."""
    if n not in contract.NS:
        _fail(f"n must be one of {contract.NS} (at most 32, a multiple of 8), got {n}.")
    if k % contract.BLOCK_K:
        _fail(f"k must be a multiple of {contract.BLOCK_K}, got {k}.")
    if a.is_cuda:
        for name, t, elems in (("a", a, 8), ("b", b, 4)):  # TMA: 16-byte rows pitches and base
            if (t.shape[0] > 1 and t.stride(0) % elems) or t.data_ptr() % 16:
                _fail(f"{name}'s row stride must be a multiple of 16 bytes and its start 16-byte aligned "
                      f"(TMA); got stride {t.stride(0)}.")
        row_stride = d.stride(-2) if m > 1 else n
        split_stride = d.stride(0) if splits > 1 and d.dim() == 3 else 0
        if row_stride % 2 or split_stride % 2 or d.data_ptr() % 8:
            _fail(f"d's row and split strides must be even and its start 8-byte aligned (two-float stores); "
                  f"got strides {d.stride()}.")
        if max(row_stride * max(m - 1, 0), split_stride * (splits - 1), k // contract.BLOCK_K) > I32_MAX:
            _fail("d's strides and k must stay within int32 offsets.")


def hc_prenorm_reference(a: torch.Tensor, b: torch.Tensor, num_splits: int | None = None,
                         dtype: torch.dtype = torch.float32) -> tuple:
    """(d, sqr_sum) in ``dtype`` on ``a``'s device: float32 the CPU path, float64 the tests'
    reference; with ``num_splits`` the per-split partials of the kernel's K ranges."""
    a_f, b_f = a.to(dtype), b.to(dtype)
    if num_splits is None:
        return a_f @ b_f.T, (a_f * a_f).sum(-1)
    m, k = a.shape
    d = torch.zeros((num_splits, m, b.shape[0]), dtype=dtype, device=a.device)
    s = torch.zeros((num_splits, m), dtype=dtype, device=a.device)
    for split in range(num_splits):
        blocks = contract.k_blocks_of_split(k // contract.BLOCK_K, num_splits, split)
        cols = slice(blocks.start * contract.BLOCK_K, blocks.stop * contract.BLOCK_K)
        d[split] = a_f[:, cols] @ b_f[:, cols].T
        s[split] = (a_f[:, cols] ** 2).sum(-1)
    return d, s


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                         num_splits: int | None = None) -> None:
    """The pre-norm GEMM (module doc): writes ``d`` and ``sqr_sum`` in place, returns None.

    Raises:
        TypeError: a non-tensor argument, or a ``num_splits`` that is neither None nor an int.
        ValueError: a dtype, shape, layout, device or alignment the kernel does not take.
    """
    m, n, k, splits = _check(a, b, d, sqr_sum, num_splits)
    if m == 0:
        return
    _check_kernel(a, b, d, m, n, k, splits)
    if not a.is_cuda:
        ref_d, ref_s = hc_prenorm_reference(a, b, num_splits)
        d.copy_(ref_d)
        sqr_sum.copy_(ref_s)
        return
    num_sms = get_num_sms()
    # the registry refuses a value not in GROUP_CHOICES
    groups = env.hc_groups() or contract.math_groups(m, k, num_splits, num_sms)
    defines = contract.defines(groups, env.hc_variant())
    if num_splits is None:  # own splits, each its own part, all summed into d
        parts = contract.own_splits(m, k, num_sms, groups)
        per_output, outputs, launch_splits, sub = parts, 1, parts, 1
    else:
        sub = env.hc_sub_splits() or contract.sub_splits(m, k, splits, num_sms, groups)
        parts, per_output, outputs = splits * sub, sub, splits
        launch_splits = splits
    row_stride = d.stride(-2) if m > 1 else n
    split_stride = d.stride(0) if num_splits is not None and splits > 1 else 0
    if parts == 1 or per_output == 1:  # the kernel writes d itself
        _launch(a, b, d, sqr_sum, m, n, k, splits, row_stride, split_stride, num_sms, groups, 1, defines)
        return
    # partials in a workspace, summed in order by a second kernel
    work_d = torch.empty((parts, m, n), dtype=torch.float32, device=a.device)
    work_s = torch.empty((parts, m), dtype=torch.float32, device=a.device)
    _launch(a, b, work_d, work_s, m, n, k, launch_splits, n, m * n, num_sms, groups, sub, defines)
    values = (work_d.data_ptr(), work_s.data_ptr(), d.data_ptr(), sqr_sum.data_ptr(), m, n, per_output, row_stride,
              outputs, split_stride)
    kernel = get_kernel(contract.ENTRY, defines, contract.REDUCE_SYMBOL)
    with torch.cuda.device(a.device):
        kernel.launch(grid=contract.reduce_grid(m, n, num_sms, outputs), block=contract.REDUCE_THREADS, smem_bytes=0,
                      stream=torch.cuda.current_stream(a.device).cuda_stream,
                      args=KernelArgs(list(zip(contract.REDUCE_ARGUMENT_KINDS, values))),
                      device=a.device.index, pdl=get_pdl())


def _launch(a, b, d, sqr_sum, m, n, k, splits, row_stride, split_stride, num_sms, groups, sub, defines) -> None:
    """The kernel on ``a``'s device and current stream: ``splits`` K splits of ``sub`` pieces each
    into ``d`` / ``sqr_sum`` (part p at split stride p), ``groups`` math warpgroups, the entry built
    with ``defines`` (contract.defines)."""
    map_a = encode_2d(a.data_ptr(), "bfloat16", k, m, a.stride(0) * 2 if m > 1 else k * 2,
                      contract.BLOCK_K, contract.block_m(groups), contract.SWIZZLE, 256)
    map_b = encode_2d(b.data_ptr(), "float32", k, n, b.stride(0) * 4 if n > 1 else k * 4,
                      contract.B_BOX_K, n, contract.SWIZZLE, 256)
    values = (map_a, map_b, d.data_ptr(), sqr_sum.data_ptr(), m, k // contract.BLOCK_K, splits, row_stride,
              split_stride, sub)
    kernel = get_kernel(contract.ENTRY, defines, contract.symbol(n))
    device = a.device
    with torch.cuda.device(device):
        kernel.launch(grid=contract.grid(m, splits, num_sms, groups, sub), block=contract.threads(groups),
                      smem_bytes=contract.smem_bytes(n, groups),
                      stream=torch.cuda.current_stream(device).cuda_stream,
                      args=KernelArgs(list(zip(contract.ARGUMENT_KINDS, values))), device=device.index,
                      pdl=get_pdl())
