// Launches the tensor-core backward (flash_attention_backward.cuh) with its tile configurations.
#include <cuda_runtime.h>

#include <string>

#include "core/check.h"
#include "core/cuda_check.h"
#include "ops/cuda/flash_attention_backward.cuh"
#include "ops/cuda/flash_attention_internal.h"

namespace ferry::flash {
namespace {

template <class Tile>
void launch_backward(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum,
                     void* stream) {
  const int tiles = static_cast<int>((p.fwd.tokens + Tile::Bc - 1) / Tile::Bc);
  const auto kernel = backward_kernel<Tile>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(Tile::kSmemBytes)));
  kernel<<<dim3(p.fwd.kv_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      p, delta, dq_accum);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// Tile configurations (Bc keys x Bq queries per step, warps, dQ piece width). dK and dV take
// 4 D / 8 registers per thread (128 for D = 128), so the query step stays small.
// * D = 128, where a block may have 116 KB of shared memory (sm_80, sm_90): 128 x 32, 8 warps,
//   dQ in 16 x 32 pieces (one per warp). One block per SM; each Q/dO tile loaded and each dq
//   atomic serves 128 keys.
// * D = 128 otherwise (sm_86, sm_89: 99 KB): 64 x 32, 4 warps, 16 x 64 pieces, 75.5 KB.
// * D = 64: 64 x 64, 4 warps, 16 x 64 pieces, 66 KB.
void backward_tensor_core(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum,
                          void* stream, int keys_per_block) {
  using Wide128 = BackwardTile<128, 8, 32, 32, 1>;
  using Narrow128 = BackwardTile<128, 4, 32, 64, 2>;
  if (p.fwd.head_dim == 64) {
    launch_backward<BackwardTile<64, 4, 64, 64, 2>>(p, delta, dq_accum, stream);
    return;
  }
  int device = 0, optin = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const bool wide_fits = static_cast<size_t>(optin) >= Wide128::kSmemBytes;
  if (keys_per_block == 128 && !wide_fits)
    raise("flash_attention_backward", "128-key blocks need " + std::to_string(Wide128::kSmemBytes) +
                                          " bytes of shared memory; this device allows " +
                                          std::to_string(optin));
  if (keys_per_block == 128 || (keys_per_block == 0 && wide_fits))
    launch_backward<Wide128>(p, delta, dq_accum, stream);
  else
    launch_backward<Narrow128>(p, delta, dq_accum, stream);
}

}  // namespace ferry::flash
