// Fused bf16 -> FP8 (e4m3) casts with an optional transposed copy, one pass over the input.
//
//   token (1x128) kind: x [rows, cols] -> q [rows, cols] with one scale per row per 128 columns,
//     and on request qt [cols, qt_ld] (x transposed, padded columns zero) with one scale per
//     column of x per 128 rows: what the FP8 GEMMs read for fprop/dgrad and for the weight gradient.
//   block (128x128) kind: w [rows, cols] -> q with one scale per 128x128 block, and on request
//     qt = the bit-exact transpose of q with the transposed scales.
//   Either kind casts `batch` such matrices stacked contiguously (x [batch, rows, cols]), each on
//   its own (Args::of): the outputs stacked likewise, matrix b's at b times one matrix's extent.
//   Grouped token kind (`num_groups` > 0, the experts' tokens): the rows come in groups
//   [group_offsets[g], group_offsets[g + 1]), and the transposed copy gives each group its own
//   128-row blocks: group g's rows start at qt column padded_start[g] (the groups' row counts
//   rounded up to 128, summed), zeros after its last row up to the next multiple of 128, so no
//   scale block of qt holds two groups' rows (TileRows). q and s are those of the plain cast.
//
// DT_CT_STAGES == 0 (the "tile" design), and every cast without a transposed output: one CTA of
// DT_CT_THREADS (512) threads per 128x128 tile, x along the columns. Each thread loads 16
// consecutive bf16 of 2 rows (two 128-bit loads per row), reduces the row amax over the 8 lanes of
// its row with shuffles, writes its 16 FP8 bytes with one 128-bit store, and (transposed) stages
// the raw bf16 tile in shared memory; then each thread reads one column over 32 rows of the tile
// (a warp reads 64 contiguous bytes of a row: no bank conflict) and writes that column's 32 FP8
// bytes, a whole 32-byte sector of the transposed row, with two 128-bit stores.
// DT_CT_STAGES >= 2 (the "pipe" designs) with a transposed output: cast_tiles_pipelined, a
// persistent grid whose CTAs stream their tiles into DT_CT_STAGES shared-memory buffers with
// cp.async, DT_CT_STAGES - 1 tiles ahead, and run the same two passes from shared memory.
//
// Math (same float32 operations as deep_tile/casts/cast_transpose.py's torch reference, so bitwise equal):
//   amax = max(max |x|, 1e-4); inv = 448 / amax (correctly rounded);
//   power-of-two scales: inv = 2^floor(log2(inv)) (exponent bits kept);
//   scale = amax / 448, or 1 / inv for power-of-two scales; q = e4m3_rn_satfinite(x * inv).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/address.cuh"
#include "deep_tile/ptx/cp_async.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

#ifndef DT_CT_THREADS
#error "DT_CT_THREADS (threads per CTA) is set by deep_tile/kernels/cast_transpose.py"
#endif
#ifndef DT_CT_STAGES
#error "DT_CT_STAGES (0: one CTA per tile; >= 2: pipelined transposed casts) is set by deep_tile/kernels/cast_transpose.py"
#endif
#ifndef DT_CT_LINES
#error "DT_CT_LINES (pipelined column pass: 1 whole 128-byte qt lines per warp store, 0 one sector per thread) is set by deep_tile/kernels/cast_transpose.py"
#endif

namespace deep_tile {

namespace cast_transpose {

constexpr int kTile = 128;        // tile edge (= kScaleGroup)
constexpr int kThreads = DT_CT_THREADS;  // threads per CTA (deep_tile/kernels/cast_transpose.py)
constexpr int kChunk = 16;        // columns per thread in the row pass (two 16-byte loads)
constexpr int kRowsPerPass = kThreads / (kTile / kChunk);  // 32
constexpr int kPasses = kTile / kRowsPerPass;              // 4
constexpr int kSegs = kThreads / kTile;                    // threads per column in the column pass
constexpr int kColRows = kTile / kSegs;                    // rows per thread in the column pass
constexpr float kFp8Max = 448.0f;
constexpr float kMinAmax = 1e-4f;
constexpr int kPowerOfTwoFlag = 1;
constexpr int kStages = DT_CT_STAGES;  // smem tile buffers of the pipelined transposed cast (0: per-tile design)
constexpr int kTileBytes = kTile * kTile * 2;              // one bf16 tile in shared memory
constexpr int kCopiesPerThread = kTileBytes / 16 / kThreads;  // 16-byte cp.async per thread per tile
constexpr bool kLines = DT_CT_LINES != 0;  // pipelined column pass writes whole 128-byte qt lines per warp
constexpr int kLineRows = 16;              // kLines: tile rows (qt bytes) per thread per column
constexpr int kLineCols = 32 / (kTile / kLineRows);        // kLines: columns per warp (4)
constexpr int kLineTasks = kTile / (kThreads / 32 * kLineCols);  // kLines: columns per thread (2)

static_assert(kTile == kScaleGroup, "the cast tile is one scale group");
static_assert(kThreads == 256 || kThreads == 512, "DT_CT_THREADS must be 256 or 512");
static_assert(kStages == 0 || kStages >= 2, "DT_CT_STAGES must be 0 or >= 2");
static_assert(kTileBytes % (16 * kThreads) == 0, "a tile is whole 16-byte copies per thread");
static_assert(kLineTasks * (kThreads / 32) * kLineCols == kTile, "the line column pass covers the tile");
static_assert(kLineRows == 16 && kColRows % 16 == 0, "16-row runs share one swizzle (tile_offset)");

DT_DEVICE float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
DT_DEVICE float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

/// |lo|, |hi| of a bf16 pair folded into a running amax (NaN inputs are ignored, not propagated).
DT_DEVICE float amax2(float a, u32 w) { return fmaxf(a, fmaxf(fabsf(bf16_lo(w)), fabsf(bf16_hi(w)))); }

/// Two floats -> two e4m3 bytes (round to nearest even, saturating); `lo` in the low byte.
DT_DEVICE u32 e4m3x2(float lo, float hi) {
  u16 packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

/// Four products -> four e4m3 bytes, the first in the low byte.
DT_DEVICE u32 e4m3x4(float a, float b, float c, float d, float inv) {
  return e4m3x2(__fmul_rn(a, inv), __fmul_rn(b, inv)) | (e4m3x2(__fmul_rn(c, inv), __fmul_rn(d, inv)) << 16);
}

/// 8 bf16 (one 16-byte word) -> 8 e4m3 bytes (two 32-bit words).
DT_DEVICE uint2 quantize8(uint4 v, float inv) {
  return make_uint2(e4m3x4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y), inv),
                    e4m3x4(bf16_lo(v.z), bf16_hi(v.z), bf16_lo(v.w), bf16_hi(v.w), inv));
}

/// (inv, scale) of a clamped amax: 448 / amax and amax / 448, or the power-of-two pair.
DT_DEVICE float2 inv_and_scale(float amax, bool power_of_two) {
  float inv = __fdiv_rn(kFp8Max, amax);
  if (power_of_two) {
    inv = __uint_as_float(__float_as_uint(inv) & 0x7f800000u);
    return make_float2(inv, __fdiv_rn(1.0f, inv));
  }
  return make_float2(inv, __fdiv_rn(amax, kFp8Max));
}

DT_DEVICE float shfl_max(float v, int lane_mask) {
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1)
    if (offset & lane_mask) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

struct Args {
  const u16* x;  // [rows, cols] bf16, row-major, 16-byte aligned, cols % 16 == 0
  u8* q;         // [rows, cols] e4m3
  float* s;      // token: column-major [ceil(cols/128)][s_pitch]; block: row-major [.., s_pitch]
  u8* qt;        // [cols, qt_ld] e4m3, or null (no transposed output)
  float* st;     // token: column-major [ceil(rows/128)][st_pitch]; block: row-major [.., st_pitch]
  int rows, cols, s_pitch, st_pitch, qt_ld, flags;
  int batch;     // stacked matrices (>= 1), each [rows, cols]
  const int* group_offsets;  // grouped token kind: [num_groups + 1] row offsets (else unused)
  int num_groups;            // 0: not grouped; else 1 .. kMaxGroups

  /// Matrix `b` of the stack: every pointer moved on by b matrices' extent (the scales: b times
  /// ceil(cols / 128) (token) or ceil(rows / 128) (block) rows of their pitch; qt: b times cols rows).
  template <bool kBlock>
  DT_DEVICE Args of(int b) const {
    const long long elems = static_cast<long long>(rows) * cols;
    const int scale_rows = kBlock ? (rows + kTile - 1) / kTile : (cols + kTile - 1) / kTile;
    const int scale_t_rows = (cols + kTile - 1) / kTile;
    Args m = *this;
    m.x = x + b * elems;
    m.q = q + b * elems;
    m.s = s + static_cast<long long>(b) * scale_rows * s_pitch;
    // (null stays null: qt_ld and st_pitch are 0 without a transposed output)
    m.qt = qt + static_cast<long long>(b) * cols * qt_ld;
    m.st = st + static_cast<long long>(b) * (kBlock ? scale_t_rows : (rows + kTile - 1) / kTile) * st_pitch;
    return m;
  }
};

constexpr int kMaxGroups = 512;  // most groups of the grouped token kind

/// The rows of a tile: x's rows [src0, min(src0 + kTile, end)) (zeros after them), the first at
/// row dst0 of the transposed copy (qt column dst0, st column dst0 / kTile). Plain: the tile row
/// band j is x's rows 128 j .., dst0 = src0. Grouped: band j of the padded row space.
struct TileRows {
  int src0, end, dst0;
};

/// The grouped token kind's table, built once per CTA in shared memory (GroupTable::build): each
/// group's first row (`first`, clamped into [0, rows]) and padded start (`padded`; [num_groups]:
/// the total), its rows [first[g], first[g + 1]) with first[num_groups] = the last group's end.
struct GroupTable {
  int* first;   // [kMaxGroups + 1]
  int* padded;  // [kMaxGroups + 1]

  /// Thread 0 fills the table from a.group_offsets (each end clamped to [start, rows]), then the
  /// CTA synchronises. Nothing without groups.
  DT_DEVICE void build(const Args& a) const {
    if (a.num_groups == 0) return;
    if (threadIdx.x == 0) {
      int start = min(max(a.group_offsets[0], 0), a.rows), pad = 0;
      for (int g = 0; g < a.num_groups; ++g) {
        const int end = min(max(a.group_offsets[g + 1], start), a.rows);
        first[g] = start, padded[g] = pad;
        pad += (end - start + kTile - 1) / kTile * kTile;
        start = end;
      }
      first[a.num_groups] = start, padded[a.num_groups] = pad;
    }
    __syncthreads();
  }

  /// The rows of tile row band j (plain: x's rows 128 j ..; grouped: the group whose padded
  /// rows hold 128 j, or nothing past the last group's).
  DT_DEVICE TileRows rows_of(const Args& a, int j) const {
    const int p = j * kTile;
    if (a.num_groups == 0) return {p, a.rows, p};
    if (p >= padded[a.num_groups]) return {0, 0, p};
    int lo = 0, hi = a.num_groups;  // the last group g with padded[g] <= p (empty groups skipped)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (padded[mid] <= p) lo = mid; else hi = mid;
    }
    return {first[lo] + (p - padded[lo]), first[lo + 1], p};
  }
};

/// Tile row bands of a launch: ceil(rows / 128), and for the grouped kind one more per group (a
/// group's rows round up to whole bands).
DT_DEVICE int tile_bands(const Args& a) { return (a.rows + kTile - 1) / kTile + a.num_groups; }

/// The row pass's geometry of one thread in a 128x128 tile: its 16 columns (`chunk`), its first
/// row in the tile (`sub_row`, then every kRowsPerPass rows), the tile's first row and the end of
/// its rows (TileRows).
struct RowPass {
  int tid, row0, chunk, sub_row, col;
  bool col_ok;
  int row_end;
};

/// The amax of 16 bf16 (two 16-byte words).
DT_DEVICE float amax16(const uint4 (&v)[2]) {
  float m = 0.0f;
  const u32* w = reinterpret_cast<const u32*>(&v[0]);
#pragma unroll
  for (int i = 0; i < 8; ++i) m = amax2(m, w[i]);
  return m;
}

/// The row pass's (inv, scale) per pass from each pass's chunk amax, and the row scales stored:
/// kBlock, one scale for the tile (the block's amax through `warp_amax`; stored by thread 0 at
/// s[tile_y][tile_x] and, with `store_transposed`, st[tile_x][tile_y]); else one per row (the 8
/// lanes of a row meet their amax with shuffles; stored column-major, s[tile_x][row]).
/// NOTES: `Index` keeps the caller's type of the tile's indices (blockIdx's unsigned, or int): the
/// index arithmetic, and so the SASS, stay those of the code this was taken out of.
template <bool kBlock, class Index>
DT_DEVICE void row_scales(const Args& a, const RowPass& t, const float (&amax)[kPasses], Index tile_y, Index tile_x,
                          float* warp_amax, bool store_transposed, bool power_of_two, float2 (&row_inv)[kPasses]) {
  if constexpr (kBlock) {
    float m = amax[0];
#pragma unroll
    for (int p = 1; p < kPasses; ++p) m = fmaxf(m, amax[p]);
    m = shfl_max(m, 31);
    if (t.tid % 32 == 0) warp_amax[t.tid / 32] = m;
    __syncthreads();
    m = warp_amax[0];
#pragma unroll
    for (int i = 1; i < kThreads / 32; ++i) m = fmaxf(m, warp_amax[i]);
    const float2 is = inv_and_scale(fmaxf(m, kMinAmax), power_of_two);
#pragma unroll
    for (int p = 0; p < kPasses; ++p) row_inv[p] = is;
    if (t.tid == 0) {
      a.s[tile_y * a.s_pitch + tile_x] = is.y;
      if (store_transposed) a.st[tile_x * a.st_pitch + tile_y] = is.y;
    }
  } else {
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      row_inv[p] = inv_and_scale(fmaxf(shfl_max(amax[p], kTile / kChunk - 1), kMinAmax), power_of_two);
      const int row = t.row0 + t.sub_row + p * kRowsPerPass;
      if (t.chunk == 0 && row < t.row_end) a.s[static_cast<long long>(tile_x) * a.s_pitch + row] = row_inv[p].y;
    }
  }
}

/// The row pass's stores: each pass's 16 FP8 bytes of a row with one 16-byte store.
DT_DEVICE void store_row_pass(const Args& a, const RowPass& t, const uint4 (&v)[kPasses][2],
                              const float2 (&row_inv)[kPasses]) {
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int row = t.row0 + t.sub_row + p * kRowsPerPass;
    if (t.col_ok && row < t.row_end) {
      const uint2 lo = quantize8(v[p][0], row_inv[p].x), hi = quantize8(v[p][1], row_inv[p].x);
      *reinterpret_cast<uint4*>(a.q + static_cast<long long>(row) * a.cols + t.col) = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
  }
}

/// The cast of one 128x128 tile; kBlock: one scale for the tile (weights), else 1x128 groups.
/// With kStages > 0 this runs only without a transposed output (cast_tiles_pipelined does those).
template <bool kBlock>
DT_DEVICE void cast_tile(const Args& a) {
#if DT_CT_STAGES == 0
  __shared__ __align__(16) u16 tile[kTile][kTile];  // raw bf16, only with a transposed output
  __shared__ float col_amax[kSegs][kTile];                         // column pass partial amax
#endif
  __shared__ float warp_amax[kThreads / 32];                      // block kind
  __shared__ int group_first[kMaxGroups + 1], group_padded[kMaxGroups + 1];  // grouped token kind
  ptx::grid_dependency_wait();  // the stream predecessor may write x or read the outputs
  ptx::launch_dependents();
  const GroupTable groups{group_first, group_padded};
  groups.build(a);
  const TileRows rows = groups.rows_of(a, blockIdx.y);
  const bool power_of_two = (a.flags & kPowerOfTwoFlag) != 0;
  const bool transposed = a.qt != nullptr;
  const int tid = threadIdx.x;
  const int row0 = rows.src0, col0 = blockIdx.x * kTile;
  const int chunk = tid % (kTile / kChunk), sub_row = tid / (kTile / kChunk);
  const int col = col0 + chunk * kChunk;
  const bool col_ok = col < a.cols;

  // ---- load kPasses rows x 16 columns; zeros outside the tensor
  uint4 v[kPasses][2];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int row = row0 + sub_row + p * kRowsPerPass;
    v[p][0] = v[p][1] = make_uint4(0, 0, 0, 0);
    if (col_ok && row < rows.end) {
      const uint4* src = reinterpret_cast<const uint4*>(a.x + static_cast<long long>(row) * a.cols + col);
      v[p][0] = __ldg(src);
      v[p][1] = __ldg(src + 1);
    }
  }
  float amax[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) amax[p] = amax16(v[p]);

  // ---- amax and scale of the row pass, then its stores: 16 FP8 bytes per row, one 16-byte store
  const RowPass rp{tid, row0, chunk, sub_row, col, col_ok, rows.end};
  float2 row_inv[kPasses];
  row_scales<kBlock>(a, rp, amax, blockIdx.y, blockIdx.x, warp_amax, transposed, power_of_two, row_inv);
  store_row_pass(a, rp, v, row_inv);
  if (!transposed) return;
#if DT_CT_STAGES == 0
  // ---- column pass through shared memory
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    uint4* dst = reinterpret_cast<uint4*>(&tile[sub_row + p * kRowsPerPass][chunk * kChunk]);
    dst[0] = v[p][0];
    dst[1] = v[p][1];
  }
  __syncthreads();
  const int d_local = tid % kTile, seg = tid / kTile;  // column d_local of the tile, rows kColRows*seg ..
  float h[kColRows];
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kColRows; ++i) {
    h[i] = __uint_as_float(static_cast<u32>(tile[seg * kColRows + i][d_local]) << 16);
    m = fmaxf(m, fabsf(h[i]));
  }
  float inv;
  if constexpr (kBlock) {
    inv = row_inv[0].x;
  } else {
    col_amax[seg][d_local] = m;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSegs; ++i) m = fmaxf(m, col_amax[i][d_local]);
    const float2 is = inv_and_scale(fmaxf(m, kMinAmax), power_of_two);
    inv = is.x;
    if (seg == 0 && col0 + d_local < a.cols)
      a.st[static_cast<long long>(blockIdx.y) * a.st_pitch + col0 + d_local] = is.y;
  }
  const int d = col0 + d_local;
  if (d >= a.cols) return;
  const int t = rows.dst0 + seg * kColRows;
  u8* dst = a.qt + static_cast<long long>(d) * a.qt_ld + t;
#pragma unroll
  for (int c = 0; c < kColRows / 16; ++c) {
    if (t + 16 * c >= a.qt_ld) break;  // qt_ld % 16 == 0: a 16-byte word is all padding or all inside
    const float* f = h + 16 * c;
    *reinterpret_cast<uint4*>(dst + 16 * c) =
        make_uint4(e4m3x4(f[0], f[1], f[2], f[3], inv), e4m3x4(f[4], f[5], f[6], f[7], inv),
                   e4m3x4(f[8], f[9], f[10], f[11], inv), e4m3x4(f[12], f[13], f[14], f[15], inv));
  }
#endif
}

#if DT_CT_STAGES > 0
// ---- pipelined transposed casts: a persistent grid, each CTA walking the tiles blockIdx.x,
// blockIdx.x + gridDim.x, ...; the raw bf16 tiles stream into kStages shared-memory buffers with
// 16-byte cp.async (LDGSTS, zero-filled outside the tensor), kStages - 1 tiles ahead of the one
// being quantised, so an SM keeps a tile's loads in flight per CTA while it converts and stores.

/// Byte offset of element (row, col) of a tile buffer: rows of 256 bytes whose 16-byte words are
/// XOR-swizzled by bits 4-6 of the row, so the 8 rows 16 apart that a warp of the line column pass
/// reads at once fall in 8 different bank groups (rows and 16-byte words stay whole).
DT_DEVICE int tile_offset(int row, int col) {
  return row * (kTile * 2) + (((col >> 3) ^ ((row >> 4) & 7)) << 4) + (col & 7) * 2;
}

/// Start the loads of tile `tile` (row-major over the tiles) into the [kTile][kTile] bf16 buffer at
/// `buf`. Warp w copies rows kWarpRows * w ..: two whole rows (512 contiguous bytes) per copy, and
/// all of a thread's copies share one swizzle, so their shared addresses are one register plus
/// immediates (the loop-invariant addresses of the persistent loop stay few).
DT_DEVICE void load_tile(const Args& a, const TileRows& rows, int tile_x, u32 buf) {
  constexpr int kWords = kTile / 8;                       // 16-byte words per row
  constexpr int kWarpRows = kTile / (kThreads / 32);     // 8
  static_assert(kWarpRows % 2 == 0 && kWarpRows / 2 == kCopiesPerThread && 16 % kWarpRows == 0,
                "a warp copies two rows at a time, within one 16-row swizzle run");
  const int row0 = rows.src0, col0 = tile_x * kTile;
  const int lane = threadIdx.x % 32, r_first = threadIdx.x / 32 * kWarpRows + lane / kWords;
  const int word = lane % kWords, col = col0 + word * 8;
  const u32 dst = buf + tile_offset(r_first, word * 8);
#pragma unroll
  for (int k = 0; k < kCopiesPerThread; ++k) {
    const int row = row0 + r_first + 2 * k;
    const bool ok = row < rows.end && col < a.cols;  // cols % 16 == 0: a word is all inside or all outside
    const u16* src = ok ? a.x + static_cast<long long>(row) * a.cols + col : a.x;
    ptx::cp_async_16_zfill(dst + 2 * k * (kTile * 2), src, ok ? 16u : 0u);
  }
}

/// load_tile of the launch's tile t: matrix t / per_matrix, its row band and column block.
template <bool kBlock>
DT_DEVICE void load_nth_tile(const Args& a, const GroupTable& groups, int t, int per_matrix, int tiles_x, u32 buf) {
  const int in_matrix = t % per_matrix;
  const Args m = a.of<kBlock>(t / per_matrix);
  load_tile(m, groups.rows_of(m, in_matrix / tiles_x), in_matrix % tiles_x, buf);
}

/// The cast of the tile (tile_y, tile_x) whose raw bf16 (zeros outside the tensor) is in `tile`.
template <bool kBlock>
DT_DEVICE void cast_smem_tile(const Args& a, const u8* tile, const TileRows& rows, int tile_y, int tile_x,
                              float (*col_amax)[kTile], float* warp_amax, bool power_of_two) {
  const int tid = threadIdx.x;
  const int row0 = rows.src0, col0 = tile_x * kTile;
  const int chunk = tid % (kTile / kChunk), sub_row = tid / (kTile / kChunk);
  const int col = col0 + chunk * kChunk;
  const bool col_ok = col < a.cols;

  // ---- row pass: the same math as cast_tile, from shared memory
  uint4 v[kPasses][2];
  float amax[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = sub_row + p * kRowsPerPass;
    v[p][0] = *reinterpret_cast<const uint4*>(tile + tile_offset(r, chunk * kChunk));
    v[p][1] = *reinterpret_cast<const uint4*>(tile + tile_offset(r, chunk * kChunk + 8));
    amax[p] = amax16(v[p]);
  }
  const RowPass rp{tid, row0, chunk, sub_row, col, col_ok, rows.end};
  float2 row_inv[kPasses];
  row_scales<kBlock>(a, rp, amax, tile_y, tile_x, warp_amax, true, power_of_two, row_inv);
  store_row_pass(a, rp, v, row_inv);

  if constexpr (kLines) {
    // ---- column pass, whole lines: a warp takes kLineCols columns; its 8 lanes of a column take
    // 16 rows each, meet their amax with shuffles, and store the column's 128 FP8 bytes (a whole
    // 128-byte line of the qt row) as 8 x 16 bytes in one warp store.
    const int lane = tid % 32, warp = tid / 32;
    const int rseg = lane / kLineCols;  // rows kLineRows * rseg ..
#pragma unroll
    for (int j = 0; j < kLineTasks; ++j) {
      const int d_local = (j * (kThreads / 32) + warp) * kLineCols + lane % kLineCols;
      float h[kLineRows];
      float m = 0.0f;
      // rows kLineRows * rseg + i share one swizzle (kLineRows == 16): one address, immediate offsets
      const u8* col_ptr = tile + tile_offset(rseg * kLineRows, d_local);
#pragma unroll
      for (int i = 0; i < kLineRows; ++i) {
        const u16 raw = *reinterpret_cast<const u16*>(col_ptr + i * (kTile * 2));
        h[i] = __uint_as_float(static_cast<u32>(raw) << 16);
        m = fmaxf(m, fabsf(h[i]));
      }
      const int d = col0 + d_local;
      float inv;
      if constexpr (kBlock) {
        inv = row_inv[0].x;
      } else {
        m = shfl_max(m, 32 - kLineCols);  // over the lanes of this column (lane bits 2-4)
        const float2 is = inv_and_scale(fmaxf(m, kMinAmax), power_of_two);
        inv = is.x;
        if (rseg == 0 && d < a.cols) a.st[static_cast<long long>(tile_y) * a.st_pitch + d] = is.y;
      }
      const int t = rows.dst0 + rseg * kLineRows;
      if (d < a.cols && t < a.qt_ld) {  // qt_ld % 16 == 0: a 16-byte word is all padding or all inside
        const float* f = h;
        *reinterpret_cast<uint4*>(a.qt + static_cast<long long>(d) * a.qt_ld + t) =
            make_uint4(e4m3x4(f[0], f[1], f[2], f[3], inv), e4m3x4(f[4], f[5], f[6], f[7], inv),
                       e4m3x4(f[8], f[9], f[10], f[11], inv), e4m3x4(f[12], f[13], f[14], f[15], inv));
      }
    }
    return;
  }
  // ---- column pass, one sector per thread (kLines off): as cast_tile's, from the swizzled buffer
  // (a warp reads 64 contiguous bytes of a row: 4 words that the swizzle keeps in distinct banks)
  const int d_local = tid % kTile, seg = tid / kTile;
  float h[kColRows];
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kColRows; ++i) {  // one address per 16 rows (one swizzle), immediate offsets
    const u8* run = tile + tile_offset(seg * kColRows + i / 16 * 16, d_local);
    const u16 raw = *reinterpret_cast<const u16*>(run + i % 16 * (kTile * 2));
    h[i] = __uint_as_float(static_cast<u32>(raw) << 16);
    m = fmaxf(m, fabsf(h[i]));
  }
  const int d = col0 + d_local;
  float inv;
  if constexpr (kBlock) {
    inv = row_inv[0].x;
  } else {
    col_amax[seg][d_local] = m;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSegs; ++i) m = fmaxf(m, col_amax[i][d_local]);
    const float2 is = inv_and_scale(fmaxf(m, kMinAmax), power_of_two);
    inv = is.x;
    if (seg == 0 && d < a.cols) a.st[static_cast<long long>(tile_y) * a.st_pitch + d] = is.y;
  }
  if (d < a.cols) {
    const int t = rows.dst0 + seg * kColRows;
    u8* dst = a.qt + static_cast<long long>(d) * a.qt_ld + t;
#pragma unroll
    for (int c = 0; c < kColRows / 16; ++c) {
      if (t + 16 * c >= a.qt_ld) break;  // qt_ld % 16 == 0: a 16-byte word is all padding or all inside
      const float* f = h + 16 * c;
      *reinterpret_cast<uint4*>(dst + 16 * c) =
          make_uint4(e4m3x4(f[0], f[1], f[2], f[3], inv), e4m3x4(f[4], f[5], f[6], f[7], inv),
                     e4m3x4(f[8], f[9], f[10], f[11], inv), e4m3x4(f[12], f[13], f[14], f[15], inv));
    }
  }
}

/// The transposed casts over a persistent grid (dynamic shared memory: kStages * kTileBytes).
template <bool kBlock>
DT_DEVICE void cast_tiles_pipelined(const Args& a) {
  extern __shared__ __align__(128) u8 tile_bufs[];  // kStages raw bf16 tiles
  __shared__ float col_amax[kSegs][kTile];          // column pass partial amax (token kind)
  __shared__ float warp_amax[kThreads / 32];        // block kind
  __shared__ int group_first[kMaxGroups + 1], group_padded[kMaxGroups + 1];  // grouped token kind
  ptx::grid_dependency_wait();  // the stream predecessor may write x or read the outputs
  ptx::launch_dependents();
  const GroupTable groups{group_first, group_padded};
  groups.build(a);
  const bool power_of_two = (a.flags & kPowerOfTwoFlag) != 0;
  const int tiles_x = (a.cols + kTile - 1) / kTile;
  const int per_matrix = tiles_x * tile_bands(a);
  const int tiles = per_matrix * a.batch;  // tile t: matrix t / per_matrix, tile t % per_matrix of it
  const u32 base = ptx::smem_addr(tile_bufs);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {  // prologue: the first kStages - 1 tiles of this CTA
    const int t = blockIdx.x + s * gridDim.x;
    if (t < tiles) load_nth_tile<kBlock>(a, groups, t, per_matrix, tiles_x, base + s * kTileBytes);
    ptx::cp_async_commit_group();
  }
  u32 stage_off = 0;  // byte offset of this iteration's buffer: stage * kTileBytes
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // refill the buffer consumed last iteration (the trailing barrier ordered its reads first)
    const int ahead = tile + (kStages - 1) * gridDim.x;
    const u32 ahead_off = stage_off == 0 ? (kStages - 1) * kTileBytes : stage_off - kTileBytes;
    if (ahead < tiles) load_nth_tile<kBlock>(a, groups, ahead, per_matrix, tiles_x, base + ahead_off);
    ptx::cp_async_commit_group();             // one group per iteration, empty or not: the count below holds
    ptx::cp_async_wait_group<kStages - 1>();  // this thread's copies of `tile` have landed
    __syncthreads();                          // ... and every thread's
    const int in_matrix = tile % per_matrix;
    const Args m = a.of<kBlock>(tile / per_matrix);
    cast_smem_tile<kBlock>(m, tile_bufs + stage_off, groups.rows_of(m, in_matrix / tiles_x), in_matrix / tiles_x,
                           in_matrix % tiles_x, col_amax, warp_amax, power_of_two);
    __syncthreads();  // all reads of this buffer (and of col_amax / warp_amax) before they are rewritten
    stage_off = stage_off + kTileBytes == kStages * kTileBytes ? 0 : stage_off + kTileBytes;
  }
}
#endif

/// The kernels' body: the per-tile cast, or with kStages > 0 and a transposed output the pipelined one.
template <bool kBlock>
DT_DEVICE void cast(const Args& a) {
#if DT_CT_STAGES > 0
  if (a.qt != nullptr) {
    cast_tiles_pipelined<kBlock>(a);
    return;
  }
#endif
  cast_tile<kBlock>(a.of<kBlock>(blockIdx.z));  // one grid z per matrix
}

}  // namespace cast_transpose

}  // namespace deep_tile
