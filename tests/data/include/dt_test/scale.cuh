// Test header for tests/test_cache.py and tests/test_compile.py (not part of deep_tile).
#pragma once

namespace dt_test {

__device__ __forceinline__ int scaled(int x, int scale) { return x * scale + 1; }

}  // namespace dt_test
