// The fp32 reference backend: the oracle every other backend is checked against, and the backend
// that trains small models on the CPU.
//
// Every method lives in the file of its op family (embedding.cpp, rmsnorm.cpp, rope.cpp,
// attention.cpp, swiglu.cpp, linear.cpp, cross_entropy.cpp, elementwise.cpp).
//
// Determinism: every result is bit-identical run to run for the same inputs. Work is split with
// ThreadPool::global() so that each output element is computed by exactly one thread in a fixed
// order (no atomics, no per-thread partials whose combination depends on the partition), which
// makes the results independent of the thread count too. The matrix products (ordered_gemm.h) are
// also independent of how many rows a call has, so a layer cut into sequence tiles gives the bits
// of the uncut layer.
#pragma once

#include <vector>

#include "ops/ops.h"

namespace ferry {

class CpuOps final : public Ops {
 public:
  const char* name() const override { return "cpu"; }

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
  // The summed loss in double (the reference computation behind linear_cross_entropy).
  double linear_cross_entropy_sum(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                  Tensor dw, Tensor logits);
  // Each token's loss in double (0 where the target is ignored), behind both of the above.
  void linear_cross_entropy_rows(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                 Tensor dw, Tensor logits, std::vector<double>& row_loss);

  void add(Tensor a, Tensor b, Tensor out) override;
  void zero(Tensor x) override;
  void copy(Tensor src, Tensor dst) override;
};

}  // namespace ferry
