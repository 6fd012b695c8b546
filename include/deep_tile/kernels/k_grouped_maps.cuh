// The per-group tensor maps of the K-grouped GEMM in DeepGEMM's NT layout (ProblemKind::kKGroupedBlocks):
// group g's A block [m, sizes[g]] and B block [n, sizes[g]] lie row-major one after another in flat
// buffers, so each is its own 2-D tensor and TMA needs one map per group and operand. One CTA,
// launched on the GEMM's stream just before it, fills the table maps[2 g] (A), maps[2 g + 1] (B)
// from the sizes on the device (no host sync, graph-safe): each map a copy of the host-built
// template (box, swizzle, element type, L2 promotion) with its address, dims and row pitch
// replaced (tensormap.replace), released to the tensor-map proxy; the GEMM's producer acquires a
// group's maps before its first load through them (fp8_gemm_producer.cuh).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// Threads of the map-writing CTA: one per group, the most groups of the K-grouped kind
/// (kMaxTableGroups in scheduler/tile_scheduler.cuh; deep_tile/kernels/moe_layout.py K_GROUPED_MAPS_THREADS).
constexpr int kKGroupedMapsThreads = 512;

/// `dst` (global, 64-byte aligned) := `tmpl` over `rows` rows of `cols` bytes, row pitch `cols`, at `address`.
DT_DEVICE void write_group_map(TmaDescriptor* dst, const TmaDescriptor& tmpl, const u8* address, u32 cols, u32 rows,
                               bool replace) {
  const uint4* src = reinterpret_cast<const uint4*>(&tmpl);
  uint4* out = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = src[i];
  if (!replace) return;  // an empty group's map is never used, a misfit's reads the template's in-bounds view
  ptx::tensormap_replace_address(dst, address);
  ptx::tensormap_replace_dims(dst, cols, rows);
  ptx::tensormap_replace_row_pitch(dst, cols);
}

/// Fill maps[2 g], maps[2 g + 1] for g < num_groups (<= kKGroupedMapsThreads; thread g writes
/// group g's). Group g's K range is the K-grouped kind's (GroupTable::build_k_ranges: sizes
/// clamped, running sum saturating at k), [begin, end); its blocks start at a[m * begin] and
/// b[n * begin]. A group that does not fit (k_grouped_block_fits; the caller's error) keeps the
/// host-built template (the whole [rows, k] view): the GEMM runs it as an empty group
/// (Scheduler<kKGroupedBlocks>::k_range) and never reads its maps.
DT_DEVICE void write_k_grouped_maps(const TmaDescriptor& tmpl_a, const TmaDescriptor& tmpl_b, const u8* a,
                                    const u8* b, const int* __restrict__ sizes, int num_groups, int k, int m, int n,
                                    TmaDescriptor* __restrict__ maps) {
  __shared__ int scan[kKGroupedMapsThreads];
  const int g = static_cast<int>(threadIdx.x);
  ptx::grid_dependency_wait();  // the stream predecessor may write the sizes
  ptx::launch_dependents();     // the GEMM's set-up may start; its own wait waits for this grid's writes
  const int raw = g < num_groups ? __ldg(sizes + g) : 0;
  const int size = min_int(max_int(raw, 0), k);
  int inclusive = size;  // block-wide inclusive scan, saturating at k
  scan[g] = inclusive;
  __syncthreads();
  for (int d = 1; d < kKGroupedMapsThreads; d *= 2) {
    const int v = g >= d ? scan[g - d] : 0;
    __syncthreads();
    inclusive = static_cast<int>(min(static_cast<long long>(inclusive) + v, static_cast<long long>(k)));
    scan[g] = inclusive;
    __syncthreads();
  }
  if (g >= num_groups) return;
  const int begin = g == 0 ? 0 : scan[g - 1], end = inclusive;
  const bool used = end > begin;
  const bool aligned = k_grouped_block_fits(begin, end);  // the GEMM's own test
  const bool replace = used && aligned;  // a misfit keeps the template: a valid map over the buffer, in bounds
  const u32 cols = static_cast<u32>(end - begin);
  const u64 a_offset = static_cast<u64>(m) * static_cast<u64>(begin);
  const u64 b_offset = static_cast<u64>(n) * static_cast<u64>(begin);
  write_group_map(maps + 2 * g, tmpl_a, a + a_offset, cols, static_cast<u32>(m), replace);
  write_group_map(maps + 2 * g + 1, tmpl_b, b + b_offset, cols, static_cast<u32>(n), replace);
  ptx::tensormap_release();
}

}  // namespace deep_tile
