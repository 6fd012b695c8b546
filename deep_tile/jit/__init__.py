"""JIT: kernel source -> sm_90a cubin (NVRTC or NVCC) -> disk cache + in-process memo.

- :func:`get_cubin` (``deep_tile.jit.cache``): the cached cubin of ``csrc/entry/<name>.cu``.
- :func:`compile_cubin` (``deep_tile.jit.compiler``): one uncached compile.

``deep_tile.jit.paths`` locates the headers and entry files. Nothing here touches the driver.
"""
from deep_tile.jit.cache import get_cubin
from deep_tile.jit.compiler import CompiledKernel, compile_cubin

__all__ = ["get_cubin", "compile_cubin", "CompiledKernel"]
