"""How a kernel's parameters are made from the call's tensors: argument specs both host paths walk.

A kernel family's contract (e.g. :func:`deep_tile.kernels.fp8_gemm.argument_specs`) describes each
kernel parameter, in declaration order, as one spec that names where its value comes from:

- :class:`TensorMap`: a 2-D TMA descriptor over one operand tensor: which dimension is the
  contiguous ("inner") one and which the rows ("outer"), the element type, box, swizzle and L2
  promotion (bytes an L2 miss fetches: 0, 64, 128 or 256); or, given ``slab_rows``, the 3-D
  slab view of the same rows (:class:`TensorMap`);
- :class:`ZeroMap`: 128 zero bytes (a tensor map the kernel variant does not use);
- :class:`Pointer`: an operand's data pointer;
- :class:`Size`, :class:`Stride`: an operand's size or stride (elements) along a dimension, int32;
- :class:`Value`: an int32 constant of the plan.

Operands are numbered by their index in the family contract's ``OPERANDS`` (the op's tensors,
in its argument order; at most :data:`MAX_OPERANDS`). The Python
host path packs specs with :func:`pack` (:mod:`deep_tile.gemm.launch`); the native path receives them
as int tuples (:func:`encode`) and fills the same parameters in C++ (``fill_params`` in
deep_tile/native/csrc/launch.cpp; the ``SpecKind`` values of csrc/gemm_plan.h are
:data:`SPEC_KINDS`, checked against this module by tests/test_native.py). So a kernel fact (dims, boxes, argument order) is
written once, here and in the family's contract, and neither host path has its own copy.

The row pitch of a tensor map is ``stride(outer) * element bytes``, or, when the operand has one
row (``size(outer) == 1``, where the stride means nothing), the inner extent rounded up to 16
bytes (TMA wants a multiple of 16 even where it never steps): :meth:`TensorMap.value`, and
``row_pitch_bytes`` in csrc/launch.cpp.

Pure Python: no torch, no CUDA.
"""
from __future__ import annotations

__all__ = ["MAX_OPERANDS", "ELEMENTS", "SPEC_KINDS", "L2_PROMOTIONS", "DEFAULT_L2_PROMOTION", "CODE_LENGTHS", "TensorMap", "ZeroMap", "Pointer", "Size",
           "Stride", "Value", "encode", "pack_values"]

MAX_OPERANDS = 8
"""Most operand tensors a spec may refer to (``kMaxOperands`` in csrc/gemm_plan.h)."""

ELEMENTS = {"uint8": (0, 1), "bfloat16": (1, 2), "float32": (2, 4)}
"""Tensor-map element type -> (code of ``Element`` in csrc/tensor_maps.h, bytes)."""

SPEC_KINDS = {"tensor_map": 0, "zero_map": 1, "pointer": 2, "size": 3, "stride": 4, "value": 5}
"""Spec kind -> its code in :func:`encode` (``SpecKind`` in csrc/gemm_plan.h)."""

L2_PROMOTIONS = (0, 64, 128, 256)
"""The L2 promotions a tensor map may have, in bytes (0: none; ``CU_TENSOR_MAP_L2_PROMOTION_*``)."""
DEFAULT_L2_PROMOTION = 256
"""A tensor map's L2 promotion unless its spec names another."""

CODE_LENGTHS = {SPEC_KINDS["tensor_map"]: 10, SPEC_KINDS["zero_map"]: 1, SPEC_KINDS["pointer"]: 2,
                SPEC_KINDS["size"]: 3, SPEC_KINDS["stride"]: 3, SPEC_KINDS["value"]: 2}
"""Spec kind code -> the ints of its encoding (the kind code included)."""


_ZERO_MAP = bytes(128)


class TensorMap:
    """A 2-D tensor map over operand ``operand`` (an index into the family's ``OPERANDS``): its
    ``inner_dim`` is contiguous, ``outer_dim`` the rows; ``box`` is ``(inner, outer)`` elements;
    ``l2_promotion`` one of :data:`L2_PROMOTIONS`.

    ``slab_rows`` > 0 makes it the 3-D slab view instead: element ``(i, r, s)`` at row ``r + s``,
    dims ``(inner, slab_rows, outer)``, both outer strides the row pitch, box
    ``(box[0], box[1], 1)``. A store box at ``(i, c, row0 - c)`` writes rows ``row0 ..
    row0 + slab_rows - c - 1`` only (the TMA unit clips ``r`` at ``slab_rows``): the grouped
    kernels' partial slabs (``SlabView`` in include/deep_tile/epilogue/store_bf16.cuh)."""

    __slots__ = ("operand", "element", "inner_dim", "outer_dim", "box", "swizzle", "l2_promotion", "slab_rows",
                 "_element_bytes")
    kind = "tensormap"

    def __init__(self, operand: int, element: str, inner_dim: int, outer_dim: int, box: tuple, swizzle: int,
                 l2_promotion: int = DEFAULT_L2_PROMOTION, slab_rows: int = 0):
        if l2_promotion not in L2_PROMOTIONS:
            raise ValueError(f"TensorMap: l2_promotion must be one of {L2_PROMOTIONS}; got {l2_promotion!r}")
        if slab_rows < 0 or (slab_rows and slab_rows != box[1]):
            raise ValueError(f"TensorMap: slab_rows must be 0 or the box's rows ({box[1]}); got {slab_rows!r}")
        self.operand, self.element, self.inner_dim, self.outer_dim = operand, element, inner_dim, outer_dim
        self.box, self.swizzle, self.l2_promotion, self.slab_rows = tuple(box), swizzle, l2_promotion, slab_rows
        self._element_bytes = ELEMENTS[element][1]

    def code(self) -> tuple:
        return (SPEC_KINDS["tensor_map"], self.operand, ELEMENTS[self.element][0], self.inner_dim, self.outer_dim,
                self.box[0], self.box[1], self.swizzle, self.l2_promotion, self.slab_rows)

    def value(self, operands, encode_map):
        t = operands[self.operand]
        shape = t.shape
        inner, outer = shape[self.inner_dim], shape[self.outer_dim]
        if outer > 1:  # the row pitch (module docstring)
            pitch = t.stride(self.outer_dim) * self._element_bytes
        else:
            pitch = (inner * self._element_bytes + 15) // 16 * 16
        return encode_map(t.data_ptr(), self.element, inner, outer, pitch, self.box[0], self.box[1], self.swizzle,
                          self.l2_promotion, self.slab_rows)


class ZeroMap:
    """128 zero bytes in a tensor-map parameter the kernel variant does not read."""

    __slots__ = ()
    kind = "tensormap"

    def code(self) -> tuple:
        return (SPEC_KINDS["zero_map"],)

    def value(self, operands, encode_map):
        return _ZERO_MAP


class Pointer:
    """The data pointer of operand ``operand``."""

    __slots__ = ("operand",)
    kind = "ptr"

    def __init__(self, operand: int):
        self.operand = operand

    def code(self) -> tuple:
        return (SPEC_KINDS["pointer"], self.operand)

    def value(self, operands, encode_map):
        return operands[self.operand].data_ptr()


class Size:
    """``operand.size(dim)`` as an int32."""

    __slots__ = ("operand", "dim")
    kind = "i32"

    def __init__(self, operand: int, dim: int):
        self.operand, self.dim = operand, dim

    def code(self) -> tuple:
        return (SPEC_KINDS["size"], self.operand, self.dim)

    def value(self, operands, encode_map):
        return operands[self.operand].shape[self.dim]


class Stride(Size):
    """``operand.stride(dim)`` (elements) as an int32."""

    __slots__ = ()

    def code(self) -> tuple:
        return (SPEC_KINDS["stride"], self.operand, self.dim)

    def value(self, operands, encode_map):
        return operands[self.operand].stride(self.dim)


class Value:
    """An int32 constant of the plan."""

    __slots__ = ("constant",)
    kind = "i32"

    def __init__(self, value: int):
        self.constant = int(value)

    def code(self) -> tuple:
        return (SPEC_KINDS["value"], self.constant)

    def value(self, operands, encode_map):
        return self.constant


def encode(specs) -> list:
    """``specs`` as lists of ints, the form the native path reads (and plan records store)."""
    return [list(spec.code()) for spec in specs]


def pack_values(specs, operands, encode_map) -> list:
    """``(kind, value)`` of each spec over ``operands`` (tensors in the family's ``OPERANDS`` order), for
    :class:`deep_tile.jit.runtime.KernelArgs`; ``encode_map(address, element, inner, outer,
    pitch_bytes, box_inner, box_outer, swizzle, l2_promotion, slab_rows)`` makes a tensor map's
    128 bytes (:func:`deep_tile.gemm.tma.encode_2d`)."""
    return [(spec.kind, spec.value(operands, encode_map)) for spec in specs]
