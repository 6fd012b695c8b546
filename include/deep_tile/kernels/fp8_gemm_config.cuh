// Compile-time configuration of the FP8 GEMM kernel, with every derived size in one place.
//
// The owner of these facts on the host is deep_tile/kernels/fp8_gemm.py: it renders the DT_*
// defines of a KernelConfig, including the contract defines DT_SMEM_BYTES, DT_MIN_STAGES,
// DT_MAX_STAGES, DT_STORE_SWIZZLE and DT_SCALE_GROUP, which are checked here against the values
// this header derives, so a drift between the two sides fails the compile instead of running.
// The tuned choices below (the NOTES say why each is what it is) take no define: probes change them
// through deep_tile/probes/overrides.cuh.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/kernels/fp8_gemm_params.cuh"
#include "deep_tile/scheduler/tile_scheduler.cuh"

namespace deep_tile {

/// The facts both families derive from their parameters (fp8_gemm_1d2d.cuh and fp8_gemm_1d1d.cuh
/// instantiate it with theirs; the parameters a family does not use are fixed there).
template <class Shape, class Cluster, class Pipeline, class FixedK, class Out, ProblemKind kProblemKind_,
          int kSplitK_, bool kAScaleRowMajor_, bool kRasterAlongM_, bool kEvictFirstB_, int kSwapN_, bool kBScale1D_>
struct Fp8GemmConfig {
  static constexpr int kBlockM = Shape::kBlockM;
  static constexpr int kBlockN = Shape::kBlockN;
  static constexpr int kBlockK = kScaleGroup;  // one K block (one a_scale column, one b_scale block) per stage
  static constexpr int kNumStages = Pipeline::kNumStages;
  static constexpr int kMinStages = 2;
  static constexpr int kMaxStages = 16;
  static constexpr int kNumMulticast = Cluster::kNumMulticast;
  static constexpr bool kMulticastA = Cluster::kNumMulticast == 2 && Cluster::kOnA;
  static constexpr bool kMulticastB = Cluster::kNumMulticast == 2 && !Cluster::kOnA;
  // Split-K: a cluster of kSplitK CTAs shares one output tile, each CTA a range of K, reduced in
  // a fixed order through distributed shared memory (deterministic). Not persistent.
  static constexpr int kSplitK = kSplitK_;
  static constexpr int kClusterSize = kSplitK > 1 ? kSplitK : kNumMulticast;
  // What the kernel multiplies (the tile scheduler's kind, scheduler/tile_scheduler.cuh).
  static constexpr ProblemKind kProblemKind = kProblemKind_;
  static constexpr bool kGrouped = kProblemKind_ != ProblemKind::kDense;
  // The K-grouped kind (MoE weight gradients): D[g] = A[:, K_g] B[:, K_g]^T per group g, 1D1D,
  // stored from registers (store_tile_direct) into D's group g, every tile with its own K range.
  static constexpr bool kKGrouped = kProblemKind_ == ProblemKind::kKGrouped || kProblemKind_ == ProblemKind::kKGroupedBlocks;
  // Its DeepGEMM NT layout: A and B of each group through that group's tensor maps (kKGroupedBlocks).
  static constexpr bool kKGroupedBlocks = kProblemKind_ == ProblemKind::kKGroupedBlocks;
  // The raster order's bands span m-blocks (consecutive tiles share an n-block) or n-blocks
  // (consecutive tiles share an m-block); a multicast pair must share its operand.
  static constexpr bool kRasterAlongM = kRasterAlongM_;
  // L2 policies of the operand loads: B evict-first and A evict-last (small M, where each B tile is
  // read by one or two tiles: deep_tile/select/selector.py streams_b), else plain loads.
  static constexpr bool kEvictFirstB = kEvictFirstB_;
  // k-blocks per unrolled body of the one-buffer k-loop: 3 (BScaleQueue's depth) or 6 (long
  // K ranges; deep_tile/select/selector.py k_unroll_for).
  static constexpr int kKUnroll = Pipeline::kKUnroll;
  // K blocks fixed at compile time (persistent one-buffer kernels of every kind but the K-grouped
  // one; 0: K is a run-time value): every CTA's K range is [0, kStaticKBlocks) (cta_work_range),
  // so the producer's and the consumers' k-loops have constant trip counts (TileMainloop::run).
  // The kernel is right for problems of this many K blocks only (the host refuses others:
  // KernelConfig.for_problem). When the host sets it: deep_tile/select/selector.py static_k_blocks_for.
  static constexpr int kStaticKBlocks = FixedK::kBlocks;
  /// The problem's K blocks: kStaticKBlocks when fixed, else the run-time count.
  DT_DEVICE static int k_blocks(int run_time_k_blocks) {
    return kStaticKBlocks > 0 ? kStaticKBlocks : run_time_k_blocks;
  }
  // K blocks per unrolled body of that k-loop (the host's deep_tile.kernels.fp8_gemm.STATIC_K_UNROLL).
  static constexpr int kStaticKUnroll = FixedK::kUnroll;
  // The stage ring as immediates (K fixed at a multiple of the stages, one buffer, 1D2D): every
  // tile starts at stage 0, so the consumers walk the ring in passes of straight code whose stage,
  // barrier, a_scale and descriptor offsets are constants (TileMainloop::kStaticRing). When the
  // host sets it: deep_tile/select/selector.py static_ring_for.
  static constexpr bool kStaticRing = FixedK::kRing;
  // Swap-AB (small M, dense): the weights are each WGMMA's 64-row operand and the first kSwapN
  // rows of the A tile (every real row: M <= kSwapN) its N side, so a k-block's tensor work and
  // promotion shrink from 64 x kBlockN to kBlockN x kSwapN. The one sub-tile's accumulators hold
  // D^T as kernels/swap_fragment.cuh lays it out; the output is stored transposed back
  // (store_tile_swapped, write_partial).
  // 0: off. The host picks it for M <= 16 (deep_tile/select/selector.py swap_n_for).
  static constexpr int kSwapN = kSwapN_;
  static constexpr bool kSwapAB = kSwapN_ > 0;
  // Completion signals (SGLang's single-batch overlap; DT_SIGNAL, masked kind only): after each
  // consumer warpgroup's rows of a tile are stored and visible at GPU scope, 1 is added to the
  // counter of its kWgM-row slab (store_tile_bf16), so a slab's counter reaches ceil(N / kBlockN)
  // once every column of it is written. 1: by the storing thread right after the tile's store (it
  // waits for its bulk stores to complete); 2: by a warp of the producer warpgroup once the
  // warpgroup hands the slab over at its next store, whose wait for the staging buffer then waits
  // for completion (and after the last tile), the GPU-scope release off the consumers' path.
  // 0 (the default): off, the kernel unchanged.
  static constexpr int kSignal = Out::kSignal;

  // Output (epilogue/store_direct.cuh): D in bf16 (kOutKind 0) or FP32 (1), and an optional C
  // added to it, D = C + A.B^T (kCKind 0: none, 1: bf16, 2: FP32, 3: D itself, in-place
  // accumulation; kCType: C's type, 1 bf16 or 2 FP32). The default (bf16, no C) stores through
  // shared memory and TMA (store_bf16.cuh). The other variants (kDirectStore): a dense
  // persistent FP32 D without C, or the 1D1D weight gradient's FP32 D accumulated in place
  // (kTmaF32Store), is staged per 64-row sub-tile and stored, or added to D by the unit's
  // reduce-add (kTmaF32Reduce), by the TMA unit (store_tile_f32_tma), which overlaps the stores
  // with the next tile; every other variant (with C, a bf16 D with C, split-K, swap-AB, the
  // grouped kinds) stores each thread's accumulators straight to global memory, reading C beside
  // them (store_tile_direct).
  // NOTES: the reduce-add beats the direct store in geomean for the 1D1D weight gradients; for 1D2D D in place
  // it was slower at K <= 2048 (its staging also costs 128x192 a stage), so those keep the direct store.
  static constexpr int kOutKind = Out::kOutKind;
  static constexpr int kCKind = Out::kCKind;
  static constexpr int kCType = Out::kCKind == 3 ? (Out::kOutKind == 1 ? 2 : 1) : Out::kCKind;
  static constexpr bool kDirectStore = Out::kOutKind != 0 || Out::kCKind != 0 || kKGrouped;
  static constexpr bool kTmaF32Store = Out::kOutKind == 1 && (Out::kCKind == 0 || (Out::kCKind == 3 && kBScale1D_)) &&
                                       kSplitK_ == 1 && kSwapN_ == 0 && kProblemKind_ == ProblemKind::kDense;
  static constexpr bool kTmaF32Reduce = kTmaF32Store && Out::kCKind == 3;
  // D asked of L2 ahead of the reduce-add (kTmaF32Reduce): for a tile of at most
  // kPrefetchDMaxKBlocks k-blocks, the producer asks L2 for each consumer warpgroup's first sub-tile
  // of D as it issues the tile's k-block kb_end - 1 - kPrefetchDAhead. That is the sub-tile the
  // warpgroup waits on (the unit must have read it out of the staging before the next one is
  // written), and the unit's adds then find D in L2 instead of DRAM; the other sub-tiles are added
  // while the next tile's k-loop runs. On the weight gradients it pays up to 64 k-blocks a tile and is even
  // beyond; asking for every sub-tile was slower (L2 cannot hold them beside the operands), and asking
  // for the rest as the epilogue starts no faster.
  static constexpr int kPrefetchDMaxKBlocks = kTmaF32Reduce ? 64 : 0;
  static constexpr int kPrefetchDAhead = 1;
  static constexpr bool kReduceAsStore = false;
  // The FP32 staging's TMA atoms: kF32AtomCols floats (the swizzle span: 128, 64 or 32 bytes) of
  // 64 rows; a warpgroup stages one sub-tile (64 x kWgmmaN floats) at a time.
  // 1D1D (kBScale1D): B is scaled per row and 128-wide K block like A (b_scale [N, K/128], read
  // column-major, [K/128][align4(N)], like a_scale's TMA-aligned layout), the weight gradient's
  // operands; the producer loads the stage's kBlockN values by TMA beside a_scale, and each
  // accumulator is promoted with a_scale(row) * b_scale(column) (TileMainloop::finish).
  static constexpr bool kBScale1D = kBScale1D_;
  // The staged epilogue of a sub-tile whose width is a multiple of 8 but not 16 (24, 40, ..., 152,
  // 168, 184: tiles of 4 stages beside the 64-row FP32 stagings) stages unswizzled, one atom of the
  // whole width at a pitch of kWgmmaN floats (F32StagingSlots), where 8-column swizzled atoms would
  // make 32-byte TMA boxes.
  static constexpr bool kF32PlainStaging = Out::kStaged && Shape::kWgmmaN % 16 != 0;
  static constexpr int kF32AtomCols = kF32PlainStaging ? Shape::kWgmmaN
                                      : Shape::kWgmmaN % 32 == 0 ? 32 : (Shape::kWgmmaN % 16 == 0 ? 16 : 8);
  // The K-grouped kind's FP32 D through a storer (kStagedEpilogue, DT_STAGED_EPILOGUE; without C or
  // accumulated in place, one sub-tile per consumer warpgroup): one thread of the producer
  // warpgroup loads each tile's C (D itself) by TMA into the warpgroup's 64-row FP32 staging
  // while the consumers run the tile's k-loop, the consumers add their sums there and go on to
  // the next tile, and the storer hands the staging to the TMA unit's store
  // (epilogue/store_staged.cuh). So D's reads and writes overlap the tensor cores' work, where the
  // direct store reads C and writes D between two tiles' k-loops.
  static constexpr bool kStagedEpilogue = Out::kStaged;
  // kStagedEpilogue accumulated in place (kCKind == 3): a tile of at least this many k-blocks hands
  // its staged sums to the TMA unit's reduce-add (D += staging in L2; no C loaded), a shorter one
  // has C loaded into the staging, the sums added there and the staging stored. The reduce-add
  // keeps C's bytes off the SM and the consumers' loads of it out of the epilogue, but where D's
  // traffic bounds the kernel (tiles of a few k-blocks) it moves them more slowly than the load
  // and store.
  // NOTES: in place at 4096x7168, the reduce-add beat load + store at 16 k-blocks a tile and lost clearly
  // at 8, so the threshold lies between them.
  static constexpr int kStagedReduceMinKBlocks = 12;
  // The contiguous, offsets and psum kinds' k-loop sets each tile's result (its first k-block
  // promoted into it: TileMainloop::run) instead of adding to a result zeroed first. Possible for
  // every persistent kind but the K-grouped one (up to three runs per tile); not split-K (a rank's
  // share may be empty).
  // NOTES: the same kernels with and without: the contiguous, offsets and psum kinds gained, the masked kind
  // was even and the dense kind slower on most shapes, so only those three kinds set the result.
  static constexpr bool kLoopSetsResultPossible = !kKGrouped && kSplitK == 1;
  static constexpr bool kLoopSetsResult =
      kLoopSetsResultPossible &&
      (kProblemKind_ == ProblemKind::kGroupedContiguous || kProblemKind_ == ProblemKind::kGroupedOffsets ||
       kProblemKind_ == ProblemKind::kGroupedPsum);

  // Programmatic dependent launch (ptx/grid_dependency.cuh): the k-blocks of the CTA's first
  // weight (B) tile asked of L2 before the kernel waits for its stream predecessor, so they stream
  // in during the predecessor's tail; the dense kind only (a grouped tile's expert is read from
  // memory the predecessor may write).
  // NOTES: 2 was best in a decode chain; a pipeline's worth was slower than none, and a whole tile (more than
  // L2 holds over a grid) far slower (docs/performance.md, 'What was tried and did not pay').
  static constexpr int kL2PrefetchKBlocks = kProblemKind_ == ProblemKind::kDense ? 2 : 0;

  // Threads: consumer warpgroups first, the producer warpgroup last.
  static constexpr int kNumMathWarpgroups = kBlockM == 64 ? 1 : 2;
  static constexpr int kWgM = kBlockM / kNumMathWarpgroups;  // rows per consumer warpgroup
  static constexpr int kNumMathThreads = 128 * kNumMathWarpgroups;
  static constexpr int kNumMathWarps = kNumMathThreads / 32;
  static constexpr int kNumThreads = kNumMathThreads + 128;
  static constexpr int kProducerRegisters = 40;
  // Launch allots 168 x 384 registers; the producer gives back 128 each: 128*40 + 256*232.
  static constexpr int kConsumerRegisters = 232;

  // Sub-tiles: each consumer warpgroup computes its kWgM x kBlockN rows as kNumSlabs 64-row slabs
  // times kNumNParts column parts, each one WGMMA chain m64 x kWgmmaN x 128 into an accumulator of
  // kWgmmaN / 2 floats per thread; kNumAccumBuffers such accumulators are reused over the sub-tiles
  // (2: the next sub-tile's WGMMAs run while this one is promoted).
  static constexpr int kWgmmaN = Shape::kWgmmaN;
  static constexpr int kNumSlabs = kWgM / 64;
  static constexpr int kNumNParts = kBlockN / kWgmmaN;
  static constexpr int kNumSubtiles = kNumSlabs * kNumNParts;
  static constexpr int kNumAccumBuffers = Pipeline::kNumAccumBuffers;
  static constexpr int kAccumPerSubtile = kWgmmaN / 2;
  // 1D1D one-buffer k-loop of the dense kind: the scale products a_scale(row) * b_scale(column)
  // of the first kPreScaleGroups 4-float groups of each sub-tile's accumulator are formed while its
  // WGMMAs run (TileMainloop::prescale), so only their fused multiply-adds wait for the WGMMAs.
  // As many as the registers left beside the result and the accumulator allow (4 per group):
  // 12 with 88 or more of the 232 free (128x144), 8 with 72 (128x160), 4 with 40 (128x192,
  // 128x256 /128); one group more spilled in each. Not on tiles of two 64-row slabs per
  // warpgroup (256x128 spilled with 4), of one consumer warpgroup (64-row tiles: 2-7% slower),
  // nor on the K-grouped kind.
  // NOTES: it paid on the in-place weight gradients' picks (128x144 over few tokens broke even) and cost on
  // the K-grouped tiles, hence not there.
  static constexpr int kPreScaleFreeRegisters = kConsumerRegisters - (kNumSubtiles + 1) * kAccumPerSubtile;
  static constexpr int kPreScaleWanted = kKGrouped || kNumSlabs > 1 || kNumMathWarpgroups == 1 ? 0
                                         : kPreScaleFreeRegisters >= 88 ? 12
                                         : kPreScaleFreeRegisters >= 72 ? 8
                                         : kPreScaleFreeRegisters >= 40 ? 4
                                                                        : 0;
  static constexpr int kPreScaleGroups =
      kBScale1D_ && kNumAccumBuffers == 1 ? min_int(kPreScaleWanted, kAccumPerSubtile / 4) : 0;
  // Rows of a sub-tile whose loads of C the direct store issues before their stores: both of a
  // thread's two rows (more loads in flight) where a warpgroup has several sub-tiles, one at a time
  // otherwise and under 1D1D (whose 192-register tiles spilled with both).
  // NOTES: in place FP32 (tools/probe_epilogue.py), both rows paid on 128x256 /128 and one row on 128x128 x2;
  // asking L2 for the tile's rows of C when the tile starts (cp.async.bulk.prefetch.L2) was always slower.
  static constexpr int kCLoadRows = kNumSubtiles > 1 && !kBScale1D_ ? 2 : 1;
  // Column pairs of each such row loaded before their stores: all of the sub-tile's, or where a
  // warpgroup has several sub-tiles at most 8 at a time (so 16 loads of C in flight per thread
  // with both rows; under 1D1D all 16 spilled 28 bytes in 256x128), in chunks that divide the
  // sub-tile's pairs (96 columns: 12 pairs, two chunks of 6).
  // NOTES: in place FP32, 8 pairs at a time beat all 16 on every shape measured; the K-grouped 128x160 was
  // slower with fewer and with more (docs/performance.md, 'What was tried and did not pay').
  // NOTES: chunks must divide the pairs: chunks of 8 over 12 stored past the sub-tile into the next column
  // part's columns (128x192 /96 under 1D1D gave wrong results in tests/test_k_grouped.py).
  // NOTES: a K-grouped sub-tile of 192 columns with all 24 pairs in flight spilled (56 bytes) and stored wrong sums.
  static constexpr int kCLoadPairs = (kNumSubtiles > 1 || (kKGrouped && kAccumPerSubtile / 4 > 20)) && kAccumPerSubtile / 4 > 8
                                         ? largest_divisor_at_most(kAccumPerSubtile / 4, 8)
                                         : kAccumPerSubtile / 4;

  // Shared memory (bytes): D staging (persistent kernels only), then A, B, a_scale and b_scale
  // stages, then the barriers. The split-K partial tile (fp32) reuses the stage memory after the k-loop.
  // NOTES: staging one 64-row slab per warpgroup at a time (half the staging of a 256-row tile)
  // cost 5% at 4096x7168x16384 on an H100, and the memory it frees is 1 KB short of a 4th stage.
  static constexpr int kStoreRows = kWgM;  // rows per consumer warpgroup and TMA store
  static constexpr int kSmemDBytes =
      kTmaF32Store || kStagedEpilogue ? align_up(kNumMathWarpgroups * 64 * kWgmmaN * 4, 1024)
                   : (kSplitK > 1 || kDirectStore ? 0 : align_up(kBlockM * kBlockN * 2, 1024));
  static constexpr int kTileABytes = kBlockM * kBlockK;
  static constexpr int kTileBBytes = kBlockN * kBlockK;
  // a_scale arrives by TMA per stage: from the TMA-aligned column-major layout one float per row;
  // from a row-major [M, K blocks] tensor (K blocks % 4 == 0) a box of 4 K blocks per row, of which
  // the k-block's column is read (the box's inner edge must be 16 bytes).
  static constexpr bool kAScaleRowMajor = kAScaleRowMajor_;
  static constexpr int kAScaleCols = kAScaleRowMajor ? 4 : 1;
  static constexpr int kTileAScaleBytes = kBlockM * 4 * kAScaleCols;
  static constexpr int kStageBytes = kTileABytes + kTileBBytes + kTileAScaleBytes;  // the stages' region
  static constexpr int kTileBScaleBytes = kBScale1D_ ? kBlockN * 4 : 0;  // 1D1D: a TMA box per stage
  static constexpr int kStageTxBytes = kStageBytes + kTileBScaleBytes;
  // The one-buffer k-loop of a tile whose width is not a multiple of 128 reads the two b_scale
  // values of each k-block (row 0 and row 1 of a tile straddling two 128-row weight blocks) from
  // its stage, copied there by the producer (mainloop/b_scale_sources.cuh, BScaleStaged); other k-loops
  // load them themselves (BScaleQueue, BScaleChunks). The 8 bytes per stage are there for every config.
  static constexpr bool kBScaleStaged = !kBScale1D_ && Pipeline::kNumAccumBuffers == 1 && Shape::kBlockN % 128 != 0;
  // The one-buffer k-loop hands each stage back by the index it waited for it at (TileMainloop's
  // issued_stage) instead of advancing a release state of its own, in the dense kernels with K fixed
  // at up to 8 K blocks.
  // NOTES: against the release state it paid at 4 and 8 K blocks and cost a little at 12-16, with long
  // run-time K and in the masked kind.
  static constexpr bool kOneRingState = Pipeline::kNumAccumBuffers == 1 && !kBScale1D_ && FixedK::kBlocks > 0 &&
                                        FixedK::kBlocks <= 8 && kProblemKind_ == ProblemKind::kDense && !FixedK::kRing;
  // 1D1D: each stage's kBlockN b_scale values, at a pitch of whole 128-byte lines (TMA destinations).
  static constexpr int kBScalePitch = kBScale1D_ ? align_up(kBlockN * 4, 128) / 4 : 2;  // floats per stage
  // 1D1D: the values live in a ring of twice the stages' slots (the producer fills slot
  // PipelineState::ring2_index() with the stage), so the k-loop may hand a stage back before the
  // promotion reads its columns' values (an early release): the slot is refilled only once the
  // stage after next is released, which each consumer does after this promotion. It does so on
  // the tiles of at most 128 columns, and in the K-grouped kind only on tiles of at most
  // kEarlyReleaseMaxKBlocks k-blocks (TileMainloop's kEarlyRelease, chosen per tile).
  // NOTES: the early release paid on the in-place weight gradient's 128-column tiles and cost on wider ones;
  // on the K-grouped 128x128 tiles it paid at 16 k-blocks a tile and cost at 32-64, hence the limit of 24.
  static constexpr int kEarlyReleaseNever = 0, kEarlyReleaseAlways = 1 << 30;
  static constexpr int kEarlyReleaseMaxKBlocks = !kBScale1D_ || Shape::kBlockN > 128 ? kEarlyReleaseNever
                                                 : kKGrouped                   ? 24
                                                                               : kEarlyReleaseAlways;
  // The ring is used where a tile may release early (kBScaleRing); the others keep one slot per
  // stage, the stage's own, and only those slots in shared memory (deep_tile/kernels/fp8_gemm.py b_scale_ring).
  static constexpr bool kBScaleRing = kEarlyReleaseMaxKBlocks != kEarlyReleaseNever;
  static constexpr int kBScaleSlots = kBScaleRing ? 2 * kNumStages : kNumStages;
  // Where the promotion gets its k-block's ring slot: from the release state (its phase, one more
  // register live through the k-loop), or, on the tiles with two sub-tiles per warpgroup under
  // multicast, from a copy of the issue state's taken at issue (BScaleColumns::slot).
  // NOTES: taken at issue the slot cost time on the in-place weight gradient's picks, but from the release
  // state the 256x128 mcA in-place kernel spilled.
  static constexpr bool kBScaleSlotAtIssue = kBScaleRing && Cluster::kNumMulticast == 2 && kNumSubtiles > 1;
  static constexpr int kSmemBScaleBytes = kBScaleSlots * kBScalePitch * 4;
  // Arrivals per consumer warp (and CTA of a pair) on a stage's empty barrier: every lane with
  // staged b_scale values (its read must precede the producer's next copy), else one.
  static constexpr int kReleasesPerWarp = kBScaleStaged ? 32 : 1;
  // kStagedEpilogue: after the stages' barriers, per consumer warpgroup a `ready` barrier (the
  // storer's: its staging holds C, or is free) and a `staged` one (the warpgroup's: its sums are
  // there), SharedStorage::epilogue.
  static constexpr int kNumEpilogueBarriers = kStagedEpilogue ? 2 * kNumMathWarpgroups : 0;
  // The kinds with a table keep it after the barriers; the masked, offsets and psum kinds then a
  // tile slot per stage (TileSlot).
  static constexpr int kSmemTableBytes = (has_group_table(kProblemKind_) ? kGroupTableBytes : 0) +
                                         (uses_tile_slots(kProblemKind_) ? kNumStages * kTileSlotBytes : 0);
  // The producer hands each tile to the consumers in its first stage's slot (uses_tile_slots).
  static constexpr bool kTileSlots = uses_tile_slots(kProblemKind_);
  // The grouped kinds store a slab whose real rows end inside it (a partial slab) by TMA too:
  // D's map is then the 3-D view of store_bf16.cuh's SlabView.
  static constexpr bool kPartialTma = true;
  // Head-strided A and D (DT_HEAD_STRIDED, the masked kind only): group g's rows i are row i of
  // [rows, G * K] / [rows, G * N] views, at column g * K / g * N (fp8_einsum's x [b, h, r], d [b, h, d]).
  static constexpr bool kHeadStrided = false;
  static constexpr int kSmemBytes = kSmemDBytes + kNumStages * kStageBytes + kSmemBScaleBytes + kNumStages * 16 +
                                    kNumEpilogueBarriers * 8 + kSmemTableBytes;
  // The table's offset from the start of shared memory (the last region, SharedStorage::group_table).
  static constexpr int kSmemTableOffset = kSmemBytes - kSmemTableBytes;

  // Split-K partial tile: fp32 rows of kPartialPitch floats; a pitch of 8 (mod 32) words makes the
  // 8-byte fragment stores of a half-warp hit 32 distinct banks.
  static constexpr int kPartialPitch = kBlockN + (40 - kBlockN % 32) % 32;
  static constexpr int kPartialBytes = kBlockM * kPartialPitch * 4;

  // Epilogue: D is stored in atoms of kStoreSwizzleBytes-wide rows (the TMA swizzle span).
  static constexpr int kStoreSwizzleBytes = kBlockN % 64 == 0 ? 128 : (kBlockN % 32 == 0 ? 64 : 32);
  static constexpr int kAtomCols = kStoreSwizzleBytes / 2;
  static constexpr int kNumAtoms = kBlockN / kAtomCols;

  DT_STATIC_ASSERT(kBlockM == 64 || kBlockM == 128 || kBlockM == 256, "DT_BLOCK_M must be 64, 128 or 256");
  DT_STATIC_ASSERT((kBlockN % 16 == 0 || (kF32PlainStaging && kNumNParts == 1)) && kBlockN >= 16 && kBlockN <= 256,
                   "DT_BLOCK_N must be a multiple of 16 in [16, 256], or of 8 with DT_STAGED_EPILOGUE and DT_WGMMA_N == DT_BLOCK_N");
  DT_STATIC_ASSERT(kBlockN <= 128 || kBlockN - gcd(kBlockN, 128) <= 128 || kF32PlainStaging,
                   "DT_BLOCK_N > 128 must be 144, 160, 192 or 256 (a tile spans at most two b_scale blocks)");
  DT_STATIC_ASSERT(kWgmmaN % 8 == 0 && kWgmmaN >= 8 && kBlockN % kWgmmaN == 0 && (kNumNParts == 1 || kWgmmaN % 16 == 0),
                   "DT_WGMMA_N must divide DT_BLOCK_N (a multiple of 8; of 16 when the tile has several column parts)");
  DT_STATIC_ASSERT((kAccumPerSubtile / 4) % kCLoadPairs == 0, "the direct store's chunks of C must divide a sub-tile's columns");
  DT_STATIC_ASSERT(kNumAccumBuffers == 1 || (kNumAccumBuffers == 2 && kNumSubtiles <= 2),
                   "DT_ACCUM_BUFFERS must be 1, or 2 with at most two sub-tiles per consumer warpgroup");
  DT_STATIC_ASSERT((kNumSubtiles + kNumAccumBuffers) * kAccumPerSubtile <= 192,
                   "accumulators exceed the register budget: (sub-tiles + buffers) * DT_WGMMA_N / 2 must be <= 192");
  DT_STATIC_ASSERT(kKUnroll == 3 || (kKUnroll == 6 && kNumAccumBuffers == 1),
                   "DT_K_UNROLL must be 3, or 6 with one accumulator buffer");
  DT_STATIC_ASSERT(kStaticKBlocks == 0 || (kStaticKBlocks > 0 && !kKGrouped && kSplitK == 1 && kNumAccumBuffers == 1),
                   "DT_STATIC_K_BLOCKS must be 0, or > 0 without the K-grouped kind, with DT_SPLIT_K 1 and one accumulator buffer");
  DT_STATIC_ASSERT(kStaticKUnroll >= 1, "DT_STATIC_K_UNROLL must be >= 1");
  DT_STATIC_ASSERT(!kStaticRing || (kStaticKBlocks > 0 && kStaticKBlocks % kNumStages == 0 && !kBScale1D && !kOneRingState),
                   "DT_STATIC_RING needs DT_STATIC_K_BLOCKS a positive multiple of DT_NUM_STAGES, 1D2D scales");
  DT_STATIC_ASSERT(kNumStages >= kMinStages && kNumStages <= kMaxStages, "DT_NUM_STAGES must be in [2, 16]");
  DT_STATIC_ASSERT(kNumMulticast == 1 || kNumMulticast == 2, "DT_NUM_MULTICAST must be 1 or 2");
  DT_STATIC_ASSERT(kSplitK >= 1 && kSplitK <= 8, "DT_SPLIT_K must be in [1, 8] (a portable cluster)");
  DT_STATIC_ASSERT(kSplitK == 1 || kNumMulticast == 1, "DT_SPLIT_K > 1 needs DT_NUM_MULTICAST == 1");
  DT_STATIC_ASSERT(kNumMulticast == 1 || kRasterAlongM == kMulticastB,
                   "DT_RASTER_ALONG_M must be 1 with multicast of B and 0 with multicast of A (the pair shares the operand)");
  DT_STATIC_ASSERT(kSplitK == 1 || kPartialBytes <= kNumStages * (kTileABytes + kTileBBytes),
                   "the split-K partial tile must fit in the A and B stage memory it reuses");
  DT_STATIC_ASSERT(kProblemKind_ != ProblemKind::kGroupedOffsets || kAScaleRowMajor,
                   "the offsets kind (DT_PROBLEM_KIND 3) needs DT_A_SCALE_ROW_MAJOR: its tiles start at any row, and a "
                   "column-major a_scale box must start 16-byte aligned");
  DT_STATIC_ASSERT(!kGrouped || kSplitK == 1, "the grouped kinds (DT_PROBLEM_KIND != 0) need DT_SPLIT_K == 1");
  DT_STATIC_ASSERT(kSwapN == 0 || ((kSwapN == 8 || kSwapN == 16) && kBlockM == 64 && kBlockN % 64 == 0 &&
                                    kNumNParts == 1 && kNumMulticast == 1 && !kGrouped),
                   "DT_SWAP_N must be 0, or 8 or 16 with DT_BLOCK_M 64, DT_BLOCK_N a multiple of 64 equal to DT_WGMMA_N, "
                   "no multicast and the dense kind");
  DT_STATIC_ASSERT((kOutKind == 0 || kOutKind == 1) && kCKind >= 0 && kCKind <= 3,
                   "DT_OUT_KIND must be 0 (bf16) or 1 (FP32), DT_C_KIND 0 (no C), 1 (bf16), 2 (FP32) or 3 (D itself)");
  DT_STATIC_ASSERT(!kBScale1D || (kSwapN == 0 && (!kGrouped || kKGrouped)),
                   "DT_B_SCALE_1D (1D1D) needs the dense or the K-grouped kind without swap-AB");
  DT_STATIC_ASSERT(!kKGrouped || (kBScale1D && !kAScaleRowMajor),
                   "the K-grouped kind (DT_PROBLEM_KIND 4) needs DT_B_SCALE_1D and the column-major a_scale");
  DT_STATIC_ASSERT(kSignal == 0 || ((kSignal == 1 || kSignal == 2) && kProblemKind_ == ProblemKind::kGroupedMasked && kSplitK == 1 && !kSwapAB),
                   "DT_SIGNAL must be 0, or 1 or 2 with the masked kind (DT_PROBLEM_KIND 2), no split-K and no swap-AB");
  DT_STATIC_ASSERT(!kStagedEpilogue || (kKGrouped && kOutKind == 1 && (kCKind == 0 || kCKind == 3) && kNumSubtiles == 1),
                   "DT_STAGED_EPILOGUE needs the K-grouped kind (DT_PROBLEM_KIND 4), FP32 D (DT_OUT_KIND 1) without C or "
                   "accumulated in place (DT_C_KIND 0 or 3), and one sub-tile per consumer warpgroup");
  DT_STATIC_ASSERT(kSmemBytes <= 232448, "shared memory exceeds the sm_90 limit of 232448 bytes");
};

/// The head-strided variant of a masked config (DT_HEAD_STRIDED; kHeadStrided): A, its row-major
/// scales and D read and written in views of fp8_einsum's [b, h, *] tensors, whose rows are the
/// kernel's m (max_m) and whose group e starts at column e * K, e * K blocks and e * n.
template <class Cfg>
struct HeadStridedConfig : Cfg {
  static constexpr bool kHeadStrided = true;
  DT_STATIC_ASSERT(Cfg::kProblemKind == ProblemKind::kGroupedMasked && Cfg::kAScaleRowMajor && !Cfg::kDirectStore &&
                       !Cfg::kSwapAB && Cfg::kSignal == 0 && Cfg::kSplitK == 1 && !Cfg::kBScale1D,
                   "DT_HEAD_STRIDED needs the masked kind (DT_PROBLEM_KIND 2) with the row-major a_scale, bf16 D "
                   "without C, no swap-AB, no signals, no split-K and 1D2D scales");
};

}  // namespace deep_tile
