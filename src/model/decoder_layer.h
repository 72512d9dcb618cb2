// Forward and backward of one decoder layer (pre-norm attention + SwiGLU MLP), written with Ops.
//
//   h  = rmsnorm(x)                    x1 = x + o_proj(attention(rope(q), rope(k), v))
//   q, k, v = proj(h) [+ q/k norm]     x' = x1 + down(silu(gate(h2)) * up(h2)),  h2 = rmsnorm(x1)
//
// Training keeps each layer's input (the boundary activation). The backward pass recomputes the
// layer's forward from it into the scratch, then runs the backward -- or, where the forward's
// intermediates were kept (the forward ran into a scratch of their own), skips the recompute.
// Parameter gradients are accumulated (+=) into the layer's gradient views.
#pragma once

#include <vector>

#include "core/arena.h"
#include "io/model_config.h"
#include "model/token_chunk.h"
#include "model/unit_params.h"
#include "ops/ops.h"

namespace ferry {

// Activations of one layer for T tokens: forward intermediates, then backward temporaries.
struct LayerScratch {
  Tensor h, rstd1;             // (T,H), (T)
  Tensor q_pre, rstd_q;        // (T,Hq*D), (T*Hq): q before q_norm (qk_norm models only)
  Tensor k_pre, rstd_k;        // (T,Hkv*D), (T*Hkv)
  Tensor q, k, v;              // (T,Hq*D), (T,Hkv*D), (T,Hkv*D): after norm and RoPE
  Tensor attn, lse;            // (T,Hq*D), (Hq,T)
  Tensor x1, h2, rstd2;        // (T,H), (T,H), (T)
  Tensor gate, up, act;        // (T,F) each
  // backward only
  Tensor d_act, d_gate, d_up;  // (T,F)
  Tensor d_h2, d_x1, d_h;      // (T,H)
  Tensor d_attn, dq, dk, dv;   // (T,Hq*D), (T,Hq*D), (T,Hkv*D), (T,Hkv*D)
  Tensor dq_pre, dk_pre;       // (T,Hq*D), (T,Hkv*D) (qk_norm models only)
};

// Carves the scratch for `tokens` tokens from `arena` (a measuring arena gives its size).
LayerScratch carve_layer_scratch(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                                 bool with_backward);
// The forward intermediates of `forward` with the backward temporaries of `backward`: the scratch
// a backward without recompute runs in.
LayerScratch with_forward_of(const LayerScratch& forward, const LayerScratch& backward);

struct LayerContext {
  const ModelConfig* config = nullptr;
  const float* inv_freq = nullptr;  // (D/2) RoPE inverse frequencies, in host memory of the ops
};

// x_out (T,H) = layer(x_in (T,H)).
void layer_forward(Ops& ops, const LayerContext& ctx, const LayerParams& params, const TokenChunk& chunk,
                   Tensor x_in, Tensor x_out, LayerScratch& s);

// Recomputes the forward from x_in into s (unless `recompute` is false: s then holds what
// layer_forward of x_in wrote), then: dx_in (T,H) = d layer / d x_in applied to dx_out, and
// grads += d/d params. dx_in may alias dx_out. The backward writes only s's backward temporaries.
void layer_backward(Ops& ops, const LayerContext& ctx, const LayerParams& params, const LayerParams& grads,
                    const TokenChunk& chunk, Tensor x_in, Tensor dx_out, Tensor dx_in, LayerScratch& s,
                    bool recompute = true);

}  // namespace ferry
