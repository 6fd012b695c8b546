"""deep_tile's torch custom ops: ``torch.ops.deep_tile.*``, traceable by torch.compile.

The operators of the ``deep_tile`` namespace (see :data:`SCHEMAS`):

- ``fp8_gemm(a, a_scale, b, b_scale) -> Tensor``: a new bf16 ``[m, n]`` output;
- ``fp8_gemm_out(a, a_scale, b, b_scale, out) -> ()``: writes ``out`` (declared mutated,
  ``Tensor(a!)``, so torch.compile functionalises it and CUDA graphs capture it);
- ``fp8_gemm_acc(a, a_scale, b, b_scale, c, out_dtype) -> Tensor`` and
  ``fp8_gemm_acc_out(a, a_scale, b, b_scale, c, accumulate, out) -> ()``: the output variants,
  ``out = C + A.B^T`` in bf16 or FP32 (``c`` optional; ``accumulate`` adds ``out`` to itself, the
  in-place accumulation of a main gradient, without passing one tensor twice);
- ``fp8_gemm_1d1d(a, a_scale, b, b_scale, c, out_dtype) -> Tensor`` and ``fp8_gemm_1d1d_out(a,
  a_scale, b, b_scale, c, accumulate, out) -> ()``: the same with b_scale per row of b (1D1D, the
  weight gradient's GEMM, :func:`deep_tile.fp8_gemm_1d1d`);
- ``k_grouped_fp8_gemm_1d1d(a, a_scale, b, b_scale, group_sizes, c, out_dtype) -> Tensor`` and
  ``k_grouped_fp8_gemm_1d1d_out(a, a_scale, b, b_scale, group_sizes, c, accumulate, out) -> ()``:
  the K-grouped 1D1D GEMM of MoE weight gradients (:mod:`deep_tile.gemm.k_grouped`);
- ``m_grouped_fp8_gemm_{contiguous,offsets,masked,psum}`` and their ``_out`` variants: the
  Mixture-of-Experts GEMMs of :mod:`deep_tile.gemm.grouped` (likewise);
- ``m_grouped_fp8_gemm_acc(kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype) -> Tensor``
  and ``m_grouped_fp8_gemm_acc_out(kind, ..., expected_m, c, accumulate, out) -> ()``: the output
  variants of those four kinds (``kind`` a grouped ProblemKind's value; ``expected_m`` the masked
  kind's hint, None for the others), as ``fp8_gemm_acc`` is of ``fp8_gemm``;
- ``per_token_cast_to_fp8(x) -> (Tensor, Tensor)`` and ``per_block_cast_to_fp8(w) -> (Tensor,
  Tensor)``: ``(q, s)`` as :mod:`deep_tile.casts.quant` documents;
- ``per_token_cast_transpose_to_fp8(x, transpose, power_of_two_scales)`` and
  ``per_block_cast_transpose_to_fp8(w, transpose, power_of_two_scales) -> (q, s, qt, st)``: the
  fused casts of :mod:`deep_tile.casts.cast_transpose` (``qt``/``st`` empty without ``transpose``);
- ``per_token_cast_transpose_grouped_to_fp8(x, group_offsets, power_of_two_scales) -> (q, s, qt,
  st)``: the activation cast whose transposed copy gives each row group its own 128-row blocks.

Each has a fake (meta) implementation that checks what can be checked without data (types,
dtypes, shapes, strides: the messages of :mod:`deep_tile.gemm.checks` and :mod:`deep_tile.casts.quant`)
and returns outputs of the right shape, dtype and strides, so torch.compile traces them with no
graph break and ``torch.library.opcheck`` passes.

Dynamic shapes: the fake implementations keep the row count symbolic: ``m`` of the GEMMs
(``a.shape[0]``) and ``rows`` of the casts. They never make it an int nor branch on it (the checks
compare it with ``torch._check_with``), so ``torch.compile(dynamic=True)`` builds one graph for
every ``m`` and ``torch.export`` accepts a dynamic ``Dim`` for it (an unbacked ``m``, see
``torch._dynamo.mark_unbacked``, works too, ``m`` = 0 and 1 included). ``n`` and ``k`` (the
weight's shape) are made ints: a graph is specialised to them, as the kernels are. Guards torch
adds itself remain: Dynamo specialises backed sizes 0 and 1, relates sizes and strides equal in
the first call (duck sizing), and AOTAutograd / torch.export ask whether per_block_cast_to_fp8's
``ceil(rows/128)`` scale rows are 1 (``torch.fx.experimental._config.backed_size_oblivious``
avoids that one).

The real implementations are Python kernels
registered for ``CompositeExplicitAutograd``; once the native extension (:mod:`deep_tile.native`)
is loaded, its C++ kernels registered for the CUDA and CPU keys take every GEMM op over (the dense,
the grouped, the output-variant, the 1D1D and the K-grouped ones, ``_out`` variants included).

Importing this module needs torch and starts no CUDA context; ``import deep_tile`` imports it
when torch is already imported, and ``deep_tile.fp8_gemm`` / the casts import it on first use.
"""
from __future__ import annotations

import torch

from deep_tile import native
from deep_tile.gemm.checks import check_fp8_gemm_acc_args, check_fp8_gemm_args, check_grouped_args, check_k_grouped_args, \
    grouped_op_kind
from deep_tile.common import SCALE_GROUP, ceil_div

__all__ = ["NAMESPACE", "SCHEMAS", "fp8_gemm", "fp8_gemm_out", "fp8_gemm_acc", "fp8_gemm_acc_out", "fp8_gemm_1d1d", "fp8_gemm_1d1d_out", "k_grouped_fp8_gemm_1d1d", "k_grouped_fp8_gemm_1d1d_out", "per_token_cast_to_fp8", "per_block_cast_to_fp8",
           "per_token_cast_transpose_to_fp8", "per_block_cast_transpose_to_fp8",
           "per_token_cast_transpose_grouped_to_fp8",
           "m_grouped_fp8_gemm_contiguous", "m_grouped_fp8_gemm_contiguous_out", "m_grouped_fp8_gemm_offsets",
           "m_grouped_fp8_gemm_offsets_out", "m_grouped_fp8_gemm_masked", "m_grouped_fp8_gemm_masked_out",
           "m_grouped_fp8_gemm_psum", "m_grouped_fp8_gemm_psum_out", "m_grouped_fp8_gemm_acc",
           "m_grouped_fp8_gemm_acc_out"]

NAMESPACE = "deep_tile"
"""The ``torch.ops`` namespace of the operators."""

SCHEMAS = {
    "fp8_gemm": "fp8_gemm(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale) -> Tensor",
    "fp8_gemm_out": "fp8_gemm_out(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor(a!) out) -> ()",
    "fp8_gemm_acc": ("fp8_gemm_acc(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor? c, "
                     "ScalarType out_dtype) -> Tensor"),
    "fp8_gemm_acc_out": ("fp8_gemm_acc_out(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor? c, "
                         "bool accumulate, Tensor(a!) out) -> ()"),
    "fp8_gemm_1d1d": ("fp8_gemm_1d1d(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor? c, "
                      "ScalarType out_dtype) -> Tensor"),
    "fp8_gemm_1d1d_out": ("fp8_gemm_1d1d_out(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor? c, "
                          "bool accumulate, Tensor(a!) out) -> ()"),
    "k_grouped_fp8_gemm_1d1d": ("k_grouped_fp8_gemm_1d1d(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                                "Tensor group_sizes, Tensor? c, ScalarType out_dtype) -> Tensor"),
    "k_grouped_fp8_gemm_1d1d_out": ("k_grouped_fp8_gemm_1d1d_out(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                                    "Tensor group_sizes, Tensor? c, bool accumulate, Tensor(a!) out) -> ()"),
    "m_grouped_fp8_gemm_contiguous": ("m_grouped_fp8_gemm_contiguous(Tensor a, Tensor a_scale, Tensor b, "
                                      "Tensor b_scale, Tensor m_indices) -> Tensor"),
    "m_grouped_fp8_gemm_contiguous_out": ("m_grouped_fp8_gemm_contiguous_out(Tensor a, Tensor a_scale, Tensor b, "
                                          "Tensor b_scale, Tensor m_indices, Tensor(a!) out) -> ()"),
    "m_grouped_fp8_gemm_offsets": ("m_grouped_fp8_gemm_offsets(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                                   "Tensor offsets) -> Tensor"),
    "m_grouped_fp8_gemm_offsets_out": ("m_grouped_fp8_gemm_offsets_out(Tensor a, Tensor a_scale, Tensor b, "
                                       "Tensor b_scale, Tensor offsets, Tensor(a!) out) -> ()"),
    "m_grouped_fp8_gemm_masked": ("m_grouped_fp8_gemm_masked(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                                  "Tensor masked_m, int expected_m) -> Tensor"),
    "m_grouped_fp8_gemm_masked_out": ("m_grouped_fp8_gemm_masked_out(Tensor a, Tensor a_scale, Tensor b, "
                                      "Tensor b_scale, Tensor masked_m, int expected_m, Tensor(a!) out) -> ()"),
    "m_grouped_fp8_gemm_psum": ("m_grouped_fp8_gemm_psum(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                                "Tensor expert_ends) -> Tensor"),
    "m_grouped_fp8_gemm_psum_out": ("m_grouped_fp8_gemm_psum_out(Tensor a, Tensor a_scale, Tensor b, "
                                    "Tensor b_scale, Tensor expert_ends, Tensor(a!) out) -> ()"),
    "m_grouped_fp8_gemm_acc": ("m_grouped_fp8_gemm_acc(str kind, Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, "
                               "Tensor info, int? expected_m, Tensor? c, ScalarType out_dtype) -> Tensor"),
    "m_grouped_fp8_gemm_acc_out": ("m_grouped_fp8_gemm_acc_out(str kind, Tensor a, Tensor a_scale, Tensor b, "
                                   "Tensor b_scale, Tensor info, int? expected_m, Tensor? c, bool accumulate, "
                                   "Tensor(a!) out) -> ()"),
    "per_token_cast_to_fp8": "per_token_cast_to_fp8(Tensor x) -> (Tensor, Tensor)",
    "per_block_cast_to_fp8": "per_block_cast_to_fp8(Tensor w) -> (Tensor, Tensor)",
    "per_token_cast_transpose_to_fp8": ("per_token_cast_transpose_to_fp8(Tensor x, bool transpose, "
                                        "bool power_of_two_scales) -> (Tensor, Tensor, Tensor, Tensor)"),
    "per_block_cast_transpose_to_fp8": ("per_block_cast_transpose_to_fp8(Tensor w, bool transpose, "
                                        "bool power_of_two_scales) -> (Tensor, Tensor, Tensor, Tensor)"),
    "per_token_cast_transpose_grouped_to_fp8": ("per_token_cast_transpose_grouped_to_fp8(Tensor x, "
                                                "Tensor group_offsets, bool power_of_two_scales) -> "
                                                "(Tensor, Tensor, Tensor, Tensor)"),
}
"""Operator name -> schema, as registered in :data:`NAMESPACE`."""


# ---- real implementations (Python; the native extension replaces the GEMM ones) --------------

def _gemm(a, a_scale, b, b_scale, out):
    """The GEMM through the native extension when it is loaded, else the Python host path.

    The first call with a CUDA tensor loads the extension, or starts building it
    (``DEEP_TILE_NATIVE``); calls with other tensors never start a build (they raise).
    """
    extension = native.module(start_build=isinstance(a, torch.Tensor) and a.is_cuda)
    if extension is not None:
        return extension.fp8_gemm(a, a_scale, b, b_scale, out)
    from deep_tile.gemm.launch import run

    return run(a, a_scale, b, b_scale, out)


def _fp8_gemm_impl(a, a_scale, b, b_scale):
    return _gemm(a, a_scale, b, b_scale, None)


def _fp8_gemm_out_impl(a, a_scale, b, b_scale, out):
    _gemm(a, a_scale, b, b_scale, out)


def _acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d):
    """The output variants (``b_scale_1d``: the 1D1D GEMM) through the native extension when it is
    loaded (as :func:`_gemm`), else the Python host path (:func:`deep_tile.gemm.launch.run_acc`)."""
    extension = native.module(start_build=isinstance(a, torch.Tensor) and a.is_cuda)
    if extension is not None:
        return extension.fp8_gemm_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d)
    from deep_tile.gemm.launch import run_acc

    return run_acc(a, a_scale, b, b_scale, c, accumulate, out, out_dtype, b_scale_1d=b_scale_1d)


def _fp8_gemm_acc_impl(a, a_scale, b, b_scale, c, out_dtype):
    return _acc(a, a_scale, b, b_scale, c, False, None, out_dtype, False)


def _fp8_gemm_acc_out_impl(a, a_scale, b, b_scale, c, accumulate, out):
    _acc(a, a_scale, b, b_scale, c, accumulate, out, None, False)


def _fp8_gemm_1d1d_impl(a, a_scale, b, b_scale, c, out_dtype):
    return _acc(a, a_scale, b, b_scale, c, False, None, out_dtype, True)


def _fp8_gemm_1d1d_out_impl(a, a_scale, b, b_scale, c, accumulate, out):
    _acc(a, a_scale, b, b_scale, c, accumulate, out, None, True)


def _k_grouped(a, a_scale, b, b_scale, group_sizes, c, accumulate, out, out_dtype):
    """The K-grouped GEMM through the native extension when it is loaded (as :func:`_gemm`), else
    the Python host path (:func:`deep_tile.gemm.launch.run_k_grouped`)."""
    extension = native.module(start_build=isinstance(a, torch.Tensor) and a.is_cuda)
    if extension is not None:
        return extension.k_grouped_fp8_gemm(a, a_scale, b, b_scale, group_sizes, c, accumulate, out, out_dtype)
    from deep_tile.gemm.launch import run_k_grouped

    return run_k_grouped(a, a_scale, b, b_scale, group_sizes, out, c, out_dtype, accumulate=accumulate)


def _k_grouped_impl(a, a_scale, b, b_scale, group_sizes, c, out_dtype):
    return _k_grouped(a, a_scale, b, b_scale, group_sizes, c, False, None, out_dtype)


def _k_grouped_out_impl(a, a_scale, b, b_scale, group_sizes, c, accumulate, out):
    _k_grouped(a, a_scale, b, b_scale, group_sizes, c, accumulate, out, None)


def _grouped(kind_value: str):
    """The real and fake implementations of one grouped GEMM op pair (``name``, ``name_out``):
    the native extension when it is loaded (as :func:`_gemm`), else the Python host path
    (:func:`deep_tile.gemm.launch.run_grouped`); and the checks without data followed by an empty
    output (its row count left symbolic when it is)."""
    from deep_tile.gemm.problem import ProblemKind

    kind = ProblemKind(kind_value)
    masked = kind is ProblemKind.GROUPED_MASKED

    def run(a, a_scale, b, b_scale, info, expected_m, out):
        extension = native.module(start_build=isinstance(a, torch.Tensor) and a.is_cuda)
        if extension is not None:
            return extension.m_grouped_fp8_gemm(kind.value, a, a_scale, b, b_scale, info, expected_m, out)
        from deep_tile.gemm.launch import run_grouped

        return run_grouped(kind, a, a_scale, b, b_scale, info, out, expected_m)

    def fake(a, a_scale, b, b_scale, info, expected_m, out):
        problem = check_grouped_args(kind, a, a_scale, b, b_scale, info, out, expected_m, data_checks=False)
        if out is None:
            return a.new_empty(tuple(a.shape[:-1]) + (problem.n,), dtype=torch.bfloat16)
        return None

    def real_new(*args):
        return run(*_split(args, masked), None)

    def real_out(*args):
        run(*_split(args[:-1], masked), args[-1])

    def fake_new(*args):
        return fake(*_split(args, masked), None)

    def fake_out(*args):
        fake(*_split(args[:-1], masked), args[-1])

    return real_new, real_out, fake_new, fake_out


def _grouped_acc(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out, out_dtype):
    """The M-grouped output variants (``kind``: a grouped ProblemKind's value) through the native
    extension when it is loaded (as :func:`_gemm`), else the Python host path
    (:func:`deep_tile.gemm.launch.run_grouped`)."""
    extension = native.module(start_build=isinstance(a, torch.Tensor) and a.is_cuda)
    if extension is not None:
        return extension.m_grouped_fp8_gemm_acc(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out,
                                                out_dtype)
    from deep_tile.gemm.launch import run_grouped

    return run_grouped(_grouped_kind(kind), a, a_scale, b, b_scale, info, out, expected_m, c=c,
                       accumulate=accumulate, out_dtype=out_dtype)


def _grouped_kind(value):
    """The grouped ProblemKind of an op's ``kind`` string (ValueError for any other)."""
    return grouped_op_kind(value)


def _grouped_acc_impl(kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype):
    return _grouped_acc(kind, a, a_scale, b, b_scale, info, expected_m, c, False, None, out_dtype)


def _grouped_acc_out_impl(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out):
    _grouped_acc(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out, None)


def _grouped_acc_fake(kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype):
    problem = check_grouped_args(_grouped_kind(kind), a, a_scale, b, b_scale, info, None, expected_m, c=c,
                                 out_dtype=out_dtype, data_checks=False)
    return a.new_empty(tuple(a.shape[:-1]) + (problem.n,), dtype=getattr(torch, problem.out_dtype))


def _grouped_acc_out_fake(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out):
    check_grouped_args(_grouped_kind(kind), a, a_scale, b, b_scale, info, out, expected_m, c=c, accumulate=accumulate,
                       data_checks=False)


def _split(args: tuple, masked: bool) -> tuple:
    """A grouped op's positional arguments before ``out`` as ``(a, a_scale, b, b_scale, info,
    expected_m)`` (expected_m None unless masked)."""
    return args if masked else args + (None,)


def _per_token_impl(x):
    from deep_tile.casts.quant_impl import per_token_cast

    return per_token_cast(x)


def _per_block_impl(w):
    from deep_tile.casts.quant_impl import per_block_cast

    return per_block_cast(w)


# ---- fake implementations (shapes only: torch.compile, FakeTensorMode, meta tensors) ---------

def _fp8_gemm_fake(a, a_scale, b, b_scale):
    """The checks without data, then an empty bf16 ``[m, n]`` (``m`` left symbolic when it is)."""
    problem = check_fp8_gemm_args(a, a_scale, b, b_scale, None, data_checks=False)
    return a.new_empty((problem.m, problem.n), dtype=torch.bfloat16)


def _fp8_gemm_out_fake(a, a_scale, b, b_scale, out):
    """The checks without data (``out`` is mutated in place: nothing to return)."""
    check_fp8_gemm_args(a, a_scale, b, b_scale, out, data_checks=False)


def _fp8_gemm_acc_fake(a, a_scale, b, b_scale, c, out_dtype):
    """The checks without data, then an empty ``[m, n]`` of ``out_dtype``."""
    problem = check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, False, None, out_dtype, data_checks=False)
    return a.new_empty((problem.m, problem.n), dtype=out_dtype)


def _fp8_gemm_acc_out_fake(a, a_scale, b, b_scale, c, accumulate, out):
    """The checks without data (``out`` is mutated in place)."""
    check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, accumulate, out, data_checks=False)


def _fp8_gemm_1d1d_fake(a, a_scale, b, b_scale, c, out_dtype):
    """The checks without data, then an empty ``[m, n]`` of ``out_dtype``."""
    problem = check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, False, None, out_dtype, data_checks=False,
                                      b_scale_1d=True)
    return a.new_empty((problem.m, problem.n), dtype=out_dtype)


def _fp8_gemm_1d1d_out_fake(a, a_scale, b, b_scale, c, accumulate, out):
    """The checks without data (``out`` is mutated in place)."""
    check_fp8_gemm_acc_args(a, a_scale, b, b_scale, c, accumulate, out, data_checks=False, b_scale_1d=True)


def _k_grouped_fake(a, a_scale, b, b_scale, group_sizes, c, out_dtype):
    """The checks without data (c needs out: none here), then an empty ``[G, m, n]`` of ``out_dtype``."""
    problem, _ = check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, None, c, out_dtype, data_checks=False)
    return a.new_empty((problem.num_groups, problem.m, problem.n), dtype=out_dtype)


def _k_grouped_out_fake(a, a_scale, b, b_scale, group_sizes, c, accumulate, out):
    """The checks without data (``out`` is mutated in place)."""
    check_k_grouped_args(a, a_scale, b, b_scale, group_sizes, out, c, accumulate=accumulate, data_checks=False)


def _cast_fake(fn: str, arg: str, x, scale_rows):
    """The input checks, then empty ``(q, s)``; ``scale_rows(rows)``: the row count of ``s``.
    ``rows`` is only used in sizes (never made an int), so a symbolic one stays symbolic."""
    from deep_tile.casts.quant_impl import check_cast_input

    check_cast_input(fn, arg, x)
    rows, k = x.shape
    q = x.new_empty((rows, k), dtype=torch.float8_e4m3fn)
    s = x.new_empty((scale_rows(rows), ceil_div(k, SCALE_GROUP)), dtype=torch.float32)
    return q, s


def _cast_transpose(name: str):
    """``deep_tile.casts.cast_transpose_impl.<name>``, imported on first call (it loads the kernels' module)."""

    def call(*args):
        from deep_tile.casts import cast_transpose_impl

        return getattr(cast_transpose_impl, name)(*args)

    return call


def _per_token_fake(x):
    return _cast_fake("per_token_cast_to_fp8", "x", x, lambda rows: rows)


def _per_block_fake(w):
    return _cast_fake("per_block_cast_to_fp8", "w", w, lambda rows: ceil_div(rows, SCALE_GROUP))


_IMPLS = {
    "fp8_gemm": (_fp8_gemm_impl, _fp8_gemm_fake),
    "fp8_gemm_out": (_fp8_gemm_out_impl, _fp8_gemm_out_fake),
    "fp8_gemm_acc": (_fp8_gemm_acc_impl, _fp8_gemm_acc_fake),
    "fp8_gemm_acc_out": (_fp8_gemm_acc_out_impl, _fp8_gemm_acc_out_fake),
    "fp8_gemm_1d1d": (_fp8_gemm_1d1d_impl, _fp8_gemm_1d1d_fake),
    "fp8_gemm_1d1d_out": (_fp8_gemm_1d1d_out_impl, _fp8_gemm_1d1d_out_fake),
    "k_grouped_fp8_gemm_1d1d": (_k_grouped_impl, _k_grouped_fake),
    "k_grouped_fp8_gemm_1d1d_out": (_k_grouped_out_impl, _k_grouped_out_fake),
    "m_grouped_fp8_gemm_acc": (_grouped_acc_impl, _grouped_acc_fake),
    "m_grouped_fp8_gemm_acc_out": (_grouped_acc_out_impl, _grouped_acc_out_fake),
    "per_token_cast_to_fp8": (_per_token_impl, _per_token_fake),
    "per_block_cast_to_fp8": (_per_block_impl, _per_block_fake),
    "per_token_cast_transpose_to_fp8": (_cast_transpose("token_op_impl"), _cast_transpose("token_op_fake")),
    "per_block_cast_transpose_to_fp8": (_cast_transpose("block_op_impl"), _cast_transpose("block_op_fake")),
    "per_token_cast_transpose_grouped_to_fp8": (_cast_transpose("grouped_op_impl"),
                                                _cast_transpose("grouped_op_fake")),
}


for _kind in ("grouped_contiguous", "grouped_offsets", "grouped_masked", "grouped_psum"):
    _name = "m_" + _kind.replace("grouped_", "grouped_fp8_gemm_")
    _real, _real_out, _fake, _fake_out = _grouped(_kind)
    _IMPLS[_name] = (_real, _fake)
    _IMPLS[_name + "_out"] = (_real_out, _fake_out)


def _register() -> list:
    """Define the operators and register their Python and fake kernels (once per process)."""
    if hasattr(torch.ops, NAMESPACE) and hasattr(getattr(torch.ops, NAMESPACE), "fp8_gemm_out"):
        return []  # already registered (this module was reloaded)
    definitions = torch.library.Library(NAMESPACE, "FRAGMENT")
    implementations = torch.library.Library(NAMESPACE, "FRAGMENT")
    for name, schema in SCHEMAS.items():
        definitions.define(schema)
        real, fake = _IMPLS[name]
        implementations.impl(name, real, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=implementations)
    return [definitions, implementations]


_LIBRARIES = _register()  # kept alive: a Library's registrations end when it is collected

_ops = getattr(torch.ops, NAMESPACE)

fp8_gemm = _ops.fp8_gemm.default
"""``torch.ops.deep_tile.fp8_gemm.default``: ``(a, a_scale, b, b_scale) -> out`` (a new bf16 tensor)."""
fp8_gemm_out = _ops.fp8_gemm_out.default
"""``torch.ops.deep_tile.fp8_gemm_out.default``: ``(a, a_scale, b, b_scale, out) -> None``, writes out."""
fp8_gemm_acc = _ops.fp8_gemm_acc.default
"""``(a, a_scale, b, b_scale, c, out_dtype) -> out``: a new ``[m, n]`` of ``out_dtype``, ``C + A.B^T``."""
fp8_gemm_acc_out = _ops.fp8_gemm_acc_out.default
"""``(a, a_scale, b, b_scale, c, accumulate, out) -> None``: writes ``out = C + A.B^T`` (C: ``c``, or
``out`` itself when ``accumulate``, or none)."""
fp8_gemm_1d1d = _ops.fp8_gemm_1d1d.default
"""``(a, a_scale, b, b_scale, c, out_dtype) -> out``: :func:`deep_tile.fp8_gemm_1d1d` into a new tensor."""
fp8_gemm_1d1d_out = _ops.fp8_gemm_1d1d_out.default
"""``(a, a_scale, b, b_scale, c, accumulate, out) -> None``: :func:`deep_tile.fp8_gemm_1d1d` into ``out``."""
per_token_cast_to_fp8 = _ops.per_token_cast_to_fp8.default
"""``torch.ops.deep_tile.per_token_cast_to_fp8.default``: ``x -> (q, s)``."""
per_block_cast_to_fp8 = _ops.per_block_cast_to_fp8.default
"""``torch.ops.deep_tile.per_block_cast_to_fp8.default``: ``w -> (q, s)``."""
per_token_cast_transpose_to_fp8 = _ops.per_token_cast_transpose_to_fp8.default
"""``(x, transpose, power_of_two_scales) -> (q, s, qt, st)``
(:func:`deep_tile.casts.cast_transpose.per_token_cast_transpose_to_fp8`)."""
per_block_cast_transpose_to_fp8 = _ops.per_block_cast_transpose_to_fp8.default
"""``(w, transpose, power_of_two_scales) -> (q, s, qt, st)``
(:func:`deep_tile.casts.cast_transpose.per_block_cast_transpose_to_fp8`)."""
per_token_cast_transpose_grouped_to_fp8 = _ops.per_token_cast_transpose_grouped_to_fp8.default
"""``(x, group_offsets, power_of_two_scales) -> (q, s, qt, st)``
(:func:`deep_tile.casts.cast_transpose.per_token_cast_transpose_to_fp8` with ``group_offsets``)."""
m_grouped_fp8_gemm_contiguous = _ops.m_grouped_fp8_gemm_contiguous.default
"""``(a, a_scale, b, b_scale, m_indices) -> out`` (:func:`deep_tile.m_grouped_fp8_gemm_contiguous`)."""
m_grouped_fp8_gemm_contiguous_out = _ops.m_grouped_fp8_gemm_contiguous_out.default
"""``(a, a_scale, b, b_scale, m_indices, out) -> None``, writes out."""
m_grouped_fp8_gemm_offsets = _ops.m_grouped_fp8_gemm_offsets.default
"""``(a, a_scale, b, b_scale, offsets) -> out`` (:func:`deep_tile.m_grouped_fp8_gemm_offsets`)."""
m_grouped_fp8_gemm_offsets_out = _ops.m_grouped_fp8_gemm_offsets_out.default
"""``(a, a_scale, b, b_scale, offsets, out) -> None``, writes out."""
m_grouped_fp8_gemm_masked = _ops.m_grouped_fp8_gemm_masked.default
"""``(a, a_scale, b, b_scale, masked_m, expected_m) -> out`` (:func:`deep_tile.m_grouped_fp8_gemm_masked`)."""
m_grouped_fp8_gemm_masked_out = _ops.m_grouped_fp8_gemm_masked_out.default
"""``(a, a_scale, b, b_scale, masked_m, expected_m, out) -> None``, writes out."""
m_grouped_fp8_gemm_psum = _ops.m_grouped_fp8_gemm_psum.default
"""``(a, a_scale, b, b_scale, expert_ends) -> out`` (:func:`deep_tile.m_grouped_fp8_gemm_psum`, alignment 128)."""
m_grouped_fp8_gemm_psum_out = _ops.m_grouped_fp8_gemm_psum_out.default
"""``(a, a_scale, b, b_scale, expert_ends, out) -> None``, writes out."""
m_grouped_fp8_gemm_acc = _ops.m_grouped_fp8_gemm_acc.default
"""``(kind, a, a_scale, b, b_scale, info, expected_m, c, out_dtype) -> out``: an M-grouped GEMM of ``kind``
(``"grouped_contiguous"``, ``"grouped_offsets"``, ``"grouped_masked"``, ``"grouped_psum"``) with an FP32
output or an addend C, into a new tensor of ``out_dtype``."""
m_grouped_fp8_gemm_acc_out = _ops.m_grouped_fp8_gemm_acc_out.default
"""``(kind, a, a_scale, b, b_scale, info, expected_m, c, accumulate, out) -> None``: the same into ``out`` (C:
``c``, or ``out`` itself when ``accumulate``, or none)."""
k_grouped_fp8_gemm_1d1d = _ops.k_grouped_fp8_gemm_1d1d.default
"""``(a, a_scale, b, b_scale, group_sizes, c, out_dtype) -> out``: :func:`deep_tile.gemm.k_grouped.k_grouped_fp8_gemm_1d1d`
into a new ``[G, m, n]`` tensor."""
k_grouped_fp8_gemm_1d1d_out = _ops.k_grouped_fp8_gemm_1d1d_out.default
"""``(a, a_scale, b, b_scale, group_sizes, c, accumulate, out) -> None``: the same into ``out`` (C: ``c``, or
``out`` itself when ``accumulate``, or none)."""
