// Small layout kernels of the Mixture-of-Experts GEMMs' DeepGEMM conventions, one thread per output
// element, reading their inputs on the device (no host sync, graph-safe):
//   psum_to_m_indices: DeepGEMM's psum contiguous layout (expert_ends [G]: expert e's rows are
//     [align_up(ends[e-1], alignment), ends[e]), ends[-1] = 0) -> the contiguous kind's m_indices
//     [M] (each row's expert, -1 for the padding rows between and after the experts' runs);
//   raise_signals: the completion flags of SGLang's single-batch overlap after a masked GEMM:
//     signal[g * blocks_per_group + j] = threshold for j < ceil(masked_m[g] / block_m).
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

namespace deep_tile {

/// ends[e] clamped into [0, m].
DT_DEVICE int clamped_end(const int* ends, int e, int m) { return min_int(max_int(__ldg(ends + e), 0), m); }

/// m_indices[row] for every row < m; the grid covers m threads. Ends that decrease (the caller's
/// error) give some rows a wrong expert or -1, never an access out of bounds.
DT_DEVICE void psum_to_m_indices(const int* __restrict__ ends, int* __restrict__ m_indices, int num_groups, int m,
                                 int alignment) {
  const int row = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  ptx::grid_dependency_wait();  // the stream predecessor may write ends or read m_indices
  ptx::launch_dependents();
  if (row >= m) return;
  int lo = 0, hi = num_groups;  // the first expert whose end is past the row (num_groups: none)
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (clamped_end(ends, mid, m) > row) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  int id = -1;
  if (lo < num_groups) {
    const int prev = lo == 0 ? 0 : clamped_end(ends, lo - 1, m);
    const int start = (prev + alignment - 1) / alignment * alignment;
    if (row >= start) id = lo;
  }
  m_indices[row] = id;
}

/// signal[g * blocks_per_group + j] = threshold for the blocks j < ceil(min(masked_m[g], max_m) /
/// block_m); the other entries are not written. The grid covers num_groups * blocks_per_group threads.
DT_DEVICE void raise_signals(int* __restrict__ signal, const int* __restrict__ masked_m, int num_groups,
                             int blocks_per_group, int max_m, int block_m, int threshold) {
  const int index = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  ptx::grid_dependency_wait();  // the GEMM before it writes d; the flags follow its stores
  ptx::launch_dependents();
  if (index >= num_groups * blocks_per_group) return;
  const int g = index / blocks_per_group, j = index - g * blocks_per_group;
  const int rows = min_int(max_int(__ldg(masked_m + g), 0), max_m);
  if (j * block_m < rows) {
    __threadfence();
    atomicExch(signal + index, threshold);
  }
}

}  // namespace deep_tile
