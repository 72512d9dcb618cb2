// Forward and backward of one decoder layer (pre-norm attention + SwiGLU MLP), written with Ops.
//
//   h  = rmsnorm(x)                    x1 = x + o_proj(attention(rope(q), rope(k), v))
//   q, k, v = proj(h) [+ q/k norm]     x' = x1 + down(silu(gate(h2)) * up(h2)),  h2 = rmsnorm(x1)
//
// Training keeps each layer's input (the boundary activation). The backward pass recomputes the
// layer's forward from it into the scratch, then runs the backward -- or, where the forward's
// intermediates were kept (carve_kept_internals: every GEMM's and the attention's output), runs
// again only the three passes that are cheap to run and dear to keep: the two norms' outputs and
// the MLP's activation. They are memory-bound passes over 2H + F values per token, which keeping
// would add to the H + 2(Hq + Hkv)D + 2F kept (Llama-3.2-3B: a third more memory per kept layer,
// to save a few percent of the recompute). Parameter gradients are accumulated (+=) into the
// layer's gradient views.
//
// Sequence tiles (issue 22, long context): everything but attention is token-local, so it runs
// over tiles of `tile_tokens` tokens in turn, and no (T, F)-sized intermediate exists -- at 32K
// tokens of an 8B model one (T,F) bf16 tensor is 0.9 GiB, and the layer has six. Attention runs
// once over the chunk's full-length q, k, v (flash attention is O(T) in memory). A forward is
//   A: per tile  h = rmsnorm(x), q k v = proj(h) [+ q/k norm], RoPE   -> rows of full q, k, v
//   B: attention over the whole chunk                                  -> full attn, lse
//   C: per tile  x1 = x + o_proj(attn), MLP, x' = x1 + down(...)
// and the backward recomputes A and B, runs C and the MLP's and o_proj's backward per tile (d_x1
// lands in dx_in's rows, read again in E), the attention backward once (D), then per tile (E) the
// q/k/v projections' and the input norm's backward, recomputing h (and q/k before their norms)
// from x when there is more than one tile. Every parameter's gradient receives its tiles in token
// order, and the CPU backend sums a gradient token after token onto its value
// (ops/cpu/ordered_gemm.h), so on the CPU any tiling gives the bits of the untiled layer.
#pragma once

#include <vector>

#include "core/arena.h"
#include "model/model_config.h"
#include "model/token_chunk.h"
#include "model/unit_params.h"
#include "ops/ops.h"

namespace ferry {

// Activations of one layer for T tokens: forward intermediates, then backward temporaries. q, k,
// v, attn, lse, d_attn, dq, dk, dv are full-length (T rows); the others are one sequence tile's
// (tile_tokens rows), or T rows when untiled.
struct LayerScratch {
  int64_t tile_tokens = 0;  // rows of the token-local tensors; 0: as many as the chunk has
  Tensor h, rstd1;          // (T,H), (T)
  Tensor q_pre, rstd_q;     // (T,Hq*D), (T*Hq): q before q_norm (qk_norm models only)
  Tensor k_pre, rstd_k;     // (T,Hkv*D), (T*Hkv)
  Tensor q, k, v;           // (T,Hq*D), (T,Hkv*D), (T,Hkv*D): after norm and RoPE
  Tensor attn, lse;         // (T,Hq*D), (Hq,T)
  Tensor x1, h2, rstd2;     // (T,H), (T,H), (T)
  Tensor gate, up, act;     // (T,F) each
  // backward only
  Tensor d_act, d_gate, d_up;  // (T,F)
  Tensor d_h2, d_h;            // (T,H)
  Tensor d_attn, dq, dk, dv;   // (T,Hq*D), (T,Hq*D), (T,Hkv*D), (T,Hkv*D)
  Tensor dq_pre, dk_pre;       // (T,Hq*D), (T,Hkv*D) (qk_norm models only)
};

// Carves the scratch for chunks of up to `tokens` tokens from `arena` (a measuring arena gives its
// size), the token-local tensors for tiles of `tile_tokens` (0 or >= tokens: untiled).
LayerScratch carve_layer_scratch(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                                 bool with_backward, int64_t tile_tokens = 0);
// Carves what a layer keeps from its forward to skip the backward's recompute: the outputs of the
// GEMMs and the attention (q_pre, k_pre and their norms' rstd for qk_norm models; q, k, v, attn,
// lse, x1, gate, up). The other fields stay empty.
LayerScratch carve_kept_internals(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype);
// `work` (a full scratch, with_backward) with the fields of `kept` (carve_kept_internals) in place
// of its own: the scratch a forward that keeps its internals, and the backward that reads them,
// run in. The norms' outputs, the activation and the backward temporaries stay `work`'s. Kept
// internals are whole chunks, so `work` must be untiled.
LayerScratch with_kept_internals(const LayerScratch& kept, const LayerScratch& work);

// What layer_backward computes again before the backward proper.
enum class Recompute {
  Forward,          // the whole forward from x_in (s holds nothing of it)
  NormsActivation,  // h, h2 and act, from x_in and the kept x1, gate, up (with_kept_internals)
};

struct LayerContext {
  const ModelConfig* config = nullptr;
  const float* inv_freq = nullptr;  // (D/2) RoPE inverse frequencies, in host memory of the ops
};

// x_out (T,H) = layer(x_in (T,H)), T = chunk.tokens (at most what s was carved for).
void layer_forward(Ops& ops, const LayerContext& ctx, const LayerParams& params, const TokenChunk& chunk,
                   Tensor x_in, Tensor x_out, LayerScratch& s);

// Recomputes what `recompute` says into s, then: dx_in (T,H) = d layer / d x_in applied to
// dx_out, and grads += d/d params. dx_in may alias dx_out. Both recomputes give the bits the
// forward gave (the same kernels on the same inputs). Besides the recompute, the backward writes
// only s's backward temporaries and dx_in, which holds d/d x1 between the MLP's backward and the
// attention's.
void layer_backward(Ops& ops, const LayerContext& ctx, const LayerParams& params, const LayerParams& grads,
                    const TokenChunk& chunk, Tensor x_in, Tensor dx_out, Tensor dx_in, LayerScratch& s,
                    Recompute recompute = Recompute::Forward);

}  // namespace ferry
