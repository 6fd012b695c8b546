// Head-major copies for fp8_einsum's grouped path (deep_tile/kernels/einsum.py): up to three
// tensors [b, h, row] (rows of 16-byte chunks, any b and h strides in chunks) copied in one launch
// to contiguous [h, b, row], so that x, its scales and c cost one kernel, not three.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/grid_dependency.cuh"

namespace deep_tile {

constexpr int kHeadMajorThreads = 256;

/// One tensor of the copy: `chunks` 16-byte chunks per row (0: no tensor), strides in chunks.
struct HeadMajorOperand {
  const uint4* src;
  uint4* dst;
  int chunks, b_stride, h_stride;
};

/// Chunk t of the destination [h, b, chunks] (contiguous) from its source row (b_i, head); the
/// host keeps every count below 2^31 chunks, so the divisions are 32-bit.
DT_DEVICE void head_major_chunk(const HeadMajorOperand& op, u32 t, u32 b) {
  const u32 chunks = static_cast<u32>(op.chunks), per_head = b * chunks;
  const u32 head = t / per_head, rem = t - head * per_head;
  const u32 row = rem / chunks, chunk = rem - row * chunks;
  op.dst[t] = op.src[static_cast<long long>(row) * op.b_stride + static_cast<long long>(head) * op.h_stride + chunk];
}

/// Grid-stride over the three tensors' chunks one after another (h * b * chunks each).
DT_DEVICE void head_major_copy(const HeadMajorOperand (&ops)[3], int b, int h) {
  ptx::grid_dependency_wait();  // the stream predecessor may write the sources
  ptx::launch_dependents();
  const u32 rows = static_cast<u32>(b) * static_cast<u32>(h);
  const u32 n0 = rows * ops[0].chunks, n1 = rows * ops[1].chunks, n2 = rows * ops[2].chunks;
  for (u32 t = blockIdx.x * kHeadMajorThreads + threadIdx.x; t < n0 + n1 + n2; t += gridDim.x * kHeadMajorThreads) {
    if (t < n0) {
      head_major_chunk(ops[0], t, b);
    } else if (t < n0 + n1) {
      head_major_chunk(ops[1], t - n0, b);
    } else {
      head_major_chunk(ops[2], t - n0 - n1, b);
    }
  }
}

}  // namespace deep_tile
