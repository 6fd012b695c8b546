"""Check an installed deep_tile on a Hopper GPU: a few GEMMs against the float64 reference.

    python tools/check_install.py [--expect-native] [--expect-python]

Imports deep_tile from wherever the interpreter finds it (run it from outside the checkout to
check an installed wheel), prints where that is and the CUDA stack, then runs ``fp8_gemm`` on
fresh random operands of a few shapes (output poisoned with NaN first, so an unwritten element
shows) with both a_scale layouts, and compares each result with ``ref_fp8_gemm``. After the
first call it says which host path ran (``DEEP_TILE_NATIVE=wait`` builds the native one first;
``off`` keeps the Python one). ``--expect-native`` / ``--expect-python`` fail when the other ran.
Prints one line per shape, then ``N passed, N failed``; exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import os
import sys

SHAPES = ((1, 2112, 7168), (64, 7168, 2048), (300, 576, 7168), (4096, 7168, 2048), (129, 4096, 528))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    paths = parser.add_mutually_exclusive_group()
    paths.add_argument("--expect-native", action="store_true", help="fail unless the native host path ran")
    paths.add_argument("--expect-python", action="store_true", help="fail unless the Python host path ran")
    args = parser.parse_args(argv)

    import torch

    import deep_tile
    from deep_tile import cuda_stack, native
    from deep_tile.jit import compiler
    from deep_tile.testing.data import make_fp8_problem
    from deep_tile.testing.numeric import calc_diff, max_rel_error

    print(f"deep_tile {deep_tile.__version__} from {os.path.dirname(deep_tile.__file__)}")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), cuda-bindings {cuda_stack.bindings_version()}, "
          f"NVRTC {compiler.compiler_version('nvrtc')}, device {torch.cuda.get_device_name()}")
    passed = failed = 0
    for i, (m, n, k) in enumerate(SHAPES):
        for layout in ("row", "tma"):
            a, a_scale, b, b_scale = make_fp8_problem(m, n, k, "cuda", seed=1000 + i, a_scale_layout=layout)
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            deep_tile.fp8_gemm(a, a_scale, b, b_scale, out=out)
            torch.cuda.synchronize()
            ref = deep_tile.ref_fp8_gemm(a, a_scale, b, b_scale)
            diff, rel = calc_diff(out, ref), max_rel_error(out, ref)
            ok = bool(torch.isfinite(out).all()) and diff < 1e-3 and rel < 1e-2
            passed, failed = passed + ok, failed + (not ok)
            print(f"{m}x{n}x{k} a_scale {layout}: calc_diff {diff:.2e} max_rel {rel:.2e} {'ok' if ok else 'FAIL'}")
    state = native.status()["state"]
    path = "native" if state == "loaded" else "Python"
    print(f"host path: {path} (native extension: {state}; {native.status()['reason']})")
    if (args.expect_native and path != "native") or (args.expect_python and path != "Python"):
        print("FAIL: the expected host path did not run")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
