// The CUDA backend's working-memory sizes as plain arithmetic: CudaOps allocates by them, and the
// planner's memory model (planner/memory_model.cpp) predicts the same bytes without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

// CudaOpsOptions' defaults.
inline constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;
inline constexpr size_t kCudaFlceChunkBytes = size_t{256} << 20;

// Tokens per chunk of the fused linear-cross-entropy for a vocabulary of V: as many bf16 logits
// rows (padded to a multiple of 8) as fit in chunk_bytes, rounded down to a multiple of 128 tokens
// when at least 128, and at least 1.
constexpr int64_t fused_cross_entropy_chunk_tokens(size_t chunk_bytes, int64_t V) {
  const int64_t Vp = (V + 7) / 8 * 8;
  int64_t C = static_cast<int64_t>(chunk_bytes / (2 * static_cast<size_t>(Vp < 8 ? 8 : Vp)));
  if (C >= 128) C = C / 128 * 128;
  return C < 1 ? 1 : C;
}

}  // namespace ferry
