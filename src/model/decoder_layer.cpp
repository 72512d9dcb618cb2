#include "model/decoder_layer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace ferry {

void check_head_groups(const ModelConfig& c, int64_t head_groups) {
  FERRY_CHECK(head_groups >= 1 && c.num_kv_heads % head_groups == 0, "head_groups",
              "{} groups of KV heads: the model has {} KV heads, and the groups must split them evenly; "
              "use a divisor of {} (1: all heads at once)",
              head_groups, c.num_kv_heads, c.num_kv_heads);
}

namespace {

// The tensors attention reads or writes: whole chunks (T rows) whatever the tile; q, k, v one
// group's heads (all of them when head_groups is 1), the output and its statistics every head's.
void carve_full_length(Arena& a, const ModelConfig& c, int64_t T, DType dt, int64_t groups, LayerScratch& s) {
  s.q = a.take(dt, {T, c.q_dim() / groups});
  s.k = a.take(dt, {T, c.kv_dim() / groups});
  s.v = a.take(dt, {T, c.kv_dim() / groups});
  s.attn = a.take(dt, {T, c.q_dim()});
  s.lse = a.take(DType::F32, {c.num_heads, T});
}

// What a layer keeps between its forward and its backward of `rows` token-local rows, beside
// attention's: q/k before their norm (qk-norm models, one group's heads) and the MLP's inputs.
void carve_qk_norm_inputs(Arena& a, const ModelConfig& c, int64_t rows, DType dt, int64_t groups,
                          LayerScratch& s) {
  if (!c.qk_norm) return;
  s.q_pre = a.take(dt, {rows, c.q_dim() / groups});
  s.rstd_q = a.take(DType::F32, {rows * c.num_heads / groups});
  s.k_pre = a.take(dt, {rows, c.kv_dim() / groups});
  s.rstd_k = a.take(DType::F32, {rows * c.num_kv_heads / groups});
}

void carve_mlp_inputs(Arena& a, const ModelConfig& c, int64_t rows, DType dt, LayerScratch& s) {
  s.x1 = a.take(dt, {rows, c.hidden_size});
  s.gate = a.take(dt, {rows, c.intermediate_size});
  s.up = a.take(dt, {rows, c.intermediate_size});
}

// The two norms' outputs and statistics.
void carve_norm_outputs(Arena& a, const ModelConfig& c, int64_t rows, DType dt, LayerScratch& s) {
  s.h = a.take(dt, {rows, c.hidden_size});
  s.rstd1 = a.take(DType::F32, {rows});
  s.h2 = a.take(dt, {rows, c.hidden_size});
  s.rstd2 = a.take(DType::F32, {rows});
}

}  // namespace

LayerScratch carve_kept_internals(Arena& a, const ModelConfig& c, int64_t T, DType dt, KeptInternals kept) {
  LayerScratch s;
  s.tile_tokens = T;
  carve_qk_norm_inputs(a, c, T, dt, 1, s);
  carve_full_length(a, c, T, dt, 1, s);
  carve_mlp_inputs(a, c, T, dt, s);
  if (keeps_norm_outputs(kept)) carve_norm_outputs(a, c, T, dt, s);
  if (keeps_activation(kept)) s.act = a.take(dt, {T, c.intermediate_size});
  return s;
}

Recompute recompute_after(KeptInternals kept) {
  switch (kept) {
    case KeptInternals::Products:
      return Recompute::NormsActivation;
    case KeptInternals::WithNorms:
      return Recompute::Activation;
    case KeptInternals::WithActivation:
      return Recompute::Nothing;
  }
  FERRY_ASSERT(false, "unknown KeptInternals");
  return Recompute::NormsActivation;
}

LayerScratch carve_layer_scratch(Arena& a, const ModelConfig& c, int64_t T, DType dt, bool with_backward,
                                 int64_t tile_tokens, int64_t head_groups) {
  check_head_groups(c, head_groups);
  const int64_t H = c.hidden_size, F = c.intermediate_size, QD = c.q_dim();
  const int64_t gQD = QD / head_groups, gKD = c.kv_dim() / head_groups;  // one group's widths
  const int64_t n = tile_tokens > 0 ? std::min(tile_tokens, T) : T;      // rows of the token-local tensors
  LayerScratch s;
  s.tile_tokens = n;
  s.head_groups = head_groups;
  carve_qk_norm_inputs(a, c, n, dt, head_groups, s);
  carve_full_length(a, c, T, dt, head_groups, s);
  carve_mlp_inputs(a, c, n, dt, s);
  carve_norm_outputs(a, c, n, dt, s);
  s.act = a.take(dt, {n, F});
  if (with_backward) {
    s.d_act = a.take(dt, {n, F});
    s.d_gate = a.take(dt, {n, F});
    s.d_up = a.take(dt, {n, F});
    s.d_h2 = a.take(dt, {n, H});
    s.d_h = a.take(dt, {n, H});
    s.d_attn = a.take(dt, {T, QD});
    s.dq = a.take(dt, {T, gQD});
    s.dk = a.take(dt, {T, gKD});
    s.dv = a.take(dt, {T, gKD});
    if (c.qk_norm) {
      s.dq_pre = a.take(dt, {n, gQD});
      s.dk_pre = a.take(dt, {n, gKD});
    }
  }
  return s;
}

LayerScratch with_kept_internals(const LayerScratch& kept, const LayerScratch& work) {
  FERRY_ASSERT(work.head_groups == 1, "kept internals hold every head: a scratch of one head group only");
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
  if (kept.h.data != nullptr) {  // carved WithNorms or WithActivation
    s.h = kept.h;
    s.rstd1 = kept.rstd1;
    s.h2 = kept.h2;
    s.rstd2 = kept.rstd2;
  }
  if (kept.act.data != nullptr) s.act = kept.act;  // carved WithActivation
  return s;
}

namespace {

// One sequence tile: rows [t0, t0 + n) of the chunk.
struct Tile {
  int64_t t0, n;
};

// Rows [r0, r0 + n) of `t` viewed as (rows, width): a tile of a full-length tensor, or (r0 = 0)
// the leading rows of a tile-sized one.
Tensor rows(Tensor t, int64_t r0, int64_t n, int64_t width) {
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(r0 * width) * dtype_size(t.dtype), t.dtype,
                {n, width});
}

// The layer's sizes, and one head group's: gHq query heads, gHkv KV heads, gQD = gHq * D and
// gKD = gHkv * D columns of q and k/v (all heads when G = 1).
struct Dims {
  int64_t T, H, F, Hq, Hkv, D, QD, KD;
  int64_t G, gHq, gHkv, gQD, gKD;
};

Dims dims_of(const ModelConfig& c, int64_t T, int64_t G) {
  Dims d{};
  d.T = T, d.H = c.hidden_size, d.F = c.intermediate_size, d.D = c.head_dim;
  d.Hq = c.num_heads, d.Hkv = c.num_kv_heads, d.QD = c.q_dim(), d.KD = c.kv_dim();
  d.G = G, d.gHq = d.Hq / G, d.gHkv = d.Hkv / G, d.gQD = d.QD / G, d.gKD = d.KD / G;
  return d;
}

// Rows [r0, r0 + n) of a weight (out, in) or a bias (out); empty stays empty.
Tensor weight_rows(Tensor w, int64_t r0, int64_t n) {
  if (w.empty()) return w;
  if (w.ndim == 1) return rows(w, r0, n, 1).view({n});
  return rows(w, r0, n, w.dim(1));
}

// The q/k/v projections of group g's heads: contiguous rows of q_proj, k_proj, v_proj (and of
// their biases), since a head's D rows are consecutive and a group's heads are too. Applied to a
// layer's parameters or to its gradients alike.
struct QkvRows {
  Tensor q_proj, q_bias, k_proj, k_bias, v_proj, v_bias;
};
QkvRows qkv_rows(const LayerParams& p, const Dims& d, int64_t g) {
  return {weight_rows(p.q_proj, g * d.gQD, d.gQD), weight_rows(p.q_bias, g * d.gQD, d.gQD),
          weight_rows(p.k_proj, g * d.gKD, d.gKD), weight_rows(p.k_bias, g * d.gKD, d.gKD),
          weight_rows(p.v_proj, g * d.gKD, d.gKD), weight_rows(p.v_bias, g * d.gKD, d.gKD)};
}

// The layer's full (T, Hq, D) attention output (or its gradient) seen from group g's first head:
// the wider out/dout view of ops.h attention_forward, whose first gHq heads are the group's.
Tensor group_heads(Tensor full, const Dims& d, int64_t g) {
  return Tensor(static_cast<char*>(full.data) + static_cast<size_t>(g * d.gQD) * dtype_size(full.dtype),
                full.dtype, {d.T, d.Hq, d.D});
}

std::vector<Tile> tiles_of(const LayerScratch& s, int64_t T) {
  const int64_t step = s.tile_tokens > 0 ? s.tile_tokens : T;
  std::vector<Tile> tiles;
  for (int64_t t0 = 0; t0 < T; t0 += step) tiles.push_back({t0, std::min(step, T - t0)});
  return tiles;
}

// The passes that a backward from kept internals (Recompute::NormsActivation) runs again: one
// function each, so that every run is the same calls and gives the same bits. (The activation is
// written again by the SwiGLU backward, bit for bit as mlp_activation writes it: ops.h; where the
// norms' outputs were kept too, Recompute::Activation, that is all it runs again, and where the
// activation was kept as well, Recompute::Nothing, not even that.)
void input_norm(Ops& ops, const ModelConfig& c, const LayerParams& p, const Dims& d, const Tile& t,
                Tensor x_in, LayerScratch& s) {
  ops.rmsnorm_forward(rows(x_in, t.t0, t.n, d.H), p.input_norm, static_cast<float>(c.rms_norm_eps),
                      rows(s.h, 0, t.n, d.H), rows(s.rstd1, 0, t.n, 1).view({t.n}));
}
void post_attention_norm(Ops& ops, const ModelConfig& c, const LayerParams& p, const Dims& d, const Tile& t,
                         LayerScratch& s) {
  ops.rmsnorm_forward(rows(s.x1, 0, t.n, d.H), p.post_norm, static_cast<float>(c.rms_norm_eps),
                      rows(s.h2, 0, t.n, d.H), rows(s.rstd2, 0, t.n, 1).view({t.n}));
}
void mlp_activation(Ops& ops, const Dims& d, const Tile& t, LayerScratch& s) {
  ops.swiglu_forward(rows(s.gate, 0, t.n, d.F), rows(s.up, 0, t.n, d.F), rows(s.act, 0, t.n, d.F));
}
// q_pre, k_pre (tile) = projections of h, and q, k (rows of the tile) = their norms (qk_norm), for
// the heads of w's rows (one group's).
void qk_before_rope(Ops& ops, const ModelConfig& c, const LayerParams& p, const QkvRows& w, const Dims& d,
                    const Tile& t, LayerScratch& s) {
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor h = rows(s.h, 0, t.n, d.H);
  if (!c.qk_norm) {
    ops.linear_forward(h, w.q_proj, w.q_bias, Tensor(), rows(s.q, t.t0, t.n, d.gQD));
    ops.linear_forward(h, w.k_proj, w.k_bias, Tensor(), rows(s.k, t.t0, t.n, d.gKD));
    return;
  }
  const Tensor q_pre = rows(s.q_pre, 0, t.n, d.gQD), k_pre = rows(s.k_pre, 0, t.n, d.gKD);
  ops.linear_forward(h, w.q_proj, w.q_bias, Tensor(), q_pre);
  ops.linear_forward(h, w.k_proj, w.k_bias, Tensor(), k_pre);
  ops.rmsnorm_forward(q_pre.view({t.n * d.gHq, d.D}), p.q_norm, eps,
                      rows(s.q, t.t0, t.n, d.gQD).view({t.n * d.gHq, d.D}),
                      rows(s.rstd_q, 0, t.n * d.gHq, 1).view({t.n * d.gHq}));
  ops.rmsnorm_forward(k_pre.view({t.n * d.gHkv, d.D}), p.k_norm, eps,
                      rows(s.k, t.t0, t.n, d.gKD).view({t.n * d.gHkv, d.D}),
                      rows(s.rstd_k, 0, t.n * d.gHkv, 1).view({t.n * d.gHkv}));
}

// A: rows of group g's q, k, v for one tile, RoPE applied; h = rmsnorm(x) first where `norm_input`
// (it holds this tile's rows already otherwise).
void project_qkv(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                 const Dims& d, int64_t g, const Tile& t, bool norm_input, Tensor x_in, LayerScratch& s) {
  const ModelConfig& c = *ctx.config;
  const QkvRows w = qkv_rows(p, d, g);
  if (norm_input) input_norm(ops, c, p, d, t, x_in, s);
  qk_before_rope(ops, c, p, w, d, t, s);
  ops.linear_forward(rows(s.h, 0, t.n, d.H), w.v_proj, w.v_bias, Tensor(), rows(s.v, t.t0, t.n, d.gKD));
  const int32_t* positions = chunk.positions + t.t0;
  ops.rope(rows(s.q, t.t0, t.n, d.gQD).view({t.n, d.gHq, d.D}), positions, ctx.inv_freq, false);
  ops.rope(rows(s.k, t.t0, t.n, d.gKD).view({t.n, d.gHkv, d.D}), positions, ctx.inv_freq, false);
}

// A for every tile of group g. h = rmsnorm(x) runs for each tile when there are several (h holds
// only the last tile's rows), and for the one tile unless `h_is_fresh` (an earlier group's A, or
// the recompute, left it there).
void project_group(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                   const Dims& d, int64_t g, const std::vector<Tile>& tiles, bool h_is_fresh, Tensor x_in,
                   LayerScratch& s) {
  for (const Tile& t : tiles)
    project_qkv(ops, ctx, p, chunk, d, g, t, tiles.size() > 1 || !h_is_fresh, x_in, s);
}

// The chunk's mask for attention, forward and backward alike: the exact documents, with what the
// host knows of their shape (whole rows, causal segments) that lets a backend skip doc_start.
AttentionMask attention_mask(const TokenChunk& chunk) {
  AttentionMask mask(chunk.doc_start, chunk.row_tokens);
  mask.segment_bounds = chunk.segment_bounds;
  mask.segments = chunk.segments;
  mask.longest_segment = chunk.longest_segment;
  return mask;
}

// B: group g's attention over the whole chunk, into its heads' columns of attn and rows of lse.
void attend(Ops& ops, const LayerContext& ctx, const TokenChunk& chunk, const Dims& d, int64_t g,
            LayerScratch& s) {
  const float scale = attention_scale(*ctx.config);  // 1/sqrt(head_dim), with YaRN's temperature
  ops.attention_forward(rows(s.q, 0, d.T, d.gQD).view({d.T, d.gHq, d.D}),
                        rows(s.k, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}),
                        rows(s.v, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}), attention_mask(chunk), scale,
                        group_heads(s.attn, d, g), rows(s.lse, g * d.gHq, d.gHq, d.T));
}

// C up to the activation's inputs: x1 = x + o_proj(attn), h2 = rmsnorm(x1), gate, up for one tile.
void mlp_inputs(Ops& ops, const ModelConfig& c, const LayerParams& p, const Dims& d, const Tile& t,
                Tensor x_in, LayerScratch& s) {
  ops.linear_forward(rows(s.attn, t.t0, t.n, d.QD), p.o_proj, p.o_bias, rows(x_in, t.t0, t.n, d.H),
                     rows(s.x1, 0, t.n, d.H));
  post_attention_norm(ops, c, p, d, t, s);
  const Tensor h2 = rows(s.h2, 0, t.n, d.H);
  ops.linear_forward(h2, p.gate_proj, p.gate_bias, Tensor(), rows(s.gate, 0, t.n, d.F));
  ops.linear_forward(h2, p.up_proj, p.up_bias, Tensor(), rows(s.up, 0, t.n, d.F));
}

int64_t checked_tokens(const LayerScratch& s, const TokenChunk& chunk) {
  FERRY_ASSERT(chunk.tokens <= s.q.dim(0), "chunk longer than the layer scratch was carved for");
  return chunk.tokens;
}

// A and B for every group in turn: attn and lse whole, q, k, v (and h, q_pre, k_pre) the last
// group's.
void project_and_attend(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                        const Dims& d, const std::vector<Tile>& tiles, Tensor x_in, LayerScratch& s) {
  for (int64_t g = 0; g < d.G; ++g) {
    project_group(ops, ctx, p, chunk, d, g, tiles, /*h_is_fresh=*/g > 0, x_in, s);
    attend(ops, ctx, chunk, d, g, s);
  }
}

}  // namespace

void layer_forward(Ops& ops, const LayerContext& ctx, const LayerParams& p, const TokenChunk& chunk,
                   Tensor x_in, Tensor x_out, LayerScratch& s) {
  const Dims d = dims_of(*ctx.config, checked_tokens(s, chunk), s.head_groups);
  const std::vector<Tile> tiles = tiles_of(s, d.T);
  project_and_attend(ops, ctx, p, chunk, d, tiles, x_in, s);
  for (const Tile& t : tiles) {
    mlp_inputs(ops, *ctx.config, p, d, t, x_in, s);
    mlp_activation(ops, d, t, s);
    ops.linear_forward(rows(s.act, 0, t.n, d.F), p.down_proj, p.down_bias, rows(s.x1, 0, t.n, d.H),
                       rows(x_out, t.t0, t.n, d.H));
  }
}

void layer_backward(Ops& ops, const LayerContext& ctx, const LayerParams& p, const LayerParams& g,
                    const TokenChunk& chunk, Tensor x_in, Tensor dx_out, Tensor dx_in, LayerScratch& s,
                    Recompute recompute) {
  const ModelConfig& c = *ctx.config;
  const Dims d = dims_of(c, checked_tokens(s, chunk), s.head_groups);
  const std::vector<Tile> tiles = tiles_of(s, d.T);
  const bool recompute_forward = recompute == Recompute::Forward;
  const bool recompute_norms = recompute == Recompute::NormsActivation;
  // The SwiGLU backward writes the activation again on its way unless the forward's was kept.
  const bool recompute_activation = recompute != Recompute::Nothing;
  FERRY_ASSERT(recompute_forward || (tiles.size() == 1 && d.G == 1),
               "kept internals are whole chunks of every head: untiled scratch of one head group only");
  if (recompute_forward) project_and_attend(ops, ctx, p, chunk, d, tiles, x_in, s);

  // Per tile, the MLP and o_proj backward: x' = x1 + down(act), act = silu(gate) * up, gate/up =
  // proj(h2), h2 = rmsnorm(x1), x1 = x + o_proj(attn). Where two gradients meet (gate and up into
  // h2; the residual and the norm into x1) the second op adds its part in its epilogue (ops.h), so
  // no temporary and no add pass. d_x1 goes to dx_in's rows (it may be dx_out's, already read).
  // down_proj's dx comes first: the SwiGLU backward that takes it writes act again on the way
  // (unless the forward's was kept), which down_proj's dw then reads.
  for (const Tile& t : tiles) {
    if (recompute_forward)
      mlp_inputs(ops, c, p, d, t, x_in, s);
    else if (recompute_norms)
      post_attention_norm(ops, c, p, d, t, s);
    const Tensor d_act = rows(s.d_act, 0, t.n, d.F), d_gate = rows(s.d_gate, 0, t.n, d.F),
                 d_up = rows(s.d_up, 0, t.n, d.F), d_h2 = rows(s.d_h2, 0, t.n, d.H),
                 h2 = rows(s.h2, 0, t.n, d.H);
    const Tensor dy = rows(dx_out, t.t0, t.n, d.H), d_x1 = rows(dx_in, t.t0, t.n, d.H);
    const Tensor act = rows(s.act, 0, t.n, d.F);
    ops.linear_backward(act, p.down_proj, dy, d_act, Tensor(), Tensor(), false);
    ops.swiglu_backward(rows(s.gate, 0, t.n, d.F), rows(s.up, 0, t.n, d.F), d_act, d_gate, d_up,
                        recompute_activation ? act : Tensor());
    ops.linear_backward(act, p.down_proj, dy, Tensor(), g.down_proj, g.down_bias, false);
    ops.linear_backward(h2, p.gate_proj, d_gate, d_h2, g.gate_proj, g.gate_bias, false);
    ops.linear_backward(h2, p.up_proj, d_up, d_h2, g.up_proj, g.up_bias, true);
    ops.rmsnorm_backward(rows(s.x1, 0, t.n, d.H), p.post_norm, rows(s.rstd2, 0, t.n, 1).view({t.n}), d_h2, dy,
                         d_x1, g.post_norm);
    ops.linear_backward(rows(s.attn, t.t0, t.n, d.QD), p.o_proj, d_x1, rows(s.d_attn, t.t0, t.n, d.QD),
                        g.o_proj, g.o_bias, false);
  }

  // Per group, last first (its q, k, v are still in the scratch; the others' are computed again):
  // D, the attention backward, then per tile (E) the projections' and the input norm's backward.
  // With more than one tile, h (and q_pre, k_pre with their statistics) hold the last tile's
  // values, so they are computed again; q and k are dead after the attention backward, so the q/k
  // norms' outputs may land there. Kept internals hold neither h nor (for its rows) anything else
  // to trust but q_pre, k_pre, unless they were kept with the norms' outputs.
  const float scale = attention_scale(c);  // 1/sqrt(head_dim), with YaRN's temperature
  const bool h_is_stale = tiles.size() > 1 || (!recompute_forward && recompute_norms);
  const bool qk_pre_is_stale = tiles.size() > 1;
  for (int64_t grp = d.G - 1; grp >= 0; --grp) {
    if (grp != d.G - 1) project_group(ops, ctx, p, chunk, d, grp, tiles, /*h_is_fresh=*/true, x_in, s);
    ops.attention_backward(
        rows(s.q, 0, d.T, d.gQD).view({d.T, d.gHq, d.D}), rows(s.k, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}),
        rows(s.v, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}), attention_mask(chunk), scale,
        group_heads(s.attn, d, grp), rows(s.lse, grp * d.gHq, d.gHq, d.T), group_heads(s.d_attn, d, grp),
        rows(s.dq, 0, d.T, d.gQD).view({d.T, d.gHq, d.D}), rows(s.dk, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}),
        rows(s.dv, 0, d.T, d.gKD).view({d.T, d.gHkv, d.D}));

    const QkvRows w = qkv_rows(p, d, grp), gw = qkv_rows(g, d, grp);
    for (const Tile& t : tiles) {
      if (h_is_stale) input_norm(ops, c, p, d, t, x_in, s);
      if (c.qk_norm && qk_pre_is_stale) qk_before_rope(ops, c, p, w, d, t, s);
      Tensor dq = rows(s.dq, t.t0, t.n, d.gQD), dk = rows(s.dk, t.t0, t.n, d.gKD);
      const Tensor dv = rows(s.dv, t.t0, t.n, d.gKD);
      const int32_t* positions = chunk.positions + t.t0;
      ops.rope(dq.view({t.n, d.gHq, d.D}), positions, ctx.inv_freq, true);
      ops.rope(dk.view({t.n, d.gHkv, d.D}), positions, ctx.inv_freq, true);
      if (c.qk_norm) {
        const Tensor dq_pre = rows(s.dq_pre, 0, t.n, d.gQD), dk_pre = rows(s.dk_pre, 0, t.n, d.gKD);
        ops.rmsnorm_backward(rows(s.q_pre, 0, t.n, d.gQD).view({t.n * d.gHq, d.D}), p.q_norm,
                             rows(s.rstd_q, 0, t.n * d.gHq, 1).view({t.n * d.gHq}),
                             dq.view({t.n * d.gHq, d.D}), Tensor(), dq_pre.view({t.n * d.gHq, d.D}),
                             g.q_norm);
        ops.rmsnorm_backward(rows(s.k_pre, 0, t.n, d.gKD).view({t.n * d.gHkv, d.D}), p.k_norm,
                             rows(s.rstd_k, 0, t.n * d.gHkv, 1).view({t.n * d.gHkv}),
                             dk.view({t.n * d.gHkv, d.D}), Tensor(), dk_pre.view({t.n * d.gHkv, d.D}),
                             g.k_norm);
        dq = dq_pre;
        dk = dk_pre;
      }
      // d_h is this group's share of d/dh; the input norm's backward is linear in it, so each
      // group adds its share to d_x1 (and to the norm's weight gradient) in turn.
      const Tensor h = rows(s.h, 0, t.n, d.H), d_h = rows(s.d_h, 0, t.n, d.H);
      const Tensor d_x1 = rows(dx_in, t.t0, t.n, d.H);
      ops.linear_backward(h, w.q_proj, dq, d_h, gw.q_proj, gw.q_bias, false);
      ops.linear_backward(h, w.k_proj, dk, d_h, gw.k_proj, gw.k_bias, true);
      ops.linear_backward(h, w.v_proj, dv, d_h, gw.v_proj, gw.v_bias, true);
      ops.rmsnorm_backward(rows(x_in, t.t0, t.n, d.H), p.input_norm, rows(s.rstd1, 0, t.n, 1).view({t.n}),
                           d_h, d_x1, d_x1, g.input_norm);
    }
  }
}

}  // namespace ferry
