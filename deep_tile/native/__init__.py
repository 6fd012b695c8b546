"""The native (C++) host path of the FP8 GEMMs: built on first use, loaded from the kernel cache.

Per call the Python host path spends tens of microseconds deciding to launch a 15 us kernel.
The native extension does that per-call work in C++ with no rule of its own: one op behind every
GEMM op (``torch.ops.deep_tile.fp8_gemm``, the grouped ``m_grouped_fp8_gemm_{contiguous,offsets,
masked,psum}`` and ``m_grouped_fp8_gemm_acc``, the training GEMMs ``fp8_gemm_acc``, ``fp8_gemm_1d1d``
and ``k_grouped_fp8_gemm_1d1d``, and their ``_out`` variants; ``csrc/ops.cpp``) looks up the plan of
the call's signature (dtypes, devices, sizes, strides, alignment, aliasing, scalars) and launches
it: output, operands, overlap tests, tensor maps cached by value, ``cuLaunchKernelEx``. A new
signature is planned once by Python (:mod:`.bridge`: the Python path's own checks, which raise its
errors, and its operands), so both paths take the same calls and launch the same kernel.

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
