// The scalars of one AdamW step, computed once from the hyperparameters and t, the way torch
// computes them; every AdamW (the reference adamw_step, the SIMD cpu_adamw_step, the GPU kernels)
// takes them from here, so the ~10 lines the bit-exactness against torch rests on exist once.
//
// torch.optim.AdamW's single-tensor step computes, with Python floats (IEEE doubles, each
// operation rounded on its own):
//
//   bias_correction1 = 1 - beta1 ** step
//   bias_correction2 = 1 - beta2 ** step
//   step_size = lr / bias_correction1
//   bias_correction2_sqrt = sqrt(bias_correction2)
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.lerp_(grad, 1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// and ATen rounds each Python scalar to fp32 where a float tensor uses it. The fields below are
// those fp32 values. The double arithmetic must not be contracted (1 - lr*wd as one fused
// multiply-add rounds differently), so it lives in adamw_scalars.cpp, compiled without
// contraction whatever the flags of the files that call it.
#pragma once

#include <cstdint>

#include "optim/adamw.h"

namespace ferry {

// Plain data, passed by value to kernels (the GPU's launch takes it as it is).
struct AdamWScalars {
  // f32(1 - lr*wd), the factor of the tensors with weight decay; exactly 1 when weight_decay is
  // 0 (torch skips the multiply then, and p * 1 == p). Tensors without decay use 1.
  float decay_factor;
  float lerp_weight;      // f32(1 - beta1)
  float beta2;            // f32(beta2)
  float one_minus_beta2;  // f32(1 - beta2)
  float bc2_sqrt;         // f32(sqrt(1 - beta2^t))
  float eps;              // f32(eps)
  float neg_step_size;    // f32(-(lr / (1 - beta1^t)))
};

// The scalars of step `step` (1-based: torch's state['step'] after its += 1).
AdamWScalars adamw_scalars(const AdamWHyper& hyper, int64_t step);

}  // namespace ferry
