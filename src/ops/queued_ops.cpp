#include "ops/queued_ops.h"

namespace ferry {

QueuedOps::QueuedOps(Device& device, std::unique_ptr<Ops> inner, StreamKind stream)
    : WrappingOps(std::move(inner)),
      device_(device),
      stream_(stream),
      name_(std::string("queued ") + inner_->name()) {}

void QueuedOps::embedding_forward(const int32_t* ids, Tensor table, Tensor out) {
  enqueue([=](Ops& ops) { ops.embedding_forward(ids, table, out); });
}

void QueuedOps::embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) {
  enqueue([=](Ops& ops) { ops.embedding_backward(ids, dout, dtable); });
}

void QueuedOps::rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) {
  enqueue([=](Ops& ops) { ops.rmsnorm_forward(x, weight, eps, out, rstd); });
}

void QueuedOps::rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual,
                                 Tensor dx, Tensor dweight) {
  enqueue([=](Ops& ops) { ops.rmsnorm_backward(x, weight, rstd, dout, dresidual, dx, dweight); });
}

void QueuedOps::rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) {
  enqueue([=](Ops& ops) { ops.rope(x, positions, inv_freq, inverse); });
}

void QueuedOps::attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                  Tensor lse) {
  enqueue([=](Ops& ops) { ops.attention_forward(q, k, v, mask, scale, out, lse); });
}

void QueuedOps::attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                   Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) {
  enqueue([=](Ops& ops) { ops.attention_backward(q, k, v, mask, scale, out, lse, dout, dq, dk, dv); });
}

void QueuedOps::attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) {
  enqueue([=](Ops& ops) { ops.attention_cached(q, k, v, scale, out); });
}

void QueuedOps::swiglu_forward(Tensor gate, Tensor up, Tensor out) {
  enqueue([=](Ops& ops) { ops.swiglu_forward(gate, up, out); });
}

void QueuedOps::swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) {
  enqueue([=](Ops& ops) { ops.swiglu_backward(gate, up, dout, dgate, dup, out); });
}

void QueuedOps::linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) {
  enqueue([=](Ops& ops) { ops.linear_forward(x, w, bias, residual, y); });
}

void QueuedOps::linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                                bool accumulate_dx) {
  enqueue([=](Ops& ops) { ops.linear_backward(x, w, dy, dx, dw, dbias, accumulate_dx); });
}

void QueuedOps::linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                     Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) {
  enqueue([=](Ops& ops) {
    ops.linear_cross_entropy(x, w, targets, grad_scale, dx, dw, loss_sum, logits, weight_grad_chunks);
  });
}

void QueuedOps::add(Tensor a, Tensor b, Tensor out) {
  enqueue([=](Ops& ops) { ops.add(a, b, out); });
}

void QueuedOps::zero(Tensor x) {
  enqueue([=](Ops& ops) { ops.zero(x); });
}

void QueuedOps::copy(Tensor src, Tensor dst) {
  enqueue([=](Ops& ops) { ops.copy(src, dst); });
}

}  // namespace ferry
