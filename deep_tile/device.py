"""Facts about the current CUDA device, the SM limit, and the public ``get_config`` / ``explain``.

The only module of the selection path that touches ``torch.cuda``. Importing it starts no CUDA
context (torch itself is imported on first use); every device query is cached per device index.
Without a CUDA device, the selection defaults to an H100 SXM (132 SMs, 232448 bytes of shared
memory per block) so configurations can be inspected on any machine.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Optional

from deep_tile import arch
from deep_tile.errors import DeepTileError
from deep_tile.select import KernelConfig, explain_text, select_config
from deep_tile.select.selector import check_positive_int

__all__ = ["DeviceFacts", "has_cuda", "device_facts", "set_num_sms", "get_num_sms", "get_config", "explain"]


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
_printed: set = set()


def _device_num_sms() -> int:
    return device_facts().num_sms if has_cuda() else arch.DEFAULT_CHIP.num_sms


def set_num_sms(num_sms: Optional[int]) -> None:
    """Limit the persistent grid of later kernels to ``num_sms`` SMs (None: use them all).

    Useful to leave SMs free for concurrent work such as communication kernels.

    Raises:
        ValueError: ``num_sms`` is not an int in 1..(the device's SM count; 132 without a device).
    """
    global _num_sms_limit
    if num_sms is None:
        _num_sms_limit = None
        return
    limit = _device_num_sms()
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or not 1 <= num_sms <= limit:
        raise ValueError(f"set_num_sms: num_sms must be an int in 1..{limit} (the device's SM count) "
                         f"or None; got {num_sms!r}")
    _num_sms_limit = num_sms


def get_num_sms() -> int:
    """SMs the persistent grid may use: the :func:`set_num_sms` limit, else the device's SM count
    (132, an H100 SXM, without a CUDA device)."""
    return _device_num_sms() if _num_sms_limit is None else _num_sms_limit


def _resolve(func: str, m, n, k, num_sms) -> tuple:
    for name, value in (("m", m), ("n", n), ("k", k)):
        check_positive_int(func, name, value)
    if num_sms is None:
        num_sms = get_num_sms()
    check_positive_int(func, "num_sms", num_sms)
    max_smem = device_facts().max_smem_per_block if has_cuda() else arch.MAX_SMEM_PER_BLOCK
    return num_sms, max_smem


def get_config(m: int, n: int, k: int, num_sms: Optional[int] = None) -> KernelConfig:
    """The :class:`KernelConfig` deep_tile uses for ``out[m, n] = a[m, k] @ b[n, k]^T``.

    ``num_sms`` defaults to :func:`get_num_sms`. With ``DEEP_TILE_PRINT_CONFIGS`` set, each new
    choice is printed once to stderr.

    Raises:
        ValueError: an argument is not a positive int (the message names it).
    """
    num_sms, max_smem = _resolve("get_config", m, n, k, num_sms)
    config = select_config(m, n, k, num_sms, max_smem)
    from deep_tile import env

    key = (m, n, k, num_sms, max_smem)
    if key not in _printed and env.print_configs():
        _printed.add(key)
        print(f"deep_tile: m={m} n={n} k={k} num_sms={num_sms} -> {config.label} grid={config.num_sms} "
              f"group={config.group_size} smem={config.smem_bytes} threads={config.num_threads}",
              file=sys.stderr)
    return config


def explain(m: int, n: int, k: int, num_sms: Optional[int] = None) -> str:
    """A multi-line account of :func:`get_config`'s choice for ``m x n x k`` and why.

    Uses the current device's facts when a CUDA device is present, else an H100 SXM.

    Raises:
        ValueError: an argument is not a positive int (the message names it).
    """
    num_sms, max_smem = _resolve("explain", m, n, k, num_sms)
    if has_cuda():
        facts = device_facts()
        chip = facts.chip
        header = (f"device: {facts.name} (sm_{facts.capability[0]}{facts.capability[1]}, "
                  f"{facts.num_sms} SMs, {facts.max_smem_per_block} bytes smem per block)")
    else:
        chip = arch.DEFAULT_CHIP
        header = f"device: none found; assuming {chip.name} ({chip.num_sms} SMs)"
    return header + "\n" + explain_text(m, n, k, num_sms, max_smem, chip)
