"""Command line: ``python -m deep_tile <command> ...`` (also installed as ``deep-tile``).

Commands:

    explain M,N,K [--num-sms N]   why the selector picks its kernel configuration for a shape
    warmup --shape M,N,K [--shape ...] [--num-sms N] [--compiler nvrtc|nvcc]
                                  compile the FP8 GEMM kernels of those shapes into the disk cache

Adding a command takes one ``cmd_<name>(args) -> int`` function and one entry in
:func:`build_parser` (``sub.add_parser(...)`` with ``set_defaults(func=cmd_<name>)``).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

PROG = "python -m deep_tile"
"""How the command line names itself in usage and error messages."""

__all__ = ["PROG", "parse_shape", "positive_int", "cmd_explain", "cmd_warmup", "build_parser", "main"]


def parse_shape(text: str) -> tuple:
    """Parse ``"M,N,K"`` into three positive ints (an argparse ``type``)."""
    parts = text.split(",")
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"shape must be M,N,K with three positive ints, e.g. 4096,7168,2048; "
                                         f"got {text!r}")
    return values


def positive_int(text: str) -> int:
    """Parse a positive int (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int; got {text!r}")
    return value


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain``: print :func:`deep_tile.explain` for one shape."""
    from deep_tile.device import explain

    m, n, k = args.shape
    print(explain(m, n, k, num_sms=args.num_sms))
    return 0


def _format_shape(shape: tuple) -> str:
    return ",".join(str(v) for v in shape)


def cmd_warmup(args: argparse.Namespace) -> int:
    """``warmup``: compile the FP8 GEMM kernel of each ``--shape`` into the disk cache.

    Prints one line per distinct kernel (its shapes, config label, cache hit/miss and seconds)
    and a summary; returns 1 when a kernel failed to build, else 0. Needs no GPU; without
    ``--num-sms`` the SM count comes from :func:`deep_tile.get_num_sms` (the device's when one is
    present, else 132), with it no device is queried.
    """
    from deep_tile import env, warmup
    from deep_tile.errors import DeepTileError
    from deep_tile.jit import cache, compiler

    if args.num_sms is None:
        from deep_tile.device import get_num_sms

        args.num_sms = get_num_sms()
    kernels = warmup.plan(args.shape, args.num_sms)
    name = args.compiler or compiler.default_compiler()
    try:
        version = compiler.compiler_version(name)
    except DeepTileError as error:
        print(f"{PROG} warmup: error: {error}", file=sys.stderr)
        return 1
    where = ("cache disabled (DEEP_TILE_DISABLE_CACHE)" if env.disable_cache()
             else f"cache {cache.kernels_dir()}")
    num_shapes = sum(len(kernel.shapes) for kernel in kernels)
    print(f"warmup: {num_shapes} shapes on {args.num_sms} SMs, compiler {name} {version}, {where}",
          flush=True)
    words = {"hit": "cache hit", "miss": "cache miss", "uncached": "compiled, not cached", "error": "error"}
    start = time.perf_counter()
    results = []
    for kernel in kernels:
        result = warmup.build(kernel, name)
        results.append(result)
        shapes = " ".join(_format_shape(shape) for shape in kernel.shapes)
        print(f"{shapes} -> {kernel.config.label}: {words[result.status]}, {result.seconds:.2f}s", flush=True)
        if result.error:
            print(f"{PROG} warmup: error building {kernel.config.label}: {result.error}", file=sys.stderr)
    count = {status: sum(r.status == status for r in results) for status in words}
    print(f"{len(kernels)} kernels for {num_shapes} shapes: {count['miss'] + count['uncached']} compiled, "
          f"{count['hit']} cache hits, {count['error']} errors in {time.perf_counter() - start:.2f}s")
    return 1 if count["error"] else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog=PROG,
                                     description="deep_tile: FP8 GEMM kernels for Hopper.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    explain = sub.add_parser("explain", help="show the kernel configuration chosen for a shape, and why",
                             description="Show the kernel configuration chosen for out[M,N] = A[M,K] @ B[N,K]^T.")
    explain.add_argument("shape", type=parse_shape, metavar="M,N,K", help="problem shape, e.g. 4096,7168,2048")
    explain.add_argument("--num-sms", type=int, default=None,
                         help="SMs of the persistent grid (default: the device's, or 132 without one)")
    explain.set_defaults(func=cmd_explain)

    warm = sub.add_parser("warmup", help="compile the kernels of some shapes into the disk cache",
                          description="Compile the FP8 GEMM kernel that fp8_gemm would use for each shape into "
                                      "the disk cache (DEEP_TILE_CACHE_DIR), so later calls skip the JIT "
                                      "compile. Needs no GPU. Shapes using the same kernel share one build.")
    warm.add_argument("--shape", type=parse_shape, action="append", required=True, metavar="M,N,K",
                      help="problem shape out[M,N] = A[M,K] @ B[N,K]^T (repeat for more shapes)")
    warm.add_argument("--num-sms", type=positive_int, default=None,
                      help="SMs of the persistent grid (default: the device's, or 132 without one)")
    warm.add_argument("--compiler", choices=("nvrtc", "nvcc"), default=None,
                      help="compiler for this run (default: DEEP_TILE_COMPILER, else nvrtc if it loads)")
    warm.set_defaults(func=cmd_warmup)

    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Bad arguments (argparse or a ``ValueError`` from deep_tile) print a message to stderr and
    return 2.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
