// What the wgmma flash attention kernels share: the loader of tiles into wgmma.cuh's swizzled
// layout.
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

}  // namespace ferry::flash::sm90
