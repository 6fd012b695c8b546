"""Command line: ``python -m deep_tile <command> ...`` (also installed as ``deep-tile``).

Commands:

    explain M,N,K [--num-sms N] [--kind KIND --groups G [--expected-m E]] [--out T] [--c C] [--1d1d]
                                  why the selector picks its kernel configuration for a shape
                                  (a grouped GEMM's with --kind contiguous|masked|offsets|psum)
    warmup [--shape M,N,K ...] [--grouped KIND,G,M,N,K[,E] ...] [--num-sms N] [--compiler nvrtc|nvcc]
           [--out T] [--c C] [--1d1d]
                                  compile the FP8 GEMM kernels of those shapes into the disk cache

Shapes and SM counts are checked by the library (:func:`deep_tile.gemm.checks.check_problem_shape`,
:func:`deep_tile.device.check_num_sms`), so the command line accepts exactly what
:func:`deep_tile.fp8_gemm` accepts and prints the same messages; a bad value exits with status 2.
An error of the environment rather than of the arguments -- no CUDA stack installed, a bad
``DEEP_TILE_*`` value, a cache directory that cannot be written, a GPU or driver deep_tile cannot
use -- prints one line that says what to do and exits with status 1; ``DEEP_TILE_DEBUG=1`` prints
its traceback instead (see :func:`main`).

Adding a command takes one ``cmd_<name>(args) -> int`` function and one entry in
:func:`build_parser` (``sub.add_parser(...)`` with ``set_defaults(func=cmd_<name>)``).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Optional, Sequence

SCRIPT_NAME = "deep-tile"
"""The console script's name (``[project.scripts]`` in pyproject.toml)."""
BROKEN_PIPE_STATUS = 141
"""Exit status when the reader of stdout closed the pipe (128 + SIGPIPE, as a killed tool reports)."""
USAGE_STATUS = 2
"""Exit status of bad arguments (argparse's own, and values deep_tile rejects)."""
ERROR_STATUS = 1
"""Exit status of an error of the environment (CUDA stack, ``DEEP_TILE_*`` values, cache directory,
GPU) and of a kernel that failed to build."""

__all__ = ["SCRIPT_NAME", "BROKEN_PIPE_STATUS", "USAGE_STATUS", "ERROR_STATUS", "prog_name", "plural", "parse_shape", "parse_grouped", "parse_int", "cmd_explain", "cmd_warmup",
           "build_parser", "main"]

# A token such as "-1,8,16": a shape with a negative first value. argparse would take it for an
# option (its negative-number rule covers "-1" but not "-1,8,16"); see _protect_negative_shapes.
_NEGATIVE_SHAPE = re.compile(r"^-\d[-\d,]*$")


def prog_name(argv0: Optional[str] = None) -> str:
    """How the command line names itself: ``deep-tile`` when run as that console script
    (``argv0``, default ``sys.argv[0]``), else ``python -m deep_tile``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    return SCRIPT_NAME if os.path.basename(argv0) == SCRIPT_NAME else "python -m deep_tile"


def plural(count: int, noun: str, plural_form: Optional[str] = None) -> str:
    """``"1 shape"``, ``"2 shapes"``: ``count`` and ``noun``, made plural unless ``count == 1``."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def parse_shape(text: str) -> tuple:
    """Parse ``"M,N,K"`` into three ints (an argparse ``type``).

    Only the syntax is checked here; the values are checked by the command with
    :func:`deep_tile.gemm.checks.check_problem_shape`, as fp8_gemm checks them.
    """
    text = text.strip()
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"shape must be M,N,K with three ints, e.g. 4096,7168,2048; got {text!r}")
    return values


def parse_grouped(text: str) -> tuple:
    """Parse ``"KIND,G,M,N,K[,EXPECTED_M]"`` (an argparse ``type``): a grouped GEMM's kind
    (``contiguous``, ``masked``, ``offsets``), experts, rows of ``a`` (masked: max_m), ``n``,
    ``k`` and the masked kind's hint of rows per expert. Only the syntax is checked here; the
    values by :func:`deep_tile.gemm.checks.check_grouped_problem`."""
    kind, *rest = text.strip().split(",")
    try:
        values = tuple(int(part) for part in rest)
    except ValueError:
        values = ()
    if len(values) not in (4, 5):
        raise argparse.ArgumentTypeError(f"a grouped problem must be KIND,G,M,N,K[,EXPECTED_M], e.g. "
                                         f"masked,32,256,4096,7168,192; got {text!r}")
    return (kind,) + values + ((None,) if len(values) == 4 else ())


def parse_int(text: str) -> int:
    """Parse an int (an argparse ``type``); its range is checked by the command."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int; got {text!r}") from None


def _protect_negative_shapes(argv: Sequence[str]) -> list:
    """``argv`` with shape tokens that start with ``-`` prefixed by a space, so that argparse
    passes them on as values (then rejected with the library's message) instead of reading them
    as unknown options. :func:`parse_shape` strips the space."""
    return [" " + arg if _NEGATIVE_SHAPE.match(arg) else arg for arg in argv]


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain``: print :func:`deep_tile.explain` for one shape."""
    from deep_tile.select.api import explain

    m, n, k = args.shape
    print(explain(m, n, k, num_sms=args.num_sms, kind=args.kind, num_groups=args.groups,
                  expected_m=args.expected_m, out_dtype=args.out, c_dtype=args.c, b_scale_1d=args.one_d))
    return 0


def _format_shape(shape) -> str:
    """``M,N,K``, or a grouped problem as ``--grouped`` spells it; then the output variant's
    options, if any."""
    from deep_tile.gemm.problem import ProblemKind

    if isinstance(shape, tuple):
        return ",".join(str(v) for v in shape)
    kind = shape.kind.short_name
    hint = f",{shape.expected_m}" if kind == "masked" else ""
    text = (f"{shape.m},{shape.n},{shape.k}" if not shape.kind.grouped
            else f"{kind},{shape.num_groups},{shape.m},{shape.n},{shape.k}{hint}")
    if shape.out_dtype != "bfloat16":
        text += f" --out {shape.out_dtype}"
    if shape.c_dtype is not None:
        text += f" --c {shape.c_dtype}"
    if shape.b_scale_1d and shape.kind is not ProblemKind.K_GROUPED:
        text += " --1d1d"
    return text


def _with_output(problem, args: argparse.Namespace):
    """``problem`` (an ``(m, n, k)`` shape or a Problem) with the output options of ``args``; a
    plain shape stays a tuple."""
    from deep_tile.select.api import selection_problem

    plain = args.out == "bfloat16" and args.c is None and not args.one_d
    if plain:
        return problem
    if isinstance(problem, tuple):
        return selection_problem("warmup", *problem, "dense", 1, None, args.out, args.c, args.one_d)
    return problem.with_output(args.out, args.c) if not args.one_d else selection_problem(
        "warmup", problem.m, problem.n, problem.k, problem.kind, problem.num_groups, None, args.out, args.c, True)


def cmd_warmup(args: argparse.Namespace) -> int:
    """``warmup``: compile the FP8 GEMM kernel of each ``--shape`` into the disk cache.

    Prints one line per distinct kernel (its shapes, config label, cache hit/miss and seconds)
    and a summary; returns 1 when a kernel failed to build, else 0. Needs no GPU; without
    ``--num-sms`` the SM count comes from :func:`deep_tile.get_num_sms` (the device's when one is
    present, else 132); a given ``--num-sms`` is bounded by the device's SM count when a device is
    present. Shapes with ``M = 0`` need no kernel (fp8_gemm launches nothing) and are listed as such.
    """
    from deep_tile import env
    from deep_tile.gemm import warmup
    from deep_tile.errors import DeepTileError
    from deep_tile.jit import cache, compiler

    from deep_tile.gemm.checks import check_grouped_problem

    prog = prog_name()
    shapes = list(dict.fromkeys([_with_output(warmup.check_shape(shape), args) for shape in args.shape or ()]
                                + [_with_output(check_grouped_problem("warmup", kind, m, n, k, g, e), args)
                                   for kind, g, m, n, k, e in args.grouped or ()]))
    if not shapes:
        raise ValueError("warmup: give at least one --shape M,N,K or --grouped KIND,G,M,N,K[,EXPECTED_M]")
    if args.num_sms is None:
        from deep_tile.device import get_num_sms

        args.num_sms = get_num_sms()
    kernels = warmup.plan(shapes, args.num_sms)
    name = args.compiler or compiler.default_compiler()
    try:
        version = compiler.compiler_version(name)
    except DeepTileError as error:
        print(f"{prog} warmup: error: {error}", file=sys.stderr)
        return 1
    where = ("cache disabled (DEEP_TILE_DISABLE_CACHE)" if env.disable_cache()
             else f"cache {cache.kernels_dir()}")
    print(f"warmup: {plural(len(shapes), 'shape')} on {args.num_sms} SMs, compiler {name} {version}, {where}",
          flush=True)
    for shape in shapes:
        if (shape[0] if isinstance(shape, tuple) else shape.m) == 0:
            print(f"{_format_shape(shape)} -> no kernel: M=0 launches nothing", flush=True)
    words = {"hit": "cache hit", "miss": "cache miss", "uncached": "compiled, not cached", "error": "error"}
    start = time.perf_counter()
    results = []
    for kernel in kernels:
        result = warmup.build(kernel, name)
        results.append(result)
        built = " ".join(_format_shape(shape) for shape in kernel.shapes)
        print(f"{built} -> {kernel.config.label}: {words[result.status]}, {result.seconds:.2f}s", flush=True)
        if result.error:
            print(f"{prog} warmup: error building {kernel.config.label}: {result.error}", file=sys.stderr)
    count = {status: sum(r.status == status for r in results) for status in words}
    print(f"{plural(len(kernels), 'kernel')} for {plural(len(shapes), 'shape')}: "
          f"{count['miss'] + count['uncached']} compiled, {plural(count['hit'], 'cache hit')}, "
          f"{plural(count['error'], 'error')} in {time.perf_counter() - start:.2f}s")
    return 1 if count["error"] else 0


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command; ``prog`` defaults to :func:`prog_name`."""
    from deep_tile.gemm.checks import PROBLEM_KIND_NAMES

    parser = argparse.ArgumentParser(prog=prog or prog_name(),
                                     description="deep_tile: FP8 GEMM kernels for Hopper.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    num_sms_help = ("SMs of the persistent grid: 1 to the device's SM count (default: the device's, or 132 "
                    "without one; without a device any positive int, for another target GPU)")

    explain = sub.add_parser("explain", help="show the kernel configuration chosen for a shape, and why",
                             description="Show the kernel configuration chosen for out[M,N] = A[M,K] @ B[N,K]^T. "
                                         "M >= 0, N a positive multiple of 8, K a positive multiple of 16 "
                                         "(as fp8_gemm requires).")
    explain.add_argument("shape", type=parse_shape, metavar="M,N,K", help="problem shape, e.g. 4096,7168,2048")
    explain.add_argument("--num-sms", type=parse_int, default=None, help=num_sms_help)
    explain.add_argument("--kind", choices=tuple(PROBLEM_KIND_NAMES), default="dense",
                         help="a grouped (Mixture-of-Experts) GEMM's kind; M is then the rows of A (masked: max_m)")
    explain.add_argument("--groups", type=parse_int, default=1, metavar="G", help="experts of a grouped GEMM")
    explain.add_argument("--expected-m", type=parse_int, default=None, metavar="E",
                         help="the masked kind's hint of real rows per expert (default: M)")
    _output_options(explain)
    explain.set_defaults(func=cmd_explain)

    warm = sub.add_parser("warmup", help="compile the kernels of some shapes into the disk cache",
                          description="Compile the FP8 GEMM kernel that fp8_gemm would use for each shape into "
                                      "the disk cache (DEEP_TILE_CACHE_DIR), so later calls skip the JIT "
                                      "compile. Needs no GPU. Shapes using the same kernel share one build.")
    warm.add_argument("--shape", type=parse_shape, action="append", metavar="M,N,K",
                      help="problem shape out[M,N] = A[M,K] @ B[N,K]^T (repeat for more shapes)")
    warm.add_argument("--grouped", type=parse_grouped, action="append", metavar="KIND,G,M,N,K[,E]",
                      help="a grouped GEMM: kind (contiguous, masked, offsets, psum), experts, rows of A (masked: "
                           "max_m), N, K and the masked kind's expected rows per expert (repeatable)")
    warm.add_argument("--num-sms", type=parse_int, default=None, help=num_sms_help)
    warm.add_argument("--compiler", choices=("nvrtc", "nvcc"), default=None,
                      help="compiler for this run (default: DEEP_TILE_COMPILER, else nvrtc if it loads)")
    _output_options(warm, " (for every shape of the run)")
    warm.set_defaults(func=cmd_warmup)

    return parser


def _output_options(parser: argparse.ArgumentParser, scope: str = "") -> None:
    """The output variant's options (training GEMMs): ``--out``, ``--c``, ``--1d1d``."""
    parser.add_argument("--out", choices=("bfloat16", "float32"), default="bfloat16",
                        help="the output's type" + scope)
    parser.add_argument("--c", choices=("bfloat16", "float32", "out"), default=None,
                        help="an addend C of out = C + A.B^T: a bf16 or FP32 tensor, or out itself (in-place "
                             "accumulation, a weight gradient's main_grad +=)" + scope)
    parser.add_argument("--1d1d", dest="one_d", action="store_true",
                        help="the dense 1D1D GEMM (fp8_gemm_1d1d: b scaled per row, a weight gradient)" + scope)


def _debug() -> bool:
    """Whether ``DEEP_TILE_DEBUG`` asks for tracebacks (a bad value of it counts as off: the error
    it causes is then reported in one line like any other)."""
    from deep_tile import env

    try:
        return env.debug()
    except ValueError:
        return False


def _one_line(prog: str, error: BaseException) -> str:
    """``<prog>: error: <the message's first line>``, pointing at ``DEEP_TILE_DEBUG=1`` when the
    message had more lines (a compiler log) than the one printed."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    more = " (DEEP_TILE_DEBUG=1 prints the rest and the traceback)" if len(lines) > 1 else ""
    return f"{prog}: error: {lines[0]}{more}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Malformed arguments exit through argparse (status 2, with usage); values deep_tile rejects
    (a ``ValueError``, e.g. ``explain: n must be a positive multiple of 8; got 12``) print
    ``<prog>: error: <message>`` to stderr and return :data:`USAGE_STATUS` (2). Errors of the
    environment print one such line and return :data:`ERROR_STATUS` (1): no CUDA stack
    (:class:`deep_tile.cuda_stack.MissingCudaStackError`, whose message names the pip extra), a bad
    ``DEEP_TILE_*`` value (:class:`deep_tile.env.EnvValueError`), an unusable cache directory
    (:class:`deep_tile.errors.CacheError`), any other :class:`deep_tile.errors.DeepTileError` (the
    GPU, the driver, a failed build) and an ``OSError`` (a file or directory that cannot be used).
    With ``DEEP_TILE_DEBUG=1`` those errors propagate with their traceback instead. Anything else is
    a bug of deep_tile and keeps its traceback. A reader that closes stdout early (``| head``) ends
    the command quietly with :data:`BROKEN_PIPE_STATUS`.
    """
    from deep_tile.cuda_stack import MissingCudaStackError
    from deep_tile.env import EnvValueError
    from deep_tile.errors import DeepTileError, UnsupportedProblemError

    parser = build_parser()
    args = parser.parse_args(_protect_negative_shapes(sys.argv[1:] if argv is None else argv))
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`... | head -2`): stop quietly, as tools killed by SIGPIPE do.
        # stdout is pointed at /dev/null so the interpreter's last flush cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_STATUS
    except UnsupportedProblemError as error:  # a DeepTileError, but the arguments' fault: no kernel runs them
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return USAGE_STATUS
    except (MissingCudaStackError, EnvValueError, DeepTileError, OSError) as error:
        if _debug():
            raise
        print(_one_line(parser.prog, error), file=sys.stderr)
        return ERROR_STATUS
    except ValueError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return USAGE_STATUS


if __name__ == "__main__":
    sys.exit(main())
