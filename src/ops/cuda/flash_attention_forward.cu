// Launches the tensor-core forward (flash_attention_forward.cuh) with its tile configurations.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "ops/cuda/flash_attention_forward.cuh"
#include "ops/cuda/flash_attention_internal.h"

namespace ferry::flash {
namespace {

template <class Tile>
void launch_forward(const FlashAttentionParams& p, void* stream) {
  const int tiles = static_cast<int>((p.tokens + Tile::Br - 1) / Tile::Br);
  const auto kernel = forward_kernel<Tile>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(Tile::kSmemBytes)));
  kernel<<<dim3(p.q_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(p);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// Tile configurations (Br x Bc, warps): 128 x 64 with 8 warps for both head dims. D = 128 holds
// O (64), S (32) and Q (32) fp32/bf16x2 registers per thread (223 registers on sm_90): one block
// of 8 warps per SM, 69.6 KB of shared memory (fits sm_89's 99 KB). D = 64 halves O and Q (153
// registers; capping it at 128 for two blocks per SM spilled): 36.9 KB.
void forward_tensor_core(const FlashAttentionParams& p, void* stream) {
  if (p.head_dim == 64)
    launch_forward<ForwardTile<64, 8, 64, 1>>(p, stream);
  else
    launch_forward<ForwardTile<128, 8, 64, 1>>(p, stream);
}

}  // namespace ferry::flash
