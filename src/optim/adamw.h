// AdamW on fp32 masters, with exactly torch.optim.AdamW's semantics (the reference of DESIGN.md §1).
//
// This is the plain, obvious implementation: every faster AdamW (SIMD CPU, GPU) is tested against it.
// It follows torch's single-tensor (for-loop) path, which is what torch runs for CPU tensors by
// default (foreach/fused default to CUDA tensors only), operation by operation in fp32, so that our
// masters track a torch run to the last bit wherever the operations below are the ones torch executes:
//
//   g      = grad * grad_scale                  clip_grad_norm_'s grads.mul_(clip_coef_clamped)
//   param  = param * f32(1 - lr*wd)              param.mul_(1 - lr * weight_decay)   (decayed params only)
//   m      = fma(f32(1-beta1), g - m, m)         exp_avg.lerp_(grad, 1 - beta1): ATen's vectorized lerp
//                                                 for a weight < 0.5 is fmadd(w, end - self, self)
//   v      = fma(f32(1-beta2) * g, g,            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2):
//                v * f32(beta2))                 ATen writes self + s*t1*t2, and its released CPU kernels
//                                                 (GCC, FMA-enabled AVX2/AVX-512 units) contract it to
//                                                 fma(s*t1, t2, self)
//   denom  = sqrt(v) / f32(sqrt(bc2)) + f32(eps) (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param  = param + (f32(-step_size) * m) / denom
//                                                 param.addcdiv_(exp_avg, denom, value=-step_size):
//                                                 self + s*t1/t2
//
// with bias_correction1 = 1 - beta1^t, bias_correction2 = 1 - beta2^t and step_size = lr / bc1 computed
// in double, as torch computes them with Python floats; f32(x) is the double rounded to nearest float,
// which is what ATen does with a Python scalar operand of a float tensor (optim/adamw_scalars.h, which
// every AdamW takes them from). Every other operation is a
// separately rounded fp32 operation (this file must not be compiled with FMA contraction: see the .cpp).
// Checked bit for bit against torch 2.11's CPU AdamW (tests/optim_adamw_torch_golden_test.cpp). (A torch
// build running its non-SIMD DEFAULT kernels would not fuse addcmul and could differ in v's last bit.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// Checks the hyperparameters as torch.optim.AdamW does (lr >= 0, eps >= 0, 0 <= beta < 1,
// weight_decay >= 0); throws ferry::Error naming the bad value.
void validate_adamw_hyper(const AdamWHyper& hyper);

// One AdamW update of n elements in place: param (fp32 master), m (exp_avg), v (exp_avg_sq).
// `step` is the 1-based count of updates including this one (torch's state['step'] after += 1).
// `decay` selects whether weight decay applies to this tensor (torch: the param group's weight_decay).
// `grad_scale` multiplies the gradient first (the clipping coefficient, 1 when not clipping).
// The four buffers must not overlap. Elementwise, so the parallel split over ThreadPool::global()
// cannot change the result.
void adamw_step(float* param, float* m, float* v, const float* grad, size_t n, const AdamWHyper& hyper,
                int64_t step, bool decay, float grad_scale = 1.0f);

}  // namespace ferry
