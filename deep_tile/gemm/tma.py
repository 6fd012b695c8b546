"""Host-built TMA descriptors (``CUtensorMap``) for 2-D tiles of torch tensors (and the 3-D slab
view of :class:`deep_tile.gemm.kernel_args.TensorMap`).

Encoding a map costs a driver call and some Python; maps are cached by everything that goes
into them (address, shape, strides, box, swizzle), so repeated calls on the same buffers --
weights, or activations from PyTorch's caching allocator -- reuse the 128 bytes.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict

from deep_tile.jit.runtime import check, driver


_ELEMENT = {  # dtype name -> (CUtensorMapDataType member, bytes per element)
    "uint8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1),
    "bfloat16": ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2),
    "float32": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4),
}
_SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
            64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}
_L2_PROMOTION = {0: "CU_TENSOR_MAP_L2_PROMOTION_NONE", 64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
_CACHE_CAPACITY = 4096
_cache: "OrderedDict[tuple, bytes]" = OrderedDict()


def encode_2d(address: int, element: str, inner: int, outer: int, outer_stride_bytes: int,
              box_inner: int, box_outer: int, swizzle: int, l2_promotion: int, slab_rows: int = 0) -> bytes:
    """The 128 bytes of a 2-D tiled tensor map.

    `inner` is the contiguous dimension (elements), `outer` the rows, `outer_stride_bytes` the
    row pitch; `l2_promotion` the bytes an L2 miss of the map's loads fetches (0, 64, 128, 256).
    Out-of-bounds box elements load as zero and are not stored. `slab_rows` > 0 encodes the 3-D
    slab view instead: dims (inner, slab_rows, outer), both outer strides the row pitch, box
    (box_inner, box_outer, 1) (:class:`deep_tile.gemm.kernel_args.TensorMap`).
    """
    key = (address, element, inner, outer, outer_stride_bytes, box_inner, box_outer, swizzle, l2_promotion,
           slab_rows)
    cached = _cache.get(key)
    if cached is not None:
        _cache.move_to_end(key)
        return cached
    cu = driver()
    dtype_name, _ = _ELEMENT[element]
    dims, strides, box = [inner, outer], [outer_stride_bytes], [box_inner, box_outer]
    if slab_rows:
        dims, strides, box = [inner, slab_rows, outer], [outer_stride_bytes] * 2, [box_inner, box_outer, 1]
    return _remember(key, _encode(
        cu, address, dtype_name, dims, strides, box, swizzle, l2_promotion,
        f"cuTensorMapEncodeTiled({element}, dims=({', '.join(map(str, dims))}), row pitch={outer_stride_bytes} B, "
        f"box=({', '.join(map(str, box))}), swizzle={swizzle}, L2 promotion={l2_promotion})"))


def encode_3d(address: int, element: str, dims: tuple, strides_bytes: tuple, box: tuple, swizzle: int,
              l2_promotion: int) -> bytes:
    """The 128 bytes of a 3-D tiled tensor map: ``dims`` (innermost first, elements), the byte strides
    of dimensions 1 and 2 (multiples of 16, in any order of size), ``box`` per dimension. Cached as
    :func:`encode_2d` is."""
    key = ("3d", address, element, tuple(dims), tuple(strides_bytes), tuple(box), swizzle, l2_promotion)
    cached = _cache.get(key)
    if cached is not None:
        _cache.move_to_end(key)
        return cached
    return _remember(key, _encode(
        driver(), address, _ELEMENT[element][0], list(dims), list(strides_bytes), list(box), swizzle, l2_promotion,
        f"cuTensorMapEncodeTiled({element}, dims={tuple(dims)}, strides={tuple(strides_bytes)} B, "
        f"box={tuple(box)}, swizzle={swizzle}, L2 promotion={l2_promotion})"))


def _remember(key: tuple, raw: bytes) -> bytes:
    """``raw`` cached under ``key``, the least recently used entry dropped past _CACHE_CAPACITY."""
    _cache[key] = raw
    if len(_cache) > _CACHE_CAPACITY:
        _cache.popitem(last=False)
    return raw


def _encode(cu, address: int, dtype_name: str, dims: list, strides: list, box: list, swizzle: int, l2_promotion: int,
            what: str) -> bytes:
    tensor_map = check(
        cu.cuTensorMapEncodeTiled(
            getattr(cu.CUtensorMapDataType, dtype_name), len(dims), address,
            [cu.cuuint64_t(v) for v in dims], [cu.cuuint64_t(v) for v in strides],
            [cu.cuuint32_t(v) for v in box], [cu.cuuint32_t(1)] * len(dims),
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, _SWIZZLE[swizzle]),
            getattr(cu.CUtensorMapL2promotion, _L2_PROMOTION[l2_promotion]),
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        what)
    return ctypes.string_at(tensor_map.getPtr(), 128)
