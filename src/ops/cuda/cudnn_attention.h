// Causal attention of whole sequences through cuDNN's fused flash attention, where cuDNN is
// installed (cudnn_library.h; a build without cuDNN's headers compiles no_cudnn/ instead, whose
// make() gives nullptr): the same semantics and tensors as flash_attention.h, restricted to
// the case AttentionMask::row_tokens vouches for (ops/ops.h): the T tokens are rows of R tokens,
// each row one causal sequence. q k v out are then the BSHD tensors (T / R, R, heads, D) cuDNN
// takes as they are, and lse (Hq, T) is its statistics tensor (natural log-sum-exp of the scaled,
// masked scores of each query), read through strides.
//
// Packed rows of several documents (AttentionMask::segment_bounds: causal segments of varied
// lengths) run as a ragged batch instead: one entry per segment, the batch rounded up to a power of
// two (entries past the segments are empty) and the entries' most tokens to a power of two of at
// least 128, so that a run builds few graphs however its documents fall.
//
// The graphs are built once per shape (batch, R, heads, head_dim) with cuDNN's heuristics and
// kept. A shape cuDNN refuses, or whose plan needs more workspace than the caller has, is
// remembered and answered `false` at once from then on, and so is a shape whose execution ever
// fails; the caller runs its own kernels, so the results never depend on cuDNN being there, only
// the speed. The first refusal of each shape is logged with cuDNN's reason.
//
// Numerics: fp32 softmax and accumulation like the own kernels, but cuDNN's order of summation;
// dq accumulates in fp32 with atomics (not bitwise repeatable, as the own kernel's dq). Forward
// and backward may come from different implementations (lse means the same in both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "ops/cuda/flash_attention.h"

namespace ferry {

namespace cudnn {
struct AttentionShape;
struct AttentionGraph;
struct AttentionTensors;
struct RaggedTables;
}  // namespace cudnn

// The segments of a call (ops.h: AttentionMask::segment_bounds, segments, longest_segment).
struct AttentionSegments {
  const int32_t* bounds = nullptr;  // device: count + 1 token indices, the first 0, the last T
  int64_t count = 0;
  int64_t longest = 0;
};

class CudnnAttention {
 public:
  // nullptr when cuDNN is not available (unavailable_reason() says why). `stream` is the
  // cudaStream_t the graphs run on.
  static std::unique_ptr<CudnnAttention> make(void* stream);
  // Why make() gives nullptr: cuDNN not installed, too old, turned off, or ferry built without its
  // headers ("" when it is available).
  static std::string unavailable_reason();
  // The loaded library's version (e.g. 91400), 0 when unavailable.
  static size_t library_version();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Enqueue on the stream and return true, or return false having done nothing (row_tokens 0 or
  // not dividing T, a shape cuDNN refuses or failed to run, workspace_bytes too small, a tensor
  // not 16-byte aligned).
  bool forward(const FlashAttentionParams& p, int64_t row_tokens, void* workspace, size_t workspace_bytes);
  bool backward(const FlashAttentionBackwardParams& p, int64_t row_tokens);
  // The same for tokens that fall into segments (a ragged batch), false also when there are none or
  // more than cuDNN's batch takes.
  bool forward(const FlashAttentionParams& p, const AttentionSegments& segments, void* workspace,
               size_t workspace_bytes);
  bool backward(const FlashAttentionBackwardParams& p, const AttentionSegments& segments);
  // The workspace the backward over `segments` needs, 0 when cuDNN refuses the shape.
  size_t backward_workspace_bytes(const FlashAttentionParams& p, const AttentionSegments& segments);

  // Why the last call returned false ("" after a success).
  const std::string& last_refusal() const { return refusal_; }

  struct Graphs;

 private:
  explicit CudnnAttention(void* stream);
  // The plans of a shape, built on first use; nullptr when cuDNN refused it.
  Graphs* graphs(const FlashAttentionParams& p, int64_t row_tokens);
  Graphs* graphs(const FlashAttentionParams& p, const AttentionSegments& segments);
  // The plans of `shape`, built on its first call; nullptr when cuDNN refused it.
  Graphs* built(const cudnn::AttentionShape& shape);
  // Whether g (nullptr: refused, the refusal already said why) can run its backward (else its
  // forward) in `given` bytes of workspace with `tensors`, each 16-byte aligned as the graphs
  // declare them. When not, the refusal says why (a short workspace logged once per shape).
  bool can_run(Graphs* g, bool backward, size_t given, std::initializer_list<const void*> tensors);
  // Fills a ragged batch's tables at the start of the workspace `base` (on the stream).
  cudnn::RaggedTables ragged_tables(const Graphs& g, const FlashAttentionParams& p,
                                    const AttentionSegments& segments, char* base);
  // Runs one of g's graphs; false (logged, and the shape given up) when cuDNN fails to.
  bool execute(Graphs& g, const cudnn::AttentionGraph& graph, const cudnn::AttentionTensors& t,
               void* workspace);

  void* stream_;
  void* handle_ = nullptr;  // cudnnHandle_t
  // batch, row_tokens (ragged: the entries' most tokens), Hq, Hkv, D, Ho, ragged: the tokens (else 0)
  using Key = std::tuple<int64_t, int64_t, int, int, int, int, int64_t>;
  std::map<Key, std::unique_ptr<Graphs>> built_;
  std::string refusal_;
};

}  // namespace ferry
