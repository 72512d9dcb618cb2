// Pieces the tensor-core flash attention kernels share: types, constants, and the tile loader.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/flash_attention_ptx.cuh"

// sm_90 adds float4 atomicAdd to global memory: the backward's dq accumulation uses it (a
// quarter of the scalar atomics) where compiled for sm_90 and newer.
#ifndef FERRY_FLASH_FLOAT4_ATOMICS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FERRY_FLASH_FLOAT4_ATOMICS 1
#else
#define FERRY_FLASH_FLOAT4_ATOMICS 0
#endif
#endif

namespace ferry::flash {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFullMask = 0xffffffffu;

// Rows row0..row0+Rows-1 (each D bf16, `stride` elements apart from `base`) into shared memory
// rows LD apart, asynchronously (cp.async; the caller commits and waits); rows at or past T are
// zero-filled, so that masked probabilities (0) never meet uninitialised bits that could be NaN.
template <int D, int LD, int Rows, int Threads>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* base, int64_t stride, int row0, int T) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  static_assert((Rows * kChunks) % Threads == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int it = 0; it < Rows * kChunks / Threads; ++it) {
    const int i = threadIdx.x + it * Threads;
    const int r = i / kChunks, c = i % kChunks;
    const int t = row0 + r;
    const bool valid = t < T;
    cp_async_16(dst + r * LD + c * 8, base + (valid ? t * stride : 0) + c * 8, valid);
  }
}

}  // namespace ferry::flash
