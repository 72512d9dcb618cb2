// Launches the simple flash attention kernels (flash_attention_simple.cuh).
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "ops/cuda/flash_attention_internal.h"
#include "ops/cuda/flash_attention_simple.cuh"

namespace ferry::flash {
namespace {

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>((items + kSimpleWarps - 1) / kSimpleWarps);
}

// Shared memory for `rows` rows of head_dim fp32 per warp.
size_t row_bytes(int rows, int head_dim) {
  return sizeof(float) * rows * kSimpleWarps * head_dim;
}

}  // namespace

void forward_simple(const FlashAttentionParams& p, void* stream) {
  forward_simple_kernel<<<blocks_for(p.tokens * p.q_heads), 32 * kSimpleWarps, row_bytes(1, p.head_dim),
                          static_cast<cudaStream_t>(stream)>>>(p);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void backward_simple(const FlashAttentionBackwardParams& p, const float* delta, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t smem = row_bytes(2, p.fwd.head_dim);
  dq_simple_kernel<<<blocks_for(p.fwd.tokens * p.fwd.q_heads), 32 * kSimpleWarps, smem, s>>>(p, delta);
  FERRY_CUDA_CHECK(cudaGetLastError());
  dkdv_simple_kernel<<<blocks_for(p.fwd.tokens * p.fwd.kv_heads), 32 * kSimpleWarps, smem, s>>>(p, delta);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void compute_delta(const FlashAttentionBackwardParams& p, float* delta, void* stream) {
  const int64_t rows = p.fwd.tokens * p.fwd.q_heads;
  constexpr int kThreads = 256;
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  delta_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const bf16*>(p.fwd.out), static_cast<const bf16*>(p.dout), delta, p.fwd.tokens,
      p.fwd.q_heads, p.fwd.head_dim, out_row_elements(p.fwd));
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void convert_dq(const float* acc, void* dq, float scale, int64_t count, void* stream) {
  constexpr int kThreads = 256;
  const int64_t quads = count / 4;
  const int64_t blocks = std::min<int64_t>((quads + kThreads - 1) / kThreads, 65536);
  convert_dq_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const float4*>(acc), static_cast<uint2*>(dq), scale, quads);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ferry::flash
