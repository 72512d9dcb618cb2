// Attention on the GPU: CudaOps' two methods hand the views to cuDNN's fused attention where the
// mask allows it, cuDNN is there (ops/cuda/cudnn_attention.h) and it is not set aside
// (Ops::use_library_attention: the profile found the own kernels faster in that direction), else
// to ferry's own flash attention (ops/cuda/flash_attention.h). Both directions, either
// implementation, share one working memory of the planner's size (attention_workspace_bytes); a
// cuDNN plan that needs more is not used.
#include "ops/cuda/cuda_ops_state.cuh"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/flash_attention.h"

namespace ferry {

namespace {

// Returns (T, Hq, Hkv, D) after checking q (T,Hq,D), k v (T,Hkv,D) in bf16, out (T,Ho,D) with
// Ho >= Hq (a group of heads' columns of a wider output, ops.h) and lse (Hq,T) fp32.
FlashAttentionParams attention_params(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const int32_t* doc_start, float scale, const Tensor& out,
                                      const Tensor& lse) {
  cuda::expect_dtype(op, "q", q, DType::BF16);
  CUDA_OPS_EXPECT(q.ndim == 3, op, cuda::describe("q", q) + ": expected (T, Hq, D)");
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  cuda::expect_dtype(op, "k", k, DType::BF16);
  CUDA_OPS_EXPECT(k.ndim == 3 && k.shape[0] == T && k.shape[2] == D, op,
                  cuda::describe("k", k) + " does not match " + cuda::describe("q", q));
  const int64_t Hkv = k.shape[1];
  cuda::expect_like(op, "v", v, "k", k, DType::BF16);
  cuda::expect_dtype(op, "out", out, DType::BF16);
  CUDA_OPS_EXPECT(
      out.ndim == 3 && out.shape[0] == T && out.shape[1] >= Hq && out.shape[2] == D, op,
      cuda::describe("out", out) + ": expected (T, Ho, D) with Ho >= Hq, beside " + cuda::describe("q", q));
  cuda::expect_dtype(op, "lse", lse, DType::F32);
  CUDA_OPS_EXPECT(lse.numel() == Hq * T, op, cuda::describe("lse", lse) + ": expected (Hq, T)");
  CUDA_OPS_EXPECT(Hkv > 0 && Hq % Hkv == 0, op, "Hq must be a multiple of Hkv");
  FlashAttentionParams p{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.lse = static_cast<float*>(lse.data);
  p.doc_start = doc_start;
  p.tokens = T;
  p.q_heads = static_cast<int>(Hq);
  p.kv_heads = static_cast<int>(Hkv);
  p.head_dim = static_cast<int>(D);
  p.scale = scale;
  p.out_heads = static_cast<int>(out.shape[1]);
  return p;
}

AttentionSegments segments_of(const AttentionMask& mask) {
  return AttentionSegments{mask.segment_bounds, mask.segments, mask.longest_segment};
}

// Attention's working memory at its one size for these dims (the planner's); *bytes gets the size.
void* attention_workspace(CudaOps::State& state, const FlashAttentionParams& p, size_t* bytes) {
  *bytes = attention_workspace_bytes(p.tokens, p.q_heads, p.head_dim);
  return state.buffer(cuda::Scratch::kAttention, *bytes, "attention");
}

// cuDNN's attention for one direction where it is loaded and not set aside for that direction
// (Ops::use_library_attention), else null.
CudnnAttention* library_attention(const CudaOps::State& state, bool forward) {
  return (forward ? state.cudnn_forward : state.cudnn_backward) ? state.cudnn_attention.get() : nullptr;
}

}  // namespace

void CudaOps::attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                Tensor lse) {
  const FlashAttentionParams p =
      attention_params("attention_forward", q, k, v, mask.doc_start, scale, out, lse);
  if (p.tokens == 0 || p.q_heads == 0) return;
  if (CudnnAttention* cudnn = library_attention(*state_, true);
      cudnn != nullptr && (mask.row_tokens > 0 || mask.segments > 0)) {
    size_t bytes = 0;
    void* workspace = attention_workspace(*state_, p, &bytes);
    if (mask.row_tokens > 0 && cudnn->forward(p, mask.row_tokens, workspace, bytes)) return;
    if (mask.row_tokens <= 0 && cudnn->forward(p, segments_of(mask), workspace, bytes)) return;
  }
  flash_attention_forward(p, state_->stream);
}

void CudaOps::attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                 Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "attention_backward";
  FlashAttentionBackwardParams p{};
  p.fwd = attention_params(op, q, k, v, mask.doc_start, scale, out, lse);
  cuda::expect_like(op, "dout", dout, "out", out, DType::BF16);
  cuda::expect_like(op, "dq", dq, "q", q, DType::BF16);
  cuda::expect_like(op, "dk", dk, "k", k, DType::BF16);
  cuda::expect_like(op, "dv", dv, "v", v, DType::BF16);
  if (p.fwd.tokens == 0 || p.fwd.q_heads == 0) return;
  p.dout = dout.data;
  p.dq = dq.data;
  p.dk = dk.data;
  p.dv = dv.data;
  p.workspace = attention_workspace(*state_, p.fwd, &p.workspace_bytes);
  if (CudnnAttention* cudnn = library_attention(*state_, false); cudnn != nullptr) {
    if (mask.row_tokens > 0 && cudnn->backward(p, mask.row_tokens)) return;
    if (mask.row_tokens <= 0 && mask.segments > 0 && cudnn->backward(p, segments_of(mask))) return;
  }
  flash_attention_backward(p, state_->stream);
}

}  // namespace ferry
