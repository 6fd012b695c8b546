// JIT entry for the fused bf16 -> FP8 casts with an optional transposed copy
// (deep_tile/kernels/cast_transpose.py is their contract; deep_tile/casts/cast_transpose.py launches them).
#include "deep_tile/kernels/cast_transpose.cuh"

#define DT_CAST_TRANSPOSE_PARAMS                                                                        \
  const deep_tile::u16* __restrict__ x, deep_tile::u8* __restrict__ q, float* __restrict__ s,           \
      deep_tile::u8* __restrict__ qt, float* __restrict__ st, int rows, int cols, int s_pitch, int st_pitch, \
      int qt_ld, int flags, int batch, const int* __restrict__ group_offsets, int num_groups

/// 1x128 groups: q [rows, cols] + column-major s; qt [cols, qt_ld] + column-major st (qt may be null);
/// `batch` such matrices stacked (Args::of); with `num_groups` > 0 qt/st get each row group its own
/// 128-row blocks (cast_transpose.cuh, the grouped token kind).
extern "C" __global__ void __launch_bounds__(DT_CT_THREADS, DT_CT_MIN_BLOCKS)
    deep_tile_cast_transpose_token(DT_CAST_TRANSPOSE_PARAMS) {
  deep_tile::cast_transpose::cast<false>({x, q, s, qt, st, rows, cols, s_pitch, st_pitch, qt_ld, flags, batch, group_offsets, num_groups});
}

/// 128x128 blocks: q [rows, cols] + row-major s; qt = q transposed + st = s transposed (qt may be null);
/// `batch` such matrices stacked.
extern "C" __global__ void __launch_bounds__(DT_CT_THREADS, DT_CT_MIN_BLOCKS)
    deep_tile_cast_transpose_block(DT_CAST_TRANSPOSE_PARAMS) {
  deep_tile::cast_transpose::cast<true>({x, q, s, qt, st, rows, cols, s_pitch, st_pitch, qt_ld, flags, batch, group_offsets, num_groups});
}
