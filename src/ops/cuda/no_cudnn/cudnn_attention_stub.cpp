// CudnnAttention in a build without cuDNN's headers: never available, so CudaOps always runs
// ferry's own flash attention.
#include "ops/cuda/cudnn_attention.h"

namespace ferry {

struct CudnnAttention::Graphs {};

std::unique_ptr<CudnnAttention> CudnnAttention::make(void*) {
  return nullptr;
}
std::string CudnnAttention::unavailable_reason() {
  return "ferry was built without cuDNN's headers";
}
size_t CudnnAttention::library_version() {
  return 0;
}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::forward(const FlashAttentionParams&, int64_t, void*, size_t) {
  return false;
}
bool CudnnAttention::backward(const FlashAttentionBackwardParams&, int64_t) {
  return false;
}
bool CudnnAttention::forward(const FlashAttentionParams&, const AttentionSegments&, void*, size_t) {
  return false;
}
bool CudnnAttention::backward(const FlashAttentionBackwardParams&, const AttentionSegments&) {
  return false;
}
size_t CudnnAttention::backward_workspace_bytes(const FlashAttentionParams&, const AttentionSegments&) {
  return 0;
}

}  // namespace ferry
