"""Argument validation: the one problem-shape check, and fp8_gemm's tensor checks.

:func:`check_problem_shape` is the single definition of which ``(m, n, k)`` deep_tile runs;
``fp8_gemm``, ``get_config``, ``explain``, the warmup planner and the command line all call it,
so they accept and reject the same shapes with the same messages.

:func:`check_fp8_gemm_args` checks fp8_gemm's tensors: dtype, then shape, then layout and
alignment, then device. Every failure raises TypeError or ValueError naming the function, the
argument, what was expected and what was passed, before anything is allocated or written. The
device is checked last, so messages about shapes and layouts can be tested with CPU tensors.

Imports torch lazily (only :func:`check_fp8_gemm_args` needs it), so the selection path can use
:func:`check_problem_shape` without importing torch.

Symbolic shapes (torch.compile with dynamic shapes, torch.export with a dynamic dimension): the
fake implementations of :mod:`deep_tile.ops` call :func:`check_fp8_gemm_args` on tensors whose
row count ``m`` is a ``torch.SymInt``. Then ``m`` is checked with ``torch._check_with`` (the same
exception types and messages, the sizes in a message shown as the values traced with) and never
turned into an int nor branched on, so it stays symbolic: one graph serves every ``m``. ``n`` and
``k`` (the weight's shape) are still made ints, which specialises a graph to them. Concrete
tensors take the plain path, with no extra work.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

from deep_tile.common import SCALE_GROUP, ceil_div, check_int, recording
from deep_tile.gemm.problem import Problem, ProblemKind

if TYPE_CHECKING:  # annotations only: torch is imported where the tensors are checked
    import torch

__all__ = ["N_MULTIPLE", "K_MULTIPLE", "check_int", "check_problem_shape", "check_problem", "check_fp8_gemm_args",
           "shown", "GROUPED_FUNCTIONS", "PROBLEM_KIND_NAMES", "check_problem_kind", "check_grouped_problem",
           "check_grouped_args", "check_fp8_gemm_acc_args", "OUT_DTYPE_NAMES", "K_GROUPED_FN", "check_k_grouped_args",
           "grouped_op_kind", "recording_overlap_tests"]

N_MULTIPLE = 8
"""``n`` must be a positive multiple of this (16-byte rows of the bf16 output, for TMA)."""

K_MULTIPLE = 16
"""``k`` must be a positive multiple of this (16-byte rows of the FP8 operands, for TMA)."""

_FN = "fp8_gemm"


def check_problem_shape(func: str, m, n, k) -> tuple[int, int, int]:
    """Validate the problem ``out[m, n] = a[m, k] @ b[n, k]^T`` and return ``(m, n, k)`` as ints.

    The one shape contract of deep_tile: ``m`` an int >= 0 (``m == 0`` is an empty product),
    ``n`` a positive multiple of 8, ``k`` a positive multiple of 16. ``func`` names the caller
    in the messages, e.g. ``"explain: n must be a positive multiple of 8; got 12"``.

    Raises:
        TypeError: an argument is not an int (bools are refused; numpy/torch integer scalars
            are accepted through ``__index__``).
        ValueError: ``m < 0``, or ``n`` / ``k`` not a positive multiple of 8 / 16.
    """
    m, n, k = (check_int(func, name, value) for name, value in (("m", m), ("n", n), ("k", k)))
    if m < 0:
        raise ValueError(f"{func}: m must be an int >= 0; got {m}")
    _check_n_k(func, n, k)
    return m, n, k


def check_problem(func: str, m, n, k) -> Problem:
    """:func:`check_problem_shape` as the dense :class:`deep_tile.gemm.problem.Problem` it describes."""
    return Problem(*check_problem_shape(func, m, n, k))


def _check_n_k(func: str, n: int, k: int) -> None:
    """The range checks of ``n`` and ``k`` (ints) of :func:`check_problem_shape`."""
    if n <= 0 or n % N_MULTIPLE:
        raise ValueError(f"{func}: n must be a positive multiple of {N_MULTIPLE}; got {n}")
    if k <= 0 or k % K_MULTIPLE:
        raise ValueError(f"{func}: k must be a positive multiple of {K_MULTIPLE}; got {k}")


def _check_symbolic_problem_shape(func: str, m, n, k) -> tuple:
    """:func:`check_problem_shape` for a symbolic ``m`` (a ``torch.SymInt``): the same checks and
    messages, ``m`` returned as it is (not specialised), ``n`` and ``k`` as ints."""
    import torch

    n, k = check_int(func, "n", n), check_int(func, "k", k)
    torch._check_with(ValueError, m >= 0, lambda: f"{func}: m must be an int >= 0; got {shown(m)}")
    _check_n_k(func, n, k)
    return m, n, k


def _checked_shape(fn: str, m, n, k, symbolic: bool) -> tuple:
    """``(m, n, k, require_rows)``: the problem shape checked, and the shape check for tensors whose
    first dimension is ``m``. A symbolic ``m`` (torch.compile / torch.export with a dynamic m) is
    checked without being specialised (:func:`_check_symbolic_problem_shape`,
    :func:`_require_symbolic_shape`); else :func:`check_problem_shape` and :func:`_require_shape`."""
    if symbolic:
        return (*_check_symbolic_problem_shape(fn, m, n, k), _require_symbolic_shape)
    return (*check_problem_shape(fn, m, n, k), _require_shape)


def shown(value):
    """``value`` as a message shows it: a symbolic int as the concrete value it was traced with
    (its hint, no guard added), or as its expression when it has none; anything else as is."""
    if isinstance(value, (tuple, list)):
        return tuple(shown(v) for v in value)
    node = getattr(value, "node", None)
    if node is None or not hasattr(node, "has_hint"):
        return value
    return node.hint if node.has_hint() else value


def _symbolic_extent(size) -> int:
    """A stand-in int for a symbolic size in the ``> 0`` / ``> 1`` tests of :func:`_require_aligned`:
    0 or 1 when the size is known (without a guard) to be that, else 2 (assumed to have several
    rows, so the layout is checked). Adds no guard, so the size stays symbolic."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    for value in (0, 1):
        if statically_known_true(size == value):
            return value
    return 2


def _require_dtype(name: str, x: torch.Tensor, dtype: torch.dtype, fn: str = _FN) -> None:
    if x.dtype != dtype:
        raise TypeError(f"{fn}: {name} must have dtype {dtype}; got {x.dtype}")


def _require_2d(name: str, x: torch.Tensor, fn: str = _FN, dims: int = 2) -> None:
    if x.dim() != dims:
        raise ValueError(f"{fn}: {name} must be {dims}-D; got shape {shown(tuple(x.shape))}")


def _require_shape(name: str, x: torch.Tensor, expected: tuple, why, fn: str = _FN) -> None:
    """``why``: the expected shape in words, or a function giving them (built only on failure)."""
    if tuple(x.shape) != expected:
        raise ValueError(_shape_message(name, x, expected, why, fn))


def _shape_message(name: str, x: torch.Tensor, expected: tuple, why, fn: str = _FN) -> str:
    words = why() if callable(why) else why
    return f"{fn}: {name} must have shape {words} = {shown(expected)}; got {shown(tuple(x.shape))}"


def _require_symbolic_shape(name: str, x: torch.Tensor, expected: tuple, why, fn: str = _FN) -> None:
    """:func:`_require_shape` when ``expected[0]`` is the symbolic ``m``: the other dimensions are
    compared as usual; the first with ``torch._check_with``, so ``m`` is not specialised (a backed
    ``m`` gets at most an equality guard between two sizes, an unbacked one a runtime assert)."""
    import torch

    if x.dim() != len(expected) or tuple(x.shape[1:]) != expected[1:]:
        raise ValueError(_shape_message(name, x, expected, why, fn))
    torch._check_with(ValueError, x.shape[0] == expected[0], lambda: _shape_message(name, x, expected, why, fn))


def _require_aligned(name: str, x: torch.Tensor, row_multiple: int, what: str, data_checks: bool,
                     fn: str = _FN) -> None:
    rows, cols = x.shape
    if type(rows) is not int or type(cols) is not int:  # symbolic sizes: test them without a guard
        rows, cols = (v if type(v) is int else _symbolic_extent(v) for v in (rows, cols))
    if rows > 0 and cols > 0:
        row_stride, col_stride = x.stride()
        if col_stride != 1 and cols > 1:
            raise ValueError(f"{fn}: {name} must be contiguous along its last dimension ({what}); "
                             f"got strides {shown((row_stride, col_stride))}")
        if rows > 1 and row_stride % row_multiple != 0:
            raise ValueError(f"{fn}: {name} row stride must be a multiple of {row_multiple} elements "
                             f"(16 bytes, for TMA); got stride {shown(row_stride)}")
        if data_checks and x.data_ptr() % 16 != 0:
            raise ValueError(f"{fn}: {name} base address must be 16-byte aligned (TMA); "
                             f"got address ending in {x.data_ptr() % 16:#x} modulo 16")


def _operand_shapes(fn: str, a, a_scale, b, b_scale) -> tuple:
    """The shape checks both the 1D2D and the 1D1D GEMM make of their operands (after their dtype
    checks): every operand 2-D, ``b``'s K that of ``a``, the problem shape, ``a_scale``'s rows and K
    groups. ``b_scale`` (checked 2-D here) is the caller's to check further.
    ``(m, n, k, k_groups, require_m_rows)``."""
    import torch

    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        _require_2d(name, x, fn)
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"{fn}: b must have shape (n, k) with k = a.shape[1] = {shown(k)}; "
                         f"got {shown(tuple(b.shape))}")
    m, n, k, require_m_rows = _checked_shape(fn, m, n, k, isinstance(m, torch.SymInt))
    g = SCALE_GROUP
    k_groups = ceil_div(k, g)
    require_m_rows("a_scale", a_scale, (m, k_groups), lambda: f"(m, ceil(k/{g})) for a of shape {shown(tuple(a.shape))}",
                   fn)
    return m, n, k, k_groups, require_m_rows


def check_fp8_gemm_args(a, a_scale, b, b_scale, out, *, data_checks: bool = True) -> Problem:
    """Validate fp8_gemm's arguments and return the dense :class:`deep_tile.gemm.problem.Problem` they
    describe (its a_scale layout is the launcher's to decide: :mod:`deep_tile.gemm.layouts`).

    ``m = a.shape[0]``, ``n = b.shape[0]`` and ``k = a.shape[1]`` go through
    :func:`check_problem_shape`, so a shape fp8_gemm rejects is rejected with the same message by
    ``get_config``, ``explain``, warmup and the command line.

    ``data_checks=False`` skips what needs real data: base addresses, devices and the GPU (the
    fake implementations of :mod:`deep_tile.ops` check fake and meta tensors with it).

    When ``a.shape[0]`` is a ``torch.SymInt`` (fake tensors of torch.compile / torch.export with a
    dynamic m), the problem's ``m`` is that SymInt: it is checked with ``torch._check_with`` (the same
    messages, symbolic sizes shown as the values traced with) and never specialised, the row counts
    of ``a_scale`` and ``out`` compared with it the same way; ``n`` and ``k`` are returned as ints.

    Raises:
        TypeError: a non-tensor argument or a wrong dtype.
        ValueError: a wrong rank, shape, layout, alignment or device, or a non-sm_90 GPU.
    """
    import torch

    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("out", out)):
        if not isinstance(x, torch.Tensor) and (x is not None or name != "out"):
            raise TypeError(f"{_FN}: {name} must be a torch.Tensor; got {type(x).__name__}")
    _require_dtype("a", a, torch.float8_e4m3fn)
    _require_dtype("b", b, torch.float8_e4m3fn)
    _require_dtype("a_scale", a_scale, torch.float32)
    _require_dtype("b_scale", b_scale, torch.float32)
    if out is not None:
        _require_dtype("out", out, torch.bfloat16)
    m, n, k, k_groups, require_m_rows = _operand_shapes(_FN, a, a_scale, b, b_scale)
    g = SCALE_GROUP
    _require_shape("b_scale", b_scale, (ceil_div(n, g), k_groups),
                   lambda: f"(ceil(n/{g}), ceil(k/{g})) for b of shape {shown(tuple(b.shape))}")
    if out is not None:
        _require_2d("out", out)
        require_m_rows("out", out, (m, n), "(m, n)")

    _require_aligned("a", a, 16, "k", data_checks)
    _require_aligned("b", b, 16, "k", data_checks)
    if out is not None:
        _require_aligned("out", out, 8, "n", data_checks)
    if data_checks:
        _require_device(_FN, (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("out", out)))
    return Problem(m, n, k)


OUT_DTYPE_NAMES = {"bfloat16": "bfloat16", "float32": "float32"}
"""The output and C types of :func:`deep_tile.fp8_gemm` (torch dtype name -> the name the kernel
contract, :data:`deep_tile.kernels.fp8_gemm.OUT_DTYPES`, uses)."""


def _span(x) -> tuple:
    """``[first, end)`` byte addresses of the memory ``x`` can reach (its strides' hull)."""
    start = x.data_ptr()
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(x.shape, x.stride()) if size > 0)
    return start, start + extent * x.element_size()


def _same_view(x, y) -> bool:
    """Whether ``x`` and ``y`` view the same elements the same way (``c`` given as ``out``)."""
    return (x.data_ptr() == y.data_ptr() and x.dtype == y.dtype and tuple(x.shape) == tuple(y.shape)
            and x.stride() == y.stride())


_overlap_tests: ContextVar = ContextVar("deep_tile_overlap_tests", default=None)


def recording_overlap_tests():
    """A list that gets ``(out, others)`` for every overlap test the checks make inside the block
    (the native path repeats those tests per call: they depend on addresses, not on the signature)."""
    return recording(_overlap_tests)


def _require_no_overlap(fn: str, out, others: tuple) -> None:
    """``out`` (written) shares no memory with any ``(name, tensor)`` of ``others`` (read)."""
    log = _overlap_tests.get()
    if log is not None:
        log.append((out, tuple(x for _, x in others if x is not None)))
    o0, o1 = _span(out)
    if o0 == o1:
        return
    for name, x in others:
        if x is None or x.numel() == 0:
            continue
        x0, x1 = _span(x)
        if x0 < o1 and o0 < x1:
            raise ValueError(f"{fn}: out must not overlap {name} in memory (out is written while {name} is read); "
                             f"out spans [{o0:#x}, {o1:#x}), {name} [{x0:#x}, {x1:#x})")


def _output_dtype(fn: str, out, out_dtype, c, default):
    """The output dtype of an FP32-capable GEMM (bf16 or FP32): ``out``'s, else ``out_dtype``, else
    ``default``; ``out``, ``out_dtype`` and ``c`` of another dtype, or an ``out_dtype`` that is not
    ``out``'s, raise."""
    import torch

    allowed = (torch.bfloat16, torch.float32)
    if out is not None:
        if out.dtype not in allowed:
            raise TypeError(f"{fn}: out must have dtype torch.bfloat16 or torch.float32; got {out.dtype}")
        if out_dtype is not None and out_dtype != out.dtype:
            raise ValueError(f"{fn}: out_dtype={out_dtype} differs from out.dtype={out.dtype}")
        out_dtype = out.dtype
    elif out_dtype is None:
        out_dtype = default
    elif out_dtype not in allowed:
        raise TypeError(f"{fn}: out_dtype must be torch.bfloat16 or torch.float32; got {out_dtype}")
    if c is not None and c.dtype not in allowed:
        raise TypeError(f"{fn}: c must have dtype torch.bfloat16 or torch.float32; got {c.dtype}")
    return out_dtype


def check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, accumulate: bool, out, out_dtype=None, *,
                            data_checks: bool = True, b_scale_1d: bool = False) -> Problem:
    """Validate the arguments of :func:`deep_tile.fp8_gemm` with an FP32 output or an addend C
    (``out = C + A.B^T``) and return the :class:`deep_tile.gemm.problem.Problem` (its ``out_dtype`` and
    ``c_dtype`` set).

    The operands are checked as :func:`check_fp8_gemm_args` checks them. Then:

    - ``out``: None (allocated; ``out_dtype`` then says its type, bf16 by default) or an ``[m, n]``
      tensor of dtype bfloat16 or float32, n contiguous, row stride a multiple of 16 bytes,
      16-byte aligned; ``out_dtype``, when given with ``out``, must be its dtype;
    - ``c``: None or an ``[m, n]`` bfloat16 or float32 tensor laid out as ``out`` must be;
      ``accumulate=True`` means C is ``out`` itself (``c`` must then be None and ``out`` given):
      the op schema passes an in-place accumulation so, not as two aliasing tensors;
    - aliasing: ``out`` must not share memory with a, a_scale, b, b_scale or ``c`` (a ``c`` that is
      exactly ``out`` is passed as ``accumulate``; one that overlaps it otherwise is refused).

    ``b_scale_1d``: the 1D1D GEMM (:func:`deep_tile.fp8_gemm_1d1d`): b_scale is ``[n, ceil(k/128)]``
    (one scale per row of b and 128-wide K block), checked like a_scale, and the function named in
    the messages is ``fp8_gemm_1d1d``.

    Raises:
        TypeError: a non-tensor argument or a wrong dtype.
        ValueError: a wrong rank, shape, layout, alignment, device, or an overlap.
    """
    import torch

    fn = "fp8_gemm_1d1d" if b_scale_1d else _FN
    if c is not None and not isinstance(c, torch.Tensor):
        raise TypeError(f"{fn}: c must be a torch.Tensor or None; got {type(c).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"{fn}: out must be a torch.Tensor or None; got {type(out).__name__}")
    if not isinstance(accumulate, bool):
        raise TypeError(f"{fn}: accumulate must be a bool; got {type(accumulate).__name__}")
    if accumulate and (c is not None or out is None):
        raise ValueError(f"{fn}: accumulate=True adds out to itself: it needs out and no separate c")
    out_dtype = _output_dtype(fn, out, out_dtype, c, torch.bfloat16)
    # the operands' shapes first, then out's and c's, then what needs data (alignment, devices)
    if b_scale_1d:
        problem = _check_1d1d_operands(fn, a, a_scale, b, b_scale)
    else:
        problem = check_fp8_gemm_args(a, a_scale, b, b_scale, None, data_checks=False)
    m, n = problem.m, problem.n
    require_rows = _require_symbolic_shape if isinstance(m, torch.SymInt) else _require_shape
    for name, x in (("out", out), ("c", c)):
        if x is None:
            continue
        _require_2d(name, x)
        require_rows(name, x, (m, n), "(m, n)")
        _require_aligned(name, x, 16 // x.element_size(), "n", data_checks)
    if data_checks:
        if b_scale_1d:
            _require_aligned("a", a, 16, "k", True, fn)
            _require_aligned("b", b, 16, "k", True, fn)
        else:
            check_fp8_gemm_args(a, a_scale, b, b_scale, None, data_checks=True)
        _require_device(fn, (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("out", out),
                             ("c", c)))
        if out is not None:
            if c is not None and _same_view(c, out):
                raise ValueError(f"{fn}: c is out: pass it as accumulate=True (deep_tile.fp8_gemm does so)")
            _require_no_overlap(fn, out, (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("c", c)))
    c_dtype = None
    if accumulate:
        c_dtype = "out"
    elif c is not None:
        c_dtype = OUT_DTYPE_NAMES[str(c.dtype).removeprefix("torch.")]
    problem = problem.with_output(OUT_DTYPE_NAMES[str(out_dtype).removeprefix("torch.")], c_dtype)
    return problem.with_b_scale_1d() if b_scale_1d else problem


def _check_1d1d_operands(fn: str, a, a_scale, b, b_scale) -> Problem:
    """The operand checks of the 1D1D GEMM (as :func:`check_fp8_gemm_args`'s, b_scale per row of
    b: ``[n, ceil(k/128)]``), without data; the dense problem."""
    import torch

    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
    _require_dtype("a", a, torch.float8_e4m3fn, fn)
    _require_dtype("b", b, torch.float8_e4m3fn, fn)
    _require_dtype("a_scale", a_scale, torch.float32, fn)
    _require_dtype("b_scale", b_scale, torch.float32, fn)
    m, n, k, k_groups, require_m_rows = _operand_shapes(fn, a, a_scale, b, b_scale)
    g = SCALE_GROUP
    _require_shape("b_scale", b_scale, (n, k_groups), lambda: f"(n, ceil(k/{g})) for b of shape {shown(tuple(b.shape))}",
                   fn)
    _require_aligned("a", a, 16, "k", False, fn)
    _require_aligned("b", b, 16, "k", False, fn)
    return Problem(m, n, k)


def _require_device(fn: str, named: tuple) -> None:
    """All ``(name, tensor)`` of ``named`` (None skipped) on one CUDA device, an sm_90 GPU."""
    import torch

    devices = {name: x.device for name, x in named if x is not None}
    for name, device in devices.items():
        if device.type != "cuda":
            raise ValueError(f"{fn}: {name} must be a CUDA tensor; got a tensor on {device}")
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{fn}: all tensors must be on the same device; got {listing}")
    from deep_tile.device import device_facts  # deep_tile.device imports this module

    device = named[0][1].device
    capability = device_facts(device.index).capability
    if capability != (9, 0):
        raise ValueError(f"{fn}: needs an sm_90 (Hopper) GPU; {device} is "
                         f"{torch.cuda.get_device_name(device)} with compute capability {capability}")


GROUPED_FUNCTIONS = {
    "grouped_contiguous": "m_grouped_fp8_gemm_contiguous",
    "grouped_masked": "m_grouped_fp8_gemm_masked",
    "grouped_offsets": "m_grouped_fp8_gemm_offsets",
    "grouped_psum": "m_grouped_fp8_gemm_psum",
}
"""The public function of each grouped :class:`deep_tile.gemm.problem.ProblemKind` (by value), named in
the messages of :func:`check_grouped_args`."""

_INFO_NAMES = {"grouped_contiguous": "m_indices", "grouped_masked": "masked_m", "grouped_offsets": "offsets",
               "grouped_psum": "expert_ends"}

PROBLEM_KIND_NAMES = {kind.short_name: kind for kind in ProblemKind}
"""The names :func:`check_problem_kind` takes: :attr:`deep_tile.gemm.problem.ProblemKind.short_name` -> kind."""


def grouped_op_kind(value) -> ProblemKind:
    """The M-grouped ProblemKind named by the ``kind`` argument of the ``m_grouped_fp8_gemm_acc`` ops
    (ValueError for any other name)."""
    kinds = {kind.value: kind for kind in ProblemKind if kind.grouped and kind is not ProblemKind.K_GROUPED}
    if value not in kinds:
        raise ValueError(f"m_grouped_fp8_gemm_acc: kind must be one of {', '.join(map(repr, kinds))}; got {value!r}")
    return kinds[value]


def check_problem_kind(func: str, kind):
    """``kind`` as a :class:`deep_tile.gemm.problem.ProblemKind`: one already, or its name
    (``"dense"``, ``"contiguous"``, ``"masked"``, ``"offsets"``, ``"psum"``, ``"k_grouped"``;
    :data:`PROBLEM_KIND_NAMES`).

    Raises:
        ValueError: any other value (the message lists the names).
    """
    if isinstance(kind, ProblemKind):
        return kind
    if isinstance(kind, str) and kind in PROBLEM_KIND_NAMES:
        return PROBLEM_KIND_NAMES[kind]
    raise ValueError(f"{func}: kind must be one of {', '.join(map(repr, PROBLEM_KIND_NAMES))}; got {kind!r}")


def _check_group_count(fn: str, kind, num_groups, what: str) -> int:
    """The group count of a grouped problem: an int >= 1, at most MAX_TABLE_GROUPS for the kinds
    with a table. ``what`` names where it comes from in the messages."""
    from deep_tile.kernels.fp8_gemm import MAX_TABLE_GROUPS

    num_groups = check_int(fn, what, num_groups)
    if num_groups < 1:
        raise ValueError(f"{fn}: {what} must be at least 1; got {num_groups}")
    if kind.has_table and num_groups > MAX_TABLE_GROUPS:
        raise ValueError(f"{fn}: at most {MAX_TABLE_GROUPS} groups are supported; {what} is {num_groups}")
    return num_groups


def _masked_expected_m(fn: str, expected_m, m: int) -> int:
    """The masked kind's ``expected_m`` hint (an int >= 0) as the selector takes it: clamped into
    ``[1, m]`` (1 when ``m`` is 0)."""
    if isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m < 0:
        raise ValueError(f"{fn}: expected_m must be an int >= 0; got {expected_m!r}")
    return max(1, min(expected_m, m)) if m > 0 else 1


def check_grouped_problem(func: str, kind, m, n, k, num_groups, expected_m=None) -> Problem:
    """A grouped problem described by its sizes, checked as the grouped GEMMs check their
    tensors' sizes (for :func:`deep_tile.explain`, :func:`deep_tile.get_config` and warmup).

    ``kind``: a grouped :class:`deep_tile.gemm.problem.ProblemKind` or its name (``"contiguous"``,
    ``"masked"``, ``"offsets"``, ``"psum"``); ``m``: the rows of ``a`` (masked: ``max_m``, the rows of each
    group's slab); ``n``, ``k`` as :func:`check_problem_shape`; ``num_groups``: the experts
    (at most :data:`deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS` for the masked, offsets and
    psum kinds); ``expected_m``: the masked kind's hint of real rows per group (default ``m``); the
    other kinds derive it (``ceil(m / num_groups)``) and take none.

    Raises:
        TypeError: a size is not an int.
        ValueError: a value out of range, a dense ``kind``, or ``expected_m`` given for a kind
            that derives it.
    """
    kind = check_problem_kind(func, kind)
    if not kind.grouped:
        raise ValueError(f"{func}: kind must be a grouped kind ('contiguous', 'masked', 'offsets' or 'psum'); got {kind.value!r}")
    m, n, k = check_problem_shape(func, m, n, k)
    num_groups = _check_group_count(func, kind, num_groups, "num_groups")
    if kind is ProblemKind.GROUPED_MASKED:
        expected = _masked_expected_m(func, m if expected_m is None else expected_m, m)
    elif expected_m is not None:
        raise ValueError(f"{func}: expected_m is the masked kind's hint; the {kind.short_name} kind "
                         f"derives it from m and num_groups (got expected_m={expected_m!r})")
    else:
        expected = None
    return Problem(m, n, k, kind=kind, num_groups=num_groups, expected_m=expected,
                   b_scale_1d=kind is ProblemKind.K_GROUPED)


def check_grouped_args(kind, a, a_scale, b, b_scale, info, out, expected_m=None, *, c=None,
                       accumulate: bool = False, out_dtype=None, data_checks: bool = True) -> Problem:
    """Validate the arguments of a grouped (Mixture-of-Experts) GEMM and return its
    :class:`deep_tile.gemm.problem.Problem` (``kind`` one of the grouped ProblemKinds).

    The contiguous, offsets and psum kinds take ``a`` [M, K], ``a_scale`` [M, ceil(K/128)] and
    ``out`` [M, N]; the masked kind ``a`` [G, max_m, K], ``a_scale`` [G, max_m, ceil(K/128)] and ``out``
    [G, max_m, N] (the problem's ``m`` is max_m). All take ``b`` [G, N, K] and ``b_scale``
    [G, ceil(N/128), ceil(K/128)]. ``info`` is the int32 ``m_indices`` [M], ``masked_m`` [G],
    ``offsets`` [G + 1] or ``expert_ends`` [G] (contiguous). ``n``, ``k`` follow :func:`check_problem_shape`; ``a``, ``b``
    and ``out`` must be contiguous along their last dimension with 16-byte rows, and ``b`` (and the
    masked ``a`` and ``out``) must be viewable as 2-D (their groups one after another). The masked
    offsets and psum kinds take at most :data:`deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS` groups.
    ``expected_m`` (masked only): an int >= 0, a hint for the selector.

    The output variants (as :func:`check_fp8_gemm_acc_args` checks the dense ones): ``out`` bf16
    or float32 (``out_dtype``, when given, its dtype; without ``out`` the type to allocate, bf16
    by default); ``c`` None or a bf16 / float32 addend of ``out``'s shape and layout rules;
    ``accumulate=True``: C is ``out`` itself (``out`` given, ``c`` None). With C or an FP32
    output, ``out`` must share no memory with the operands, ``info`` or ``c``.

    A symbolic ``M`` (fake tensors, contiguous, offsets and psum kinds) stays symbolic, as in
    :func:`check_fp8_gemm_args`. Raises TypeError / ValueError naming the public function and
    the argument, before anything is allocated or written.
    """
    import torch

    fn, info_name = GROUPED_FUNCTIONS[kind.value], _INFO_NAMES[kind.value]
    masked = kind is ProblemKind.GROUPED_MASKED
    named = (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), (info_name, info), ("out", out),
             ("c", c))
    for name, x in named:
        if not isinstance(x, torch.Tensor) and (x is not None or name not in ("out", "c")):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
    if not isinstance(accumulate, bool):
        raise TypeError(f"{fn}: accumulate must be a bool; got {type(accumulate).__name__}")
    if accumulate and (c is not None or out is None):
        raise ValueError(f"{fn}: accumulate=True adds out to itself: it needs out and no separate c")
    out_dtype = _output_dtype(fn, out, out_dtype, c, torch.bfloat16)
    for name, x, dtype in (("a", a, torch.float8_e4m3fn), ("b", b, torch.float8_e4m3fn), ("a_scale", a_scale, torch.float32),
                           ("b_scale", b_scale, torch.float32), (info_name, info, torch.int32)):
        _require_dtype(name, x, dtype, fn)
    a_dims = 3 if masked else 2
    for name, x, dims in (("a", a, a_dims), ("a_scale", a_scale, a_dims), ("b", b, 3), ("b_scale", b_scale, 3),
                          (info_name, info, 1), ("out", out, a_dims), ("c", c, a_dims)):
        if x is not None:
            _require_2d(name, x, fn, dims)

    num_groups, n, k = b.shape
    if check_int(fn, "the group count b.shape[0]", num_groups) < 1:
        raise ValueError(f"{fn}: b must have at least one group; got shape {shown(tuple(b.shape))}")
    num_groups = _check_group_count(fn, kind, num_groups, "b.shape[0]")
    if masked:
        if a.shape[0] != num_groups:
            raise ValueError(f"{fn}: a must have shape (num_groups, max_m, k) with num_groups = b.shape[0] = "
                             f"{num_groups}; got {shown(tuple(a.shape))}")
        m = a.shape[1]
    else:
        m = a.shape[0]
    if a.shape[-1] != k:
        raise ValueError(f"{fn}: b must have shape (num_groups, n, k) with k = a.shape[-1] = {shown(a.shape[-1])}; "
                         f"got {shown(tuple(b.shape))}")
    m, n, k, require_rows = _checked_shape(fn, m, n, k, isinstance(m, torch.SymInt) and not masked)
    g = SCALE_GROUP
    k_blocks = ceil_div(k, g)
    lead = (num_groups, m) if masked else (m,)
    words = "(num_groups, max_m, " if masked else "(m, "
    require_rows("a_scale", a_scale, lead + (k_blocks,), f"{words}ceil(k/{g}))", fn)
    _require_shape("b_scale", b_scale, (num_groups, ceil_div(n, g), k_blocks),
                   f"(num_groups, ceil(n/{g}), ceil(k/{g}))", fn)
    if kind is ProblemKind.GROUPED_CONTIGUOUS:
        require_rows(info_name, info, (m,), "(m,)", fn)
    else:
        extra = 1 if kind is ProblemKind.GROUPED_OFFSETS else 0
        _require_shape(info_name, info, (num_groups + extra,), "(num_groups + 1,)" if extra else "(num_groups,)", fn)
    for name, x in (("out", out), ("c", c)):
        if x is not None:
            require_rows(name, x, lead + (n,), f"{words}n)", fn)

    outputs = tuple((name, x, 16 // x.element_size(), "n") for name, x in (("out", out), ("c", c)) if x is not None)
    for name, x, multiple, what in (("a", a, 16, "k"), ("b", b, 16, "k")) + outputs:
        flat = x
        if x.dim() == 3:
            groups, rows, cols = x.shape
            if groups > 1 and rows > 0 and cols > 0 and x.stride(0) != rows * x.stride(1):
                raise ValueError(f"{fn}: {name}'s groups must follow one another (stride(0) == shape[1] * stride(1), "
                                 f"so it can be read as 2-D); got strides {shown(tuple(x.stride()))}")
            flat = x.as_strided((groups * rows, cols), (x.stride(1), x.stride(2)))
        _require_aligned(name, flat, multiple, what, data_checks, fn)
    if info.numel() > 1 and info.stride(0) != 1:
        raise ValueError(f"{fn}: {info_name} must be contiguous; got stride {shown(info.stride(0))}")
    expected = _masked_expected_m(fn, expected_m, m) if masked else None
    variant = c is not None or accumulate or out_dtype != torch.bfloat16
    if data_checks:
        if variant and out is not None:  # aliasing first: the native path's fast check refuses it on any device
            if c is not None and _same_view(c, out):
                raise ValueError(f"{fn}: c is out: pass it as accumulate=True ({fn} does so)")
            _require_no_overlap(fn, out, named[:5] + (("c", c),))
        _require_device(fn, named)
    problem = Problem(m, n, k, kind=kind, num_groups=num_groups, expected_m=expected)
    if not variant:
        return problem
    c_dtype = "out" if accumulate else (None if c is None else OUT_DTYPE_NAMES[str(c.dtype).removeprefix("torch.")])
    return problem.with_output(OUT_DTYPE_NAMES[str(out_dtype).removeprefix("torch.")], c_dtype)


K_GROUPED_FN = "k_grouped_fp8_gemm_1d1d"
"""The K-grouped GEMM's public name, in the messages of :func:`check_k_grouped_args`."""


def _check_group_sizes(fn: str, group_sizes, k: int):
    """The K-grouped GEMM's ``group_sizes``: an int32 1-D contiguous tensor (returned as it is), or
    a list / tuple of ints >= 0 summing to at most ``k`` (returned as a tuple of ints)."""
    import torch

    if isinstance(group_sizes, torch.Tensor):
        if group_sizes.dtype != torch.int32 or group_sizes.dim() != 1 or not group_sizes.is_contiguous():
            raise ValueError(f"{fn}: group_sizes must be a contiguous 1-D torch.int32 tensor (or a list of ints); got "
                             f"{group_sizes.dtype} shape {tuple(group_sizes.shape)} strides {tuple(group_sizes.stride())}")
        return group_sizes
    if not isinstance(group_sizes, (list, tuple)):
        raise TypeError(f"{fn}: group_sizes must be an int32 tensor or a list / tuple of ints; got "
                        f"{type(group_sizes).__name__}")
    sizes = tuple(check_int(fn, f"group_sizes[{i}]", v) for i, v in enumerate(group_sizes))
    if any(v < 0 for v in sizes):
        raise ValueError(f"{fn}: group_sizes must be >= 0; got {list(sizes)}")
    if sum(sizes) > k:
        raise ValueError(f"{fn}: the group sizes sum to {sum(sizes)}, more than k = a.shape[1] = {k} (the groups' K "
                         f"ranges follow one another from K = 0)")
    return sizes


def check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype=None, *, accumulate: bool = False,
                         data_checks: bool = True) -> tuple:
    """Validate the arguments of :func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d` and return
    ``(problem, group_sizes)``: the K-grouped :class:`deep_tile.gemm.problem.Problem` (``m``, ``n``,
    ``k`` = total tokens, ``num_groups``, output and C types; ``c_dtype`` ``"out"`` when ``c is
    out``) and the group sizes (the int32 tensor, or a tuple of ints from a host list).

    - ``a`` [m, k], ``b`` [n, k] float8_e4m3fn, k contiguous, 16-byte rows, 16-byte aligned; ``n``
      a positive multiple of 8, ``k`` of 16 (:func:`check_problem_shape`), ``m >= 0``;
    - ``a_scale`` [m, ceil(k/128)], ``b_scale`` [n, ceil(k/128)] float32 (any layout: the
      launcher reads the TMA-aligned column-major one, copied into it when needed);
    - ``group_sizes``: int32 [G] (1-D, contiguous, on a's device; its values are the kernel's to
      clamp) or a list / tuple of G ints >= 0 summing to at most k; 1 <= G <=
      :data:`deep_tile.kernels.fp8_gemm.MAX_TABLE_GROUPS`;
    - ``out``: None (allocated, ``out_dtype``: float32 by default, or bfloat16) or a [G, m, n]
      bfloat16 / float32 tensor, n contiguous, row stride a multiple of 16 bytes, 16-byte aligned,
      its groups one after another (``stride(0) == m * stride(1)``);
    - ``c``: None, ``out`` itself (in-place accumulation), or a [G, m, n] bfloat16 / float32
      tensor laid out as out must be; ``out`` must not overlap any input, nor ``c`` unless it is
      ``out``; ``accumulate=True`` (the custom op's form of ``c is out``) with ``c`` None and
      ``out`` given.

    Raises:
        TypeError: a non-tensor argument, a wrong dtype, a non-int group size.
        ValueError: a wrong rank, shape, layout, alignment, device, group count or size, or an
            overlap.
    """
    import torch

    from deep_tile.kernels.fp8_gemm import MAX_TABLE_GROUPS

    fn = K_GROUPED_FN
    for name, x in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor; got {type(x).__name__}")
    for name, x in (("out", out), ("c", c)):
        if x is not None and not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor or None; got {type(x).__name__}")
    for name, x, dtype in (("a", a, torch.float8_e4m3fn), ("b", b, torch.float8_e4m3fn),
                           ("a_scale", a_scale, torch.float32), ("b_scale", b_scale, torch.float32)):
        _require_dtype(name, x, dtype, fn)
    out_dtype = _output_dtype(fn, out, out_dtype, c, torch.float32)
    if c is not None and out is None:
        raise ValueError(f"{fn}: c needs out (pass out=c to accumulate in place, or an out of its own)")
    if not isinstance(accumulate, bool):
        raise TypeError(f"{fn}: accumulate must be a bool; got {type(accumulate).__name__}")
    if accumulate and (c is not None or out is None):
        raise ValueError(f"{fn}: accumulate=True adds out to itself: it needs out and no separate c")

    m, n, k, k_groups, require_m_rows = _operand_shapes(fn, a, a_scale, b, b_scale)
    g = SCALE_GROUP
    _require_shape("b_scale", b_scale, (n, k_groups), lambda: f"(n, ceil(k/{g})) for b of shape {shown(tuple(b.shape))}",
                   fn)
    sizes = _check_group_sizes(fn, group_sizes, k)
    num_groups = len(sizes) if isinstance(sizes, tuple) else sizes.shape[0]
    if not 1 <= num_groups <= MAX_TABLE_GROUPS:
        raise ValueError(f"{fn}: group_sizes must name 1 to {MAX_TABLE_GROUPS} groups; got {num_groups}")
    for name, x in (("out", out), ("c", c)):
        if x is None:
            continue
        _require_2d(name, x, fn, dims=3)
        _require_shape(name, x, (num_groups, m, n), "(num_groups, m, n)", fn)
        groups, rows, cols = x.shape
        if groups > 1 and rows > 0 and cols > 0 and x.stride(0) != rows * x.stride(1):
            raise ValueError(f"{fn}: {name}'s groups must follow one another (stride(0) == shape[1] * stride(1), so "
                             f"it can be read as 2-D); got strides {tuple(x.stride())}")
        flat = x.as_strided((groups * rows, cols), (x.stride(1), x.stride(2)))
        _require_aligned(name, flat, 16 // x.element_size(), "n", data_checks, fn)
    _require_aligned("a", a, 16, "k", data_checks, fn)
    _require_aligned("b", b, 16, "k", data_checks, fn)
    accumulate = accumulate or (c is not None and c is out)
    if data_checks:
        sizes_tensor = sizes if isinstance(sizes, torch.Tensor) else None
        _require_device(fn, (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale),
                             ("group_sizes", sizes_tensor), ("out", out), ("c", c)))
        if out is not None:
            others = (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("group_sizes", sizes_tensor))
            _require_no_overlap(fn, out, others + ((() if c is None or c is out else (("c", c),))))
    c_dtype = "out" if accumulate else (None if c is None else OUT_DTYPE_NAMES[str(c.dtype).removeprefix("torch.")])
    problem = Problem(m, n, k, kind=ProblemKind.K_GROUPED, num_groups=num_groups, b_scale_1d=True,
                      out_dtype=OUT_DTYPE_NAMES[str(out_dtype).removeprefix("torch.")], c_dtype=c_dtype)
    return problem, sizes
