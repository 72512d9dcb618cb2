// The cuDNN graphs of causal attention over a batch of whole sequences (cudnn_attention.h): the
// forward (out and its statistics) and the backward (dq, dk, dv), as the fused flash attention
// engines recognise them, on ferry's own layouts:
//   q, dq             bf16 (batch, seq, Hq, D)   -> cuDNN [b, h, s, d] with strides {s Hq D, D, Hq D, 1}
//   out, dout         bf16 rows of Ho >= Hq heads, the first Hq used (a group of heads' columns of a
//                     wider output, ops.h): strides {s Ho D, D, Ho D, 1}
//   k, v, dk, dv      bf16 (batch, seq, Hkv, D)  -> likewise with Hkv
//   stats             fp32 [b, Hq, s, 1] packed: the only layout cuDNN 9.x takes, so a batch of
//                     more than one row goes through a copy to and from ferry's lse (Hq, b * s)
//
// A ragged batch (AttentionShape::ragged: the segments of AttentionMask::segment_bounds) is the
// same tensors with a ragged offset each (cuDNN's THD layout): entry i of the batch starts at token
// offset[i] of the packed (T, heads, D) rows and has seq_len[i] <= s tokens; a padding mask keeps
// each query to its entry's keys, and the products stop at each entry's length. The statistics
// are packed per entry ([b, Hq, s], copied to and from ferry's lse), the backward's fp32 dq is
// ragged like dq (T rows, not b * s), and so are GQA's dk and dv of every query head before they
// are summed over each group.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/cuda/cudnn_backend.h"

namespace ferry::cudnn {

struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  int out_heads = 0;    // heads per row of out and dout (Ho >= q_heads)
  bool ragged = false;  // entries of up to `seq` tokens at offsets (the header comment)
  int64_t tokens = 0;   // ragged: the T tokens the entries lie in
};

// The per-entry tables of a ragged batch, in device memory: seq_len int32 [b], and the element
// offsets (int64 [b + 1]) of each entry's first token in q (and dq), k and v (and dk, dv), out
// (and dout).
struct RaggedTables {
  int32_t* seq_len = nullptr;
  int64_t *q_offset = nullptr, *kv_offset = nullptr, *o_offset = nullptr;
};

// Device addresses of the tensors of one call (the backward's own fields null in the forward).
struct AttentionTensors {
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float* stats = nullptr;
  float scale = 1.0f;
  void *dout = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  RaggedTables ragged;
};

// Bytes rounded up to the 256-byte boundary at which each region of a workspace starts.
inline int64_t round_up_256(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// A plan and the unique ids of the tensors its variant pack needs. The workspace of a call holds
// the plan's first (plan.workspace_bytes, rounded up to 256), then the graph's own tensors
// (own_bytes): the backward's fp32 dq and rowsum(dout * out), and a ragged GQA backward's
// full-head dk and dv. The own tensors come last so that a write past them leaves the workspace.
struct AttentionGraph {
  Plan plan;
  std::vector<int64_t> uids;
  int64_t own_bytes = 0;
  // Where each own tensor starts, from the first of them (dq's fp32 accumulator at 0).
  int64_t softmax_sum_offset = 0, dk_full_offset = 0, dv_full_offset = 0;
  int64_t own_offset() const { return round_up_256(plan.workspace_bytes); }
  int64_t workspace_bytes() const { return own_offset() + own_bytes; }
};

// Bytes of the statistics in cuDNN's layout (fp32 [b, Hq, s]), rounded up to 256.
int64_t attention_statistics_bytes(const AttentionShape& shape);

// Throw Failure when cuDNN has no engine for the graph.
AttentionGraph build_attention_forward(const Library& lib, cudnnHandle_t handle, const AttentionShape& shape);
AttentionGraph build_attention_backward(const Library& lib, cudnnHandle_t handle,
                                        const AttentionShape& shape);

// Enqueues `graph` on the handle's stream with the tensors of `t`.
void run_attention(const Library& lib, cudnnHandle_t handle, const AttentionGraph& graph,
                   const AttentionTensors& t, void* workspace);

}  // namespace ferry::cudnn
