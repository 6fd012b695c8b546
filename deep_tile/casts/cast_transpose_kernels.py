"""CUDA path of the fused casts: launches the kernels of csrc/entry/cast_transpose.cu on outputs
the caller allocated, as their contract (:mod:`deep_tile.kernels.cast_transpose`) says.

:mod:`deep_tile.casts.cast_transpose` checks the input and allocates the outputs in the layouts the GEMMs
read, then calls :func:`launch`; the GPU tests call it on poisoned outputs of the same layouts.
"""
from __future__ import annotations

import torch

from deep_tile.jit.loader import get_kernel
from deep_tile.jit.runtime import KernelArgs
from deep_tile.kernels import cast_transpose as contract
from deep_tile.pdl import get_pdl

__all__ = ["launch"]


_SMS: dict = {}


def _sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (cached)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    count = _SMS.get(index)
    if count is None:
        count = _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return count


def launch(block: bool, x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, qt, st, power_of_two: bool,
           design: str = None, group_offsets: torch.Tensor = None) -> None:
    """Launch the 128x128 (``block``) or 1x128 cast of the bf16 ``x [rows, cols]`` (contiguous,
    16-byte aligned, cols % 16 == 0) into ``q``/``s`` and, when ``qt`` is a tensor, ``qt``/``st``;
    or of each matrix of a contiguous ``x [batch, rows, cols]`` into the outputs' matrices.

    Layouts (not checked here): ``q`` contiguous ``[rows, cols]``; ``qt`` ``[cols, *]`` with row
    pitch ``qt.stride(-2)`` (a multiple of 16, >= rows; the 1x128 cast writes zeros up to it);
    1x128: ``s``, ``st`` column-major (``stride(-2) == 1``, pitch ``stride(-1)``); 128x128: ``s``,
    ``st`` row-major (pitch ``stride(-2)``). A batch of matrices: each output ``[batch, ...]``, its
    matrices one matrix's extent apart (contiguous ones are; ``contract.ARGUMENTS``). ``design``:
    one of ``contract.DESIGNS`` (default ``contract.DESIGN``). ``group_offsets`` (the 1x128 cast of
    one matrix with ``qt``): int32 ``[G + 1]`` row offsets on x's device, 1 <= G <=
    ``contract.MAX_GROUPS``; ``qt`` then has ``128 * contract.row_bands(rows, G)`` columns, each
    group's rows from its own multiple of 128 on (the kernel's grouped token kind)."""
    batch, rows, cols = x.shape if x.dim() == 3 else (1,) + tuple(x.shape)
    if batch == 0 or (rows == 0 and group_offsets is None):  # (grouped: the zeros of qt are still written)
        return
    symbol = contract.BLOCK_SYMBOL if block else contract.TOKEN_SYMBOL
    kernel = get_kernel(contract.ENTRY, contract.defines(design), symbol)
    s_pitch = s.stride(-2) if block else s.stride(-1)
    if qt is None:
        qt_ptr = st_ptr = st_pitch = qt_ld = 0
    else:
        qt_ptr, st_ptr, qt_ld = qt.data_ptr(), st.data_ptr(), qt.stride(-2)
        st_pitch = st.stride(-2) if block else st.stride(-1)
    flags = contract.POWER_OF_TWO_FLAG if power_of_two else 0
    groups = 0 if group_offsets is None else group_offsets.numel() - 1
    values = (x.data_ptr(), q.data_ptr(), s.data_ptr(), qt_ptr, st_ptr, rows, cols, s_pitch, st_pitch, qt_ld, flags,
              batch, 0 if group_offsets is None else group_offsets.data_ptr(), groups)
    args = KernelArgs(list(zip(contract.ARGUMENT_KINDS, values)))
    with torch.cuda.device(x.device):
        transposed = qt is not None
        sms = _sm_count(x.device) if contract.pipelined(transposed, design) else 0
        kernel.launch(grid=contract.grid(rows, cols, transposed, sms, design, batch, groups), block=contract.THREADS,
                      smem_bytes=contract.smem_bytes(transposed, design),
                      stream=torch.cuda.current_stream(x.device).cuda_stream, args=args, device=x.device.index,
                      pdl=get_pdl())
