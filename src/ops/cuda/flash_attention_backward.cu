// Launches the tensor-core backward (flash_attention_backward.cuh) with its tile configurations.
#include <cuda_runtime.h>

#include "ops/cuda/flash_attention_backward.cuh"
#include "ops/cuda/flash_attention_internal.h"

namespace ferry::flash {
namespace {

template <class Tile>
void launch_backward(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum, void* stream) {
  const int tiles = static_cast<int>((p.fwd.tokens + Tile::Bc - 1) / Tile::Bc);
  const auto kernel = backward_kernel<Tile>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Tile::kSmemBytes)),
             "cudaFuncSetAttribute(flash attention backward, shared-memory size)");
  kernel<<<dim3(p.fwd.kv_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      p, delta, dq_accum);
  check_launch("flash attention backward");
}

}  // namespace

// Tile configurations (Bc keys x Bq queries per step, warps): D = 128: 64 x 32, 4 warps -- dK and
// dV take 128 registers per thread, so the query step stays small; 75.5 KB of shared memory, two
// blocks per SM on sm_90. D = 64: 64 x 64, 4 warps, 66 KB.
void backward_tensor_core(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum, void* stream) {
  if (p.fwd.head_dim == 64)
    launch_backward<BackwardTile<64, 4, 64, 2>>(p, delta, dq_accum, stream);
  else
    launch_backward<BackwardTile<128, 4, 32, 2>>(p, delta, dq_accum, stream);
}

}  // namespace ferry::flash
