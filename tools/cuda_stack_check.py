"""Check that this environment holds one CUDA stack, of the major version given, and that NVRTC loads.

    python tools/cuda_stack_check.py 12

Lists the installed CUDA packages (``cuda-bindings``, ``cuda-python``, ``nvidia-*``) with the CUDA
major version each belongs to (a ``-cu12``/``-cu13`` suffix, else its version's major), then
the NVRTC version deep_tile's compiler loads. Exits 1 when a package of another major is
installed or NVRTC is not of the expected major (README, "CUDA 12 check"), 0 otherwise.
"""
from __future__ import annotations

import re
import sys
from importlib import metadata

_SUFFIX = re.compile(r"-cu(\d+)$")


def cuda_packages() -> dict[str, tuple[str, int | None]]:
    """Installed CUDA distribution name -> (version, CUDA major or None when it names none)."""
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not (name.startswith("nvidia-") or name in ("cuda-bindings", "cuda-python")):
            continue
        suffix = _SUFFIX.search(name)
        major = int(suffix.group(1)) if suffix else None
        if major is None:
            head = dist.version.split(".")[0]
            major = int(head) if head.isdigit() and int(head) >= 10 else None
        found[name] = (dist.version, major)
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    expected = int(argv[0])
    failures = []
    for name, (version, major) in sorted(cuda_packages().items()):
        print(f"{name} {version}: CUDA {major if major is not None else '-'}")
        if major is not None and major != expected:
            failures.append(f"{name} {version} is a CUDA {major} package")
    from deep_tile.jit import compiler

    try:
        nvrtc = compiler.compiler_version("nvrtc")
    except Exception as error:  # noqa: BLE001 - reported as the failure it is
        failures.append(f"NVRTC does not load: {error}")
    else:
        print(f"NVRTC {nvrtc} (loaded by deep_tile.jit.compiler)")
        if int(nvrtc.split(".")[0]) != expected:
            failures.append(f"NVRTC {nvrtc} is not CUDA {expected}")
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"CUDA {expected} stack: {'not clean' if failures else 'clean'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
