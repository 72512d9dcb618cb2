#include "model/decoder_layer.h"

#include <cmath>

namespace ferry {

LayerScratch carve_kept_internals(Arena& a, const ModelConfig& c, int64_t T, DType dt) {
  const int64_t H = c.hidden_size, F = c.intermediate_size, QD = c.q_dim(), KD = c.kv_dim();
  LayerScratch s;
  if (c.qk_norm) {
    s.q_pre = a.take(dt, {T, QD});
    s.rstd_q = a.take(DType::F32, {T * c.num_heads});
    s.k_pre = a.take(dt, {T, KD});
    s.rstd_k = a.take(DType::F32, {T * c.num_kv_heads});
  }
  s.q = a.take(dt, {T, QD});
  s.k = a.take(dt, {T, KD});
  s.v = a.take(dt, {T, KD});
  s.attn = a.take(dt, {T, QD});
  s.lse = a.take(DType::F32, {c.num_heads, T});
  s.x1 = a.take(dt, {T, H});
  s.gate = a.take(dt, {T, F});
  s.up = a.take(dt, {T, F});
  return s;
}

LayerScratch carve_layer_scratch(Arena& a, const ModelConfig& c, int64_t T, DType dt, bool with_backward) {
  const int64_t H = c.hidden_size, F = c.intermediate_size, QD = c.q_dim(), KD = c.kv_dim();
  LayerScratch s = carve_kept_internals(a, c, T, dt);
  s.h = a.take(dt, {T, H});
  s.rstd1 = a.take(DType::F32, {T});
  s.h2 = a.take(dt, {T, H});
  s.rstd2 = a.take(DType::F32, {T});
  s.act = a.take(dt, {T, F});
  if (with_backward) {
    s.d_act = a.take(dt, {T, F});
    s.d_gate = a.take(dt, {T, F});
    s.d_up = a.take(dt, {T, F});
    s.d_h2 = a.take(dt, {T, H});
    s.d_x1 = a.take(dt, {T, H});
    s.d_h = a.take(dt, {T, H});
    s.d_attn = a.take(dt, {T, QD});
    s.dq = a.take(dt, {T, QD});
    s.dk = a.take(dt, {T, KD});
    s.dv = a.take(dt, {T, KD});
    if (c.qk_norm) {
      s.dq_pre = a.take(dt, {T, QD});
      s.dk_pre = a.take(dt, {T, KD});
    }
  }
  return s;
}

namespace {

struct Dims {
  int64_t T, H, F, Hq, Hkv, D;
};

Dims dims_of(const ModelConfig& c, int64_t T) {
  return {T, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim};
}

Tensor shaped(Tensor t, std::initializer_list<int64_t> dims) {
  Tensor r(t.data, t.dtype, dims);
  return r;
}

// The forward's three passes that a backward from kept internals runs again (Recompute::
// NormsActivation): one function each, so that both runs are the same calls and give the same bits.
void input_norm(Ops& ops, const ModelConfig& c, const LayerParams& p, const Dims& d, Tensor x_in,
                LayerScratch& s) {
  ops.rmsnorm_forward(x_in, p.input_norm, static_cast<float>(c.rms_norm_eps), shaped(s.h, {d.T, d.H}),
                      shaped(s.rstd1, {d.T}));
}
void post_attention_norm(Ops& ops, const ModelConfig& c, const LayerParams& p, const Dims& d,
                         LayerScratch& s) {
  ops.rmsnorm_forward(shaped(s.x1, {d.T, d.H}), p.post_norm, static_cast<float>(c.rms_norm_eps),
                      shaped(s.h2, {d.T, d.H}), shaped(s.rstd2, {d.T}));
}
void mlp_activation(Ops& ops, const Dims& d, LayerScratch& s) {
  ops.swiglu_forward(shaped(s.gate, {d.T, d.F}), shaped(s.up, {d.T, d.F}), shaped(s.act, {d.T, d.F}));
}

// Forward intermediates for T tokens, stored in s; returns nothing but fills s.x1 .. s.act.
void forward_into_scratch(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                          Tensor x_in, LayerScratch& s) {
  const ModelConfig& c = *ctx.config;
  const Dims d = dims_of(c, chunk.tokens);
  const float eps = static_cast<float>(c.rms_norm_eps);
  input_norm(ops, c, p, d, x_in, s);
  Tensor h = shaped(s.h, {d.T, d.H});

  Tensor q = shaped(s.q, {d.T, d.Hq * d.D});
  Tensor k = shaped(s.k, {d.T, d.Hkv * d.D});
  Tensor v = shaped(s.v, {d.T, d.Hkv * d.D});
  if (c.qk_norm) {
    Tensor q_pre = shaped(s.q_pre, {d.T, d.Hq * d.D});
    Tensor k_pre = shaped(s.k_pre, {d.T, d.Hkv * d.D});
    ops.linear_forward(h, p.q_proj, p.q_bias, Tensor(), q_pre);
    ops.linear_forward(h, p.k_proj, p.k_bias, Tensor(), k_pre);
    ops.rmsnorm_forward(q_pre.view({d.T * d.Hq, d.D}), p.q_norm, eps, q.view({d.T * d.Hq, d.D}),
                        shaped(s.rstd_q, {d.T * d.Hq}));
    ops.rmsnorm_forward(k_pre.view({d.T * d.Hkv, d.D}), p.k_norm, eps, k.view({d.T * d.Hkv, d.D}),
                        shaped(s.rstd_k, {d.T * d.Hkv}));
  } else {
    ops.linear_forward(h, p.q_proj, p.q_bias, Tensor(), q);
    ops.linear_forward(h, p.k_proj, p.k_bias, Tensor(), k);
  }
  ops.linear_forward(h, p.v_proj, p.v_bias, Tensor(), v);
  ops.rope(q.view({d.T, d.Hq, d.D}), chunk.positions, ctx.inv_freq, false);
  ops.rope(k.view({d.T, d.Hkv, d.D}), chunk.positions, ctx.inv_freq, false);

  const float scale = attention_scale(*ctx.config);  // 1/sqrt(head_dim), with YaRN's temperature
  Tensor attn = shaped(s.attn, {d.T, d.Hq, d.D});
  ops.attention_forward(q.view({d.T, d.Hq, d.D}), k.view({d.T, d.Hkv, d.D}), v.view({d.T, d.Hkv, d.D}),
                        AttentionMask(chunk.doc_start, chunk.row_tokens), scale, attn,
                        shaped(s.lse, {d.Hq, d.T}));
  Tensor x1 = shaped(s.x1, {d.T, d.H});
  ops.linear_forward(attn.view({d.T, d.Hq * d.D}), p.o_proj, p.o_bias, x_in, x1);

  post_attention_norm(ops, c, p, d, s);
  Tensor h2 = shaped(s.h2, {d.T, d.H});
  ops.linear_forward(h2, p.gate_proj, p.gate_bias, Tensor(), shaped(s.gate, {d.T, d.F}));
  ops.linear_forward(h2, p.up_proj, p.up_bias, Tensor(), shaped(s.up, {d.T, d.F}));
  mlp_activation(ops, d, s);
}

}  // namespace

void layer_forward(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                   Tensor x_in, Tensor x_out, LayerScratch& s) {
  const Dims d = dims_of(*ctx.config, chunk.tokens);
  forward_into_scratch(ops, ctx, p, chunk, x_in, s);
  ops.linear_forward(shaped(s.act, {d.T, d.F}), p.down_proj, p.down_bias, shaped(s.x1, {d.T, d.H}), x_out);
}

LayerScratch with_kept_internals(const LayerScratch& kept, const LayerScratch& work) {
  LayerScratch s = work;
  s.q_pre = kept.q_pre;
  s.rstd_q = kept.rstd_q;
  s.k_pre = kept.k_pre;
  s.rstd_k = kept.rstd_k;
  s.q = kept.q;
  s.k = kept.k;
  s.v = kept.v;
  s.attn = kept.attn;
  s.lse = kept.lse;
  s.x1 = kept.x1;
  s.gate = kept.gate;
  s.up = kept.up;
  return s;
}

void layer_backward(Ops& ops, const LayerContext& ctx, const LayerParams& p, const LayerParams& g,
                    const TokenChunk& chunk, Tensor x_in, Tensor dx_out, Tensor dx_in, LayerScratch& s,
                    Recompute recompute) {
  const ModelConfig& c = *ctx.config;
  const Dims d = dims_of(c, chunk.tokens);
  if (recompute == Recompute::Forward) {
    forward_into_scratch(ops, ctx, p, chunk, x_in, s);
  } else {
    input_norm(ops, c, p, d, x_in, s);
    post_attention_norm(ops, c, p, d, s);
    mlp_activation(ops, d, s);
  }

  // MLP: x' = x1 + down(act), act = silu(gate) * up, gate/up = proj(h2), h2 = rmsnorm(x1).
  // Where two gradients meet (gate and up into h2; the residual and the norm into x1) the second
  // op adds its part in its epilogue (ops.h), so no temporary and no add pass.
  Tensor d_act = shaped(s.d_act, {d.T, d.F});
  Tensor d_gate = shaped(s.d_gate, {d.T, d.F});
  Tensor d_up = shaped(s.d_up, {d.T, d.F});
  Tensor d_h2 = shaped(s.d_h2, {d.T, d.H});
  Tensor d_x1 = shaped(s.d_x1, {d.T, d.H});
  Tensor h2 = shaped(s.h2, {d.T, d.H});
  ops.linear_backward(shaped(s.act, {d.T, d.F}), p.down_proj, dx_out, d_act, g.down_proj, g.down_bias, false);
  ops.swiglu_backward(shaped(s.gate, {d.T, d.F}), shaped(s.up, {d.T, d.F}), d_act, d_gate, d_up);
  ops.linear_backward(h2, p.gate_proj, d_gate, d_h2, g.gate_proj, g.gate_bias, false);
  ops.linear_backward(h2, p.up_proj, d_up, d_h2, g.up_proj, g.up_bias, true);
  ops.rmsnorm_backward(shaped(s.x1, {d.T, d.H}), p.post_norm, shaped(s.rstd2, {d.T}), d_h2, dx_out, d_x1,
                       g.post_norm);

  // Attention: x1 = x + o_proj(attn).
  const int64_t QD = d.Hq * d.D, KD = d.Hkv * d.D;
  Tensor d_attn = shaped(s.d_attn, {d.T, QD});
  Tensor dq = shaped(s.dq, {d.T, QD});
  Tensor dk = shaped(s.dk, {d.T, KD});
  Tensor dv = shaped(s.dv, {d.T, KD});
  ops.linear_backward(shaped(s.attn, {d.T, QD}), p.o_proj, d_x1, d_attn, g.o_proj, g.o_bias, false);
  const float scale = attention_scale(*ctx.config);  // 1/sqrt(head_dim), with YaRN's temperature
  ops.attention_backward(shaped(s.q, {d.T, d.Hq, d.D}), shaped(s.k, {d.T, d.Hkv, d.D}),
                         shaped(s.v, {d.T, d.Hkv, d.D}), AttentionMask(chunk.doc_start, chunk.row_tokens),
                         scale, shaped(s.attn, {d.T, d.Hq, d.D}), shaped(s.lse, {d.Hq, d.T}),
                         d_attn.view({d.T, d.Hq, d.D}), dq.view({d.T, d.Hq, d.D}), dk.view({d.T, d.Hkv, d.D}),
                         dv.view({d.T, d.Hkv, d.D}));
  ops.rope(dq.view({d.T, d.Hq, d.D}), chunk.positions, ctx.inv_freq, true);
  ops.rope(dk.view({d.T, d.Hkv, d.D}), chunk.positions, ctx.inv_freq, true);
  if (c.qk_norm) {
    Tensor dq_pre = shaped(s.dq_pre, {d.T, QD});
    Tensor dk_pre = shaped(s.dk_pre, {d.T, KD});
    ops.rmsnorm_backward(shaped(s.q_pre, {d.T * d.Hq, d.D}), p.q_norm, shaped(s.rstd_q, {d.T * d.Hq}),
                         dq.view({d.T * d.Hq, d.D}), Tensor(), dq_pre.view({d.T * d.Hq, d.D}), g.q_norm);
    ops.rmsnorm_backward(shaped(s.k_pre, {d.T * d.Hkv, d.D}), p.k_norm, shaped(s.rstd_k, {d.T * d.Hkv}),
                         dk.view({d.T * d.Hkv, d.D}), Tensor(), dk_pre.view({d.T * d.Hkv, d.D}), g.k_norm);
    dq = dq_pre;
    dk = dk_pre;
  }
  Tensor h = shaped(s.h, {d.T, d.H});
  Tensor d_h = shaped(s.d_h, {d.T, d.H});
  ops.linear_backward(h, p.q_proj, dq, d_h, g.q_proj, g.q_bias, false);
  ops.linear_backward(h, p.k_proj, dk, d_h, g.k_proj, g.k_bias, true);
  ops.linear_backward(h, p.v_proj, dv, d_h, g.v_proj, g.v_bias, true);
  ops.rmsnorm_backward(x_in, p.input_norm, shaped(s.rstd1, {d.T}), d_h, d_x1, dx_in, g.input_norm);
}

}  // namespace ferry
