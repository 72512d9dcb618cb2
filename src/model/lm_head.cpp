#include "model/lm_head.h"

#include <algorithm>

namespace ferry {

namespace {

Tensor rows(Tensor t, int64_t r0, int64_t n, int64_t width) {
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(r0 * width) * dtype_size(t.dtype), t.dtype,
                {n, width});
}

int64_t tile_of(const HeadScratch& s, int64_t T) {
  return s.tile_tokens > 0 ? s.tile_tokens : T;
}

}  // namespace

HeadScratch carve_head_scratch(Arena& a, const ModelConfig& c, int64_t T, DType dt, int64_t tile_tokens) {
  const int64_t n = tile_tokens > 0 ? std::min(tile_tokens, T) : T;
  HeadScratch s;
  s.tile_tokens = n;
  s.normed = a.take(dt, {n, c.hidden_size});
  s.rstd = a.take(DType::F32, {n});
  s.d_normed = a.take(dt, {n, c.hidden_size});
  return s;
}

void head_forward_backward(Ops& ops, const ModelConfig& c, const HeadParams& p, const HeadParams* g,
                           const TokenChunk& chunk, Tensor x, float grad_scale, Tensor dx, HeadScratch& s,
                           Tensor loss_sum, Tensor logits) {
  const int64_t T = chunk.tokens, H = c.hidden_size, V = c.vocab_size, step = tile_of(s, T);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t t0 = 0; t0 < T; t0 += step) {
    const int64_t n = std::min(step, T - t0);
    const Tensor x_t = rows(x, t0, n, H), normed = rows(s.normed, 0, n, H);
    const Tensor rstd = rows(s.rstd, 0, n, 1).view({n});
    const Tensor logits_t = logits.empty() ? Tensor() : rows(logits, t0, n, V);
    ops.rmsnorm_forward(x_t, p.norm, eps, normed, rstd);
    if (g == nullptr) {
      ops.linear_cross_entropy(normed, p.lm_head, chunk.targets + t0, grad_scale, Tensor(), Tensor(),
                               loss_sum, logits_t, 1);
      continue;
    }
    const Tensor d_normed = rows(s.d_normed, 0, n, H);
    ops.linear_cross_entropy(normed, p.lm_head, chunk.targets + t0, grad_scale, d_normed, g->lm_head,
                             loss_sum, logits_t, s.weight_grad_chunks);
    ops.rmsnorm_backward(x_t, p.norm, rstd, d_normed, Tensor(), rows(dx, t0, n, H), g->norm);
  }
}

void head_logits(Ops& ops, const ModelConfig& c, const HeadParams& p, Tensor x, Tensor logits,
                 HeadScratch& s) {
  const int64_t T = x.dim(0), H = c.hidden_size, V = c.vocab_size, step = tile_of(s, T);
  for (int64_t t0 = 0; t0 < T; t0 += step) {
    const int64_t n = std::min(step, T - t0);
    const Tensor normed = rows(s.normed, 0, n, H);
    ops.rmsnorm_forward(rows(x, t0, n, H), p.norm, static_cast<float>(c.rms_norm_eps), normed,
                        rows(s.rstd, 0, n, 1).view({n}));
    ops.linear_forward(normed, p.lm_head, Tensor(), Tensor(), rows(logits, t0, n, V));
  }
}

}  // namespace ferry
