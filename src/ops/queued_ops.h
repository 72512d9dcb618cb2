// Ops that run another backend's ops as host tasks on a device stream, in stream order.
//
// For a device whose streams are host threads (SimDevice), the CPU reference runs exactly where a
// GPU would run kernels: each call returns at once, and the op runs on the compute stream after
// everything issued to it before (copies it waits for through events included). The engine's
// schedules are thereby exercised on the CPU with the same asynchrony as on a GPU.
//
// Each call copies its arguments (tensor views, scalars, raw pointers); what they point to must stay
// valid and unchanged until the op has run, as for a kernel launch. The wrapped ops live as long as
// any of their queued calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "ops/wrapping_ops.h"

namespace ferry {

class QueuedOps final : public WrappingOps {
 public:
  QueuedOps(Device& device, std::unique_ptr<Ops> inner, StreamKind stream = StreamKind::Compute);

  const char* name() const override { return name_.c_str(); }

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
  // Queues fn(inner ops) on the stream; the task keeps the inner ops alive.
  template <typename Fn>
  void enqueue(Fn fn) {
    device_.host_task(stream_, [ops = inner_, fn = std::move(fn)] { fn(*ops); });
  }

  Device& device_;
  StreamKind stream_;
  std::string name_;
};

}  // namespace ferry
