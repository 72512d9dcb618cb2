// The CUDA backend's working-memory sizes as plain arithmetic: CudaOps allocates by them, and the
// planner's memory model (planner/memory_model.cpp) predicts the same bytes without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

// CudaOpsOptions' defaults.
inline constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;
// 512 MiB of logits (2048 tokens of a 128k vocabulary): the head's weight gradient (V x H, fp32
// where the head keeps its optimizer on the GPU) is read and written once per chunk: on the H200
// the 8B head takes 39.3 ms per 8192 tokens with 512 MiB chunks, 42.8 with 256 MiB, and 41.0 with
// all logits at once (bench_flce). The planner counts the bytes; at 24 GiB they cost at most 0.2%
// of a step.
inline constexpr size_t kCudaFlceChunkBytes = size_t{512} << 20;
// GEMM tuning (CudaOpsOptions::gemm_tuning, ops/cuda/cuda_gemm.cuh): candidates per problem, timed
// calls of each, and how much faster than the heuristic's first a candidate must be to be kept.
// On the H200 the first 24 held algorithms 8-15% faster than the first 6 for the 1B's MLP products
// at 65,536 tokens (bench_gemm_candidates); cuBLASLt lists 8 there, the first 6 the same. In a step
// the wider choice gained nothing while each run chose anew (thirtieth and thirty-first sessions:
// runs chose differently within the trials' noise); with the choices kept per machine
// (train/gemm_choice_cache.h), the whole-GPU 1B on an H100 ran 1.1% faster on choices made among 24
// than among 6 (70,577-71,134 against 69,417-70,312 tok/s, one call). The tuning's extra trials (4-8
// steps of the 1B) are then spent once per machine.
inline constexpr int kGemmTuneAlgos = 24;
inline constexpr int kGemmTuneSamples = 5;
inline constexpr float kGemmTuneMargin = 0.05f;
// A candidate whose faster of two trials is this many times the fastest trial of any leaves the
// tuning (GemmTrials, ops/gemm_tuning.h).
inline constexpr float kGemmTuneDropRatio = 1.2f;

// Tokens per chunk of the fused linear-cross-entropy for a vocabulary of V: as many bf16 logits
// rows (padded to a multiple of 8) as fit in chunk_bytes, rounded down to a multiple of 128 tokens
// when at least 128, and at least 1.
constexpr int64_t fused_cross_entropy_chunk_tokens(size_t chunk_bytes, int64_t V) {
  const int64_t Vp = (V + 7) / 8 * 8;
  int64_t C = static_cast<int64_t>(chunk_bytes / (2 * static_cast<size_t>(Vp < 8 ? 8 : Vp)));
  if (C >= 128) C = C / 128 * 128;
  return C < 1 ? 1 : C;
}

// Rows of bf16 logits (each padded to a multiple of 8) the fused linear-cross-entropy holds for T
// tokens: one chunk's, or, with the weight gradient's product taken over `weight_grad_chunks`
// chunks' dlogits at once (Ops::linear_cross_entropy), that many chunks'.
constexpr int64_t fused_cross_entropy_logits_rows(size_t chunk_bytes, int64_t V, int64_t T,
                                                  int64_t weight_grad_chunks) {
  const int64_t rows =
      fused_cross_entropy_chunk_tokens(chunk_bytes, V) * (weight_grad_chunks < 1 ? 1 : weight_grad_chunks);
  return T < rows ? T : rows;
}

// The logits chunks whose dlogits one weight-gradient product of the head takes where the plan
// has the room (Plan::head_weight_grad_chunks). At one 2,048-token chunk of a 128k vocabulary the
// product accumulates into the whole V x H gradient (1 GB in fp32) per chunk and runs at 624
// TFLOP/s on an H100 against the logits product's 745; over 8,192 tokens at 707 (thirty-seventh
// session, ferry_kernel_bench --kernel head_gemms).
inline constexpr int64_t kHeadWeightGradChunks = 4;

// Flash attention's backward workspace: delta (fp32, tokens x query heads, rounded up to 256
// bytes, first), then on the tensor-core path (head_dim 64 or 128) dq accumulated in fp32.
constexpr size_t flash_attention_delta_bytes(int64_t tokens, int q_heads) {
  return (sizeof(float) * static_cast<size_t>(tokens) * static_cast<size_t>(q_heads) + 255) / 256 * 256;
}
constexpr bool flash_attention_tensor_core_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}
constexpr size_t flash_attention_backward_workspace_bytes(int64_t tokens, int q_heads, int head_dim) {
  size_t bytes = flash_attention_delta_bytes(tokens, q_heads);
  if (flash_attention_tensor_core_head_dim(head_dim))
    bytes += sizeof(float) * static_cast<size_t>(tokens) * static_cast<size_t>(q_heads) *
             static_cast<size_t>(head_dim);
  return bytes;
}

// Attention's working memory, the forward's and the backward's in turn: the larger of the flash
// backward's and what cuDNN's fused attention (ops/cuda/cudnn_attention.h) needs when it runs
// instead. cuDNN's backward (9.14, H200) takes its fp32 dq accumulator and rowsum(dout * out) as
// the graph's own tensors, and GQA's dk and dv of every query head (bf16, together the size of
// the accumulator: T x Hq x D x 4 bytes) either in its plan's workspace (rows; measured:
// T x Hq x D x 4 + 256 bytes) or, for packed documents, as own tensors of T rows too. With its
// statistics in its own layout (fp32, T x Hq) that is two fp32 dq, two deltas, and
// kCudnnAttentionPlanBytes kept for the rest: the plan's own needs and, for packed documents,
// statistics padded to every entry's most tokens. A plan that needs more than this is not used.
inline constexpr size_t kCudnnAttentionPlanBytes = size_t{32} << 20;
constexpr size_t attention_workspace_bytes(int64_t tokens, int q_heads, int head_dim) {
  const size_t dq = sizeof(float) * static_cast<size_t>(tokens) * static_cast<size_t>(q_heads) *
                    static_cast<size_t>(head_dim);
  const size_t cudnn = 2 * dq + 2 * flash_attention_delta_bytes(tokens, q_heads) + kCudnnAttentionPlanBytes;
  const size_t flash = flash_attention_backward_workspace_bytes(tokens, q_heads, head_dim);
  return cudnn > flash ? cudnn : flash;
}

}  // namespace ferry
