"""Load cubins and launch their kernels through the CUDA driver API (cuda-python).

The kernels are taken from a ``CUlibrary`` (context-independent, loaded lazily per device) and
launched with ``cuLaunchKernelEx`` on the caller's stream, with an optional cluster dimension and
programmatic stream serialization (:mod:`deep_tile.pdl`).
Kernel arguments are packed by :class:`KernelArgs` into one ctypes buffer plus an array of
pointers whose address is handed to the driver, which copies the values at launch time (so the
launch can be captured in a CUDA graph).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

from deep_tile import cuda_stack
from deep_tile.errors import LaunchError

try:  # cuda-bindings >= 12.6
    from cuda.bindings import driver as _cu
except ImportError as _error:  # no CUDA stack installed (deep_tile's cu12 / cu13 extras)
    raise cuda_stack.missing_bindings(_error) from None

_driver_checked = False


def driver():
    """The ``cuda.bindings.driver`` module."""
    return _cu


def check(result, what: str):
    """Raise LaunchError unless a driver call succeeded; return its outputs (one value unwrapped)."""
    err = result[0] if isinstance(result, tuple) else result
    if err != _cu.CUresult.CUDA_SUCCESS:
        _, name = _cu.cuGetErrorName(err)
        _, text = _cu.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise LaunchError(f"{what} failed: {name} ({int(err)}): {text}")
    if not isinstance(result, tuple):
        return None
    outputs = result[1:]
    return outputs[0] if len(outputs) == 1 else outputs


class KernelArgs:
    """Kernel parameters packed in declaration order: 128-byte tensor maps, pointers, int32s."""

    _ALIGN = {"tensormap": 64, "ptr": 8, "i32": 4}
    _SIZE = {"tensormap": 128, "ptr": 8, "i32": 4}

    def __init__(self, items: list[tuple[str, object]]):
        offsets, size = [], 0
        for kind, _ in items:
            align = self._ALIGN[kind]
            size = (size + align - 1) // align * align
            offsets.append(size)
            size += self._SIZE[kind]
        # Over-allocate so the tensor maps can be placed 64-byte aligned.
        self._raw = ctypes.create_string_buffer(size + 64)
        base = (ctypes.addressof(self._raw) + 63) // 64 * 64
        self._pointers = (ctypes.c_void_p * len(items))()
        for i, ((kind, value), offset) in enumerate(zip(items, offsets)):
            address = base + offset
            if kind == "tensormap":
                ctypes.memmove(address, value, 128)
            elif kind == "ptr":
                ctypes.c_uint64.from_address(address).value = int(value)
            else:
                ctypes.c_int32.from_address(address).value = int(value)
            self._pointers[i] = address

    @property
    def address(self) -> int:
        """Address of the ``void*[]`` array the driver reads."""
        return ctypes.addressof(self._pointers)


@dataclass
class Kernel:
    """A kernel of a loaded cubin; remembers per-device attributes already set."""

    name: str
    library: object
    handle: object
    _smem_limit_set: dict = field(default_factory=dict)  # device -> dynamic smem limit set
    _cluster_counts: dict = field(default_factory=dict)  # (device, block, smem, cluster) -> count
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def ensure_smem_limit(self, device: int, smem_bytes: int) -> None:
        """Allow ``smem_bytes`` of dynamic shared memory per block on ``device`` (set once per size)."""
        if self._smem_limit_set.get(device, -1) >= smem_bytes:
            return
        with self._lock:
            attr = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(_cu.cuKernelSetAttribute(attr, smem_bytes, self.handle, _cu.CUdevice(device)),
                  f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={smem_bytes}) for {self.name}")
            self._smem_limit_set[device] = smem_bytes

    def max_active_clusters(self, device: int, block: int, smem_bytes: int, cluster: int) -> int:
        """How many clusters of `cluster` CTAs can be resident at once on `device`.

        NOTES: with clusters a persistent grid of one CTA per SM may not fit in one wave: a GPC
        with an odd number of usable SMs leaves one idle for 2-CTA clusters. A grid larger than
        this runs its last clusters in a second wave, doubling the kernel time.
        """
        key = (device, block, smem_bytes, cluster)
        cached = self._cluster_counts.get(key)
        if cached is not None:
            return cached
        self.ensure_smem_limit(device, smem_bytes)
        _ensure_current_context(device)
        function = check(_cu.cuKernelGetFunction(self.handle), f"cuKernelGetFunction({self.name})")
        config = self._config(cluster, block, smem_bytes, 0, cluster)
        count = int(check(_cu.cuOccupancyMaxActiveClusters(function, config),
                          f"cuOccupancyMaxActiveClusters({self.name}, cluster={cluster}, smem={smem_bytes})"))
        self._cluster_counts[key] = count
        return count

    @staticmethod
    def _config(grid, block: int, smem_bytes: int, stream: int, cluster: int, pdl: bool = False):
        gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else (tuple(grid) + (1, 1))[:3]
        config = _cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = smem_bytes
        config.hStream = _cu.CUstream(stream)
        attrs = []
        if cluster > 1:
            attr = _cu.CUlaunchAttribute()
            attr.id = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
            attrs.append(attr)
        if pdl:
            attr = _cu.CUlaunchAttribute()
            attr.id = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        return config

    def launch(self, *, grid: int | tuple, block: int, smem_bytes: int, stream: int, args: KernelArgs,
               device: int, cluster: int = 1, pdl: bool = False) -> None:
        """Launch on `stream` (a raw ``cudaStream_t`` as int) of device ordinal `device`; with
        `pdl`, with programmatic stream serialization (the kernel must wait for its predecessor
        itself: ptx/grid_dependency.cuh)."""
        self.ensure_smem_limit(device, smem_bytes)
        if getattr(_thread, "device", None) != device:
            # NOTES: a thread that never touched the device (autograd's backward threads) has no
            # current context, and a launch on the legacy default stream (0, torch's default)
            # then fails with CUDA_ERROR_INVALID_CONTEXT; checked once per thread and device.
            _ensure_current_context(device)
            _thread.device = device
        config = self._config(grid, block, smem_bytes, stream, cluster, pdl)
        gx, gy, gz = config.gridDimX, config.gridDimY, config.gridDimZ
        check(_cu.cuLaunchKernelEx(config, self.handle, args.address, 0),
              f"cuLaunchKernelEx({self.name}, grid={gx}x{gy}x{gz}, block={block}, smem={smem_bytes}, cluster={cluster}, "
              f"pdl={int(pdl)})")


_thread = threading.local()
"""Per thread: ``device``, the device whose context Kernel.launch last made sure of."""


def _ensure_current_context(device: int) -> None:
    """Make `device`'s primary context current on this thread if no context is (the calls that
    resolve a library kernel to a function need one; launches name their stream's context)."""
    current = check(_cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) == 0:
        context = check(_cu.cuDevicePrimaryCtxRetain(_cu.CUdevice(device)), f"cuDevicePrimaryCtxRetain({device})")
        check(_cu.cuCtxSetCurrent(context), f"cuCtxSetCurrent(device {device})")


def load_kernel(cubin: bytes, kernel_name: str) -> Kernel:
    """Load `cubin` as a CUDA library and return its kernel `kernel_name`.

    Raises:
        LaunchError: a driver call failed, or the driver is older than the installed
            cuda-bindings' CUDA major version (the message names the extra to install).
    """
    global _driver_checked
    check(_cu.cuInit(0), "cuInit")
    if not _driver_checked:
        mismatch = cuda_stack.driver_mismatch(int(check(_cu.cuDriverGetVersion(), "cuDriverGetVersion")))
        if mismatch:
            raise LaunchError(mismatch)
        _driver_checked = True
    library = check(_cu.cuLibraryLoadData(cubin, [], [], 0, [], [], 0), f"cuLibraryLoadData ({len(cubin)} bytes)")
    handle = check(_cu.cuLibraryGetKernel(library, kernel_name.encode()), f"cuLibraryGetKernel({kernel_name!r})")
    return Kernel(kernel_name, library, handle)
