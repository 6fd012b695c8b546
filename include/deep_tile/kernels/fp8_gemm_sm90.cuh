// FP8 GEMM with DeepSeek-V3 fine-grained scaling for sm_90a:
//   D[M, N] (bf16) = (A[M, K] * a_scale[M, K/128]) @ (B[N, K] * b_scale[N/128, K/128])^T
//
// One producer warpgroup (one thread issues TMA into a ring of shared-memory stages) and one or
// two consumer warpgroups (WGMMA from shared memory, FP32 promotion of each 128-wide K block with
// its scales, bf16 epilogue through shared memory and TMA stores). Persistent: each CTA walks
// tiles of a grouped order; optionally clusters of 2 CTAs multicast the shared A or B tile.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/epilogue/store_bf16.cuh"
#include "deep_tile/kernels/fp8_gemm_config.cuh"
#include "deep_tile/pipeline/pipeline_state.cuh"
#include "deep_tile/ptx/mbarrier.cuh"
#include "deep_tile/ptx/tma.cuh"
#include "deep_tile/ptx/warpgroup.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"
#include "deep_tile/scheduler/persistent_scheduler.cuh"

namespace deep_tile {

/// Pointers into the dynamic shared memory, in the order of Fp8GemmConfig::kSmemBytes.
template <class Cfg>
struct SharedStorage {
  u8* d;            // [block_m, block_n] bf16 staging for the epilogue
  u8* a;            // [stages][block_m, 128] fp8, 128B-swizzled
  u8* b;            // [stages][block_n, 128] fp8, 128B-swizzled
  float* a_scale;   // [stages][block_m]
  u64* full;        // [stages]: TMA bytes landed
  u64* empty;       // [stages]: consumers done with the stage

  DT_DEVICE explicit SharedStorage(u8* base)
      : d(base),
        a(base + Cfg::kSmemDBytes),
        b(a + Cfg::kNumStages * Cfg::kTileABytes),
        a_scale(reinterpret_cast<float*>(b + Cfg::kNumStages * Cfg::kTileBBytes)),
        full(reinterpret_cast<u64*>(a_scale + Cfg::kNumStages * Cfg::kBlockM)),
        empty(full + Cfg::kNumStages) {}
};

template <class Cfg>
using SchedulerFor = PersistentScheduler<!Cfg::kMulticastB>;

/// Whether the two CTAs of this cluster can share the multicast operand for `tile` (the CTA's
/// own tile; its peer has tile ^ 1). Both CTAs compute the same answer.
template <class Cfg>
DT_DEVICE bool multicast_active(const SchedulerFor<Cfg>& sched, int tile) {
  if constexpr (Cfg::kNumMulticast == 1) {
    return false;
  } else {
    const int peer = tile ^ 1;
    if (peer >= sched.num_tiles) return false;
    const TileCoord mine = sched.coord(tile), theirs = sched.coord(peer);
    return Cfg::kMulticastA ? mine.m_block == theirs.m_block : mine.n_block == theirs.n_block;
  }
}

/// Load one operand tile of `rows` rows; a multicast operand is loaded as two halves, each CTA
/// multicasting its own half to both when the pair shares it, else one CTA loading both halves.
template <bool kSplit, int kRows>
DT_DEVICE void load_operand(u8* dst, const TmaDescriptor* desc, u64* bar, int k0, int row0, bool multicast,
                            u32 rank) {
  if constexpr (!kSplit) {
    ptx::tma_load_2d(dst, desc, bar, k0, row0);
  } else {
    constexpr int kHalfRows = kRows / 2;
    if (multicast) {
      ptx::tma_load_2d_multicast(dst + rank * kHalfRows * 128, desc, bar, k0, row0 + rank * kHalfRows, 0b11);
    } else {
      ptx::tma_load_2d(dst, desc, bar, k0, row0);
      ptx::tma_load_2d(dst + kHalfRows * 128, desc, bar, k0, row0 + kHalfRows);
    }
  }
}

template <class Cfg>
DT_DEVICE void producer_loop(const SharedStorage<Cfg>& smem, const TmaDescriptor* tma_a, const TmaDescriptor* tma_b,
                             const TmaDescriptor* tma_a_scale, const SchedulerFor<Cfg>& sched, int num_k_blocks) {
  const u32 rank = Cfg::kNumMulticast == 2 ? ptx::cluster_cta_rank() : 0;
  PipelineState<Cfg::kNumStages> state;
  for (int tile = blockIdx.x; tile < sched.num_tiles; tile += gridDim.x) {
    const TileCoord coord = sched.coord(tile);
    const bool multicast = multicast_active<Cfg>(sched, tile);
    const int m0 = coord.m_block * Cfg::kBlockM, n0 = coord.n_block * Cfg::kBlockN;
    for (int kb = 0; kb < num_k_blocks; ++kb) {
      ptx::mbarrier_wait(&smem.empty[state.index], state.empty_parity());
      u64* full = &smem.full[state.index];
      // NOTES: out-of-bounds box elements are zero-filled and still count, so the byte count is
      // constant; a multicast half from the peer completes on this barrier too.
      ptx::mbarrier_arrive_expect_tx(full, Cfg::kStageTxBytes);
      const int k0 = kb * Cfg::kBlockK;
      load_operand<Cfg::kMulticastA, Cfg::kBlockM>(smem.a + state.index * Cfg::kTileABytes, tma_a, full, k0, m0,
                                                   multicast, rank);
      load_operand<Cfg::kMulticastB, Cfg::kBlockN>(smem.b + state.index * Cfg::kTileBBytes, tma_b, full, k0, n0,
                                                   multicast, rank);
      ptx::tma_load_2d(smem.a_scale + state.index * Cfg::kBlockM, tma_a_scale, full, m0, kb);
      state.advance();
    }
  }
}

/// Hand a stage back. With multicast the producer of either CTA writes into both CTAs' stage, so
/// each CTA's empty barrier collects the releases of both CTAs' consumer warps (lane 0 here,
/// lane 1 at the peer); when the peer has already finished its last tile, lane 1 counts here.
template <class Cfg>
DT_DEVICE void release_stage(u64* empty, int lane, bool peer_alive, u32 rank) {
  if (lane == 0) ptx::mbarrier_arrive(empty);
  if constexpr (Cfg::kNumMulticast == 2) {
    if (lane == 1) {
      if (peer_alive) {
        ptx::mbarrier_arrive_cluster(empty, rank ^ 1u);
      } else {
        ptx::mbarrier_arrive(empty);
      }
    }
  }
}

/// Compile-time int, for dispatching a run-time value onto template instances.
template <int kValue>
struct IntConstant {
  static constexpr int value = kValue;
};

/// Call `fn(IntConstant<first_blocks>)` for the run-time `first_blocks`, one of the values a tile
/// of this config can have: multiples of gcd(block_n, 128) / 8 up to 128 / 8, or block_n / 8 when
/// the whole tile uses one b_scale row.
template <class Cfg, int kCandidate = gcd(Cfg::kBlockN, 128) / 8, class Fn>
DT_DEVICE void dispatch_first_blocks(int first_blocks, const Fn& fn) {
  constexpr int kAll = Cfg::kBlockN / 8;
  if constexpr (128 % Cfg::kBlockN == 0 || kCandidate > 128 / 8 || kCandidate >= kAll) {
    fn(IntConstant<kAll>{});
  } else {
    if (first_blocks == kCandidate) {
      fn(IntConstant<kCandidate>{});
    } else {
      dispatch_first_blocks<Cfg, kCandidate + gcd(Cfg::kBlockN, 128) / 8>(first_blocks, fn);
    }
  }
}

/// Everything a consumer warpgroup needs in its k-loop that does not change between tiles.
template <class Cfg>
struct ConsumerContext {
  const SharedStorage<Cfg>& smem;
  u64 desc_a0, desc_b0;  // WGMMA descriptors of stage 0 (this warpgroup's rows of A, all of B)
  int wg, warp_in_wg, lane;
  u32 rank;
  int num_k_blocks;
};

/// The k-loop of one tile: per 128-wide K block, WGMMA into `accum`, hand the stage back, and
/// promote into `result`. 8-column blocks j < kFirstBlocks use b_scale row 0, the rest row 1.
/// NOTES: the straddle point is a template argument (DeepGEMM's notes also found this vital):
/// as a run-time value it cost a select per 8 columns in the promotion, and measured 128x144 /
/// 128x160 tiles at 0.80 / 0.87 of 128x128 throughput.
template <class Cfg, int kFirstBlocks, int kNumAccum>
DT_DEVICE void consume_tile(const ConsumerContext<Cfg>& ctx, PipelineState<Cfg::kNumStages>& state,
                            float (&accum)[Cfg::kNumSlabs][kNumAccum], float (&result)[Cfg::kNumSlabs][kNumAccum],
                            const float* b_scale_row0, const float* b_scale_row1, bool peer_alive) {
  using Wgmma = ptx::WgmmaFp8<Cfg::kBlockN>;
  constexpr bool kTwoRows = kFirstBlocks < kNumAccum / 4;
  const int num_k_blocks = ctx.num_k_blocks;

  // NOTES: b_scale is loaded two k-blocks ahead: under load an L2 hit outlasts one k-block
  // (ncu showed the promotion waiting on a load issued one iteration earlier).
  float b_scale0_next = __ldg(b_scale_row0), b_scale1_next = kTwoRows ? __ldg(b_scale_row1) : 0.0f;
  float b_scale0_after = 0.0f, b_scale1_after = 0.0f;
  if (num_k_blocks > 1) {
    b_scale0_after = __ldg(b_scale_row0 + 1);
    if (kTwoRows) b_scale1_after = __ldg(b_scale_row1 + 1);
  }
  for (int kb = 0; kb < num_k_blocks; ++kb) {
    const float b_scale0 = b_scale0_next, b_scale1 = b_scale1_next;
    b_scale0_next = b_scale0_after;
    b_scale1_next = b_scale1_after;
    if (kb + 2 < num_k_blocks) {
      b_scale0_after = __ldg(b_scale_row0 + kb + 2);
      if (kTwoRows) b_scale1_after = __ldg(b_scale_row1 + kb + 2);
    }
    ptx::mbarrier_wait(&ctx.smem.full[state.index], state.full_parity());

    // Read this thread's two row scales per slab before the stage can be released.
    const float* a_scale = ctx.smem.a_scale + state.index * Cfg::kBlockM + ctx.wg * Cfg::kWgM;
    float row_scale[Cfg::kNumSlabs][2];
#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s) {
      const int r = s * 64 + ctx.warp_in_wg * 16 + ctx.lane / 4;
      row_scale[s][0] = a_scale[r];
      row_scale[s][1] = a_scale[r + 8];
    }

    const u32 a_stage = state.index * Cfg::kTileABytes, b_stage = state.index * Cfg::kTileBBytes;
#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s)
#pragma unroll
      for (int i = 0; i < kNumAccum; ++i) ptx::fence_operand(accum[s][i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kBlockK / 32; ++kk) {
        // k-slice kk of a 128B-swizzled K-major tile starts 32 bytes further along the row.
        const u64 desc_a = ptx::advance_desc(ctx.desc_a0, a_stage + s * 64 * Cfg::kBlockK + kk * 32);
        const u64 desc_b = ptx::advance_desc(ctx.desc_b0, b_stage + kk * 32);
        Wgmma::mma(desc_a, desc_b, accum[s], kk > 0);
      }
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s)
#pragma unroll
      for (int i = 0; i < kNumAccum; ++i) ptx::fence_operand(accum[s][i]);

    release_stage<Cfg>(&ctx.smem.empty[state.index], ctx.lane, peer_alive, ctx.rank);

    // Promotion: result += a_scale(row) * b_scale(column block) * partial sum. It runs while the
    // other consumer warpgroup's wgmmas occupy the tensor cores.
#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s) {
      const float lo0 = row_scale[s][0] * b_scale0, hi0 = row_scale[s][1] * b_scale0;
      const float lo1 = row_scale[s][0] * b_scale1, hi1 = row_scale[s][1] * b_scale1;
#pragma unroll
      for (int j = 0; j < kNumAccum / 4; ++j) {
        const float scale_lo = j < kFirstBlocks ? lo0 : lo1, scale_hi = j < kFirstBlocks ? hi0 : hi1;
        result[s][4 * j + 0] += scale_lo * accum[s][4 * j + 0];
        result[s][4 * j + 1] += scale_lo * accum[s][4 * j + 1];
        result[s][4 * j + 2] += scale_hi * accum[s][4 * j + 2];
        result[s][4 * j + 3] += scale_hi * accum[s][4 * j + 3];
      }
    }
    state.advance();
  }
}

/// consume_tile bound to one tile's arguments, callable with the straddle point as a constant.
/// NOTES: a functor rather than a lambda: NVRTC 13.0 treats an unannotated lambda in device code
/// as a host function and refuses it in JIT mode.
template <class Cfg, int kNumAccum>
struct ConsumeTile {
  const ConsumerContext<Cfg>& ctx;
  PipelineState<Cfg::kNumStages>& state;
  float (&accum)[Cfg::kNumSlabs][kNumAccum];
  float (&result)[Cfg::kNumSlabs][kNumAccum];
  const float* b_scale_row0;
  const float* b_scale_row1;
  bool peer_alive;

  template <int kFirstBlocks>
  DT_DEVICE void operator()(IntConstant<kFirstBlocks>) const {
    consume_tile<Cfg, kFirstBlocks>(ctx, state, accum, result, b_scale_row0, b_scale_row1, peer_alive);
  }
};

template <class Cfg>
DT_DEVICE void consumer_loop(const SharedStorage<Cfg>& smem, const TmaDescriptor* tma_d, const float* b_scale,
                             const SchedulerFor<Cfg>& sched, int m, int n, int num_k_blocks) {
  constexpr int kNumAccum = ptx::WgmmaFp8<Cfg::kBlockN>::kNumAccum;  // block_n / 2 floats per 64-row slab
  // NOTES: broadcast so ptxas knows the warpgroup index is warp-uniform and keeps the WGMMA
  // descriptors derived from it in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const int thread_in_wg = threadIdx.x % 128;
  const ConsumerContext<Cfg> ctx{
      smem,
      // Descriptors of stage 0; every other (stage, slab, k-slice) is a constant byte offset away.
      ptx::make_sw128_kmajor_desc(ptx::smem_addr(smem.a + wg * Cfg::kWgM * Cfg::kBlockK)),
      ptx::make_sw128_kmajor_desc(ptx::smem_addr(smem.b)),
      wg, thread_in_wg / 32, static_cast<int>(threadIdx.x % 32),
      Cfg::kNumMulticast == 2 ? ptx::cluster_cta_rank() : 0u,
      num_k_blocks};

  float accum[Cfg::kNumSlabs][kNumAccum];   // WGMMA partial sums of one 128-wide K block
  float result[Cfg::kNumSlabs][kNumAccum];  // FP32 sum of the scaled partial sums
  PipelineState<Cfg::kNumStages> state;

  for (int tile = blockIdx.x; tile < sched.num_tiles; tile += gridDim.x) {
    const TileCoord coord = sched.coord(tile);
    const bool peer_alive = (tile ^ 1) < sched.num_tiles;
    const int m0 = coord.m_block * Cfg::kBlockM, n0 = coord.n_block * Cfg::kBlockN;

    // b_scale rows covering this tile: the first `first_cols` columns use row n0/128, the rest
    // (a tile straddling a 128-row block boundary) use the next row.
    const int first_cols = min_int(Cfg::kBlockN, 128 - n0 % 128);
    const float* b_scale_row0 = b_scale + (n0 / 128) * num_k_blocks;
    const bool straddles = first_cols < Cfg::kBlockN && n0 + first_cols < n;
    const float* b_scale_row1 = straddles ? b_scale_row0 + num_k_blocks : b_scale_row0;

#pragma unroll
    for (int s = 0; s < Cfg::kNumSlabs; ++s)
#pragma unroll
      for (int i = 0; i < kNumAccum; ++i) result[s][i] = 0.0f;

    dispatch_first_blocks<Cfg>(straddles ? first_cols / 8 : Cfg::kBlockN / 8,
                               ConsumeTile<Cfg, kNumAccum>{ctx, state, accum, result, b_scale_row0, b_scale_row1,
                                                           peer_alive});

    store_tile_bf16<Cfg>(smem.d, tma_d, result, wg, thread_in_wg, m0, n0, m, n);
  }
  if (thread_in_wg == 0) ptx::tma_store_wait_all();
}

/// The kernel body; csrc/entry/fp8_gemm_sm90.cu wraps it in an extern "C" __global__ symbol.
template <class Cfg>
DT_DEVICE void fp8_gemm_sm90(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b, const TmaDescriptor& tma_a_scale,
                             const TmaDescriptor& tma_d, const float* b_scale, int m, int n, int k, int group_size) {
  extern __shared__ __align__(1024) u8 dynamic_smem[];
  const SharedStorage<Cfg> smem(dynamic_smem);
  const SchedulerFor<Cfg> sched(m, n, Cfg::kBlockM, Cfg::kBlockN, group_size);
  const int num_k_blocks = ceil_div(k, Cfg::kBlockK);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == Cfg::kNumMathThreads) {
    ptx::tma_prefetch_descriptor(&tma_a);
    ptx::tma_prefetch_descriptor(&tma_b);
    ptx::tma_prefetch_descriptor(&tma_a_scale);
    ptx::tma_prefetch_descriptor(&tma_d);
#pragma unroll
    for (int s = 0; s < Cfg::kNumStages; ++s) {
      ptx::mbarrier_init(&smem.full[s], 1);
      ptx::mbarrier_init(&smem.empty[s], Cfg::kNumMathWarps * Cfg::kNumMulticast);
    }
    ptx::fence_barrier_init();
    ptx::fence_proxy_async_shared();
  }
  // Barriers must be initialised everywhere before any local, remote or TMA use.
  if constexpr (Cfg::kNumMulticast == 2) {
    ptx::cluster_sync();
  } else {
    __syncthreads();
  }

  if (wg == Cfg::kNumMathWarpgroups) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x == Cfg::kNumMathThreads) {
      producer_loop<Cfg>(smem, &tma_a, &tma_b, &tma_a_scale, sched, num_k_blocks);
    }
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegisters>();
    consumer_loop<Cfg>(smem, &tma_d, b_scale, sched, m, n, num_k_blocks);
  }
  // NOTES: with multicast a CTA must not exit while its peer may still arrive on its barriers.
  if constexpr (Cfg::kNumMulticast == 2) ptx::cluster_sync();
}

}  // namespace deep_tile
