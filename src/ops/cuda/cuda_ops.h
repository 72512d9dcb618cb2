// The CUDA backend of the Ops interface (conventions in ops/ops.h): bf16 activations and weights,
// fp32 accumulation and statistics, every op asynchronous on one stream, no host sync anywhere.
//
// Plain C++: the kernels live in the .cu files beside it (one per op family, the stems of ops/cpu),
// and the CUDA types stay behind an opaque State.
//
// Working memory. Besides the tensors it is given, a CudaOps owns
//   * one cuBLASLt workspace (options.gemm_workspace_bytes, 32 MiB by default), made at construction;
//   * grow-only scratch buffers, allocated the first time an op needs them and kept after: the
//     fused linear-cross-entropy's logits chunk (at most options.flce_chunk_bytes + one row, 512 MiB
//     by default), its per-token losses (4 bytes per token), the embedding backward's sort buffers
//     (about 16 bytes per token plus CUB's temporary storage), the fp32 partial sums of the column
//     reductions (rmsnorm dweight, linear dbias: at most 1024 x D floats), attention's workspace
//     (attention_workspace_bytes: flash attention's fp32 delta and dq accumulator, or cuDNN's), and
//     the bf16 sum of a weight gradient and its product before it is copied back into a bf16
//     gradient (the largest weight).
//   Both come from options.allocator when given (a Device's: its budget and peak count them), else
//   from cudaMallocAsync on the stream. workspace_bytes() reports the total held now;
//   cuda_ops_workspace_bytes (planner/memory_model.h) predicts its steady size for the planner.
//   Nothing is allocated per step once the shapes repeat.
//
// Determinism: every op gives the same bits run to run (cuBLASLt for a given GPU and library
// version; reductions in a fixed order; the embedding backward sorts the ids with a stable radix
// sort and sums each table row's tokens in token order -- with an F32 table, the CPU reference's
// additions exactly), except attention_backward's dq (flash_attention.h).
//
// One host thread issues the ops of a CudaOps (its plan cache and scratch are not locked).
//
// Invalid data (a token id outside the vocabulary, a target outside it that is not -100) cannot be
// reported without a host sync; the op poisons its output instead (a NaN embedding row, a NaN loss)
// and sets a flag on the device that device_error() reads later.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ops/cuda_ops_sizes.h"
#include "ops/ops.h"

namespace ferry {

// false when the environment sets FERRY_GEMM_TUNING=0.
bool gemm_tuning_default();
// FERRY_GEMM_CANDIDATES from the environment (1-64), else kGemmTuneAlgos. Settings other than
// the default show in kernels(), so a profile measured with others is measured again.
int gemm_candidates_default();

struct CudaOpsOptions {
  size_t gemm_workspace_bytes = kCudaGemmWorkspaceBytes;
  // Times the first calls of each GEMM problem on cuBLASLt's candidate algorithms and keeps the
  // fastest (cuda_gemm.cuh); off: the heuristic's first choice, always. The environment variable
  // FERRY_GEMM_TUNING=0 turns it off for every CudaOps made with the default.
  bool gemm_tuning = gemm_tuning_default();
  // How many of cuBLASLt's candidates tuning times per problem (the heuristic's first ones); the
  // environment variable FERRY_GEMM_CANDIDATES sets it for every CudaOps made with the default.
  int gemm_candidates = gemm_candidates_default();
  // Attention of rows that are plain causal sequences (AttentionMask::row_tokens), or of causal
  // segments (AttentionMask::segment_bounds: packed documents), runs on cuDNN's fused attention
  // where cuDNN is installed (ops/cuda/cudnn_attention.h); off, or without cuDNN
  // (or with FERRY_CUDNN=0 in the environment): ferry's own flash attention, always.
  bool cudnn_attention = true;
  // Logits of the fused linear-cross-entropy are made this many bytes (bf16) at a time: the token
  // chunk is flce_chunk_bytes / (2 * V) rounded down to a multiple of 128 tokens when larger (at
  // least 1 token).
  size_t flce_chunk_bytes = kCudaFlceChunkBytes;
  // Where the workspace and the scratch buffers come from (empty: cudaMallocAsync on the stream).
  WorkspaceAllocator allocator;
};

class CudaOps final : public Ops {
 public:
  // `stream` is the cudaStream_t every op is issued to (nullptr: the legacy default stream). The
  // stream must outlive this object; the current CUDA device must be the stream's.
  explicit CudaOps(void* stream, const CudaOpsOptions& options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  std::string kernels() const override;
  int calls_to_steady_speed() const override {
    return options_.gemm_tuning ? options_.gemm_candidates * kGemmTuneSamples + 1 : 1;
  }
  int64_t tuning_calls() const override;
  // "<GPU name>, sm_XY, N SMs, cuBLASLt V, W MiB workspace, tuned among C" of the device current
  // at construction (the stream's); empty without tuning.
  std::string gemm_choice_scope() const override;
  std::vector<GemmChoice> gemm_choices() const override;
  void adopt_gemm_choices(const std::vector<GemmChoice>& choices) override;
  bool has_library_attention() const override;
  void use_library_attention(bool forward, bool backward) override;

  void embedding_forward(const int32_t* ids, Tensor table, Tensor out) override;
  void embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) override;

  void rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) override;
  void rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual, Tensor dx,
                        Tensor dweight) override;

  void rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) override;

  void attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                         Tensor lse) override;
  void attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                          Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) override;

  void attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) override;

  void swiglu_forward(Tensor gate, Tensor up, Tensor out) override;
  void swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) override;

  void linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) override;
  void linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                       bool accumulate_dx) override;

  void linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                            Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) override;

  void add(Tensor a, Tensor b, Tensor out) override;
  void zero(Tensor x) override;
  void copy(Tensor src, Tensor dst) override;

  // The stream the ops are issued to (a cudaStream_t).
  void* stream() const;
  // Bytes of working memory held now (cuBLASLt workspace + scratch buffers).
  size_t workspace_bytes() const;
  // Tokens per chunk of the fused linear-cross-entropy for a vocabulary of V.
  int64_t flce_chunk_tokens(int64_t V) const;
  // Synchronizes the stream and returns a description of the invalid data seen by earlier ops
  // ("" when none), clearing the flag. For tests and checkpoints, never called by the ops.
  std::string device_error();

  struct State;  // CUDA-side members (cuda_ops.cu)

 private:
  CudaOpsOptions options_;
  std::unique_ptr<State> state_;
  std::string gemm_choice_scope_;
};

}  // namespace ferry
