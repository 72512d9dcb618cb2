// Ops that issue another Ops' work and, while a step is traced (device/trace/tracer.h), bracket each op
// with timeline stamps on the ops' stream, named by the op, so the trace sees the compute stream
// op by op without the model code changing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/trace/tracer.h"
#include "ops/wrapping_ops.h"

namespace ferry {

class TracingOps final : public WrappingOps {
 public:
  // `inner` issues its work to `stream` of the device `tracer` records; the tracer must outlive this.
  TracingOps(std::unique_ptr<Ops> inner, Tracer& tracer, StreamKind stream = StreamKind::Compute);

  void embedding_forward(const int32_t* ids, Tensor table, Tensor out) override;
  void embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) override;

  void rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) override;
  void rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual, Tensor dx,
                        Tensor dweight) override;

  void rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) override;

  void attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                         Tensor lse) override;
  void attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                          Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) override;

  void attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) override;

  void swiglu_forward(Tensor gate, Tensor up, Tensor out) override;
  void swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) override;

  void linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) override;
  void linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                       bool accumulate_dx) override;

  void linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                            Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) override;

  void add(Tensor a, Tensor b, Tensor out) override;
  void zero(Tensor x) override;
  void copy(Tensor src, Tensor dst) override;

 private:
  template <typename Issue>
  void traced(const char* op, Issue&& issue) {
    tracer_.device_work(stream_, op, -1, [&] { issue(*inner_); });
  }
  // With the operands' shapes as the span's detail, for the ops whose time depends on more than
  // their size (the matrix products, attention): a trace then sums a step's time by shape.
  template <typename Describe, typename Issue>
  void traced(const char* op, Describe&& describe, Issue&& issue) {
    tracer_.device_work_described(stream_, op, describe, [&] { issue(*inner_); });
  }

  Tracer& tracer_;
  StreamKind stream_;
};

}  // namespace ferry
