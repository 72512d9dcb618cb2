#include "model/lm_head.h"

namespace ferry {

HeadScratch carve_head_scratch(Arena& a, const ModelConfig& c, int64_t T, DType dt) {
  HeadScratch s;
  s.normed = a.take(dt, {T, c.hidden_size});
  s.rstd = a.take(DType::F32, {T});
  s.d_normed = a.take(dt, {T, c.hidden_size});
  return s;
}

void head_forward_backward(Ops& ops, const ModelConfig& c, const HeadParams& p, const HeadParams* g,
                           const TokenChunk& chunk, Tensor x, float grad_scale, Tensor dx, HeadScratch& s,
                           Tensor loss_sum, Tensor logits) {
  const int64_t T = chunk.tokens, H = c.hidden_size;
  Tensor normed(s.normed.data, s.normed.dtype, {T, H});
  Tensor rstd(s.rstd.data, DType::F32, {T});
  ops.rmsnorm_forward(x, p.norm, static_cast<float>(c.rms_norm_eps), normed, rstd);
  if (g == nullptr) {
    ops.linear_cross_entropy(normed, p.lm_head, chunk.targets, grad_scale, Tensor(), Tensor(), loss_sum,
                             logits);
    return;
  }
  Tensor d_normed(s.d_normed.data, s.d_normed.dtype, {T, H});
  ops.linear_cross_entropy(normed, p.lm_head, chunk.targets, grad_scale, d_normed, g->lm_head, loss_sum,
                           logits);
  ops.rmsnorm_backward(x, p.norm, rstd, d_normed, Tensor(), dx, g->norm);
}

void head_logits(Ops& ops, const ModelConfig& c, const HeadParams& p, Tensor x, Tensor logits,
                 HeadScratch& s) {
  const int64_t T = x.dim(0), H = c.hidden_size;
  Tensor normed(s.normed.data, s.normed.dtype, {T, H});
  Tensor rstd(s.rstd.data, DType::F32, {T});
  ops.rmsnorm_forward(x, p.norm, static_cast<float>(c.rms_norm_eps), normed, rstd);
  ops.linear_forward(normed, p.lm_head, Tensor(), Tensor(), logits);
}

}  // namespace ferry
