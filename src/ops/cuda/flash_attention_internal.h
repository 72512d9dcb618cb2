// What the flash attention translation units share: the kernel launchers behind the dispatch in
// flash_attention.cu, and launch-error checking. Included by .cu files only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cuda/flash_attention.h"

namespace ferry::flash {

// Tensor-core path; head_dim is 64 or 128, pointers 16-byte aligned, T >= 1 (checked by the caller).
void forward_tensor_core(const FlashAttentionParams& p, void* stream);
// The same on Hopper's warpgroup products (sm90a/flash_attention_wgmma_forward.cu): built where
// the build targets sm_90 (FERRY_HAVE_SM90A), run only on a compute capability 9.0 device.
void forward_wgmma(const FlashAttentionParams& p, void* stream);
// delta (Hq, T) fp32 and dq_accum (T, Hq, D) fp32 (zeroed) come from the workspace: delta at its
// start, dq_accum delta_bytes() further. keys_per_block 0 lets the kernel choose; 64 or 128 forces
// a D = 128 configuration (the bench compares them; 128 raises where shared memory is short).
size_t delta_bytes(int64_t tokens, int q_heads);
void backward_tensor_core(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum,
                          void* stream, int keys_per_block = 0);
// The same on Hopper's warpgroup products (sm90a/flash_attention_wgmma_backward.cu), where
// forward_wgmma is.
void backward_wgmma(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum, void* stream);

// Simple path; any head_dim in 1..256.
void forward_simple(const FlashAttentionParams& p, void* stream);
void backward_simple(const FlashAttentionBackwardParams& p, const float* delta, void* stream);

// Both paths: delta (Hq, T) = rowsum(dout * out); dq (count bf16) = scale * acc (count fp32, a
// multiple of 4, 16-byte aligned).
void compute_delta(const FlashAttentionBackwardParams& p, float* delta, void* stream);
void convert_dq(const float* acc, void* dq, float scale, int64_t count, void* stream);

}  // namespace ferry::flash
