"""Build many FP8 GEMM kernels into the disk cache at once: the probes' ``--compile-only`` modes
(``benchmarks/probes/sweep_configs.py``, ``wgrad_configs.py``, ``row_split.py``), so a device run
starts from a warm cache. No GPU needed.
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

__all__ = ["compile_into_cache", "fill_cache"]


def compile_into_cache(defines: tuple) -> tuple:
    """Build the FP8 GEMM kernel of ``defines`` (sorted ``(name, value)`` pairs) into the disk cache
    (:func:`deep_tile.jit.cache.get_cubin`). Returns ``(defines, status)``, ``status`` ``"ok"`` or
    ``"error: ..."`` (a :class:`deep_tile.errors.DeepTileError`'s text, shortened)."""
    from deep_tile.errors import DeepTileError
    from deep_tile.jit import cache
    from deep_tile.kernels import fp8_gemm as family

    try:
        cache.get_cubin(family.ENTRY, dict(defines), family.SYMBOL)
        return defines, "ok"
    except DeepTileError as error:
        return defines, f"error: {str(error)[:300]}"


def fill_cache(todo: dict, jobs: int) -> int:
    """Build every kernel of ``todo`` (sorted defines pairs -> a label to print) with ``jobs``
    processes, printing each failure by its label and a summary line. Returns the failure count."""
    print(f"compiling {len(todo)} kernels with {jobs} processes", flush=True)
    failures = 0
    with ProcessPoolExecutor(jobs) as pool:
        for defines, status in pool.map(compile_into_cache, todo):
            if status != "ok":
                failures += 1
                print(f"  {todo[defines]}: {status}", flush=True)
    print(f"compiled: {len(todo) - failures} ok, {failures} failed", flush=True)
    return failures
