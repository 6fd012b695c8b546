// Persistent tile scheduler: CTA b takes tiles b, b + grid, b + 2*grid, ... of a grouped
// ("swizzled") tile order that keeps the tiles in flight on a few A and B panels for L2 reuse.
//
// With 2-CTA multicast the two CTAs of a cluster take tiles 2i and 2i+1. The order puts the
// multicast operand's index on the slow axis inside a group, so the pair shares it whenever
// the group width is even; when it does not (an odd last group) that pair loads on its own.
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile {

struct TileCoord {
  int m_block;
  int n_block;
};

template <bool kFastAlongN>
struct PersistentScheduler {
  int num_m_blocks;
  int num_n_blocks;
  int num_tiles;
  int group_size;  // width of a group along the fast axis, in blocks (even)

  __host__ __device__ PersistentScheduler(int m, int n, int block_m, int block_n, int group)
      : num_m_blocks(ceil_div(m, block_m)),
        num_n_blocks(ceil_div(n, block_n)),
        num_tiles(num_m_blocks * num_n_blocks),
        group_size(group) {}

  /// Tile index -> (m_block, n_block). kFastAlongN: groups of `group_size` n-blocks, walked row by
  /// row (consecutive tiles share m_block); otherwise groups of m-blocks (consecutive share n).
  __host__ __device__ TileCoord coord(int tile) const {
    const int fast_total = kFastAlongN ? num_n_blocks : num_m_blocks;
    const int slow_total = kFastAlongN ? num_m_blocks : num_n_blocks;
    const int tiles_per_group = slow_total * group_size;
    const int group = tile / tiles_per_group;
    const int in_group = tile - group * tiles_per_group;
    const int first_fast = group * group_size;
    const int width = min_int(group_size, fast_total - first_fast);
    const int slow = in_group / width;
    const int fast = first_fast + in_group - slow * width;
    return kFastAlongN ? TileCoord{slow, fast} : TileCoord{fast, slow};
  }
};

}  // namespace deep_tile
