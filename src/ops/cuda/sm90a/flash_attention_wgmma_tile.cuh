// What the wgmma flash attention kernels share: the loader of tiles into wgmma.cuh's swizzled
// layout, and the turn the block's two warpgroups take to issue their first products of a step.
#pragma once

#include <cstdint>

#include "ops/cuda/flash_attention_tile.cuh"
#include "ops/cuda/sm90a/wgmma.cuh"

namespace ferry::flash::sm90 {

// Rows row0..row0+Rows-1 of D bf16 each (`stride` elements apart) into the swizzled layout at
// `dst`, asynchronously; rows at or past T are zero-filled.
template <int D, int Rows, int Threads>
__device__ __forceinline__ void load_swizzled(unsigned char* dst, const bf16* base, int64_t stride, int row0,
                                              int T) {
  constexpr int kPieces = D / 8;  // 16-byte pieces a row
  static_assert((Rows * kPieces) % Threads == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int it = 0; it < Rows * kPieces / Threads; ++it) {
    const int i = threadIdx.x + it * Threads;
    const int r = i / kPieces, c = i % kPieces;
    const int t = row0 + r;
    const bool valid = t < T;
    cp_async_16(dst + swizzle_offset(Rows, r, c * 8), base + (valid ? t * stride : 0) + c * 8, valid);
  }
}

// Each step, the second warpgroup issues its first products only once the first has issued its own
// (named barrier 1 of the block's 256 threads: the first arrives, the second waits). The tensor
// cores then finish the first's products before the second's, and each warpgroup's elementwise
// pass runs while the other's products do, instead of both waiting on the same products at once
// (FlashAttention-3's ping-pong; +1-4% in both kernels, docs/performance.md). Every step, each
// warpgroup calls its side exactly once, whatever it computes in that step.
__device__ __forceinline__ void second_warpgroup_waits_its_turn() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}
__device__ __forceinline__ void first_warpgroup_gives_the_turn() {
  asm volatile("bar.arrive 1, 256;\n" ::: "memory");
}

// The turn back (named barrier 2), for a kernel with no block barrier between its steps: from its
// second step on, the first warpgroup issues its first products only once the second has issued
// its own of the step before. The two then alternate strictly, and neither barrier sees the same
// warpgroup arrive twice before the other has waited.
__device__ __forceinline__ void first_warpgroup_waits_its_turn() {
  asm volatile("bar.sync 2, 256;\n" ::: "memory");
}
__device__ __forceinline__ void second_warpgroup_gives_the_turn() {
  asm volatile("bar.arrive 2, 256;\n" ::: "memory");
}

}  // namespace ferry::flash::sm90
