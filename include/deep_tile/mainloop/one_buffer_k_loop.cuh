// The k-loop of one accumulator buffer (Cfg::kNumAccumBuffers == 1): each sub-tile of a k-block
// issued, waited for and promoted in turn. K is a run-time value (a loop unrolled by
// Cfg::kKUnroll), fixed at compile time (Cfg::kStaticKBlocks: a constant trip count), or fixed
// at a multiple of the stages (Cfg::kStaticRing: passes over the ring as straight code).
// `loop` is the TileMainloop of the tile.
#pragma once
#include "deep_tile/common/types.cuh"
#include "deep_tile/ptx/wgmma_fp8.cuh"

namespace deep_tile {

template <class Cfg>
struct OneBufferKLoop {
  /// One k-block: each sub-tile issued, waited for and promoted in turn (kAssign: the tile's
  /// first k-block, promoted into the result instead of added to it).
  template <int kSub, bool kAssign = false, class Loop>
  DT_DEVICE static void serial_steps(Loop& loop, int kb) {
    if constexpr (kSub < Cfg::kNumSubtiles) {
      loop.template issue<kSub, 0>(kb);
      Loop::Promotion::prescale(loop);
      ptx::wgmma_wait_group<0>();
      loop.template finish<kSub, 0, kAssign>();
      serial_steps<kSub + 1, kAssign>(loop, kb);
    } else {
      loop.bscale.pop(kb);
    }
  }

  /// kStaticRing: k-blocks kb0 + kS .. kb0 + kEnd - 1 in turn, as straight code.
  template <int kS, int kEnd, class Loop>
  DT_DEVICE static void static_steps(Loop& loop, int kb0) {
    if constexpr (kS < kEnd) {
      serial_steps<0>(loop, kb0 + kS);
      static_steps<kS + 1, kEnd>(loop, kb0);
    }
  }

  /// kInitResult: the first k-block is promoted into the result (it is not zeroed first). Needs
  /// kb_begin < kb_end (the persistent kinds: every entry refuses k <= 0, deep_tile/gemm/checks.py and
  /// native/csrc/checks.cpp, so every tile has a k-block).
  /// NOTES: zeroing is a CS2R per accumulator register and tile, a real share of a short-K tile's
  /// instructions; which kinds gain from skipping it: Fp8GemmConfig::kLoopSetsResult.
  template <bool kInitResult, class Loop>
  DT_DEVICE static void run(Loop& loop, int kb_begin, int kb_end) {
    if constexpr (Cfg::kStaticRing) loop.issue_state.index = 0, loop.release_state.index = 0, loop.refresh_pass_desc();
    if constexpr (kInitResult) {
      // NOTES: unconditional: with a test of the range here (zeroing when empty), ptxas hoisted
      // the zeroing above the test onto every tile's path.
      serial_steps<0, true>(loop, kb_begin);
      ++kb_begin;
    }
    if constexpr (Cfg::kStaticKBlocks > 0) {
      // K fixed at compile time (persistent: the range is [0, kStaticKBlocks)): a constant trip
      // count unrolled by kStaticKUnroll, so up to that many K blocks are straight code and longer
      // ranges have no run-time remainder test; ptxas folds the result's zeroing (consumer_loop)
      // into the first k-block's promotion (no CS2R).
      // NOTES: faster than the run-time loop for the dense, masked, offsets and psum kinds; the contiguous
      // kind gained nothing (docs/performance.md, 'What the selector picks, and why').
      if constexpr (Cfg::kStaticRing) {
        constexpr int kS = Cfg::kNumStages;
        static_steps<kInitResult ? 1 : 0, kS>(loop, 0);
#pragma unroll 1
        for (int pass = 1; pass < Cfg::kStaticKBlocks / kS; ++pass) {
          loop.issue_state.index = 0, loop.release_state.index = 0;
          loop.refresh_pass_desc();
          static_steps<0, kS>(loop, pass * kS);
        }
      } else {
#pragma unroll Cfg::kStaticKUnroll
        for (int kb = kInitResult ? 1 : 0; kb < Cfg::kStaticKBlocks; ++kb) serial_steps<0>(loop, kb);
      }
    } else {
      // NOTES: unrolled by a multiple of BScaleQueue's depth, so its rotation becomes register
      // renaming (11-14 fewer instructions per k-block on this serial chain). By 6 for long K ranges (the
      // selector's choice, Fp8GemmConfig::kKUnroll); both forms in one kernel behind a run-time
      // test of the range cost up to 8% on short ones (the larger code per tile).
#pragma unroll Cfg::kKUnroll
      for (int kb = kb_begin; kb < kb_end; ++kb) serial_steps<0>(loop, kb);
    }
    // Cfg::kOneRingState: every stage the loop waited for went back, so the release state catches
    // up with the issue state.
    if constexpr (Cfg::kOneRingState) loop.release_state = loop.issue_state;
  }
};

}  // namespace deep_tile
