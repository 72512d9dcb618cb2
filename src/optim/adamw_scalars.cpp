// Python rounds every double operation on its own; a compiler allowed to contract 1 - lr*wd into
// a fused multiply-add (GCC's default for GNU C++ once FMA instructions are enabled, e.g. by
// -march=native) would not, and for some lr, wd the fp32 decay factor would differ from torch's
// (tests/optim_adamw_scalars_test.cpp pins one such pair). So contraction is off for this file
// (CMakeLists.txt: the files of the torch-exact arithmetic).

#include "optim/adamw_scalars.h"

#include <cmath>

#include "core/check.h"

namespace ferry {

AdamWScalars adamw_scalars(const AdamWHyper& h, int64_t step) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, t);
  const double step_size = h.lr / bias_correction1;
  AdamWScalars s;
  s.decay_factor = h.weight_decay != 0.0 ? static_cast<float>(1.0 - h.lr * h.weight_decay) : 1.0f;
  s.lerp_weight = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(h.eps);
  s.neg_step_size = static_cast<float>(-step_size);
  return s;
}

}  // namespace ferry
