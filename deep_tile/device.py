"""Facts about the current CUDA device, and the SM limit (``set_num_sms`` / ``get_num_sms``).

The only module of the selection path that touches ``torch.cuda``. Importing it starts no CUDA
context (torch itself is imported on first use); every device query is cached per device index.
Without a CUDA device, the selection defaults to an H100 SXM (132 SMs, 232448 bytes of shared
memory per block) so configurations can be inspected on any machine. The selection entry points
``get_config`` and ``explain`` live in :mod:`deep_tile.select.api`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Optional

from deep_tile import arch
from deep_tile.common import check_int
from deep_tile.errors import DeepTileError

__all__ = ["DeviceFacts", "has_cuda", "device_facts", "max_smem_per_block", "check_num_sms", "set_num_sms",
           "get_num_sms", "sms_limit", "add_sms_limit_listener"]


@dataclass(frozen=True)
class DeviceFacts:
    """What the selector needs to know about one CUDA device.

    Attributes:
        index: the CUDA device index.
        name: the device name as the driver reports it, e.g. ``"NVIDIA H100 80GB HBM3"``.
        num_sms: streaming multiprocessors.
        capability: ``(major, minor)`` compute capability, ``(9, 0)`` on Hopper.
        max_smem_per_block: opt-in dynamic shared memory per block in bytes.
        chip: the matching :class:`deep_tile.arch.ChipFacts` (H100 SXM when unknown).
    """

    index: int
    name: str
    num_sms: int
    capability: tuple
    max_smem_per_block: int
    chip: arch.ChipFacts


@functools.lru_cache(maxsize=None)
def has_cuda() -> bool:
    """Whether torch sees a CUDA device (cached; does not create a CUDA context)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@functools.lru_cache(maxsize=None)
def _facts(index: int) -> DeviceFacts:
    import torch

    props = torch.cuda.get_device_properties(index)
    smem = getattr(props, "shared_memory_per_block_optin", None) or arch.MAX_SMEM_PER_BLOCK
    return DeviceFacts(index=index, name=props.name, num_sms=props.multi_processor_count,
                       capability=(props.major, props.minor), max_smem_per_block=int(smem),
                       chip=arch.chip_facts(props.name))


def device_facts(index: Optional[int] = None) -> DeviceFacts:
    """Cached :class:`DeviceFacts` of device ``index`` (default: the current device).

    Raises:
        DeepTileError: no CUDA device is available.
    """
    if not has_cuda():
        raise DeepTileError("device_facts: no CUDA device is available (torch.cuda.is_available() is False)")
    import torch

    return _facts(torch.cuda.current_device() if index is None else index)


_num_sms_limit: Optional[int] = None
_sms_limit_listeners: list = []  # add_sms_limit_listener


def _device_num_sms() -> int:
    return device_facts().num_sms if has_cuda() else arch.DEFAULT_CHIP.num_sms


def max_smem_per_block() -> int:
    """Opt-in dynamic shared memory per block of the current device in bytes (232448, the sm_90
    maximum, without a CUDA device)."""
    return device_facts().max_smem_per_block if has_cuda() else arch.MAX_SMEM_PER_BLOCK


def check_num_sms(func: str, num_sms) -> int:
    """``num_sms`` as an int, checked as an SM count for a kernel's persistent grid.

    With a CUDA device it must lie in 1..(the device's SM count). Without one any positive int
    is accepted: the target GPU is unknown (e.g. when filling a cache for another machine).

    Raises:
        TypeError: ``num_sms`` is not an int (see :func:`deep_tile.common.check_int`).
        ValueError: ``num_sms < 1``, or above the device's SM count (the message names the device).
    """
    num_sms = check_int(func, "num_sms", num_sms)
    if num_sms < 1:
        raise ValueError(f"{func}: num_sms must be a positive int; got {num_sms}")
    if has_cuda():
        facts = device_facts()
        if num_sms > facts.num_sms:
            raise ValueError(f"{func}: num_sms must be at most {facts.num_sms}, the SM count of cuda:{facts.index} "
                             f"({facts.name}); got {num_sms}")
    return num_sms


def set_num_sms(num_sms: Optional[int]) -> None:
    """Limit the persistent grid of later kernels to ``num_sms`` SMs (None: use them all).

    Useful to leave SMs free for concurrent work such as communication kernels. ``num_sms`` is
    checked as :func:`check_num_sms` checks ``get_config``'s: a positive int, at most the device's
    SM count when a CUDA device is present.

    Raises:
        TypeError: ``num_sms`` is neither None nor an int.
        ValueError: ``num_sms < 1``, or above the device's SM count.
    """
    global _num_sms_limit
    if num_sms is not None:
        num_sms = check_num_sms("set_num_sms", num_sms)
    _num_sms_limit = num_sms
    for listener in tuple(_sms_limit_listeners):
        listener(num_sms)


def sms_limit() -> Optional[int]:
    """The :func:`set_num_sms` limit, or None when none is set (all the device's SMs)."""
    return _num_sms_limit


def add_sms_limit_listener(listener: Callable[[Optional[int]], None]) -> None:
    """Call ``listener(limit)`` on every later :func:`set_num_sms` (``limit`` None: no limit).

    The native host path keeps a copy of the limit that its C++ calls read without the GIL; it
    registers here when it loads (:mod:`deep_tile.native.loader`). Registering twice is a no-op.
    """
    if listener not in _sms_limit_listeners:
        _sms_limit_listeners.append(listener)


def get_num_sms() -> int:
    """SMs the persistent grid may use: the :func:`set_num_sms` limit, else the device's SM count
    (132, an H100 SXM, without a CUDA device)."""
    return _device_num_sms() if _num_sms_limit is None else _num_sms_limit

