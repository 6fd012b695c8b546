"""Command line: ``python -m deep_tile <command> ...`` (also installed as ``deep-tile``).

Commands:

    explain M,N,K [--num-sms N]   why the selector picks its kernel configuration for a shape

Adding a command takes one ``cmd_<name>(args) -> int`` function and one entry in
:func:`build_parser` (``sub.add_parser(...)`` with ``set_defaults(func=cmd_<name>)``).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

__all__ = ["parse_shape", "cmd_explain", "build_parser", "main"]


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


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain``: print :func:`deep_tile.explain` for one shape."""
    from deep_tile.device import explain

    m, n, k = args.shape
    print(explain(m, n, k, num_sms=args.num_sms))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog="python -m deep_tile",
                                     description="deep_tile: FP8 GEMM kernels for Hopper.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    explain = sub.add_parser("explain", help="show the kernel configuration chosen for a shape, and why",
                             description="Show the kernel configuration chosen for out[M,N] = A[M,K] @ B[N,K]^T.")
    explain.add_argument("shape", type=parse_shape, metavar="M,N,K", help="problem shape, e.g. 4096,7168,2048")
    explain.add_argument("--num-sms", type=int, default=None,
                         help="SMs of the persistent grid (default: the device's, or 132 without one)")
    explain.set_defaults(func=cmd_explain)

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
