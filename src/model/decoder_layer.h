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
// to save a few percent of the recompute). The norms' outputs (2H of them) may be kept as well
// where memory is left over (a whole GPU: ~0.7% of a 1B step), the activation never: the SwiGLU
// backward writes it on its way at no extra pass. Parameter gradients are accumulated (+=) into
// the layer's gradient views.
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
//
// Head groups (issue 22, long context): with the tiles, what is left of a layer's scratch is
// attention's, O(T x heads x D): at 256K tokens of an 8B model q and the output are 2 GiB each, k
// and v 0.5, their gradients as much again, and the attention backward's fp32 dq accumulators
// (ops/cuda_ops_sizes.h) 4 GiB each. With `head_groups` G (dividing the KV heads), A and B run for
// one group of G's KV heads and their query heads at a time, and so do D and E in the backward:
// q, k, v, dq, dk, dv (and q/k before their norms) hold one group's heads (1/G of their size, and
// the attention workspace with them), while the attention output and its gradient stay whole (T,
// Hq*D): each group writes (reads) its heads' columns (the wider out/dout of ops.h), so o_proj and
// everything after it run as before. A group's q/k/v are the rows of q_proj/k_proj/v_proj of its
// heads (contiguous), its q/k norms and RoPE are per head. The backward runs the groups last first:
// the last group's q, k, v are still in the scratch from the recompute, the others' projections
// are computed again before their attention backward (G - 1 of G q/k/v projections more).
//
// Bits with G > 1 against G = 1, on the CPU: attention is per KV head, and every output element of
// a product is its own sum (ordered_gemm.h), so the output x', attn, lse, dq/dk/dv and the
// gradients of q_proj, k_proj, v_proj (and biases), o_proj and the MLP are the same bits. Three
// sums are split across groups and differ by rounding (fp32: ~1e-6 relative): d/dh (a sum over
// all heads' columns of q/k/v_proj) reaches dx_in as G partial input-norm backwards, and the
// input norm's and the q/k norms' weight gradients add their rows group after group. On the GPU,
// dx_in (bf16) takes G roundings instead of one.
#pragma once

#include <vector>

#include "core/arena.h"
#include "model/kept_internals.h"
#include "model/model_config.h"
#include "model/token_chunk.h"
#include "model/unit_params.h"
#include "ops/ops.h"

namespace ferry {

// Activations of one layer for T tokens: forward intermediates, then backward temporaries. q, k,
// v, attn, lse, d_attn, dq, dk, dv are full-length (T rows); the others are one sequence tile's
// (tile_tokens rows), or T rows when untiled. Hq, Hkv below are one head group's heads (all of
// them when head_groups is 1), but for attn, lse and d_attn, which hold every head.
struct LayerScratch {
  int64_t tile_tokens = 0;  // rows of the token-local tensors; 0: as many as the chunk has
  int64_t head_groups = 1;  // groups of KV heads attention runs in, one at a time
  Tensor h, rstd1;          // (T,H), (T)
  Tensor q_pre, rstd_q;     // (T,Hq*D), (T*Hq): q before q_norm (qk_norm models only)
  Tensor k_pre, rstd_k;     // (T,Hkv*D), (T*Hkv)
  Tensor q, k, v;           // (T,Hq*D), (T,Hkv*D), (T,Hkv*D): after norm and RoPE
  Tensor attn, lse;         // (T,Hq*D), (Hq,T) of every head
  Tensor x1, h2, rstd2;     // (T,H), (T,H), (T)
  Tensor gate, up, act;     // (T,F) each
  // backward only
  Tensor d_act, d_gate, d_up;  // (T,F)
  Tensor d_h2, d_h;            // (T,H)
  Tensor d_attn, dq, dk, dv;   // (T,Hq*D) of every head, (T,Hq*D), (T,Hkv*D), (T,Hkv*D)
  Tensor dq_pre, dk_pre;       // (T,Hq*D), (T,Hkv*D) (qk_norm models only)
};

// Raises ferry::Error unless `head_groups` splits the model's KV heads evenly.
void check_head_groups(const ModelConfig& config, int64_t head_groups);

// Carves the scratch for chunks of up to `tokens` tokens from `arena` (a measuring arena gives its
// size), the token-local tensors for tiles of `tile_tokens` (0 or >= tokens: untiled), attention's
// q, k, v and gradients for one of `head_groups` groups of heads.
LayerScratch carve_layer_scratch(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                                 bool with_backward, int64_t tile_tokens = 0, int64_t head_groups = 1);
// Carves what a layer keeps from its forward to skip the backward's recompute: the outputs of the
// GEMMs and the attention (q_pre, k_pre and their norms' rstd for qk_norm models; q, k, v, attn,
// lse, x1, gate, up); with KeptInternals::WithNorms the two norms' outputs and statistics too (h,
// rstd1, h2, rstd2: 2H values and two floats a token more, which a whole GPU has room for, and the
// backward then runs neither norm again), and with WithActivation act as well (F values a token:
// the backward runs nothing again). The other fields stay empty.
LayerScratch carve_kept_internals(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                                  KeptInternals kept);
// `work` (a full scratch, with_backward) with the fields of `kept` (carve_kept_internals) in place
// of its own: the scratch a forward that keeps its internals, and the backward that reads them,
// run in. The norms' outputs (unless kept), the activation and the backward temporaries stay
// `work`'s. Kept internals are whole chunks of every head, so `work` must be untiled, of one head
// group.
LayerScratch with_kept_internals(const LayerScratch& kept, const LayerScratch& work);

// What layer_backward computes again before the backward proper.
enum class Recompute {
  Forward,          // the whole forward from x_in (s holds nothing of it)
  NormsActivation,  // h, h2 and act, from x_in and the kept x1, gate, up (with_kept_internals)
  Activation,       // act only, the norms' outputs kept too (KeptInternals::WithNorms)
  Nothing,          // every tensor the backward reads was kept (KeptInternals::WithActivation)
};

// What the backward of a layer that kept `kept` of its forward runs again.
Recompute recompute_after(KeptInternals kept);

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
