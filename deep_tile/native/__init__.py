"""The native (C++) host path of the FP8 GEMMs: built on first use, loaded from the kernel cache.

Per call the Python host path spends tens of microseconds deciding to launch a 15 us kernel.
The native extension does the same per-call work in C++: the argument checks, a plan cached per
(problem, device, SM limit), tensor maps cached by value, and ``cuLaunchKernelEx`` with the
cluster attribute -- registered as the CUDA (and CPU) kernels of ``torch.ops.deep_tile.fp8_gemm``,
the grouped ``m_grouped_fp8_gemm_{contiguous,offsets,masked,psum}``, the training GEMMs
``fp8_gemm_acc``, ``fp8_gemm_1d1d`` and ``k_grouped_fp8_gemm_1d1d``, and their ``_out`` variants
(``csrc/ops.cpp``). Plans come from Python (:mod:`.bridge`), and any call it does not take goes
to the Python path, so both paths raise the same errors and launch the same kernel.

The wheel stays pure Python: the extension is compiled from ``csrc/`` with
``torch.utils.cpp_extension`` (ninja) into ``<DEEP_TILE_CACHE_DIR>/native/<key>/`` (:mod:`.key`)
by ``python -m deep_tile.native.build`` (:mod:`.build`), started by the first CUDA call
(:mod:`.loader`; ``DEEP_TILE_NATIVE`` chooses background, waiting, or off). It needs a C++
compiler, ninja and cuda.h (:mod:`.toolchain`), but no libcuda at link time: the driver is
resolved with dlopen. Without them one warning says what to install and the Python path runs.

Public functions: :func:`module`, :func:`build`, :func:`status`.
"""
from deep_tile.native.loader import NativeUnavailableWarning, build, module, reset, status

__all__ = ["NativeUnavailableWarning", "module", "build", "status", "reset"]
